/*
 * skelconnect.h -- the data plane's connect(): N_CONNECT answered in C, from
 * kernel sockets made before they are needed.
 *
 * A connect() on the rack is one call to the nComponent (the paper's
 * Section III); the nComponent makes a kernel socket on its NIC and connects
 * it. Made in the nMonitor's Python, that call cost several times Linux's
 * whole connect() before the kernel was even asked. Here the common case is
 * the data plane's (skelpath.c calls kc_connect for an N_CONNECT at the head
 * of an inbox ring):
 *
 *   - the socket comes from a pool per source address (a NIC, or the rack's
 *     loopback alias, named by the nMonitor: kc_source): made before it is
 *     needed, non-blocking, bound to the address with its port left to
 *     connect() (IP_BIND_ADDRESS_NO_PORT, as the Proxy makes them), each with
 *     the skeleton id it will have; the one taken is replaced once the reply
 *     is out;
 *   - the request's options are applied (only those in the allowed list,
 *     kc_allow), the kernel connects, and the reply goes straight into the
 *     FIT ring back to the caller: {sk, local address}, or {sk, pending} when
 *     the kernel's handshake goes on, or the kernel's errno;
 *   - what is left -- the bsdSocketSkeleton, its nComponent DRAM rings, its
 *     data path -- is the nMonitor's, after the reply: kc_connect describes
 *     the connection it made (kc_made) for the nMonitor to finish before it
 *     reads any other message or kernel event (the same thread).
 *
 * The CPU is held from the kernel's connect to the reply. On loopback the
 * kernel's connect wakes the listener inside the call; on a host with fewer
 * CPUs than busy processes Linux then gives it this CPU at once, and the
 * reply waited while the listener ran (a Python one: 7-9 us of a 26 us
 * connect, docs/evaluation.md). In the paper the nComponent is a board of its
 * own that no host process preempts. So kc_connect runs those few
 * microseconds under SCHED_FIFO (priority 1) and gives the thread its own
 * policy back once the reply is out; the listener runs then. It needs
 * CAP_SYS_NICE (or RLIMIT_RTPRIO): without, the first refusal turns it off
 * (`hold` 0, `hold_error` the errno) and connects go on as before. A thread
 * already real-time is left as it is.
 *
 * Authority stays with the nMonitor. kc_connect takes a request only from a
 * sender whose grant (a bit mask, set by the nMonitor from the slices and the
 * sender's vouched identity) names the request's home mComponent, that names
 * the inbox the nMonitor checked for that sender (by its hash, kc_inbox_hash),
 * whose rings and timeout the nMonitor would take too, only while
 * the nMonitor's DRAM budget (`dram`) holds a connection more, and only for a
 * source address with a pooled socket. Everything else -- a request it cannot
 * parse, a bound socket's connect (sk != 0), an option not allowed, another
 * inbox, a ring past 2^64, a timeout that is no number of seconds, a reply
 * ring with no room -- it leaves in the ring, untouched, for the nMonitor's
 * Python to answer (KC_PYTHON), as it answers every malformed or refused
 * request.
 *
 * The request's layout (fit_rpc/netpath.py CONNECT, little-endian):
 *   u32 stub, u32 sk, u8 src[4], u8 dst[4], u16 port, u8 mode, u8 flags,
 *   u32 window, u64 rbuf, u32 rbuf_size, u64 tbuf, u32 tbuf_size,
 *   f64 timeout, char home[16], u16 nopts, u16 ninbox;
 *   then nopts (i32 level, i32 opt, i32 value), then ninbox bytes of inbox.
 * The reply's (CONNECTED): u32 sk, u8 local[4], u16 local_port, u16 flags.
 */
#ifndef SPLITRACK_SKELCONNECT_H
#define SPLITRACK_SKELCONNECT_H

#include <stdint.h>

#include "fitring.h"

#define KC_POOL 8             /* sockets made ahead, per source address */
#define KC_SOURCES 16         /* source addresses with a pool */
#define KC_HOMES 64           /* mComponents a grant can name (bit i: homes[i]) */
#define KC_HOME_BYTES 16      /* an mComponent's id in a request, NUL-padded */
#define KC_MAX_OPTS 8         /* options a request the plane takes may carry */
#define KC_ALLOWED 16         /* (level, opt) pairs kc_allow can list */
#define KC_FLAG_TIMEOUT 1     /* request flags: `timeout` is set */
#define KC_FLAG_PENDING 1     /* reply flags: the handshake goes on (STUB_CONNECTED ends it) */

