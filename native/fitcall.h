/*
 * fitcall.h -- a FIT call's common case in one native call: the request into
 * the link's ring, the wait, and the reply copied out of the ring back.
 *
 * A call from Python over the shm transport (fit_rpc/endpoint.py,
 * shm_transport.py) is a send, a wait and a read of the reply, each through
 * a few layers of Python; on a core that two processes share (the other one
 * busy) that Python, not the rings, is most of a round trip. fr_call does
 * the three in C, with the same rings, doorbells and waits as the calls it
 * replaces (fitring.h: fr_send2, fr_wait, fr_peek, fr_consume), and hands
 * back to Python, untouched, whatever is not the common case:
 *
 *   FC_REPLY    the first message back on the link was read into `out`
 *               (consumed; *len its bytes); the caller checks it is the reply
 *   FC_SENT     the request is out, and the wait ended otherwise: a request
 *               waits in another ring of the set (the caller serves it), the
 *               link hung up, a wake-up with nothing, a signal, the time is
 *               up, or a message back too large for `out` (left in the ring):
 *               the caller goes on as if it had sent the request itself
 *   FC_UNSENT   the link's ring has no room now: nothing was sent
 *   < 0         -errno of the ring (-EBADMSG: the peer broke it; -EMSGSIZE)
 *
 * tx NULL: the request is out already (the caller sent it with fr_send2 and
 * did other work while the peer answers): only the wait and the read.
 *
 * rings[0] must be the ring back on the link (where its replies come), the
 * rest the inbound rings the caller serves while it waits (fr_wait's set:
 * n, start, bell, efd, fds and the spin and timeout as fr_wait takes them).
 */
#ifndef SPLITRACK_FITCALL_H
#define SPLITRACK_FITCALL_H

#include <stdint.h>

#include "fitring.h"

#define FC_REPLY 0
#define FC_SENT 1
#define FC_UNSENT 2

/* fr_call's wait alone: the next message of rings[0], waited for as fr_call waits
 * (the same set, spin and timeout): its offset in the ring's data (*len its bytes;
 * not consumed); -EAGAIN: none came (the wait ended otherwise, as FC_SENT's);
 * -EINTR: a signal ended the wait and the call around it (fitring.h: fr_wait);
 * any other < 0: the ring's -errno. */
int64_t fr_await(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
                 const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns, uint32_t *len);

int fr_call(fr_ring *tx, const char *head, uint32_t nhead, const char *payload,
            uint32_t npayload, fr_ring *const *rings, int n, int start, uint32_t *bell,
            int efd, const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns,
            char *out, uint32_t cap, uint32_t *len);

#endif
