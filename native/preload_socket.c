/* The native interposer's socket calls (native/preload.c states the contract).
 *
 * Each of libc's socket calls on a rack descriptor (is_rack) becomes the call of
 * native/guest.h the bsdSocketStub serves; on any other descriptor it is libc's.
 * What the stub cannot take as libc does is translated here, in one place:
 *   - addresses: IPv4 sockaddr_in <-> ip and port in host byte order; any other
 *     family is EAFNOSUPPORT (the rack's NICs are IPv4: never the host's);
 *   - socket(): TCP and UDP over IPv4 are the rack's, AF_INET6 is refused, any
 *     other network socket (raw, packet, netlink) stays the host's, said once;
 *   - a send on a broken connection raises SIGPIPE unless MSG_NOSIGNAL;
 *   - vectors (sendmsg, recvmsg, writev, readv): preload_vector.c;
 *   - _FORTIFY_SOURCE's checked reads (Debian builds its programs with them);
 *   - a recv that native/fastrecv.h can serve in C is served there (quick()).
 * Returns and errno as libc's (ret()).
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

REAL(int, socket, int, int, int)
REAL(int, bind, int, const struct sockaddr *, socklen_t)
REAL(int, connect, int, const struct sockaddr *, socklen_t)
REAL(int, listen, int, int)
REAL(int, accept, int, struct sockaddr *, socklen_t *)
REAL(int, accept4, int, struct sockaddr *, socklen_t *, int)
REAL(ssize_t, send, int, const void *, size_t, int)
REAL(ssize_t, sendto, int, const void *, size_t, int, const struct sockaddr *, socklen_t)
REAL(ssize_t, recv, int, void *, size_t, int)
REAL(ssize_t, recvfrom, int, void *, size_t, int, struct sockaddr *, socklen_t *)
REAL(ssize_t, read, int, void *, size_t)
REAL(ssize_t, write, int, const void *, size_t)
REAL(int, close, int)
REAL(int, shutdown, int, int)
REAL(int, getsockopt, int, int, int, void *, socklen_t *)
REAL(int, setsockopt, int, int, int, const void *, socklen_t)
REAL(int, getsockname, int, struct sockaddr *, socklen_t *)
REAL(int, getpeername, int, struct sockaddr *, socklen_t *)

/* ---- addresses -------------------------------------------------------------------------- */
static int in_address(const struct sockaddr *addr, socklen_t len, uint32_t *ip, int *port)
{
    if (!addr || len < sizeof(struct sockaddr_in))
        return -EINVAL;
    if (addr->sa_family != AF_INET)
        return -EAFNOSUPPORT;
    const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
    *ip = ntohl(in->sin_addr.s_addr);
    *port = ntohs(in->sin_port);
    return 0;
}

static void out_address(uint32_t ip, int port, struct sockaddr *addr, socklen_t *len)
{
    if (!addr || !len)
        return;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(ip)};
    memcpy(addr, &in, *len < sizeof in ? *len : sizeof in);
    *len = sizeof in;   /* as the kernel: the full size, even if truncated */
}

/* ---- the calls -------------------------------------------------------------------------- */
int socket(int domain, int type, int protocol)
{
    static _Atomic int said_host;
    int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    int network = (domain == AF_INET || domain == AF_INET6)
                  && (kind == SOCK_STREAM || kind == SOCK_DGRAM);
    if (python_thread() || (python_host && (!network || fit_over_tcp)))
        return rack_own(libc_socket()(domain, type, protocol));
    if (domain == AF_INET6 && (kind == SOCK_STREAM || kind == SOCK_DGRAM)) {
        errno = EAFNOSUPPORT;   /* the rack's NICs are IPv4: never the host's */
        return -1;
    }
    if (domain != AF_INET || (kind != SOCK_STREAM && kind != SOCK_DGRAM)) {
        if (domain != AF_UNIX && domain != AF_LOCAL && !python_host)   /* (the drop-in says) */
            say_once(&said_host, "a raw, packet or netlink socket is the host's, not the "
                                 "rack's: only TCP and UDP over IPv4 cross the rack");
        return rack_own(libc_socket()(domain, type, protocol));   /* (the guest's, starting) */
    }
    pthread_once(&guest_once, start_guest);
    if (python_host)
        watch_now();
    return mark(GUEST(sr.socket, domain, type, protocol));
}

/* bind: the stub's, with the address as guest.h takes it */
static int to_address(int fd, const struct sockaddr *addr, socklen_t len,
                      int (*call)(int, uint32_t, int))
{
    uint32_t ip;
    int port, r = in_address(addr, len, &ip, &port);
    return ret(r ? r : GUEST(call, fd, ip, port));
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    return is_rack(fd) ? to_address(fd, addr, len, sr.bind) : libc_bind()(fd, addr, len);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (!is_rack(fd))
        return libc_connect()(fd, addr, len);
    uint32_t ip;
    int port, r = in_address(addr, len, &ip, &port);
    return ret(r ? r : GUEST_LATER(sr.connect, fd, ip, port));   /* (its handshake's wait:
                                                                      EINTR, as Linux's) */
}

int listen(int fd, int backlog)
{
    return is_rack(fd) ? ret(GUEST(sr.listen, fd, backlog)) : libc_listen()(fd, backlog);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (!is_rack(fd))
        return rack_own(libc_accept4()(fd, addr, len, flags));
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
        errno = EINVAL;
        return -1;
    }
    uint32_t ip = 0;
    int port = 0, conn = GUEST_INTERRUPTIBLE(sr.accept, fd, flags, &ip, &port);
    if (conn >= 0)
        out_address(ip, port, addr, len);
    return mark(conn);
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? accept4(fd, addr, len, 0) : rack_own(libc_accept()(fd, addr, len));
}

