/* The native interposer's vector calls (native/preload.c states the contract):
 *
 *   - sendmsg, recvmsg, writev and readv on a rack descriptor go through one buffer
 *     (a stub's send and recv take one); no ancillary data on rack sockets
 *     (EOPNOTSUPP); writev and readv on a Python program's own descriptor too
 *     (is_own);
 *   - a sendmsg on any socket that would pass a rack descriptor to another process
 *     (SCM_RIGHTS) is EOPNOTSUPP, said once: it would get the bell, not the socket.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

REAL(ssize_t, sendmsg, int, const struct msghdr *, int)
REAL(ssize_t, recvmsg, int, struct msghdr *, int)
REAL(ssize_t, readv, int, const struct iovec *, int)
REAL(ssize_t, writev, int, const struct iovec *, int)

/* Vectors go through one buffer: a stub's send and recv take one. */
static size_t iov_total(const struct iovec *iov, int count)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += iov[i].iov_len;
    return total;
}

static ssize_t send_vector(int fd, const struct iovec *iov, int count, int flags,
                           const struct sockaddr *addr, socklen_t len)
{
    if (count == 1)
        return rack_sendto(fd, iov[0].iov_base, iov[0].iov_len, flags, addr, len);
    size_t total = iov_total(iov, count), at = 0;
    char *flat = malloc(total ? total : 1);
    if (!flat) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < count; i++) {
        memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    ssize_t r = rack_sendto(fd, flat, total, flags, addr, len);
    free(flat);
    return r;
}

static ssize_t recv_vector(int fd, const struct iovec *iov, int count, int flags,
                           struct sockaddr *addr, socklen_t *len)
{
    if (count == 1)
        return rack_recvfrom(fd, iov[0].iov_base, iov[0].iov_len, flags, addr, len);
    size_t total = iov_total(iov, count);
    char *flat = malloc(total ? total : 1);
    if (!flat) {
        errno = ENOMEM;
        return -1;
    }
    ssize_t r = rack_recvfrom(fd, flat, total, flags, addr, len);
    for (size_t at = 0, i = 0; r > 0 && at < (size_t)r; i++) {
        size_t k = iov[i].iov_len < (size_t)r - at ? iov[i].iov_len : (size_t)r - at;
        memcpy(iov[i].iov_base, flat + at, k);
        at += k;
    }
    free(flat);
    return r;
}

/* A message that passes a rack socket's descriptor to another process (SCM_RIGHTS): the
 * other process would get its bell, not the socket (the stub's state is this process's) */
int passes_rack_socket(const struct msghdr *msg)
{
    static _Atomic int said;
    if (!msg->msg_controllen || in_guest || python_thread())   /* (the stub's own:
                                                                   fork_channel.py) */
        return 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        if ((char *)c + c->cmsg_len > (char *)msg->msg_control + msg->msg_controllen)
            break;   /* (a length past the buffer: the kernel's EINVAL, not ours) */
        int *fds = (int *)CMSG_DATA(c), n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n; i++) {
            int v = fds[i] >= 0 && fds[i] < RACK_FDS ? atomic_load(&rack[fds[i]]) : 0;
            if (v == 1 || v == OWN) {
                say_once(&said, "a rack socket cannot be passed to another process "
                                "(SCM_RIGHTS): EOPNOTSUPP; fork() shares it");
                return 1;
            }
        }
    }
    return 0;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!is_rack(fd) && passes_rack_socket(msg)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if (!is_rack(fd))
        return libc_sendmsg()(fd, msg, flags);
    if (msg->msg_controllen) {
        errno = EOPNOTSUPP;   /* no ancillary data on rack sockets */
        return -1;
    }
    return send_vector(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
                       msg->msg_namelen);
}

/* Descriptors that came in a message the rack's own code received (a peer's FIT
 * rings, SCM_RIGHTS): out of the program's way too (rack_own). */
static ssize_t own_rights(ssize_t r, struct msghdr *msg)
{
    if (r < 0 || python_host || msg->msg_controllen == 0)
        return r;   /* (rack_own says whose they are) */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
                got = rack_own(got);
                memcpy(CMSG_DATA(c) + i * sizeof(int), &got, sizeof got);
            }
    return r;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (!is_rack(fd))
        return own_rights(libc_recvmsg()(fd, msg, flags), msg);
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
    return recv_vector(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
                       msg->msg_name ? &msg->msg_namelen : NULL);
}

ssize_t writev(int fd, const struct iovec *iov, int count)
{
    return is_rack(fd) ? send_vector(fd, iov, count, 0, NULL, 0)
         : is_own(fd) ? own_done(send_vector(fd, iov, count, 0, NULL, 0))
         : libc_writev()(fd, iov, count);
}

ssize_t readv(int fd, const struct iovec *iov, int count)
{
    return is_rack(fd) ? recv_vector(fd, iov, count, 0, NULL, NULL)
         : is_own(fd) ? own_done(recv_vector(fd, iov, count, 0, NULL, NULL))
         : libc_readv()(fd, iov, count);
}
