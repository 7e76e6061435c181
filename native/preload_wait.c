/* The native interposer's waits: poll, ppoll, select, pselect, epoll_wait, epoll_pwait
 * and epoll_pwait2 (native/preload.c states the whole interposer's contract).
 *
 * A rack descriptor is a real one, and these waits are the kernel's. The first of
 * them (or epoll_ctl) that names a rack socket makes its readiness exact (watch():
 * sr_watch), and the program's runtime *polled*: from then on its waits read the
 * runtime's inbox themselves. A wait (`wait_polled`):
 *   1. has the runtime hand out what waits in its inbox and its FIT shortcut
 *      channels, and arm them (sr_wait_begin): a stub that got data rings its
 *      descriptor;
 *   2. sleeps in the kernel on the program's descriptors and the runtime's;
 *   3. has the runtime disarm them and hand out what came (sr_wait_end);
 *   4. returns if one of the program's descriptors is ready (or the time is up),
 *      else waits again.
 * So a push wakes the thread that waits for it, and no other: no thread hop, no
 * interpreter lock handed between threads. While another thread of the program
 * reads the inbox (one blocked in recv), a wait sleeps on the program's descriptors
 * alone, in slices. A runtime that went threaded (a fork()ed server's) has a thread
 * of its own read the inbox, and its waits are the kernel's alone, as before the
 * first watch. A wait a signal handler siglongjmp()s out of between 1 and 3 leaves
 * the inbox held: the same thread's next wait or rack call lets it go first
 * (splitrack/guest/inbox_reader.py).
 *
 * select and pselect wait as poll does (their sets made pollfds and back, the kernel's
 * mapping: fs/select.c); epoll's waits sleep on the epoll descriptor, then take its
 * events without sleeping. Timeouts and signal masks are the caller's, for every
 * sleep; select() leaves the time not slept in *timeout, as Linux's does.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

REAL(int, poll, struct pollfd *, nfds_t, int)
REAL(int, ppoll, struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)
REAL(int, select, int, fd_set *, fd_set *, fd_set *, struct timeval *)
REAL(int, pselect, int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)
REAL(int, epoll_ctl, int, int, int, struct epoll_event *)
REAL(int, epoll_wait, int, struct epoll_event *, int, int)
REAL(int, epoll_pwait, int, struct epoll_event *, int, int, const sigset_t *)
REAL(int, epoll_pwait2, int, struct epoll_event *, int, const struct timespec *,
     const sigset_t *)

_Atomic int polled_waits;   /* the runtime is polled: the waits below read its inbox */

#define ON_STACK 64        /* pollfds a wait keeps on its stack (more: the heap) */
#define NO_DEADLINE (-1LL)

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long deadline_of(const struct timespec *timeout)
{
    if (!timeout)
        return NO_DEADLINE;
    return now_ns() + timeout->tv_sec * 1000000000LL + timeout->tv_nsec;
}

static long long deadline_ms(int timeout_ms)
{
    return timeout_ms < 0 ? NO_DEADLINE : now_ns() + timeout_ms * 1000000LL;
}

static long long left_of(long long deadline)   /* ns; NO_DEADLINE: none */
{
    if (deadline == NO_DEADLINE)
        return NO_DEADLINE;
    long long left = deadline - now_ns();
    return left > 0 ? left : 0;
}

/* ppoll's timeout for ns nanoseconds (NO_DEADLINE: none), kept in *ts */
static const struct timespec *timeout_of(long long ns, struct timespec *ts)
{
    if (ns == NO_DEADLINE)
        return NULL;
    *ts = (struct timespec){ns / 1000000000LL, ns % 1000000000LL};
    return ts;
}

static int polled(void)
{
    return atomic_load_explicit(&polled_waits, memory_order_relaxed) && !python_thread();
}

