/*
 * fitserve.c -- a served FIT message's common case. Contract: fitserve.h.
 */
#include "fitserve.h"

#include <errno.h>
#include <string.h>

#include "fitcall.h"
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

int fs_next(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd, int64_t spin_ns,
            int64_t timeout_ns, fs_msg *m) {
    int i = fs_take(rings, n, start, m);
    if (i >= 0 || timeout_ns == 0)
        return i;
    if (fr_signal_ends_call())
        return -EINTR;   /* a handler ran since the call began (between two waits) */
    i = fr_wait(rings, n, start, bell, efd, NULL, 0, spin_ns, timeout_ns);
    return i < 0 ? i : fs_take(rings, n, i, m);
}

int fs_answer(fr_ring *tx, fr_ring *rx, fs_counts *counts, uint16_t op, uint32_t seq,
              const char *payload, uint32_t n, uint32_t nrx) {
    fit_header h = {K.magic, K.version, K.reply, op, 0, seq, n, 0, 0};
    int rc = fr_send2(tx, (const char *)&h, HEADER_BYTES, payload, n);
    if (rc == 0) {
        fr_consume(rx);
        fs_counted(counts, op, (uint64_t)HEADER_BYTES + n, nrx);
    }
    return rc;
}

void fs_release(fr_ring *rx, fs_counts *counts, uint16_t op, uint32_t n) {
    fr_consume(rx);
    fs_counted(counts, op, 0, n);
}

int64_t fs_reply_begin(fr_ring *tx, uint16_t op, uint32_t seq, uint32_t n) {
    uint64_t total = (uint64_t)HEADER_BYTES + n;
    if (total > fr_max_payload(tx))
        return -EMSGSIZE;
    int64_t at = fr_reserve(tx, (uint32_t)total);
    if (at < 0)
        return at;
    fit_header h = {K.magic, K.version, K.reply, op, 0, seq, n, 0, 0};
    memcpy(tx->data + at, &h, HEADER_BYTES);
    return at + HEADER_BYTES;
}

/* The message c->out holds (c->len bytes): well-formed, untraced, err 0, of kind `kind`
 * (and, for a reply, to seq)? Its op into c->op. */
static int plain(fs_caller *c, uint8_t kind, uint32_t seq) {
    fit_header r;
    if (c->len < HEADER_BYTES)
        return 0;
    memcpy(&r, c->out, HEADER_BYTES);
    c->op = r.op;
    return r.magic == K.magic && r.version == K.version && r.kind == kind &&
           (kind != K.reply || r.seq == seq) && !r.err && !r.trace &&
           r.length == c->len - HEADER_BYTES;
}

int fs_call(fs_caller *c, fr_ring *tx, uint16_t op, uint32_t seq, const char *payload,
            uint32_t n, int64_t timeout_ns) {
    fit_header h = {K.magic, K.version, K.request, op, 0, seq, n, 0, 0};
    fr_waiting_for(c->peer);
    int rc = fr_call(tx, (const char *)&h, HEADER_BYTES, payload, n, c->rings, c->n, c->start,
                     c->bell, c->efd, c->fds, c->nfds, c->spin_ns, timeout_ns, c->out, c->cap,
                     &c->len);
    fr_waiting_for(0);
    c->plain = rc == FC_REPLY && plain(c, K.reply, seq);
    if (c->plain)
        fs_counted(c->counts, op, (uint64_t)HEADER_BYTES + n, c->len);
    return rc;
}

/* Messages of `op` into its row of k: tx_bytes sent, rx_bytes read (0: none that way)
 * (fitserve.h: fs_counts). */
