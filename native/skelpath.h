/*
 * skelpath.h -- the nComponent's data plane, in C: the hot path of its
 * bsdSocketSkeletons in DDIO mode (monitors/skeleton.py, data_paths.py, and
 * the loop of monitors/nmonitor.py), in DDIO and in DMA mode.
 *
 * A NIC's firmware does the per-packet work and interrupts its driver only
 * for the rest; this is that split. The nMonitor's one loop calls kp_run,
 * which does, for every connection marked `fast`, what the Python code would
 * do, without Python:
 *
 *   - its kernel socket readable: recv into rx (nComponent DRAM, nring.h),
 *     rx into the stub's receive ring's extCache lines (dDDIO, ddio.h) or,
 *     in DMA mode, where its home's arena holds that ring (dDMA, dma.h), then
 *     STUB_DATA (STUB_DATA_DMA) to the stub, written straight into the FIT
 *     ring to its process (fitring.h);
 *   - N_SEND (N_SEND_DMA) from the stub (read straight off the inbox's FIT
 *     rings): the bytes from the stub's send ring's lines (its arena's
 *     copy) into tx, tx into the kernel, STUB_SENT every `sent_batch` bytes
 *     pulled; the same when the kernel socket turns writable;
 *   - N_CREDIT: the receive window reopens;
 *   - N_CONNECT: a pooled kernel socket connects, and the reply goes back at
 *     once (skelconnect.h); the connection it made is handed back
 *     (KP_CONNECTED) for Python to give it its skeleton.
 *
 * Everything else is the nMonitor's (Python): every other op, every other
 * socket (listeners, connecting ones, traced, closing, shut down,
 * broken), and each case the common one does not cover, which kp_run hands
 * back as an event (kp_event) exactly where it stopped, with the state
 * consistent: a recv that returned EOF or an error, or bytes a line that is
 * not cached (DMA: a ring not mapped yet) stopped (KP_RECEIVED); a pull
 * stopped likewise (KP_FLUSH); a kernel send that failed (KP_FAIL); a push whose ring
 * is full, or not known (KP_PUSH). Python's code continues from there (and
 * the connection is Python's until it says otherwise: kp_run clears `fast`
 * when it hands an event of it back). A
 * message that is not one of the four, or not well-formed, or traced, or
 * for a connection that is not fast or not its sender's, or an N_CONNECT
 * that kc_connect does not take, stays in its ring
 * for Python (whose Endpoint answers it as before): kp_run stops reading
 * that ring there, so every ring is still read in order.
 *
 * Identity: each inbox ring comes with the number of its sender, as the
 * Endpoint vouched for it (kp_set_inbox); a connection names its owner's
 * number. A message about a connection of another owner is left for
 * Python, which says EPERM. Rings of links not yet vouched for are not read.
 *
 * Counters: what kp_run reads and writes is counted per peer number and op
 * (kp_peer), for the Endpoint's counters to take in (kp_take_counts).
 *
 * Ownership: the caller (nmonitor.py) owns every kp_conn, nring, ring and
 * mapping it hands in, and takes a connection out (kp_drop) before any of
 * them goes away. One thread only.
 */
#ifndef SPLITRACK_SKELPATH_H
#define SPLITRACK_SKELPATH_H

#include <stdint.h>

#include "ddio.h"
#include "dma.h"
#include "fitring.h"
#include "nring.h"
#include "skelconnect.h"

#define KP_MAX_FDS 65536      /* kernel sockets at descriptors below this can be fast */
#define KP_MAX_PEERS 4096     /* peer numbers: 0 .. KP_MAX_PEERS-1 */
#define KP_NO_PEER 0xFFFFFFFF /* an inbox ring not vouched for: not read here */
#define KP_MAX_RINGS 4096     /* inbox rings at most */
#define KP_MAX_EVENTS 64      /* events one kp_run hands back at most */

