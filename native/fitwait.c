/*
 * fitwait.c -- waiting on FIT's rings: one consumer, many rings, one bell.
 * Contract: fitring.h ("waiting"); the rings themselves: fitring.c.
 *
 * A waiter looks (fr_ready: a message due on any ring), spins for a while
 * yielding the CPU between looks (fr_spin_yield, which stops once the CPU is
 * contended), then arms its bell and sleeps on its eventfd (fr_arm, fr_wait;
 * fr_disarm after). A producer rings the eventfd only when it finds the bell
 * up (fitring.c: fr_commit), so the bell is armed, then the rings looked at
 * once more, before the sleep: no wake-up is lost. On a modelled ring a
 * message is not there before its due time, and a waiter wakes at that time,
 * FR_DUE_SPIN_NS early, then spins to it.
 */
#define _GNU_SOURCE
#include "fitring.h"
#include "kernel_poll.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
            now = fr_now_ns();
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
                  (*due != FR_NEVER && *due <= fr_now_ns() + FR_DUE_SPIN_NS))) {
        __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
        if (*due == FR_NEVER)
            *due = 0;
        return 0;
    }
    return 1;
}

int fr_disarm(uint32_t *bell, int efd) {
    __atomic_store_n(bell, 0, __ATOMIC_RELAXED);
    return fr_drain_efd(efd);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static __thread unsigned held_in_a_row;   /* fr_spin_yield's long yields, this thread's */
static __thread uint64_t no_spin_until;   /* a time slice lost: no yields before this, */
static __thread uint64_t no_spin_ns;      /* the back-off that set it */
static __thread unsigned lost_slices;     /* slices lost, FR_SHORT_YIELDS apart at most */
static __thread unsigned short_yields;    /* short yields since the last slice lost */

static __thread int peer_pid;          /* fr_waiting_for's: whom this thread's spins wait for */
static __thread uint64_t next_peer_look;
static __thread int peer_here;   /* the consumer of this thread's last commit waits behind it */

void fr_waiting_for(int pid) {
    peer_pid = pid;
}

void fr_note_peer_cpu(uint32_t cpu1) {
    peer_here = cpu1 && (int)cpu1 - 1 == sched_getcpu();
}

void fr_published_cpu(uint32_t *bell) {
    int cpu = sched_getcpu();
    if (cpu >= 0 && __atomic_load_n(bell + FR_BELL_CPU, __ATOMIC_RELAXED) != (uint32_t)cpu + 1)
        __atomic_store_n(bell + FR_BELL_CPU, (uint32_t)cpu + 1, __ATOMIC_RELAXED);
}

/* Whether the process this thread waits for is runnable on this very CPU, queued
 * behind it (/proc/<pid>/stat: state R, and the CPU it is on). The file is opened
 * for each look (2 us), not kept: a monitor's descriptors stay what they were. */
static int peer_behind(void) {
    char path[40], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", peer_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');   /* (the command's name may hold anything) */
    if (!p || p[1] != ' ' || p[2] != 'R')
        return 0;
    for (int field = 3; field <= 39 && p; field++)   /* p at each field's start, up to */
        if ((p = strchr(p + 1, ' ')))               /* 39: the CPU it is on */
            p++;
    return p && strtol(p, NULL, 10) == sched_getcpu();
}

int fr_spin_yield(uint64_t spun_ns) {
    int behind = peer_here && peer_pid > 0;   /* a call's answerer queued behind it? */
    peer_here = 0;
    uint64_t t = fr_now_ns();
    if (t < no_spin_until)
        return 0;
    if (peer_pid > 0 && spun_ns >= FR_PEER_AFTER_NS && t >= next_peer_look) {
        next_peer_look = t + FR_PEER_EVERY_NS;
        if (peer_behind())
            return 0;   /* it waits for this CPU, which a yield does not give it: sleep */
    }
    sched_yield();
    uint64_t now = fr_now_ns(), held = now - t;
    if (behind && held < FR_HANDED_NS)
        return 0;   /* the yield did not hand it the CPU (it had its share): sleep */
    if (held < FR_CONTENDED_NS) {
        held_in_a_row = 0;
        if (++short_yields >= FR_SHORT_YIELDS)
            lost_slices = 0;   /* a lost slice now and then: a neighbour moved, spin on */
        return 1;
    }
    if (held < FR_CONTENDED_SLICE_NS && ++held_in_a_row < FR_CONTENDED_TURNS)
        return 1;
    held_in_a_row = 0;   /* it sleeps now: its next spin counts afresh */
    if (held >= FR_CONTENDED_SLICE_NS)
        short_yields = 0;
    if (held >= FR_CONTENDED_SLICE_NS && ++lost_slices >= FR_LOST_SLICES) {
        /* the waits to come do not spin for a while: */
        if (no_spin_until && t - no_spin_until < no_spin_ns)   /* twice as long if a slice */
            no_spin_ns = 2 * no_spin_ns < FR_NO_SPIN_MAX_NS ? 2 * no_spin_ns   /* was lost */
                                                            : FR_NO_SPIN_MAX_NS;  /* again soon */
        else
            no_spin_ns = FR_NO_SPIN_NS;
        no_spin_until = now + no_spin_ns;
    }
    return 0;
}

int fr_wait_fd(int fd, int events, int64_t timeout_ns) {
    if (timeout_ns != 0 && fr_signal_ends_call())
        return -EINTR;   /* a handler ran since the call began (the stub busy, or spinning) */
    struct pollfd p = {.fd = fd, .events = (short)events};
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tsp = &ts;
    }
    int rc = kernel_ppoll(&p, 1, tsp);
    if (rc >= 0)
        return rc > 0;   /* ready, hung up, or an error: the caller's call on fd says */
    if (errno != EINTR)
        return -errno;
    return fr_signal_ends_call() ? -EINTR : 0;   /* 0: the caller looks again (a Python
                                                    program's handlers run then) */
}

