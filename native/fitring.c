/*
 * fitring.c -- FIT's shared-memory rings and doorbells. Contract: fitring.h.
 * The segments, a ring's producer and its consumer are here; waiting on rings
 * (the spin, the bell, the sleep) is fitwait.c's.
 *
 * Invariants (each side checks what it reads of the other's):
 * - head and tail are multiples of 8, tail <= head <= tail + cap.
 * - A record starts at a multiple of 8, carries FR_MARK and ends inside the
 *   data area; a skip record runs to the end of the data area.
 * - A record is at most cap / 2 bytes, so after a skip it always fits into an
 *   empty ring (fr_max_payload).
 * - On a modelled ring (r->modeled) a record's header is FR_RECORD_BYTES +
 *   FR_DUE_BYTES (r->hdr); a skip record is FR_RECORD_BYTES either way. Only a
 *   modelled ring reads the clock, on either side.
 */
#define _GNU_SOURCE
#include "fitring.h"
#include "kernel_poll.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ALIGN8(x) (((uint64_t)(x) + 7) & ~(uint64_t)7)

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fr_ring_efd(int efd) {
    uint64_t one = 1;
    ssize_t rc = write(efd, &one, sizeof one);  /* EAGAIN: the counter is full, rung anyway */
    (void)rc;
}

int fr_drain_efd(int efd) {
    uint64_t n;
    return read(efd, &n, sizeof n) == (ssize_t)sizeof n;
}

uint64_t fr_now_ns(void) { return now_ns(); }

/* ---- segments ------------------------------------------------------------ */

uint64_t fr_segment_size(uint32_t cap) {
    return FR_HEADER_BYTES + 2 * ALIGN8(cap);
}