/* What kp_run hands back (kp_event.kind). */
#define KP_EVENT 0     /* an epoll event of a descriptor that is not fast: fd, events */
#define KP_RECEIVED 1  /* conn's recv returned value (bytes > 0, 0 EOF, -errno), of which
                          `stored` bytes are in the stub's ring (rpos moved), and
                          nothing else was done (no window, no push) */
#define KP_FLUSH 2     /* conn's pull met a line that is not cached (DMA: a send ring
                          not mapped yet): flush it (Python) */
#define KP_FAIL 3      /* conn's connection failed with errno `value` (a kernel send's
                          failure: tx was reset; ENOBUFS: the stub sent past its ring) */
#define KP_PUSH 4      /* push op `op` with n `value` to conn's stub: its ring was full */
#define KP_CONNECTED 5 /* an N_CONNECT answered here (skelconnect.h): made[value] describes
                          the connection at fd, sk, for Python to finish */

/* The ops it knows (fit_rpc/ops.py) and the FIT header (fit_rpc/header.py). */
typedef struct {
    uint16_t n_send, n_credit, n_connect, stub_data, stub_sent;
    uint16_t n_send_dma, stub_data_dma;
    uint16_t magic, version, request, reply, oneway;
} kp_ops;

/* One connection's data-plane state: the skeleton's and its data path's. */
typedef struct {
    int32_t fd;               /* its kernel socket */
    uint32_t sk;              /* the skeleton's id (messages name it) */
    uint32_t stub;            /* the stub's id in its process (pushes name it) */
    uint32_t owner;           /* its owner's peer number */
    uint32_t fast;            /* 1: kp_run handles it (set by the caller; kp_run clears
                                 it when it hands one of its events back) */
    nring *rx, *tx;           /* its nComponent DRAM rings */
    dd_ring rbuf, tbuf;       /* the stub's two rings, in its extCache lines (DMA: their
                                 start and size alone) */
    uint32_t dma;             /* 1: the dDMA path: the rings in the arena, rdma and tdma */
    const dm_ring *rdma, *tdma;   /* DMA: the two rings as mapped (NULL: not yet) */
    fr_ring *push;            /* the FIT ring to its owner's inbox (NULL: Python pushes) */
    uint64_t rpos, tpos;      /* stream offsets in each of the stub's rings */
    uint64_t window;          /* bytes the stub can still take */
    uint64_t pending;         /* in the stub's send ring, not pulled yet */
    uint64_t unconfirmed;     /* pulled, not yet confirmed (STUB_SENT) */
    uint64_t bytes_in, bytes_out;
    uint64_t lines_bytes;     /* bytes dDDIO copied to or from extCache lines */
    uint32_t recv_chunk;      /* a kernel recv takes at most this */
    uint32_t sent_batch;      /* STUB_SENT once this many bytes were pulled */
} kp_conn;

typedef struct {
    int32_t fd;
    uint32_t sk;              /* the connection's (not KP_EVENT) */
    uint32_t kind;            /* KP_EVENT ... KP_PUSH */
    uint32_t events;          /* KP_EVENT: the epoll events */
    uint32_t op;              /* KP_PUSH: the op */
    uint32_t pad;
    int64_t value;            /* KP_RECEIVED, KP_FAIL, KP_PUSH: as above */
    uint64_t stored;          /* KP_RECEIVED: bytes already in the stub's lines */
} kp_event;

/* Messages and bytes per op, each way, of one peer (a process). */
typedef struct {
    uint64_t rx_send, rx_send_bytes, rx_credit, rx_credit_bytes;
    uint64_t tx_data, tx_data_bytes, tx_sent, tx_sent_bytes;
    uint64_t rx_send_dma, rx_send_dma_bytes, tx_data_dma, tx_data_dma_bytes;
    uint64_t rx_connect, rx_connect_bytes, tx_connect, tx_connect_bytes;
    uint64_t connect_errors;  /* N_CONNECTs answered with an error */
} kp_peer;

