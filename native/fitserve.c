/*
 * fitserve.c -- a served FIT message's common case. Contract: fitserve.h.
 */
#include "fitserve.h"

#include <errno.h>
#include <string.h>

#include "fitheader.h"

static struct {
    uint16_t magic;
    uint8_t version, request, reply, oneway;
    uint32_t max_payload;
} K;

void fs_init(uint16_t magic, uint8_t version, uint8_t request, uint8_t reply, uint8_t oneway,
             uint32_t max_payload) {
    K.magic = magic;
    K.version = version;
    K.request = request;
    K.reply = reply;
    K.oneway = oneway;
    K.max_payload = max_payload;
}

int fs_take(fr_ring *const *rings, int n, int start, fs_msg *m) {
    int i = fr_ready(rings, n, start);
    if (i < 0)
        return -1;
    m->plain = 0;
    m->at = fr_peek(rings[i], &m->len);
    if (m->at < 0 || m->len < HEADER_BYTES)
        return i;
    fit_header h;
    memcpy(&h, rings[i]->data + m->at, HEADER_BYTES);   /* read once: the peer may scribble */
    m->kind = h.kind;
    m->op = h.op;
    m->seq = h.seq;
    m->plain = h.magic == K.magic && h.version == K.version && !h.trace &&
               (h.kind == K.request || h.kind == K.oneway) &&
               h.length == m->len - HEADER_BYTES && h.length <= K.max_payload;
    return i;
}

int fs_answer(fr_ring *tx, fr_ring *rx, uint16_t op, uint32_t seq, const char *payload,
              uint32_t n) {
    fit_header h = {K.magic, K.version, K.reply, op, 0, seq, n, 0, 0};
    int rc = fr_send2(tx, (const char *)&h, HEADER_BYTES, payload, n);
    if (rc == 0)
        fr_consume(rx);
    return rc;
}
