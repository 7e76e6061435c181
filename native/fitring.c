/*
 * fitring.c -- FIT's shared-memory rings and doorbells. Contract: fitring.h.
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

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
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
    uint64_t rec = r->hdr + ALIGN8(n), t0 = now_ns();
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

/* ---- waiting --------------------------------------------------------------- */

/* When the next message of r is due: 0 now (or no model, or a broken ring:
 * fr_peek says which), FR_NEVER if none is published. Reads no clock. */
static uint64_t next_due(const fr_ring *r) {
    uint64_t head = __atomic_load_n(&r->ctl->head, __ATOMIC_ACQUIRE), pos = r->pos;
    if (head == pos)
        return FR_NEVER;
    if (!r->modeled || head < pos || head - pos > r->cap)
        return 0;
    uint64_t off = pos % r->cap;
    if (((volatile uint32_t *)(r->data + off))[0] == FR_SKIP) {   /* the record after it */
        if (head - pos <= r->cap - off)
            return 0;
        off = 0;
    }
    if (off + r->hdr > r->cap)
        return 0;
    return *(volatile uint64_t *)(r->data + off + FR_RECORD_BYTES);
}

/* A ring with a message due, from `start` round, or -1 and in *due the first
 * due time to come (FR_NEVER: nothing is published). Reads the clock only for
 * a modelled ring with something published. */
static int look(fr_ring *const *rings, int n, int start, uint64_t *due) {
    uint64_t now = 0, first = FR_NEVER;
    for (int i = 0; i < n; i++) {
        int j = (start + i) % n;
        uint64_t d = next_due(rings[j]);
        if (d == 0)
            return j;
        if (d == FR_NEVER)
            continue;
        if (!now)
            now = now_ns();
        if (d <= now)
            return j;
        if (d < first)
            first = d;
    }
    *due = first;
    return -1;
}

int fr_ready(fr_ring *const *rings, int n, int start) {
    uint64_t due;
    return look(rings, n, start, &due);
}

uint64_t fr_next_due(fr_ring *const *rings, int n) {
    uint64_t due;
    return look(rings, n, 0, &due) >= 0 ? 0 : due;
}

int fr_arm(fr_ring *const *rings, int n, uint32_t *bell, uint64_t *due) {
    __atomic_store_n(bell, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *due = FR_NEVER;
    if (n > 0 && (look(rings, n, 0, due) >= 0 ||
                  (*due != FR_NEVER && *due <= now_ns() + FR_DUE_SPIN_NS))) {
        __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
        if (*due == FR_NEVER)
            *due = 0;
        return 0;
    }
    return 1;
}

int fr_disarm(uint32_t *bell, int efd) {
    __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
    return drain_efd(efd);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static __thread unsigned held_in_a_row;   /* fr_spin_yield's long yields, this thread's */

int fr_spin_yield(void) {
    uint64_t t = now_ns();
    sched_yield();
    uint64_t held = now_ns() - t;
    if (held < FR_CONTENDED_NS) {
        held_in_a_row = 0;
        return 1;
    }
    if (held < FR_CONTENDED_SLICE_NS && ++held_in_a_row < FR_CONTENDED_TURNS)
        return 1;
    held_in_a_row = 0;   /* it sleeps now: its next spin counts afresh */
    return 0;
}

/* Sleep on efd and the fds' hang-ups until `until` (FR_NEVER: no limit; exact:
 * a due time, slept to without the thread's timer slack, 50 us by default);
 * 0 when the time came, 1 when the eventfd was rung, 2 + k when fds[k] hung
 * up, < 0 with *err the errno. */
static int sleep_on(int efd, const int *fds, int nfds, uint64_t until, int exact, int *err) {
    struct pollfd pfd[1 + 16];
    pfd[0].fd = efd;
    pfd[0].events = POLLIN;
    for (int k = 0; k < nfds; k++) {
        pfd[1 + k].fd = fds[k];
        pfd[1 + k].events = POLLRDHUP;  /* hang-ups only: fds passed later wait there */
    }
    struct timespec ts, *tsp = NULL;
    if (until != FR_NEVER) {
        uint64_t now = now_ns(), left = until > now ? until - now : 0;
        ts.tv_sec = (time_t)(left / 1000000000ull);
        ts.tv_nsec = (long)(left % 1000000000ull);
        tsp = &ts;
    }
    int slack = exact ? prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) : -1;
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    int rc = ppoll(pfd, (nfds_t)(1 + nfds), tsp, NULL);
    *err = rc < 0 ? errno : 0;
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
    for (int k = 0; rc > 0 && k < nfds; k++)
        if (pfd[1 + k].revents)
            return 2 + k;
    return rc > 0 ? 1 : rc;
}

int fr_wait(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
            const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns) {
    uint64_t t0 = now_ns(), due = FR_NEVER;
    uint64_t deadline = timeout_ns < 0 ? FR_NEVER : t0 + (uint64_t)timeout_ns;
    int i, contended = 0;
    if (nfds > 16)
        nfds = 16;
    for (;;) {
        for (;;) {   /* spin: for spin_ns, and whenever a due time is near */
            if (n > 0 && (i = look(rings, n, start, &due)) >= 0)
                return i;
            uint64_t now = now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            if (due != FR_NEVER && due - now <= FR_DUE_SPIN_NS) {
                cpu_relax();   /* near: to the due time, not giving the CPU away (a yield */
                continue;      /* to a busy task comes back a time slice later) */
            }
            if (contended || now - t0 >= (uint64_t)spin_ns)
                break;
            if (!fr_spin_yield())
                contended = 1;   /* another task wants this CPU: sleep */
        }
        __atomic_store_n(bell, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (n > 0 && (i = look(rings, n, start, &due)) >= 0) {
            __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
            return i;
        }
        uint64_t wake = deadline;   /* a due time: FR_DUE_SPIN_NS early, then spin */
        if (due != FR_NEVER && due - FR_DUE_SPIN_NS < wake)
            wake = due - FR_DUE_SPIN_NS;
        int err, rc = sleep_on(efd, fds, nfds, wake, wake != deadline, &err);
        fr_disarm(bell, efd);
        if (n > 0 && (i = look(rings, n, start, &due)) >= 0)
            return i;
        if (rc >= 2)
            return n + rc - 2;
        if (err == EINTR)
            return -EINTR;
        if (rc != 0)
            return -EAGAIN;   /* rung, nothing due: the caller looks at what else changed */
        if (wake == deadline)
            return -ETIMEDOUT;
    }
}

int fr_timer_new(void) {
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    return tfd < 0 ? -errno : tfd;
}

void fr_timer_at(int tfd, uint64_t at_ns) {
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (at_ns) {   /* (a time already past fires at once) */
        its.it_value.tv_sec = (time_t)(at_ns / 1000000000ull);
        its.it_value.tv_nsec = (long)(at_ns % 1000000000ull);
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);   /* resets its expirations too */
}