typedef struct {
    int32_t epfd;             /* the nMonitor's epoll (every descriptor it watches) */
    uint32_t nrings;
    kp_ops ops;
    uint32_t inbox;           /* out: kp_run stopped at a message for Python */
    uint32_t truncated;       /* more inbox rings than KP_MAX_RINGS: Python reads the rest */
    uint32_t *bell;           /* the inbox's bell word (NULL: none), where kp_run says on
                                 which CPU it waits (fitring.h: FR_BELL_CPU) */
    uint64_t messages;        /* messages it read off the inbox rings, in all */
    uint64_t kernel_events;   /* kernel events of fast connections it handled */
    uint64_t handed_back;     /* connections' events it handed back (not KP_EVENT) */
    fr_ring *rings[KP_MAX_RINGS];   /* the inbox rings ... */
    uint32_t ring_peer[KP_MAX_RINGS];   /* ... their senders' numbers ... */
    fr_ring *replies[KP_MAX_RINGS];     /* ... and the rings back on the same links */
    kc_state connect;                /* N_CONNECT (skelconnect.h) */
    uint64_t grants[KP_MAX_PEERS];   /* per peer number: the homes it may connect with, */
    uint64_t inboxes[KP_MAX_PEERS];  /* ... and its checked inbox's hash (kc_inbox_hash) */
    kc_made made[KP_MAX_EVENTS];     /* what KP_CONNECTED events describe */
    kp_conn *by_fd[KP_MAX_FDS];      /* the fast-capable connections, by fd */
    uint32_t masks[KP_MAX_FDS];      /* what the epoll watches of each fd (kp_watch) */
    kp_peer peers[KP_MAX_PEERS];
} kp_plane;

/* A plane over the epoll fd epfd (a fresh kp_plane, zeroed, ops filled in). */
void kp_init(kp_plane *kp, int epfd, const kp_ops *ops);

/* The inbox rings, their senders' numbers (KP_NO_PEER: not vouched for) and the
 * rings back to them on the same links (replies; NULL: none). */
void kp_set_inbox(kp_plane *kp, fr_ring *const *rings, const uint32_t *peers,
                  fr_ring *const *replies, uint32_t n);

/* Register fd in the epoll with `mask` (0: unregister), kept in kp->masks.
 * Returns 0 or -errno. Every change of what the epoll watches
 * goes through here, so the plane and the caller agree on it. */
int kp_watch(kp_plane *kp, int fd, uint32_t mask);

/* The events a connection wants: EPOLLIN while its window is open, EPOLLOUT
 * while tx holds bytes (fast connections; the caller decides for the rest). */
uint32_t kp_wants(const kp_conn *c);

/* Add a connection (at its fd) / take it out (before its rings or mappings go).
 * A connection's sk carries its fd in its low 16 bits (messages name it so).
 * kp_add: 0, or -EBADF for an fd past KP_MAX_FDS or an sk that does not name
 * it (the connection then stays Python's). */
int kp_add(kp_plane *kp, kp_conn *c);
void kp_drop(kp_plane *kp, kp_conn *c);

/* Work until there is something for Python, or nothing to do: read the inbox
 * rings and the epoll, handling what is fast, spinning up to spin_ns while
 * nothing comes (yielding; not once the CPU is contended), and never past
 * until_ns (CLOCK_MONOTONIC). Returns the number of events put in out (at
 * most max); kp->inbox says whether a message waits for Python. 0 events and
 * no inbox: idle, sleep. */
int kp_run(kp_plane *kp, int64_t spin_ns, uint64_t until_ns, kp_event *out, int max);

/* What peer p may connect with here (skelconnect.h: bit i, home i; 0: nothing), and
 * the hash of the inbox its requests must name. */
void kp_grant(kp_plane *kp, uint32_t p, uint64_t homes, uint64_t inbox);

/* Copy peer p's counters into *out and zero them. */
void kp_take_counts(kp_plane *kp, uint32_t p, kp_peer *out);

#endif