/* The program's n pollfds, waited on until one is ready or the deadline: ppoll's result. */
static int wait_polled(struct pollfd *fds, nfds_t n, long long deadline, const sigset_t *mask)
{
    struct pollfd stack[ON_STACK], *all = stack;
    int extra_stack[ON_STACK], *extra = extra_stack, room = ON_STACK, result = -1;
    nfds_t cap = ON_STACK;
    for (;;) {
        long long left = left_of(deadline);
        struct timespec ts;
        if (!atomic_load(&polled_waits)) {   /* it went threaded meanwhile: the kernel's */
            result = libc_ppoll()(fds, n, timeout_of(left, &ts), mask);
            break;
        }
        int arm = left != 0, most_ms = -1;
        int k = GUEST(sr.wait_begin, arm, extra, room, &most_ms);
        if (k == -ENOSPC) {   /* more FIT shortcut channels than room */
            if (extra != extra_stack)
                free(extra);
            room = most_ms;
            if (!(extra = malloc(sizeof *extra * (size_t)room))) {
                errno = ENOMEM;
                break;
            }
            continue;
        }
        if (k == -ENOTSUP)
            atomic_store(&polled_waits, 0);
        int held = arm && k >= 0;
        if (k < 0)
            k = 0;   /* the program's descriptors alone (another thread reads the inbox) */
        if (n + (nfds_t)k > cap) {
            if (all != stack)
                free(all);
            cap = n + (nfds_t)k;
            if (!(all = malloc(sizeof *all * cap))) {
                if (held)
                    GUEST(sr.wait_end);
                errno = ENOMEM;
                break;
            }
        }
        memcpy(all, fds, sizeof *fds * n);
        for (int i = 0; i < k; i++)
            all[n + (nfds_t)i] = (struct pollfd){.fd = extra[i], .events = POLLIN};
        long long sleep = left;
        if (most_ms >= 0 && (sleep == NO_DEADLINE || sleep > most_ms * 1000000LL))
            sleep = most_ms * 1000000LL;
        int r = libc_ppoll()(all, n + (nfds_t)k, timeout_of(sleep, &ts), mask);
        int err = errno;
        int came = held ? GUEST(sr.wait_end) : 0;
        if (r < 0) {
            errno = err;
            break;
        }
        int ready = 0;
        for (nfds_t i = 0; i < n; i++) {
            fds[i].revents = all[i].revents;
            ready += all[i].revents != 0;
        }
        if (!ready && came > 0) {   /* what came may have rung one of them */
            struct timespec zero = {0, 0};
            ready = libc_ppoll()(fds, n, &zero, mask);
        }
        if (ready != 0 || left == 0) {
            result = ready;
            break;
        }
    }
    if (all != stack)
        free(all);
    if (extra != extra_stack)
        free(extra);
    return result;
}

/* ---- poll ------------------------------------------------------------------------------ */
static void watch_polled(const struct pollfd *fds, nfds_t n)
{
    for (nfds_t i = 0; guest_up && !watched && i < n; i++)
        watch(fds[i].fd);
}

/* (glibc declares poll's fds write-only; they are read here, as the kernel reads them) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    watch_polled(fds, n);
    if (polled())
        return wait_polled(fds, n, deadline_ms(timeout), NULL);
    return libc_poll()(fds, n, timeout);
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
    watch_polled(fds, n);
    if (polled())
        return wait_polled(fds, n, deadline_of(timeout), mask);
    return libc_ppoll()(fds, n, timeout, mask);
}

/* _FORTIFY_SOURCE's checked polls */
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t room)
{
    if (n > room / sizeof *fds)
        abort();
    return poll(fds, n, timeout);
}

int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
                const sigset_t *mask, size_t room)
{
    if (n > room / sizeof *fds)
        abort();
    return ppoll(fds, n, timeout, mask);
}

/* ---- select ---------------------------------------------------------------------------- */
static void watch_selected(int n, const fd_set *r, const fd_set *w, const fd_set *e)
{
    for (int fd = 0; guest_up && !watched && fd < n && fd < FD_SETSIZE; fd++)
        if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
            watch(fd);
}

/* The kernel's select, as pollfds: readable POLLIN|HUP|ERR, writable POLLOUT|ERR,
 * exceptional POLLPRI; a closed descriptor EBADF. */