int fr_spin_readable(int fd, int64_t spin_ns) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    struct timespec now = {0, 0};
    uint64_t t0 = fr_now_ns();
    for (;;) {
        if (kernel_ppoll(&p, 1, &now) != 0)
            return 1;   /* readable, hung up, or an error: the caller's read says */
        uint64_t spun = fr_now_ns() - t0;
        if ((int64_t)spun >= spin_ns || !fr_spin_yield(spun))
            return 0;
    }
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
        uint64_t now = fr_now_ns(), left = until > now ? until - now : 0;
        ts.tv_sec = (time_t)(left / 1000000000ull);
        ts.tv_nsec = (long)(left % 1000000000ull);
        tsp = &ts;
    }
    int slack = exact ? prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) : -1;
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    int rc = kernel_ppoll(pfd, (nfds_t)(1 + nfds), tsp);
    *err = rc < 0 ? errno : 0;
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
    for (int k = 0; rc > 0 && k < nfds; k++)
        if (pfd[1 + k].revents)
            return 2 + k;
    return rc > 0 ? 1 : rc;
}

int fr_signal_ends_call(void) {
    static void *ends = (void *)1;   /* 1: not looked up yet (threads may race: same answer) */
    void *f = __atomic_load_n(&ends, __ATOMIC_ACQUIRE);
    if (f == (void *)1) {
        f = dlsym(RTLD_DEFAULT, "sr_signal_ends_call");
        __atomic_store_n(&ends, f, __ATOMIC_RELEASE);
    }
    return f && ((int (*)(void))f)();
}

int fr_wait(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
            const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns) {
    uint64_t t0 = fr_now_ns(), due = FR_NEVER;
    uint64_t deadline = timeout_ns < 0 ? FR_NEVER : t0 + (uint64_t)timeout_ns;
    int i, contended = 0;
    if (nfds > 16)
        nfds = 16;
    fr_published_cpu(bell);
    for (;;) {
        for (;;) {   /* spin: for spin_ns, and whenever a due time is near */
            if (n > 0 && (i = look(rings, n, start, &due)) >= 0)
                return i;
            uint64_t now = fr_now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            if (due != FR_NEVER && due - now <= FR_DUE_SPIN_NS) {
                cpu_relax();   /* near: to the due time, not giving the CPU away (a yield */
                continue;      /* to a busy task comes back a time slice later) */
            }
            if (contended || now - t0 >= (uint64_t)spin_ns)
                break;
            if (!fr_spin_yield(now - t0))
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
        if (err == EINTR && fr_signal_ends_call())
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
