/*
 * kernel_poll.h -- the rack's own sleeps, straight to the kernel.
 *
 * In a native program, `splitrack run` preloads the interposer, whose ppoll and
 * poll (native/preload_wait.c) take the program's waits and read the program's
 * FIT inbox in them. The rack's own waits -- FIT's rings (fitwait.c, fitring.c)
 * and the heap's pager thread (pager.c) -- must never be taken for the
 * program's: they call the kernel's ppoll by its system call, which no library
 * interposes. Same arguments and result as ppoll(2).
 */
#ifndef SPLITRACK_KERNEL_POLL_H
#define SPLITRACK_KERNEL_POLL_H

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline int kernel_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout)
{
    struct timespec left, *tsp = NULL;   /* (the system call writes the time left back) */
    if (timeout) {
        left = *timeout;
        tsp = &left;
    }
    return (int)syscall(SYS_ppoll, fds, n, tsp, NULL, (size_t)(_NSIG / 8));
}

#endif