void fs_counted(fs_counts *k, uint16_t op, uint64_t tx_bytes, uint64_t rx_bytes) {
    if (!k)
        return;
    int i = 0;
    while (i < FS_COUNTED_OPS - 1 && (k->row[i].tx_msgs || k->row[i].rx_msgs) &&
           k->row[i].op != op)
        i++;
    fs_count *row = &k->row[i];
    if (i < FS_COUNTED_OPS - 1 && !row->tx_msgs && !row->rx_msgs)
        row->op = op;   /* a free row: this op's from now on (seen before its counts) */
    if (tx_bytes) {
        row->tx_bytes += tx_bytes;
        __atomic_store_n(&row->tx_msgs, row->tx_msgs + 1, __ATOMIC_RELEASE);
    }
    if (rx_bytes) {
        row->rx_bytes += rx_bytes;
        __atomic_store_n(&row->rx_msgs, row->rx_msgs + 1, __ATOMIC_RELEASE);
    }
}

int fs_recv_into(fs_caller *c, int64_t timeout_ns, uint16_t op, uint32_t skip, char *buf,
                 uint32_t want) {
    fr_ring *r = c->rings[0];
    uint32_t l;
    if (timeout_ns != 0 && fr_signal_ends_call() && fr_peek(r, &l) == -EAGAIN)
        return -EINTR;   /* nothing there, and a handler ran since the call began */
    fr_waiting_for(c->peer);
    int64_t at = fr_await(c->rings, c->n, c->start, c->bell, c->efd, c->fds, c->nfds,
                          c->spin_ns, timeout_ns, &l);
    fr_waiting_for(0);
    if (at == -EINTR)
        return -EINTR;    /* a signal that ends the recv (fitring.h: fr_wait) */
    if (at < 0 || l > c->cap)
        return FS_NONE;   /* (a broken ring, one too large: the caller's recv says) */
    if (want && l > HEADER_BYTES + skip && l - HEADER_BYTES - skip <= want) {
        fit_header h;
        memcpy(&h, r->data + at, HEADER_BYTES);   /* read once: the peer may scribble */
        if (h.magic == K.magic && h.version == K.version && h.kind == K.oneway &&
            h.op == op && !h.err && !h.trace && h.length == l - HEADER_BYTES) {
            uint32_t k = l - HEADER_BYTES - skip;
            memcpy(buf, r->data + at + HEADER_BYTES + skip, k);
            fr_consume(r);
            fs_counted(c->counts, op, 0, l);
            return (int)k;
        }
    }
    memcpy(c->out, r->data + at, l);
    fr_consume(r);
    c->len = l;
    c->plain = plain(c, K.oneway, 0);
    if (c->plain)
        fs_counted(c->counts, c->op, 0, c->len);
    return FS_LANDED;
}

int fs_recv(fs_caller *c, int64_t timeout_ns) {
    int k = fs_recv_into(c, timeout_ns, 0, 0, NULL, 0);
    return k == FS_LANDED ? FC_REPLY : k == -EINTR ? -EINTR : FC_SENT;
}

/* One message of `kind` into tx, its header written here, then head and payload. */
static int put(fr_ring *tx, uint8_t kind, uint16_t op, uint32_t seq, const char *head,
               uint32_t nhead, const char *payload, uint32_t n) {
    uint64_t total = (uint64_t)HEADER_BYTES + nhead + n;
    if (total > fr_max_payload(tx))
        return -EMSGSIZE;
    int64_t at = fr_reserve(tx, (uint32_t)total);
    if (at < 0)
        return (int)at;
    fit_header h = {K.magic, K.version, kind, op, 0, seq, nhead + n, 0, 0};
    memcpy(tx->data + at, &h, HEADER_BYTES);
    memcpy(tx->data + at + HEADER_BYTES, head, nhead);
    memcpy(tx->data + at + HEADER_BYTES + nhead, payload, n);
    fr_commit(tx, (uint32_t)total);
    return 0;
}

int fs_post(fr_ring *tx, fs_counts *counts, uint16_t op, const char *head, uint32_t nhead,
            const char *payload, uint32_t n) {
    int rc = put(tx, K.oneway, op, 0, head, nhead, payload, n);
    if (rc == 0)
        fs_counted(counts, op, (uint64_t)HEADER_BYTES + nhead + n, 0);
    return rc;
}

int fs_request(fr_ring *tx, uint16_t op, uint32_t seq, const char *payload, uint32_t n) {
    return put(tx, K.request, op, seq, "", 0, payload, n);
}
