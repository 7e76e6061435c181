/*
 * fitserve.h -- a served FIT message's common case in native calls: the next
 * message of an inbox taken with its header read (fs_take), and a request's
 * reply written with the request released (fs_answer).
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
 * fs_answer: a REPLY (err 0, untraced) with `op`, `seq` and the payload into
 * tx, then the message at rx's front released (fr_consume). 0; -EAGAIN: tx
 * has no room now (nothing sent, nothing released); < 0: tx's -errno.
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

void fs_init(uint16_t magic, uint8_t version, uint8_t request, uint8_t reply, uint8_t oneway,
             uint32_t max_payload);
int fs_take(fr_ring *const *rings, int n, int start, fs_msg *m);
int fs_answer(fr_ring *tx, fr_ring *rx, uint16_t op, uint32_t seq, const char *payload,
              uint32_t n);

#endif
