/* The native interposer's descriptor calls (native/preload.c states the contract).
 *
 *   - fcntl and ioctl(FIONBIO) on a rack descriptor: O_NONBLOCK is the stub's (its
 *     descriptor stays non-blocking underneath, for the runtime); F_DUPFD is a dup;
 *   - ioctl(FIONREAD), or SIOCINQ: the stub's count of what a recv would get now
 *     (sr_fionread; a datagram socket: the next datagram's size), not the kernel's
 *     count of the bell's bytes; any other request is the kernel's;
 *   - dup, dup2, dup3, F_DUPFD: the kernel's dup, made one more handle of the same
 *     stub (sr_dup); close-on-exec, but in a fork()ed child, whose exec()ed image
 *     takes the descriptors back from its parent (preload.c), and onto 0, 1 or 2 in
 *     a Python program, whose subprocess hands them on (spawning.py); onto 0-2, the
 *     standard stream of that descriptor becomes the interposer's (std_rebind);
 *   - close_range: what it closes is no Python socket object's any more;
 *   - a Python program's socket object's descriptor (is_own): FIONREAD is the
 *     stub's, and a dup2 or dup3 of it (os.dup2(conn.fileno(), 1), then print) an
 *     interposed handle as above; its other calls (the stub's own) are the kernel's;
 * (The waits, poll, select and epoll's, are preload_wait.c's.)
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

REAL(int, close, int)
REAL(int, fcntl, int, int, ...)
REAL(int, fcntl64, int, int, ...)
REAL(int, ioctl, int, unsigned long, ...)
REAL(int, dup, int)
REAL(int, dup2, int, int)
REAL(int, dup3, int, int, int)
REAL(int, close_range, unsigned int, unsigned int, int)

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)   /* (linux/close_range.h) */
#endif

void resolve_fd_calls(void)
{
    libc_close();
    libc_fcntl();
    libc_fcntl64();
    libc_ioctl();
    libc_dup();
    libc_dup2();
    libc_dup3();
    libc_close_range();
}

/* A new descriptor of a rack socket (the kernel's dup of `fd`) is one more handle of it. */
static int one_more(int fd, int newfd)
{
    if (newfd < 0)
        return newfd;
    int r = GUEST(sr.dup, fd, newfd);
    if (r < 0) {
        libc_close()(newfd);
        return ret(r);
    }
    return mark(newfd);
}

/* fcntl on a rack socket: O_NONBLOCK is the stub's (its descriptor stays non-blocking
 * underneath: the runtime reads it); a dup is one more handle; the rest is the kernel's. */
static int rack_fcntl(int fd, int cmd, long arg, int (*next)(int, int, ...))
{
    switch (cmd) {
    case F_GETFL: {
        int flags = next(fd, F_GETFL), blocking = GUEST(sr.blocking, fd, -1);
        if (flags < 0 || blocking < 0)
            return flags < 0 ? flags : ret(blocking);
        return blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK;
    }
    case F_SETFL:
        return ret(GUEST(sr.blocking, fd, !(arg & O_NONBLOCK)));
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return one_more(fd, next(fd, F_DUPFD_CLOEXEC, arg));
    default:
        return next(fd, cmd, arg);
    }
}

/* (Python.h asks for 64-bit file offsets, under which glibc's header names fcntl
 * fcntl64: both symbols are defined here by their own names.) */
int fcntl_any(int fd, int cmd, ...) __asm__("fcntl");
int fcntl_64(int fd, int cmd, ...) __asm__("fcntl64");

int fcntl_any(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);   /* (every command's argument fits: int, long or pointer) */
    va_end(ap);
    return is_rack(fd) ? rack_fcntl(fd, cmd, arg, libc_fcntl()) : libc_fcntl()(fd, cmd, arg);
}

int fcntl_64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return is_rack(fd) ? rack_fcntl(fd, cmd, arg, libc_fcntl64())
                       : libc_fcntl64()(fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (is_rack(fd) && request == FIONBIO)
        return ret(GUEST(sr.blocking, fd, !*(int *)arg));
    if (request == FIONREAD && (is_rack(fd) || is_own(fd))) {   /* (SIOCINQ) the stub's,
                                                                     not the bell's */
        if (!arg) {
            errno = EFAULT;
            return -1;
        }
        int r = GUEST(sr.fionread, fd);
        if (r < 0)
            return ret(r);
        *(int *)arg = r;
        return 0;
    }
    return libc_ioctl()(fd, request, arg);
}

int dup(int fd)
{
    return is_rack(fd) ? one_more(fd, libc_fcntl()(fd, F_DUPFD_CLOEXEC, 0)) : libc_dup()(fd);
}

int dup3(int fd, int newfd, int flags)
{
    if (fd != newfd)
        not_own(newfd);   /* (whatever takes its number now) */
    if (python_thread() || (!is_rack(fd) && !is_own(fd) && !is_rack(newfd)))
        return libc_dup3()(fd, newfd, flags);
    if (fd == newfd) {
        errno = EINVAL;
        return -1;
    }
    if (is_rack(newfd))
        close(newfd);   /* as dup3's own closing of newfd, but the stub's */
    if (!is_rack(fd) && !is_own(fd))
        return libc_dup3()(fd, newfd, flags);
    std_flush(newfd);   /* (what stdout held was the old descriptor's) */
    /* close-on-exec, unless an image exec()ed here can take it back: a fork()ed child's,
     * or, onto a standard stream, one a Python program's subprocess starts
     * (splitrack/guest/spawning.py) */
    int keep = forked_child() >= 0 || (python_host && newfd <= 2);   /* (Popen's stdio) */
    int r = one_more(fd, libc_dup3()(fd, newfd, keep ? flags : O_CLOEXEC));
    if (r >= 0)
        std_rebind(r);   /* printf onto a rack socket: glibc's own writes would miss it */
    return r;
}

int dup2(int fd, int newfd)
{
    if (fd != newfd)
        not_own(newfd);
    if (python_thread() || (!is_rack(fd) && !is_own(fd) && !is_rack(newfd)))
        return libc_dup2()(fd, newfd);
    if (fd == newfd)
        return newfd;
    return dup3(fd, newfd, 0);
}

/* close_range (CPython's os.closerange, subprocess's child): what it closes is no
 * Python socket object's any more (its own rack sockets are the stub's to close) */
int close_range(unsigned int first, unsigned int last, int flags)
{
    if (!spawned_child() && !(flags & CLOSE_RANGE_CLOEXEC))
        for (unsigned int fd = first; fd <= last && fd < RACK_FDS; fd++)
            not_own((int)fd);
    return libc_close_range() ? libc_close_range()(first, last, flags)
                              : (int)syscall(SYS_close_range, first, last, flags);
}