int fr_format(void *seg, uint64_t size, uint32_t cap) {
    fr_segment *s = (fr_segment *)seg;
    if (cap < 64 || cap % 8 || size < fr_segment_size(cap))
        return -EINVAL;
    memset(s, 0, sizeof *s);
    s->version = FR_VERSION;
    s->cap = cap;
    __atomic_store_n(&s->magic, FR_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int64_t fr_check(void *seg, uint64_t size) {
    fr_segment *s = (fr_segment *)seg;
    if (size < FR_HEADER_BYTES || __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != FR_MAGIC ||
        s->version != FR_VERSION)
        return -EINVAL;
    uint32_t cap = s->cap;  /* read once: the peer may change it afterwards */
    if (cap < 64 || cap % 8 || fr_segment_size(cap) != size)
        return -EINVAL;
    return cap;
}

void fr_set_model(void *seg, int which, uint64_t latency_ns, uint64_t bytes_per_s) {
    fr_model *m = &((fr_segment *)seg)->model[which];
    m->latency_ns = latency_ns;
    m->bytes_per_s = bytes_per_s;
    m->on = 1;
}

void fr_attach(fr_ring *r, void *seg, uint32_t cap, int which, const uint32_t *peer_bell,
               int peer_efd) {
    fr_segment *s = (fr_segment *)seg;
    memset(r, 0, sizeof *r);
    r->ctl = &s->ctl[which];
    r->data = (char *)seg + FR_HEADER_BYTES + (uint64_t)which * cap;
    r->cap = cap;
    r->peer_bell = peer_bell;
    r->peer_efd = peer_efd;
    volatile fr_model *m = &s->model[which];   /* read once: the peer may change it later */
    r->modeled = m->on != 0;
    r->latency_ns = r->modeled ? m->latency_ns : 0;
    r->bytes_per_s = r->modeled ? m->bytes_per_s : 0;
    r->hdr = FR_RECORD_BYTES + (r->modeled ? FR_DUE_BYTES : 0);
}

uint32_t fr_max_payload(const fr_ring *r) {
    return r->cap / 2 - r->hdr;
}

/* ---- producer ------------------------------------------------------------ */

/* Where a record of `rec` bytes would go: the bytes to skip first (0 or up to
 * the end of the data area), or -EAGAIN / -EBADMSG. It first believes the
 * consumer's tail as last read (r->seen: the tail only grows, so this errs
 * toward "full"), and reads the tail itself only when that finds no room, or
 * past FR_EARLY_WRAP, where an empty ring starts over at 0 (so that a ring in
 * ping-pong stays in its first, warm, pages): the line the consumer writes on
 * every message is not pulled across on every send. */
static int64_t place(fr_ring *r, uint64_t rec) {
    uint64_t head = r->pos;
    int fresh = head % r->cap > FR_EARLY_WRAP && r->seen != head;
    for (;; fresh = 1) {
        uint64_t tail = r->seen;
        if (fresh) {
            tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE);
            if (tail > head || head - tail > r->cap || tail % 8)
                return -EBADMSG;
            r->seen = tail;
        }
        uint64_t used = head - tail, off = head % r->cap, skip = 0;
        if (used <= r->cap) {
            if (off + rec > r->cap)
                skip = r->cap - off;                   /* does not fit before the end */
            else if (used == 0 && off > FR_EARLY_WRAP && rec <= off)
                skip = r->cap - off;                   /* empty: start over near 0 */
            if (skip + rec <= r->cap - used)
                return (int64_t)skip;
        }
        if (fresh)
            return -EAGAIN;
    }
}

int64_t fr_reserve(fr_ring *r, uint32_t n) {
    if (n > fr_max_payload(r))
        return -EMSGSIZE;
    uint64_t rec = r->hdr + ALIGN8(n);
    int64_t skip = place(r, rec);
    if (skip < 0)
        return skip;
    r->reserved = (uint32_t)(skip + rec);
    r->skip = (uint32_t)skip;
    return (int64_t)((r->pos + (uint64_t)skip) % r->cap + r->hdr);
}

/* When a message of n bytes, sent now, is due at the consumer (the model). */
static uint64_t due_time(fr_ring *r, uint32_t n) {
    uint64_t now = now_ns(), start = now > r->free_at ? now : r->free_at;
    r->free_at = start + (r->bytes_per_s ? (uint64_t)n * 1000000000ull / r->bytes_per_s : 0);
    return r->free_at + r->latency_ns;
}

void fr_commit(fr_ring *r, uint32_t n) {
    if (!r->reserved)
        return;  /* nothing reserved: a caller's bug, and nothing to publish */
    uint64_t off = r->pos % r->cap, skip = r->skip;
    if (r->hdr + ALIGN8(n) + skip > r->reserved)
        n = (uint32_t)(r->reserved - skip - r->hdr);   /* never past the reservation */
    if (skip) {
        uint32_t *mark = (uint32_t *)(r->data + off);
        mark[0] = FR_SKIP;
        mark[1] = FR_MARK;
    }
    uint32_t *hdr = (uint32_t *)(r->data + (off + skip) % r->cap);
    hdr[0] = n;
    hdr[1] = FR_MARK;
    if (r->modeled)
        *(uint64_t *)(hdr + 2) = due_time(r, n);
    r->pos += skip + r->hdr + ALIGN8(n);
    r->reserved = r->skip = 0;
    __atomic_store_n(&r->ctl->head, r->pos, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!r->peer_bell)
        return;
    if (__atomic_load_n(r->peer_bell, __ATOMIC_RELAXED))
        fr_ring_efd(r->peer_efd);
    else   /* awake: where did it begin its wait? (fitring.h: FR_BELL_CPU) */
        fr_note_peer_cpu(__atomic_load_n(r->peer_bell + FR_BELL_CPU, __ATOMIC_RELAXED));
}

int fr_send2(fr_ring *r, const char *a, uint32_t na, const char *b, uint32_t nb) {
    if ((uint64_t)na + nb > fr_max_payload(r))
        return -EMSGSIZE;
    int64_t at = fr_reserve(r, na + nb);
    if (at < 0)
        return (int)at;
    if (na)
        memcpy(r->data + at, a, na);
    if (nb)
        memcpy(r->data + at + na, b, nb);
    fr_commit(r, na + nb);
    return 0;
}

int fr_wait_space(fr_ring *r, uint32_t n, int own_efd, int64_t spin_ns, int64_t timeout_ns) {
    if (n > fr_max_payload(r))
        return -EMSGSIZE;
    uint64_t rec = r->hdr + ALIGN8(n), t0 = now_ns();
    for (;;) {
        int64_t p = place(r, rec);
        if (p != -EAGAIN)
            return p < 0 ? (int)p : 0;
        uint64_t spent = now_ns() - t0;
        if (timeout_ns >= 0 && spent >= (uint64_t)timeout_ns)
            return -ETIMEDOUT;
        if (spent < (uint64_t)spin_ns && fr_spin_yield(spent))
            continue;
        __atomic_store_n(&r->ctl->want_space, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (place(r, rec) != -EAGAIN)
            continue;  /* freed meanwhile: the next look takes it */
        int64_t left = timeout_ns < 0 ? 1000000 : timeout_ns - (int64_t)spent;
        if (left > 1000000)
            left = 1000000;  /* look again every millisecond: a lost ring costs no more */
        struct timespec ts = {0, left};
        struct pollfd pfd = {own_efd, POLLIN, 0};
        kernel_ppoll(&pfd, 1, &ts);
        fr_drain_efd(own_efd);
    }
}

/* ---- consumer ------------------------------------------------------------ */

int64_t fr_peek(fr_ring *r, uint32_t *len) {
    for (;;) {
        uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE), tail = r->pos;
        if (head == tail)
            return -EAGAIN;
        if (head < tail || head - tail > r->cap || head % 8)
            return -EBADMSG;
        uint64_t off = tail % r->cap;
        uint32_t l = ((volatile uint32_t *)(r->data + off))[0];   /* read once */
        uint32_t mark = ((volatile uint32_t *)(r->data + off))[1];
        if (mark != FR_MARK)
            return -EBADMSG;
        if (l == FR_SKIP) {
            uint64_t skip = r->cap - off;
            if (skip > head - tail)
                return -EBADMSG;
            r->pos += skip;
            __atomic_store_n(&r->ctl->tail, r->pos, __ATOMIC_RELEASE);
            continue;
        }
        uint64_t rec = r->hdr + ALIGN8(l);
        if (l > fr_max_payload(r) || off + rec > r->cap || rec > head - tail)
            return -EBADMSG;
        if (r->modeled && *(volatile uint64_t *)(r->data + off + FR_RECORD_BYTES) > now_ns())
            return -EAGAIN;   /* published, not due yet */
        *len = l;
        r->peeked = (uint32_t)rec;
        return (int64_t)(off + r->hdr);
    }
}

void fr_consume(fr_ring *r) {
    if (!r->peeked)
        return;
    r->pos += r->peeked;
    r->peeked = 0;
    __atomic_store_n(&r->ctl->tail, r->pos, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->ctl->want_space, __ATOMIC_RELAXED)) {
        __atomic_store_n(&r->ctl->want_space, 0, __ATOMIC_RELAXED);
        fr_ring_efd(r->peer_efd);
    }
}

int fr_pending(const fr_ring *r) {
    return __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE) != r->pos;
}