/* A send on a broken connection raises SIGPIPE, unless MSG_NOSIGNAL: as Linux's. */
static ssize_t sent(long r, int flags)
{
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
        raise(SIGPIPE);
    return ret(r);
}

ssize_t rack_send(int fd, const void *buf, size_t n, int flags)
{
    return sent(GUEST_INTERRUPTIBLE(sr.send, fd, buf, n, flags, 0, 0, 0), flags);
}

ssize_t rack_sendto(int fd, const void *buf, size_t n, int flags,
                    const struct sockaddr *addr, socklen_t len)
{
    uint32_t ip = 0;
    int port = 0, to = addr ? in_address(addr, len, &ip, &port) : 0;   /* -errno if not IPv4 */
    return sent(GUEST_INTERRUPTIBLE(sr.send, fd, buf, n, flags, addr && !to ? 1 : to, ip, port),
                flags);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
               socklen_t len)
{
    return is_rack(fd) ? rack_sendto(fd, buf, n, flags, addr, len)
                       : libc_sendto()(fd, buf, n, flags, addr, len);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    return is_rack(fd) ? rack_send(fd, buf, n, flags) : libc_send()(fd, buf, n, flags);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    return is_rack(fd) ? rack_send(fd, buf, n, 0)
         : is_own(fd) ? own_done(rack_send(fd, buf, n, 0)) : libc_write()(fd, buf, n);
}

/* A stream's bytes that are there already, without the interpreter (native/fastrecv.h),
 * for the flags that change nothing then (it takes all n or none: MSG_WAITALL and
 * SO_RCVLOWAT are met): n, or -1 (the stub's call, which serves everything else). */
static long quick(int fd, void *buf, size_t n, int flags)
{
    if (!fast_recv || !n || (flags & ~(MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL)))
        return -1;
    return fast_recv(fd, buf, n);
}

ssize_t rack_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                      socklen_t *len)
{
    long r = addr ? -1 : quick(fd, buf, n, flags);
    if (r >= 0)
        return r;
    uint32_t ip = 0;
    int port = 0;
    r = GUEST_INTERRUPTIBLE(sr.recv, fd, buf, n, flags, addr ? &ip : NULL, addr ? &port : NULL);
    if (r >= 0 && addr && port < 0 && len)
        *len = 0;   /* a stream's: no address, as Linux's TCP says */
    else if (r >= 0 && addr)
        out_address(ip, port, addr, len);
    return ret(r);
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? rack_recvfrom(fd, buf, n, flags, addr, len)
                       : libc_recvfrom()(fd, buf, n, flags, addr, len);
}

ssize_t rack_recv(int fd, void *buf, size_t n, int flags)
{
    long r = quick(fd, buf, n, flags);
    return r >= 0 ? r : ret(GUEST_INTERRUPTIBLE(sr.recv, fd, buf, n, flags, NULL, NULL));
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    return is_rack(fd) ? rack_recv(fd, buf, n, flags) : libc_recv()(fd, buf, n, flags);
}

ssize_t read(int fd, void *buf, size_t n)
{
    return is_rack(fd) ? rack_recv(fd, buf, n, 0)
         : is_own(fd) ? own_done(rack_recv(fd, buf, n, 0)) : libc_read()(fd, buf, n);
}

/* _FORTIFY_SOURCE's checked reads (Debian builds its programs with them). */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t room)
{
    if (n > room)
        abort();
    return read(fd, buf, n);
}

ssize_t __recv_chk(int fd, void *buf, size_t n, size_t room, int flags)
{
    if (n > room)
        abort();
    return recv(fd, buf, n, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t room, int flags,
                       struct sockaddr *addr, socklen_t *len)
{
    if (n > room)
        abort();
    return recvfrom(fd, buf, n, flags, addr, len);
}

int shutdown(int fd, int how)
{
    return is_rack(fd) ? ret(GUEST(sr.shutdown, fd, how)) : libc_shutdown()(fd, how);
}

int close(int fd)
{
    if (!is_rack(fd)) {
        not_own(fd);
        return libc_close()(fd);
    }
    atomic_store(&rack[fd], 0);   /* first: once closed, the number may be reused */
    return ret(GUEST(sr.close, fd));
}

void resolve_socket_calls(void)
{
    libc_close();
    libc_read();
    libc_write();
}

static int rack_name(int fd, int peer, struct sockaddr *addr, socklen_t *len)
{
    uint32_t ip = 0;
    int port = 0, r = GUEST(sr.name, fd, peer, &ip, &port);
    if (r == 0)
        out_address(ip, port, addr, len);
    return ret(r);
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? rack_name(fd, 0, addr, len) : libc_getsockname()(fd, addr, len);
}

int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? rack_name(fd, 1, addr, len) : libc_getpeername()(fd, addr, len);
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    return is_rack(fd) ? ret(GUEST(sr.setsockopt, fd, level, name, value, (int)len))
                       : libc_setsockopt()(fd, level, name, value, len);
}

int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    if (!is_rack(fd))
        return libc_getsockopt()(fd, level, name, value, len);
    int n = (int)*len, r = GUEST(sr.getsockopt, fd, level, name, value, &n);
    if (r == 0)
        *len = (socklen_t)n;
    return ret(r);
}
