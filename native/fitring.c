/*
 * fitring.c -- FIT's shared-memory rings and doorbells. Contract: fitring.h.
 *
 * Invariants (each side checks what it reads of the other's):
 * - head and tail are multiples of 8, tail <= head <= tail + cap.
 * - A record starts at a multiple of 8, carries FR_MARK and ends inside the
 *   data area; a skip record runs to the end of the data area.
 * - A record is at most cap / 2 bytes, so after a skip it always fits into an
 *   empty ring (fr_max_payload).
 */
#define _GNU_SOURCE
#include "fitring.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
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

static int drain_efd(int efd) {
    uint64_t n;
    return read(efd, &n, sizeof n) == (ssize_t)sizeof n;
}

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

void fr_attach(fr_ring *r, void *seg, uint32_t cap, int which, const uint32_t *peer_bell,
               int peer_efd) {
    fr_segment *s = (fr_segment *)seg;
    memset(r, 0, sizeof *r);
    r->ctl = &s->ctl[which];
    r->data = (char *)seg + FR_HEADER_BYTES + (uint64_t)which * cap;
    r->cap = cap;
    r->peer_bell = peer_bell;
    r->peer_efd = peer_efd;
}

uint32_t fr_max_payload(const fr_ring *r) {
    return r->cap / 2 - FR_RECORD_BYTES;
}

/* ---- producer ------------------------------------------------------------ */

/* Where a record of `rec` bytes would go: the bytes to skip first (0 or up to
 * the end of the data area), or -EAGAIN / -EBADMSG. */
static int64_t place(const fr_ring *r, uint64_t rec) {
    uint64_t tail = __atomic_load_n(&r->ctl->tail, __ATOMIC_ACQUIRE), head = r->pos;
    if (tail > head || head - tail > r->cap || tail % 8)
        return -EBADMSG;
    uint64_t used = head - tail, off = head % r->cap, skip = 0;
    if (off + rec > r->cap)
        skip = r->cap - off;                       /* does not fit before the end */
    else if (used == 0 && off > FR_EARLY_WRAP && rec <= off)
        skip = r->cap - off;                       /* empty: start over near 0 */
    if (skip + rec > r->cap - used)
        return -EAGAIN;
    return (int64_t)skip;
}

int64_t fr_reserve(fr_ring *r, uint32_t n) {
    if (n > fr_max_payload(r))
        return -EMSGSIZE;
    uint64_t rec = FR_RECORD_BYTES + ALIGN8(n);
    int64_t skip = place(r, rec);
    if (skip < 0)
        return skip;
    r->reserved = (uint32_t)(skip + rec);
    r->skip = (uint32_t)skip;
    return (int64_t)((r->pos + (uint64_t)skip) % r->cap + FR_RECORD_BYTES);
}

void fr_commit(fr_ring *r, uint32_t n) {
    if (!r->reserved)
        return;  /* nothing reserved: a caller's bug, and nothing to publish */
    uint64_t off = r->pos % r->cap, skip = r->skip;
    if (FR_RECORD_BYTES + ALIGN8(n) + skip > r->reserved)
        n = (uint32_t)(r->reserved - skip - FR_RECORD_BYTES);   /* never past the reservation */
    if (skip) {
        uint32_t *mark = (uint32_t *)(r->data + off);
        mark[0] = FR_SKIP;
        mark[1] = FR_MARK;
    }
    uint32_t *hdr = (uint32_t *)(r->data + (off + skip) % r->cap);
    hdr[0] = n;
    hdr[1] = FR_MARK;
    r->pos += skip + FR_RECORD_BYTES + ALIGN8(n);
    r->reserved = r->skip = 0;
    __atomic_store_n(&r->ctl->head, r->pos, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (r->peer_bell && __atomic_load_n(r->peer_bell, __ATOMIC_RELAXED))
        fr_ring_efd(r->peer_efd);
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
    uint64_t rec = FR_RECORD_BYTES + ALIGN8(n), t0 = now_ns();
    for (;;) {
        int64_t p = place(r, rec);
        if (p != -EAGAIN)
            return p < 0 ? (int)p : 0;
        uint64_t spent = now_ns() - t0;
        if (timeout_ns >= 0 && spent >= (uint64_t)timeout_ns)
            return -ETIMEDOUT;
        if (spent < (uint64_t)spin_ns && fr_spin_yield())
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
        ppoll(&pfd, 1, &ts, NULL);
        drain_efd(own_efd);
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
        uint64_t rec = FR_RECORD_BYTES + ALIGN8(l);
        if (l > fr_max_payload(r) || off + rec > r->cap || rec > head - tail)
            return -EBADMSG;
        *len = l;
        r->peeked = (uint32_t)rec;
        return (int64_t)(off + FR_RECORD_BYTES);
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

/* ---- waiting --------------------------------------------------------------- */

int fr_ready(fr_ring *const *rings, int n, int start) {
    for (int i = 0; i < n; i++) {
        int j = (start + i) % n;
        if (fr_pending(rings[j]))
            return j;
    }
    return -1;
}

int fr_arm(fr_ring *const *rings, int n, uint32_t *bell) {
    __atomic_store_n(bell, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (n > 0 && fr_ready(rings, n, 0) >= 0) {
        __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

int fr_disarm(uint32_t *bell, int efd) {
    __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
    return drain_efd(efd);
}

int fr_spin_yield(void) {
    uint64_t t = now_ns();
    sched_yield();
    return now_ns() - t < FR_CONTENDED_NS;
}

int fr_wait(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
            const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns) {
    uint64_t t0 = now_ns();
    int i;
    for (;;) {
        if (n > 0 && (i = fr_ready(rings, n, start)) >= 0)
            return i;
        uint64_t spent = now_ns() - t0;
        if (timeout_ns >= 0 && spent >= (uint64_t)timeout_ns)
            return -ETIMEDOUT;
        if (spent >= (uint64_t)spin_ns || !fr_spin_yield())
            break;   /* spun enough, or another task wants this CPU: sleep */
    }
    if (!fr_arm(rings, n, bell))
        return fr_ready(rings, n, start);
    struct pollfd pfd[1 + 16];
    if (nfds > 16)
        nfds = 16;
    pfd[0].fd = efd;
    pfd[0].events = POLLIN;
    for (int k = 0; k < nfds; k++) {
        pfd[1 + k].fd = fds[k];
        pfd[1 + k].events = POLLRDHUP;  /* hang-ups only: fds passed later wait there */
    }
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        uint64_t left = (uint64_t)timeout_ns - (now_ns() - t0);
        if ((int64_t)left < 0)
            left = 0;
        ts.tv_sec = (time_t)(left / 1000000000ull);
        ts.tv_nsec = (long)(left % 1000000000ull);
        tsp = &ts;
    }
    int rc = ppoll(pfd, (nfds_t)(1 + nfds), tsp, NULL);
    int err = rc < 0 ? errno : 0;
    fr_disarm(bell, efd);
    if (n > 0 && (i = fr_ready(rings, n, start)) >= 0)
        return i;
    for (int k = 0; rc > 0 && k < nfds; k++)
        if (pfd[1 + k].revents)
            return n + k;
    if (err == EINTR)
        return -EINTR;
    return rc == 0 ? -ETIMEDOUT : -EAGAIN;
}