static int select_polled(int n, fd_set *r, fd_set *w, fd_set *e, long long deadline,
                         const sigset_t *mask)
{
    if (n < 0) {
        errno = EINVAL;
        return -1;
    }
    if (n > FD_SETSIZE)
        n = FD_SETSIZE;
    struct pollfd stack[ON_STACK], *fds = stack;
    nfds_t m = 0;
    for (int fd = 0; fd < n; fd++)
        m += (r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e));
    if (m > ON_STACK && !(fds = malloc(sizeof *fds * m))) {
        errno = ENOMEM;
        return -1;
    }
    m = 0;
    for (int fd = 0; fd < n; fd++) {
        short events = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0)
                               | (w && FD_ISSET(fd, w) ? POLLOUT : 0)
                               | (e && FD_ISSET(fd, e) ? POLLPRI : 0));
        if (events)
            fds[m++] = (struct pollfd){.fd = fd, .events = events};
    }
    int got = wait_polled(fds, m, deadline, mask);
    for (nfds_t i = 0; got > 0 && i < m; i++)
        if (fds[i].revents & POLLNVAL) {
            errno = EBADF;
            got = -1;
        }
    if (got >= 0) {
        got = 0;
        for (nfds_t i = 0; i < m; i++) {
            int fd = fds[i].fd;
            short ev = fds[i].events, rev = fds[i].revents;
            if ((ev & POLLIN) && !(rev & (POLLIN | POLLHUP | POLLERR)))
                FD_CLR(fd, r);
            if ((ev & POLLOUT) && !(rev & (POLLOUT | POLLERR)))
                FD_CLR(fd, w);
            if ((ev & POLLPRI) && !(rev & POLLPRI))
                FD_CLR(fd, e);
            got += (r && FD_ISSET(fd, r)) + (w && FD_ISSET(fd, w)) + (e && FD_ISSET(fd, e));
        }
    }
    if (fds != stack)
        free(fds);
    return got;
}

int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
    watch_selected(n, r, w, e);
    if (!polled())
        return libc_select()(n, r, w, e, timeout);
    long long deadline = NO_DEADLINE;
    if (timeout) {
        if (timeout->tv_sec < 0 || timeout->tv_usec < 0) {
            errno = EINVAL;
            return -1;
        }
        deadline = now_ns() + timeout->tv_sec * 1000000000LL + timeout->tv_usec * 1000LL;
    }
    int got = select_polled(n, r, w, e, deadline, NULL);
    if (timeout) {   /* the time not slept, as Linux's select leaves it */
        long long left = left_of(deadline);
        timeout->tv_sec = left / 1000000000LL;
        timeout->tv_usec = left % 1000000000LL / 1000;
    }
    return got;
}

int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
            const sigset_t *mask)
{
    watch_selected(n, r, w, e);
    if (!polled())
        return libc_pselect()(n, r, w, e, timeout, mask);
    return select_polled(n, r, w, e, deadline_of(timeout), mask);
}

/* ---- epoll ----------------------------------------------------------------------------- */
int epoll_ctl(int ep, int op, int fd, struct epoll_event *event)
{
    if (guest_up && op != EPOLL_CTL_DEL)
        watch(fd);
    return libc_epoll_ctl()(ep, op, fd, event);
}

/* Sleep on the epoll descriptor (wait_polled), then take its events without sleeping. */
static int epoll_polled(int ep, struct epoll_event *events, int most, long long deadline,
                        const sigset_t *mask)
{
    if (most <= 0)   /* (the kernel's EINVAL, at once) */
        return libc_epoll_wait()(ep, events, most, 0);
    for (;;) {
        struct pollfd p = {.fd = ep, .events = POLLIN};
        int r = wait_polled(&p, 1, deadline, mask);
        if (r <= 0)
            return r;
        r = libc_epoll_wait()(ep, events, most, 0);   /* (a bad ep: its error) */
        if (r != 0 || left_of(deadline) == 0)
            return r;
    }
}

int epoll_wait(int ep, struct epoll_event *events, int most, int timeout)
{
    if (polled())
        return epoll_polled(ep, events, most, deadline_ms(timeout), NULL);
    return libc_epoll_wait()(ep, events, most, timeout);
}

int epoll_pwait(int ep, struct epoll_event *events, int most, int timeout, const sigset_t *mask)
{
    if (polled())
        return epoll_polled(ep, events, most, deadline_ms(timeout), mask);
    return libc_epoll_pwait()(ep, events, most, timeout, mask);
}

int epoll_pwait2(int ep, struct epoll_event *events, int most, const struct timespec *timeout,
                 const sigset_t *mask)
{
    if (polled())
        return epoll_polled(ep, events, most, deadline_of(timeout), mask);
    return libc_epoll_pwait2()(ep, events, most, timeout, mask);
}
