/* The native interposer's calls that move bytes between a rack socket and another
 * descriptor, or several messages in one call (native/preload.c states the contract).
 *
 * A rack descriptor is a real one: the kernel's end of its bell (splitrack/guest/
 * bell.py), which only says whether the stub has bytes or room. Left to the kernel,
 * these calls would move a program's bytes into that socket, where nobody reads
 * them: lost, and the call would say they were sent. So on a rack socket:
 *
 *   sendfile, sendfile64  a file into the socket, in slices: each read at its
 *                         offset (pread), then sent as send() sends (SIGPIPE on a
 *                         broken connection, unless ignored); a short send ends
 *                         the call, and the file's offset (or, with none given,
 *                         its position) moves only as far as the socket took. A
 *                         rack socket as the source, a negative offset, or no
 *                         offset and a source that cannot seek (a pipe, a
 *                         socket) is EINVAL; an offset on such a source is
 *                         pread's ESPIPE.
 *   splice                with a rack socket at either end: EINVAL, said once
 *                         (what a pipe gave up could not go back into it if the
 *                         socket took less: refused, never lost).
 *   sendmmsg, recvmmsg    one sendmsg / recvmsg a message, as Linux's do: an error
 *                         after the first message ends the call with the count so
 *                         far; MSG_WAITFORONE: the messages after the first do not
 *                         wait; recvmmsg's timeout is looked at after each message.
 *                         On any other socket, a message passing a rack descriptor
 *                         (SCM_RIGHTS) is refused as sendmsg refuses it: the ones
 *                         before it go, and the call counts them (EOPNOTSUPP if first).
 *
 * tee and vmsplice take only pipes, and copy_file_range only files: on a rack socket
 * the kernel already says EINVAL (or EBADF), and nothing moves.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

REAL(ssize_t, sendfile, int, int, off64_t *, size_t)
REAL(ssize_t, sendfile64, int, int, off64_t *, size_t)
REAL(ssize_t, splice, int, loff_t *, int, loff_t *, size_t, unsigned int)
REAL(int, sendmmsg, int, struct mmsghdr *, unsigned int, int)
REAL(int, recvmmsg, int, struct mmsghdr *, unsigned int, int, struct timespec *)

#define SLICE (256 * 1024)   /* bytes of the file read and sent at a time, at most */
#define MAX_MESSAGES 1024    /* UIO_MAXIOV: Linux's limit on a call's messages */

/* ---- sendfile ----------------------------------------------------------------------- */
static ssize_t rack_sendfile(int out, int in, off64_t *offset, size_t count)
{
    if (is_rack(in)) {
        errno = EINVAL;
        return -1;
    }
    if (offset && *offset < 0) {
        errno = EINVAL;
        return -1;
    }
    off64_t at = offset ? *offset : lseek64(in, 0, SEEK_CUR);
    if (at < 0) {
        if (errno == ESPIPE)
            errno = EINVAL;
        return -1;
    }
    size_t done = 0, cap = count < SLICE ? count : SLICE;
    char *buf = malloc(cap ? cap : 1);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    int err = 0;
    while (done < count) {
        size_t want = count - done < cap ? count - done : cap;
        ssize_t got = pread64(in, buf, want, at + (off64_t)done);
        if (got <= 0) {   /* the file's end, or its error */
            err = got < 0 ? errno : 0;
            break;
        }
        ssize_t took = rack_send(out, buf, (size_t)got, 0);
        if (took < 0) {
            err = errno;
            break;
        }
        done += (size_t)took;
        if (took < got)   /* the socket's window is full: the rest is the caller's */
            break;
    }
    free(buf);
    if (offset)
        *offset = at + (off64_t)done;
    else if (done)
        lseek64(in, at + (off64_t)done, SEEK_SET);
    if (!done && err) {   /* nothing sent: the error; else the count, as the kernel */
        errno = err;
        return -1;
    }
    return (ssize_t)done;
}

/* (Python.h makes off_t 64 bits and names sendfile sendfile64: each defined by its
 * symbol's name, as preload_fd.c defines fcntl) */
ssize_t sendfile_any(int out, int in, off64_t *offset, size_t count) __asm__("sendfile");
ssize_t sendfile_64(int out, int in, off64_t *offset, size_t count) __asm__("sendfile64");

static ssize_t any_sendfile(ssize_t (*libc)(int, int, off64_t *, size_t), int out, int in,
                            off64_t *offset, size_t count)
{
    int to_rack = is_rack(out) || is_own(out);   /* (os.sendfile of a Python program's) */
    if (!to_rack && !is_rack(in))
        return libc(out, in, offset, count);
    if (!to_rack) {   /* from a rack socket into anything: the kernel cannot */
        errno = EINVAL;
        return -1;
    }
    ssize_t r = rack_sendfile(out, in, offset, count);
    return is_rack(out) ? r : own_done(r);
}

ssize_t sendfile_any(int out, int in, off64_t *offset, size_t count)
{
    return any_sendfile(libc_sendfile(), out, in, offset, count);
}

ssize_t sendfile_64(int out, int in, off64_t *offset, size_t count)
{
    return any_sendfile(libc_sendfile64(), out, in, offset, count);
}

/* ---- splice ------------------------------------------------------------------------- */
ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags)
{
    static _Atomic int said;
    if (!is_rack(in) && !is_rack(out))
        return libc_splice()(in, off_in, out, off_out, len, flags);
    say_once(&said, "splice() with a rack socket is refused (EINVAL): a pipe's bytes "
                    "could not go back if the socket took fewer; read() and write() them");
    errno = EINVAL;
    return -1;
}

/* ---- several messages in one call ----------------------------------------------------- */
int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
    if (!is_rack(fd)) {   /* the messages before one passing a rack descriptor, as sendmsg's */
        unsigned int ok = 0;
        if (n > MAX_MESSAGES)
            n = MAX_MESSAGES;   /* (the kernel looks at no more) */
        while (ok < n && !passes_rack_socket(&v[ok].msg_hdr))
            ok++;
        if (n && !ok) {
            errno = EOPNOTSUPP;
            return -1;
        }
        return libc_sendmmsg()(fd, v, ok, flags);   /* (a short count: the next call says why) */
    }
    if (n > MAX_MESSAGES)
        n = MAX_MESSAGES;
    unsigned int i = 0;
    for (; i < n; i++) {
        ssize_t r = sendmsg(fd, &v[i].msg_hdr, flags);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
    }
    return (int)i;
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *timeout)
{
    if (!is_rack(fd))
        return libc_recvmmsg()(fd, v, n, flags, timeout);
    if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 ||
                    timeout->tv_nsec >= 1000000000L)) {
        errno = EINVAL;
        return -1;
    }
    long long deadline = 0;
    if (timeout)   /* (past a century: none, rather than an overflow) */
        deadline = timeout->tv_sec > 3000000000LL ? LLONG_MAX
                   : now_ns() + timeout->tv_sec * 1000000000LL + timeout->tv_nsec;
    if (n > MAX_MESSAGES)
        n = MAX_MESSAGES;
    int each = flags & ~MSG_WAITFORONE;
    unsigned int i = 0;
    for (; i < n; i++) {
        ssize_t r = recvmsg(fd, &v[i].msg_hdr,
                            i && (flags & MSG_WAITFORONE) ? each | MSG_DONTWAIT : each);
        if (r < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned int)r;
        if (timeout && now_ns() >= deadline) {
            i++;
            break;
        }
    }
    return (int)i;
}