/* The hash a grant names an inbox by: 64-bit FNV-1a of its bytes. */
uint64_t kc_inbox_hash(const char *inbox, uint32_t n);

/* kc_connect's results */
#define KC_PYTHON 0           /* not taken: the message stays in its ring */
#define KC_FAILED 1           /* answered with the kernel's errno; nothing to finish */
#define KC_MADE 2             /* answered; *made is the nMonitor's to finish */

typedef struct {
    int32_t fd;               /* non-blocking, bound to the pool's address */
    uint32_t sk;              /* the skeleton id it will have (kc_next_sk) */
} kc_socket;

typedef struct {
    uint32_t addr;            /* the source IPv4 address, as 4 bytes in a u32 */
    uint32_t n;               /* sockets ready */
    kc_socket ready[KC_POOL];
} kc_pool;

/* A connection kc_connect made: what the nMonitor needs to finish it. */
typedef struct {
    int32_t fd;
    uint32_t sk;
    uint32_t stub;            /* the stub's id in its process */
    uint32_t mode;            /* 0 ddio, 1 dma (fit_rpc/netpath.py MODES) */
    uint32_t pending;         /* 1: the kernel's handshake goes on */
    uint32_t home;            /* index into homes */
    uint32_t window;
    uint32_t rbuf_size, tbuf_size;
    uint32_t peer;            /* its sender's number (the caller fills this in) */
    uint64_t rbuf, tbuf;
    double timeout;           /* s; < 0: none */
} kc_made;

typedef struct {
    uint16_t magic, version, reply, op;   /* FIT: header constants, the reply kind, N_CONNECT */
    uint32_t npools, nhomes, nallowed;
    uint32_t dram;            /* connections the nMonitor's DRAM still holds (it sets this;
                                 kc_connect takes one from it per connection made) */
    uint32_t next_hi;         /* the last skeleton id's high 16 bits (kc_next_sk) */
    int32_t error;            /* the errno of the last socket a pool could not make */
    uint64_t made, failed;    /* answered here, in all */
    int32_t hold;             /* 1: the CPU is held from connect to reply (above); 0: not */
    int32_t hold_error;       /* the errno that turned it off (0: none) */
    int32_t policy;           /* the thread's own scheduling policy (-1: not read yet) */
    uint64_t held;            /* answers sent with the CPU held */
    kc_pool pools[KC_SOURCES];
    char homes[KC_HOMES][KC_HOME_BYTES];
    int32_t allowed[KC_ALLOWED][2];
} kc_state;

/* Fresh state (zeroed by the caller) with the FIT constants it writes. */
void kc_init(kc_state *s, uint16_t magic, uint16_t version, uint16_t reply, uint16_t op);

/* An option a request may set: (level, opt). 0, or -ENOSPC past KC_ALLOWED. */
int kc_allow(kc_state *s, int32_t level, int32_t opt);

/* The mComponents' ids, in grant-bit order (at most KC_HOMES; the rest are
 * Python's). */
void kc_home(kc_state *s, uint32_t i, const char *id);

/* A skeleton id for a kernel socket at fd (every skeleton's, the nMonitor's
 * too): the fd in its low 16 bits (0xFFFF past 65535), so that the data plane
 * finds the connection from a message, and a counter above, so that an id
 * comes back only after 65535 others at the same fd. Never 0. The caller
 * checks it is not in use (a live socket holds its fd, so only an fd past
 * 65535 can meet one). */
uint32_t kc_next_sk(kc_state *s, int32_t fd);

/* A pool for source address addr (4 bytes), filled: 0, or -ENOSPC past
 * KC_SOURCES. */
int kc_source(kc_state *s, uint32_t addr);

/* Fill every pool up to KC_POOL: the sockets made (a failure is in s->error). */
int kc_fill(kc_state *s);

/* Sockets ready in the pool of addr (0: no such pool). */
uint32_t kc_pool_count(const kc_state *s, uint32_t addr);

/* Close every pooled socket (the nMonitor's end). */
void kc_close(kc_state *s);

/* An N_CONNECT request: seq, its payload (body, len), from a sender whose grant
 * is `grant` with its checked inbox's hash `inbox`, answered on `reply` (the
 * ring back to it on the same link). KC_PYTHON, KC_FAILED or KC_MADE (above).
 * *replied: the reply's bytes with its header (counted as the nMonitor counts
 * what it sends). */
int kc_connect(kc_state *s, uint64_t grant, uint64_t inbox, fr_ring *reply, uint32_t seq,
               const char *body, uint32_t len, kc_made *made, uint32_t *replied);

#endif
