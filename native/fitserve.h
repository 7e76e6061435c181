/*
 * fitserve.h -- a FIT message's common case in native calls, on both ends: the
 * next message of an inbox taken with its header read (fs_take), a request's
 * reply written with the request released (fs_answer), and a call's request
 * written with its reply read and checked (fs_call).
 *
 * An endpoint serving over the shm transport (fit_rpc/shm_transport.py,
 * endpoint.py) found a ring with a message, peeked it, parsed its header,
 * packed the reply's header, sent the reply and released the request: six
 * steps, each through a layer of Python, around a handler that is often a
 * few lines. On a core two processes share, that Python is most of what a
 * caller waits for. These two calls do the ring and header work in C, with
 * the rings of fitring.h; the handler, the checks of who sent it and the
 * counters stay Python's. What is not the common case is handed back as it
 * is, for Python to parse and answer as before.
 *
 * fs_take: the first ring of the set with a message, looking from `start` on
 * (fr_ready's order): its index, and *m describes the message; -1: none.
 *   m->at   its offset in its ring's data (the header's first byte); < 0: the
 *           ring's -errno (-EBADMSG: the peer broke it)
 *   m->len  its bytes, the header's included
 *   m->plain 1: a well-formed, untraced REQUEST or ONEWAY of this version whose
 *           length field is what the ring holds, within FIT's limit (m->kind,
 *           op and seq are then its header's); 0: anything else, for the
 *           caller to parse
 *
 * fs_next: fs_take, and if no ring has a message and timeout_ns is not 0, fr_wait
 * (spin_ns, timeout_ns as it takes them; no fds) then fs_take of the ring it
 * found: what fs_take returns, or fr_wait's -EAGAIN (woken with nothing due),
 * -EINTR (a signal that ends a native program's call: fitring.h,
 * fr_signal_ends_call, asked before the wait too) or -ETIMEDOUT. One native call for an inbox's wait and its next message.
 *
 * fs_answer: a REPLY (err 0, untraced) with `op`, `seq` and the payload into
 * tx, then the message at rx's front released (fr_consume), and both counted
 * in `counts` (unless NULL: the reply tx, the request of nrx bytes rx). 0;
 * -EAGAIN: tx has no room now (nothing sent, nothing released); < 0: tx's
 * -errno.
 *
 * fs_release: the message at rx's front released (fr_consume) and counted rx
 * in `counts` (unless NULL) as a message of `op` and n bytes: a one-way
 * message, or a request answered another way, that fs_take found plain.
 *
 * fs_call: fr_call (fitcall.h) with the request's header written here (op, seq,
 * the payload's length, untraced) and the reply's read: the wait set, its fds,
 * spin and landing (`out`, `cap` bytes) are the fs_caller's, set once, not
 * passed per call. Returns fr_call's code; on FC_REPLY c->len is the bytes read
 * into out (the header's included) and c->plain 1 if they are a well-formed,
 * untraced REPLY to `seq` with err 0 whose length field is what was read (the
 * caller then takes out + HEADER_BYTES as the payload; the call is counted in
 * c->counts, its request's n bytes whether this call or fs_request sent it);
 * 0: anything else, for the caller to parse.
 *
 * fs_recv: the next message of c->rings[0] (a channel's), waiting for it as
 * fs_call does, read into c->out and consumed: fr_call (fitcall.h) with no
 * request. On FC_REPLY c->len is its bytes and c->plain 1 if it is a well-formed,
 * untraced ONEWAY with err 0 (its op then in c->op; counted in c->counts, unless
 * NULL); FC_SENT: none came (the wait ended otherwise), or one too large for out
 * (left in its ring); -EINTR: a signal ended the wait and the recv around it
 * (fitring.h: fr_wait).
 *
 * fs_recv_into: fs_recv, but the next message straight to `buf` if it is a
 * well-formed, untraced ONEWAY of `op` with err 0 whose payload after its first
 * `skip` bytes (a head: the FIT shortcut's stub id) is 1 to `want` bytes: those
 * bytes copied from the ring (no landing), the message consumed and counted,
 * their count returned (> 0). Any other message is fs_recv's FC_REPLY: read into
 * c->out, FS_LANDED (0); none (or one too large for out, or a broken ring: left
 * for the caller's recv to say), FS_NONE (-1); -EINTR as fs_recv's. A FIT
 * shortcut's blocking recv in one native call (splitrack/guest/fit_path.py:
 * take_next).
 *
 * fs_reply_begin: room in tx for a REPLY (err 0, untraced) with `op`, `seq` and an
 * n-byte payload, its header written: the payload's offset in tx's data, for the
 * caller to fill and then fr_commit(tx, HEADER_BYTES + n); < 0: fr_reserve's
 * -errno (-EAGAIN: no room now; -EMSGSIZE). A reply gathered from several places.
 *
 * fs_post: a ONEWAY message (err 0, untraced) with `op` into tx, its header
 * written here, then `head` and `payload` (a channel's message: fit_rpc/channel.py),
 * counted in `counts` (unless NULL) once it is in the ring. 0; -EAGAIN: no room
 * now (nothing sent); < 0: tx's -errno.
 *
 * fs_counts: a link's or a channel end's counts, by op, of what these calls did
 * in full: a message fs_post wrote (tx) or fs_recv read plain (rx); a call
 * fs_call made whose reply came plain (its request tx, its reply rx); a plain
 * message served, released by fs_answer (and its reply) or fs_release. Each with
 * its header's bytes. What they hand back for Python to parse, Python counts.
 * A row per op as ops come (op; tx msgs, bytes; rx msgs, bytes), the first
 * FS_COUNTED_OPS - 1 ops (more than FIT has); the last row (op 0) counts any
 * after them. A
 * Python counters call per message cost a FIT shortcut's round trip ~0.6 us
 * (evaluation.md). The writer is the one thread that sends (or receives) at a
 * time; a reader elsewhere sees a row's op before a count of it grows from 0,
 * and only ever growing counts. fs_counted: one call, counted as fs_call does
 * (a native call that makes its own: xcmiss.c).
 *
 * fs_request: a REQUEST (err 0, untraced) with `op` and `seq` into tx, as fs_post
 * writes its message, with no wait for the reply (a caller that works meanwhile,
 * then waits with fs_call's tx NULL). Its results are fs_post's.
 *
 * fs_init: the header's constants, as fit_rpc/header.py states them (once,
 * before the others; fitheader.h is the layout's copy in C).
 */
