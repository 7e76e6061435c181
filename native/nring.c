/*
 * nring.c -- the nComponent's byte ring. Contract: nring.h.
 *
 * Invariants:
 * - head <= tail <= head + cap; both only grow.
 * - base[p % cap] holds byte p for head <= p < tail; the rest is free space.
 * - head moves only on get/drop/send, tail only on put/recv, and only by the
 *   bytes actually copied (or taken/given by the kernel).
 */
#define _GNU_SOURCE
#include "nring.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

void nring_init(nring *r, char *base, uint32_t cap) {
    r->base = base;
    r->cap = cap;
    r->head = r->tail = 0;
}

uint32_t nring_used(const nring *r) { return (uint32_t)(r->tail - r->head); }
uint32_t nring_space(const nring *r) { return r->cap - nring_used(r); }

static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* The n bytes starting at position pos, as one or two pieces of base[]. */
static int span(const nring *r, uint64_t pos, uint32_t n, struct iovec iov[2]) {
    uint32_t off = (uint32_t)(pos % r->cap);
    uint32_t first = min_u32(n, r->cap - off);
    iov[0].iov_base = r->base + off;
    iov[0].iov_len = first;
    iov[1].iov_base = r->base;
    iov[1].iov_len = n - first;
    return n > first ? 2 : 1;
}

uint32_t nring_commit(nring *r, uint32_t n) {
    n = min_u32(n, nring_space(r));
    r->tail += n;
    return n;
}

uint32_t nring_put(nring *r, const char *src, uint32_t n) {
    struct iovec iov[2];
    n = min_u32(n, nring_space(r));
    span(r, r->tail, n, iov);
    memcpy(iov[0].iov_base, src, iov[0].iov_len);
    memcpy(iov[1].iov_base, src + iov[0].iov_len, iov[1].iov_len);
    r->tail += n;
    return n;
}

uint32_t nring_peek(const nring *r, char *dst, uint32_t n) {
    struct iovec iov[2];
    n = min_u32(n, nring_used(r));
    span(r, r->head, n, iov);
    memcpy(dst, iov[0].iov_base, iov[0].iov_len);
    memcpy(dst + iov[0].iov_len, iov[1].iov_base, iov[1].iov_len);
    return n;
}

uint32_t nring_get(nring *r, char *dst, uint32_t n) {
    n = nring_peek(r, dst, n);
    r->head += n;
    return n;
}

void nring_drop(nring *r, uint32_t n) {
    r->head += min_u32(n, nring_used(r)); /* clamped: head never passes tail */
}

/* n bytes between r from its position rpos and a process's ring from stream
 * offset pos, stretch by stretch (nring.h). */
static int64_t walk(const nring *r, uint64_t rpos, nring_copier copy, const void *ring,
                    uint64_t size, uint64_t pos, uint32_t n, int store) {
    if (!size || !r->cap)
        return -EINVAL;
    uint64_t done = 0;
    while (done < n) {
        uint64_t off = (rpos + done) % r->cap, at = (pos + done) % size, k = n - done;
        if (k > r->cap - off)
            k = r->cap - off;
        if (k > size - at)
            k = size - at;
        int64_t got = copy(ring, r->base + off, at, k, store);
        if (got < 0)
            return done ? (int64_t)done : got;
        done += (uint64_t)got;
        if ((uint64_t)got < k)
            break;
    }
    return (int64_t)done;
}

int64_t nring_store_to(nring *rx, nring_copier copy, const void *ring, uint64_t size,
                       uint64_t pos, uint32_t n) {
    int64_t done = walk(rx, rx->head, copy, ring, size, pos, min_u32(n, nring_used(rx)), 1);
    if (done > 0)
        nring_drop(rx, (uint32_t)done);
    return done;
}

int64_t nring_fetch_from(nring *tx, nring_copier copy, const void *ring, uint64_t size,
                         uint64_t pos, uint32_t n) {
    int64_t done = walk(tx, tx->tail, copy, ring, size, pos, min_u32(n, nring_space(tx)), 0);
    if (done > 0)
        nring_commit(tx, (uint32_t)done);
    return done;
}

int64_t nring_recv(nring *r, int fd, uint32_t max) {
    struct iovec iov[2];
    struct msghdr m = {.msg_iov = iov};
    uint32_t n = nring_space(r);
    if (n == 0)
        return -ENOBUFS;
    if (max == 0)
        return -EINVAL; /* a zero-byte read would look like EOF */
    m.msg_iovlen = span(r, r->tail, min_u32(n, max), iov);
    ssize_t got;
    do
        got = recvmsg(fd, &m, MSG_DONTWAIT);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return -errno;
    r->tail += (uint64_t)got;
    return got;
}

int64_t nring_send(nring *r, int fd) {
    struct iovec iov[2];
    struct msghdr m = {.msg_iov = iov};
    uint32_t n = nring_used(r);
    if (n == 0)
        return 0; /* a zero-byte send would tell us nothing */
    m.msg_iovlen = span(r, r->head, n, iov);
    ssize_t sent;
    do
        sent = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0)
        return -errno;
    r->head += (uint64_t)sent;
    return sent;
}
