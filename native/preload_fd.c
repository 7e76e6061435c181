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
 *   - the rack's own descriptors in a native program (rack_own): what the guest's
 *     code makes -- socket, socketpair, accept, eventfd, memfd_create, epoll_create,
 *     timerfd_create, pipe, a dup of anything but a socket (CPython's mmap keeps
 *     one), and descriptors that come in a message (SCM_RIGHTS,
 *     preload_vector.c) -- is moved past half the soft RLIMIT_NOFILE (1024 at
 *     most), so the program's descriptors are numbered as on Linux (its first
 *     socket is 3: wrk's event loop, sized by the descriptors it expects, refused
 *     one numbered 23); a socket's dup (a rack socket's handle, the program's) is
 *     not moved.
 * (The waits, poll, select and epoll's, are preload_wait.c's.)
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

REAL(int, close, int)
REAL(int, fcntl, int, int, ...)
REAL(int, fcntl64, int, int, ...)
REAL(int, ioctl, int, unsigned long, ...)
REAL(int, dup, int)
REAL(int, dup2, int, int)
REAL(int, dup3, int, int, int)
REAL(int, close_range, unsigned int, unsigned int, int)
REAL(int, socketpair, int, int, int, int *)
REAL(int, eventfd, unsigned int, int)
REAL(int, memfd_create, const char *, unsigned int)
REAL(int, epoll_create, int)
REAL(int, epoll_create1, int)
REAL(int, timerfd_create, int, int)
REAL(int, pipe, int *)
REAL(int, pipe2, int *, int)

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
static int own_dup(int fd, int newfd);

int fcntl_any(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);   /* (every command's argument fits: int, long or pointer) */
    va_end(ap);
    if (is_rack(fd))
        return rack_fcntl(fd, cmd, arg, libc_fcntl());
    int r = libc_fcntl()(fd, cmd, arg);
    return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? own_dup(fd, r) : r;
}

int fcntl_64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (is_rack(fd))
        return rack_fcntl(fd, cmd, arg, libc_fcntl64());
    int r = libc_fcntl64()(fd, cmd, arg);
    return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? own_dup(fd, r) : r;
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
    return is_rack(fd) ? one_more(fd, libc_fcntl()(fd, F_DUPFD_CLOEXEC, 0))
                       : own_dup(fd, libc_dup()(fd));
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

/* ---- the rack's own descriptors, out of the program's way -------------------------- */

/* Where the rack's own descriptors go: past half the soft RLIMIT_NOFILE, 64 at least
 * and 1024 at most (a program's select() takes descriptors under 1024); `again`: the
 * limit may have changed since (the program lowered it). */
static int own_floor(int again)
{
    static _Atomic int floor;
    if (!floor || again) {
        struct rlimit r;
        rlim_t half = getrlimit(RLIMIT_NOFILE, &r) == 0 ? r.rlim_cur / 2 : 512;
        floor = half > 1024 ? 1024 : half < 64 ? 64 : (int)half;
    }
    return floor;
}

/* fd moved to the lowest free number past the floor, its close-on-exec kept; fd itself
 * if there is no room there (the limit is lower than the floor: then looked at again). */
static int moved_up(int fd)
{
    int saved = errno, flags = (int)syscall(SYS_fcntl, fd, F_GETFD), moved = -1;
    for (int again = 0; flags >= 0 && moved < 0 && again < 2; again++)
        moved = (int)syscall(SYS_fcntl, fd, flags & FD_CLOEXEC ? F_DUPFD_CLOEXEC : F_DUPFD,
                             own_floor(again));
    if (moved >= 0)
        syscall(SYS_close, fd);
    errno = saved;
    return moved >= 0 ? moved : fd;
}

/* Whether this call is the rack's own code's: the guest's (python_thread), or, while
 * the guest starts, the starting threads' and the interpreter's. */
static int rack_code(void)
{
    return python_thread() || (atomic_load(&guest_starting) && (starting_here
           || (py_this_thread && py_this_thread() != NULL)));
}

int rack_own(int fd)
{
    if (fd < 0 || python_host || spawned_child() || fd >= own_floor(0) || !rack_code())
        return fd;
    return moved_up(fd);
}

/* The guest says: fd is the rack's own, kept (a twin handle a fork()ed child's calls
 * use; a pidfd, made by a raw system call), moved like the rest
 * (splitrack/guest/preloaded.py: rack_fd); in a Python program, fd as it is. */
__attribute__((visibility("default"))) int sr_rack_fd(int fd)
{
    return fd < 0 || python_host || fd >= own_floor(0) ? fd : moved_up(fd);
}

/* A dup the rack's code makes (of a memfd: CPython's mmap keeps one of the descriptor
 * it maps) goes out of the program's way too; a socket's is a rack socket's handle,
 * which the program gets (stub.py), numbered where Linux would number it. */
static int own_dup(int fd, int newfd)
{
    struct stat st;
    if (newfd < 0 || python_host || !rack_code() || (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)))
        return newfd;
    return rack_own(newfd);
}

static int own_pair(int r, int *fds)
{
    if (r == 0) {
        fds[0] = rack_own(fds[0]);
        fds[1] = rack_own(fds[1]);
    }
    return r;
}

int socketpair(int domain, int type, int protocol, int fds[2])
{
    return own_pair(libc_socketpair()(domain, type, protocol, fds), fds);
}

int eventfd(unsigned int count, int flags)
{
    return rack_own(libc_eventfd()(count, flags));
}

int memfd_create(const char *name, unsigned int flags)
{
    return rack_own(libc_memfd_create()(name, flags));
}

int epoll_create(int size)
{
    return rack_own(libc_epoll_create()(size));
}

int epoll_create1(int flags)
{
    return rack_own(libc_epoll_create1()(flags));
}

int timerfd_create(int clock, int flags)
{
    return rack_own(libc_timerfd_create()(clock, flags));
}

int pipe(int fds[2])
{
    return own_pair(libc_pipe()(fds), fds);
}

int pipe2(int fds[2], int flags)
{
    return own_pair(libc_pipe2()(fds, flags), fds);
}
