/*
 * fitcall.c -- a FIT call's common case in one native call. Contract: fitcall.h.
 */
#include "fitcall.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t fr_await(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
                 const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns, uint32_t *len) {
    fr_ring *back = rings[0];
    int64_t deadline = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
    for (;;) {
        int64_t at = fr_peek(back, len);
        if (at != -EAGAIN)
            return at;
        int64_t left = deadline < 0 ? -1 : deadline - now_ns();
        if (deadline >= 0 && left <= 0)
            return -EAGAIN;   /* the time is up */
        int rc = fr_wait(rings, n, start, bell, efd, fds, nfds, spin_ns, left);
        if (rc == -EINTR)
            return -EINTR;    /* a signal that ends the call (fitring.h: fr_wait) */
        if (rc != 0)
            return -EAGAIN;   /* another ring, a hang-up, woken, the time */
    }
}

int fr_call(fr_ring *tx, const char *head, uint32_t nhead, const char *payload,
            uint32_t npayload, fr_ring *const *rings, int n, int start, uint32_t *bell,
            int efd, const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns,
            char *out, uint32_t cap, uint32_t *len) {
    if (tx) {   /* (NULL: the caller sent the request itself) */
        int rc = fr_send2(tx, head, nhead, payload, npayload);
        if (rc == -EAGAIN)
            return FC_UNSENT;
        if (rc < 0)
            return rc;
    }
    uint32_t l;
    int64_t at = fr_await(rings, n, start, bell, efd, fds, nfds, spin_ns, timeout_ns, &l);
    if (at == -EAGAIN || at == -EINTR || (at >= 0 && l > cap))
        return FC_SENT;   /* none came (a call waits on through a signal: its request is
                             out, and its answer changes the caller's state), or one
                             too large: the caller reads it in place */
    if (at < 0)
        return (int)at;
    memcpy(out, rings[0]->data + at, l);
    fr_consume(rings[0]);
    *len = l;
    return FC_REPLY;
}