#ifndef SPLITRACK_FITSERVE_H
#define SPLITRACK_FITSERVE_H

#include <stdint.h>

#include "fitring.h"

typedef struct {
    int64_t at;
    uint32_t len;
    uint32_t seq;
    uint16_t op;
    uint8_t kind;
    uint8_t plain;
} fs_msg;

#define FS_COUNTED_OPS 64

typedef struct {
    uint32_t op, pad;
    uint64_t tx_msgs, tx_bytes, rx_msgs, rx_bytes;
} fs_count;

typedef struct {
    fs_count row[64];   /* FS_COUNTED_OPS */
} fs_counts;

typedef struct {
    fr_ring **rings;   /* fr_wait's set: rings[0] the link's ring back */
    int n, start;
    uint32_t *bell;
    int efd;
    int *fds;
    int nfds;
    int64_t spin_ns;
    int peer;          /* the pid of the process that answers (0: unknown): fr_waiting_for */
    char *out;
    uint32_t cap;
    uint32_t len;      /* out: the bytes read */
    uint8_t plain;     /* out: 1: the reply to seq (fs_recv: a one-way message),
                          well-formed, err 0, untraced */
    uint16_t op;       /* out, fs_recv: the one-way message's op */
    fs_counts *counts; /* where fs_call and fs_recv count (or NULL) */
} fs_caller;

void fs_init(uint16_t magic, uint8_t version, uint8_t request, uint8_t reply, uint8_t oneway,
             uint32_t max_payload);
int fs_take(fr_ring *const *rings, int n, int start, fs_msg *m);
int fs_next(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd, int64_t spin_ns,
            int64_t timeout_ns, fs_msg *m);
int fs_answer(fr_ring *tx, fr_ring *rx, fs_counts *counts, uint16_t op, uint32_t seq,
              const char *payload, uint32_t n, uint32_t nrx);
void fs_release(fr_ring *rx, fs_counts *counts, uint16_t op, uint32_t n);
int fs_call(fs_caller *c, fr_ring *tx, uint16_t op, uint32_t seq, const char *payload,
            uint32_t n, int64_t timeout_ns);
int fs_recv(fs_caller *c, int64_t timeout_ns);
#define FS_LANDED 0
#define FS_NONE -1
int fs_recv_into(fs_caller *c, int64_t timeout_ns, uint16_t op, uint32_t skip, char *buf,
                 uint32_t want);
int64_t fs_reply_begin(fr_ring *tx, uint16_t op, uint32_t seq, uint32_t n);
int fs_post(fr_ring *tx, fs_counts *counts, uint16_t op, const char *head, uint32_t nhead,
            const char *payload, uint32_t n);
int fs_request(fr_ring *tx, uint16_t op, uint32_t seq, const char *payload, uint32_t n);
void fs_counted(fs_counts *counts, uint16_t op, uint64_t tx_bytes, uint64_t rx_bytes);

#endif
