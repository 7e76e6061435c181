/* The native interposer's stdio on rack sockets: fdopen, dprintf and vdprintf
 * (native/preload.c states the contract).
 *
 * glibc's stdio reads and writes a descriptor with calls of its own, not through
 * read() and write(), so the interposer's socket calls never see them. On a rack
 * socket an fdopen()ed stream's bytes would go into the rack descriptor's own
 * socket (its bell: splitrack/guest/bell.py), where nobody reads them, and its
 * reads would find the bell's bytes. So:
 *
 *   fdopen    of a rack socket: a stream made with fopencookie() whose reads are
 *             read() and whose writes are write() (this library's: the stub's),
 *             each buffer written whole unless the socket fails (or, non-blocking,
 *             is full: then as glibc's own streams, the error flag); a seek is
 *             ESPIPE, as lseek on a socket (so fflush of unread input succeeds); fileno()
 *             still names the descriptor, so the program may poll it, and fclose()
 *             closes it, as with any fdopen()ed stream. (The stream's _fileno,
 *             glibc's public field, which fopencookie leaves at -2, "no file".)
 *   stdin, stdout, stderr, once a rack socket is their descriptor (dup2 onto 0, 1
 *             or 2, or inherited there by an exec()ed image: an inetd-style
 *             server's program): each made such a stream over its descriptor
 *             (std_rebind: what stdout held is flushed before the dup2 first,
 *             std_flush), so printf and the like cross the rack; the glibc
 *             stream it replaces is left as it is (its descriptor is not its).
 *   dprintf, vdprintf, and _FORTIFY_SOURCE's __dprintf_chk, __vdprintf_chk:
 *             formatted into memory (vasprintf), then written whole.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

REAL(FILE *, fdopen, int, const char *)
REAL(int, vdprintf, int, const char *, va_list)
REAL(int, __vdprintf_chk, int, int, const char *, va_list)

/* n bytes written whole by this library's write(): n; the bytes written if it
 * failed after some; -1 if before any (errno its) */
static ssize_t write_all(int fd, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, buf + done, n - done);
        if (r < 0)
            return done ? (ssize_t)done : -1;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* ---- fdopen -------------------------------------------------------------------------- */
static ssize_t stream_read(void *cookie, char *buf, size_t n)
{
    return read((int)(intptr_t)cookie, buf, n);
}

static ssize_t stream_write(void *cookie, const char *buf, size_t n)
{
    ssize_t r = write_all((int)(intptr_t)cookie, buf, n);
    return r < 0 ? 0 : r;   /* (fopencookie: 0 on an error, fewer than n sets it) */
}

static int stream_seek(void *cookie, off64_t *at, int whence)
{
    (void)cookie, (void)at, (void)whence;
    errno = ESPIPE;   /* as lseek on a socket: fflush of a read stream then succeeds */
    return -1;
}

static int stream_close(void *cookie)
{
    return close((int)(intptr_t)cookie);
}

/* A stream over descriptor fd whose reads and writes are this library's */
static FILE *stream_of(int fd, const char *mode)
{
    cookie_io_functions_t io = {.read = stream_read, .write = stream_write,
                                .seek = stream_seek, .close = stream_close};
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
    if (f)
        f->_fileno = fd;
    return f;
}

FILE *fdopen(int fd, const char *mode)
{
    return is_rack(fd) ? stream_of(fd, mode) : libc_fdopen()(fd, mode);
}

/* ---- stdin, stdout, stderr ----------------------------------------------------------- */
void std_flush(int fd)
{
    if (fd == 1 || fd == 2)
        fflush(fd == 1 ? stdout : stderr);
}

void std_rebind(int fd)
{
    if (fd < 0 || fd > 2 || python_host)   /* (python writes its own with write()) */
        return;
    FILE *f = stream_of(fd, fd == 0 ? "r" : "w");
    if (!f)
        return;
    if (fd == 2)
        setvbuf(f, NULL, _IONBF, 0);   /* unbuffered, as glibc's stderr */
    *(fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr) = f;
}

/* ---- dprintf ------------------------------------------------------------------------- */
static int rack_vdprintf(int fd, const char *format, va_list ap)
{
    char *text;
    int n = vasprintf(&text, format, ap);
    if (n < 0)
        return -1;
    ssize_t r = write_all(fd, text, (size_t)n);
    free(text);
    return r < n ? -1 : n;
}

int vdprintf(int fd, const char *format, va_list ap)
{
    return is_rack(fd) ? rack_vdprintf(fd, format, ap) : libc_vdprintf()(fd, format, ap);
}

int dprintf(int fd, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int r = vdprintf(fd, format, ap);
    va_end(ap);
    return r;
}

int __vdprintf_chk(int fd, int flag, const char *format, va_list ap)
{
    return is_rack(fd) ? rack_vdprintf(fd, format, ap)
                       : libc___vdprintf_chk()(fd, flag, format, ap);
}

int __dprintf_chk(int fd, int flag, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int r = __vdprintf_chk(fd, flag, format, ap);
    va_end(ap);
    return r;
}
