/*
 * nring.h -- the nComponent's DRAM buffers: a byte ring, in C.
 *
 * The nMonitor keeps one ring per direction per bsdSocketSkeleton, between a
 * kernel TCP socket and FIT messages: bytes arriving on the socket are
 * nring_recv'd into the ring and leave it as FIT messages (nring_get/peek/drop);
 * bytes arriving in FIT messages are nring_put into the ring and leave it to
 * the socket with nring_send. The bytes live in a caller's arena (the
 * nComponent's DRAM, e.g. an mmap); only this small header lives elsewhere.
 *
 *   base[0 .. cap)   the bytes; position p lives at base[p % cap]
 *   head             read position: the next byte to get
 *   tail             write position: where the next byte goes
 *
 * head and tail only grow (64 bits: no wrap in practice), so
 * used = tail - head and space = cap - used, with no "full vs empty" ambiguity.
 * A span of used or free bytes that crosses base[cap-1] is two pieces (two
 * memcpys, or two iovecs for the kernel); nothing is ever moved inside the ring.
 *
 * Interface: counts are clamped, never errors -- nring_put copies what fits,
 * nring_get/peek copy what is there, each returning how many. nring_drop's n
 * must be <= used (the Python binding checks; here it is clamped so that a
 * bad n cannot break head <= tail). The socket calls do one system call each,
 * never block (MSG_DONTWAIT) and return a negative errno on error, the
 * same errno Linux gives. Not thread-safe: one owner per ring.
 */
#ifndef SPLITRACK_NRING_H
#define SPLITRACK_NRING_H

#include <stdint.h>

typedef struct {
    char *base;     /* cap bytes in the caller's arena; must outlive the ring */
    uint32_t cap;   /* > 0; any size, not only powers of two */
    uint64_t head;  /* read position, monotonic */
    uint64_t tail;  /* write position, monotonic; used = tail - head <= cap */
} nring;

/* An empty ring over base[0 .. cap). */
void nring_init(nring *r, char *base, uint32_t cap);

uint32_t nring_used(const nring *r);
uint32_t nring_space(const nring *r);

/* Copy in min(n, space) bytes; returns how many. */
uint32_t nring_put(nring *r, const char *src, uint32_t n);

/* Copy out and consume min(n, used) bytes; returns how many. */
uint32_t nring_get(nring *r, char *dst, uint32_t n);

/* Copy out min(n, used) bytes without consuming them; returns how many. */
uint32_t nring_peek(const nring *r, char *dst, uint32_t n);

/* Consume n <= used bytes (after a peek, or after copying them out in place). */
void nring_drop(nring *r, uint32_t n);

/* Add n <= space bytes that the caller wrote into the free space in place
 * (clamped to the space, like put); returns how many. */
uint32_t nring_commit(nring *r, uint32_t n);

/* ---- to and from a process's socket ring (ddio.h, dma.h) ------------------
 * A process's ring of `size` bytes holds byte `pos` of its stream at ring
 * offset pos % size. The copies between it and a DRAM ring go stretch by
 * stretch, each contiguous in both rings (it ends where either wraps, or at
 * the end of what is asked); `copy` moves one stretch: k bytes between dram
 * and the process's ring at offset `at`, into it if `store`, out of it if
 * not. It returns the bytes it moved (fewer than k: stop there), or -errno. */
typedef int64_t (*nring_copier)(const void *ring, char *dram, uint64_t at, uint64_t k,
                                int store);

/* Receive: min(n, used) bytes from the front of rx into the process's ring from
 * stream offset pos; the bytes copied leave rx. Returns them, or -errno if the
 * first stretch failed (-EINVAL: a ring of no bytes). */
int64_t nring_store_to(nring *rx, nring_copier copy, const void *ring, uint64_t size,
                       uint64_t pos, uint32_t n);

/* Send: min(n, space) bytes of the process's ring from stream offset pos into
 * tx's free space; the bytes copied join tx. Returns as nring_store_to. */
int64_t nring_fetch_from(nring *tx, nring_copier copy, const void *ring, uint64_t size,
                         uint64_t pos, uint32_t n);

/* One recvmsg(MSG_DONTWAIT) into the free space (two iovecs when it wraps),
 * at most max bytes. Returns the bytes received (> 0), 0 at EOF, or -errno:
 * -EAGAIN when nothing waits, -ENOBUFS if the ring is full, -EINVAL if max is 0. */
int64_t nring_recv(nring *r, int fd, uint32_t max);

/* One sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL) of the used bytes (two iovecs when
 * they wrap); consumes what the kernel took. Returns those bytes (0 if the ring
 * is empty) or -errno: -EAGAIN when the kernel takes nothing, -EPIPE or
 * -ECONNRESET when the peer has gone. */
int64_t nring_send(nring *r, int fd);

#endif
