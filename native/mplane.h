/*
 * mplane.h -- the mComponent's data plane, in C: its page table, and the memory
 * path's hot messages answered straight from the arena (monitors/mmonitor.py,
 * miss_plane.py).
 *
 * In LegoOS the mComponent serves a pComponent's cache miss in its kernel: a
 * page-table look-up and the page sent back. Here the mMonitor is Python, and
 * a message served through its handler costs more CPU than the round trip's
 * rings; on a core two processes share, that CPU is what the caller waits
 * for. So the common cases are served here, the way the nComponent's data
 * plane (skelpath.h) serves N_SEND:
 *
 *   the endpoint's wait for its next inbox message is mp_run (the transport
 *   calls it where it would call fs_next: fit_rpc/shm_receiving.py), which
 *   answers each request below that is plain (well-formed, untraced), from a
 *   sender vouched for and allowed to name the process, for pages the table
 *   all holds (fit_rpc/pages.py has the layouts):
 *     M_MISS       the frame's bytes, from the arena straight into the ring
 *                  back; a victim riding along (of the same process, its page
 *                  held) first copied into its frame;
 *     M_FETCH      the n frames' bytes, gathered into the reply (own pid only);
 *     M_WRITEBACK  each line into its frame; an empty reply (own pid only);
 *     ECHO         FIT's ping, its payload back (any sender vouched for): the
 *                  Endpoint's own op, answered where the transport's wait is,
 *                  as a kernel answers ICMP echo without the program;
 *   the request released with the reply (fs_answer); and waits on.
 *
 * Everything else is returned as fs_next returns it, in its ring, for Python
 * (whose Endpoint answers it as before): any other op; a page with no frame
 * (a zero fill or a first write-back: Python checks the region, takes the
 * frame); another process's victim or write-back (Python's rules); a sender
 * not vouched for or naming another's pid (Python says EPERM); a full ring
 * back. Every ring is still read in order.
 *
 * The page table: (pid, vpage) -> frame, the one Python's AddressSpace keeps
 * (monitors/address_space.py's PageTable mirrors every change here, mp_set /
 * mp_del). A page it holds is inside a region of its process (a region takes
 * its pages when it goes), so a hit needs no region check.
 *
 * Identity: each inbox ring comes with what its sender may name (mp_set_inbox):
 * MP_NOBODY (not vouched for yet: Python serves it), MP_NO_PID (vouched for, a
 * component or a client: its ECHO only),
 * MP_ANY_PID (an nComponent: dDDIO's M_MISS may name any process), or a pid.
 *
 * Counters: per inbox ring, each op's messages and bytes each way (header
 * included) and the lines moved (mp_take_counts), for the Endpoint's counters
 * and the mMonitor's own to take in.
 *
 * Ownership: the caller owns the rings and the arena; it gives the ring list
 * anew (mp_set_inbox) before a run whenever it changed. One thread only.
 */
#ifndef SPLITRACK_MPLANE_H
#define SPLITRACK_MPLANE_H

#include <stdint.h>

#include "fitring.h"
#include "fitserve.h"

#define MP_MAX_RINGS 4096     /* inbox rings at most (more: the plane reads none, Python
                                 all: monitors/miss_plane.py) */
#define MP_NOBODY -1          /* an inbox ring's sender that is not served here */
#define MP_ANY_PID -2         /* ... that may name any process (an nComponent) */
#define MP_NO_PID -3          /* ... that names none (a component, a client): ECHO only */
#define MP_NO_FRAME -1        /* mp_get: the table holds no frame for the page */
#define MP_MISS_BYTES 24      /* pages.py's layouts: MISS <IQIQ>, FETCH <IQI>, */
#define MP_FETCH_BYTES 16     /* WRITEBACK <II> */
#define MP_WRITEBACK_BYTES 8

typedef struct {
    uint64_t vpage;
    uint32_t pid;
    uint32_t used;            /* 0: an empty slot */
    int64_t frame;
} mp_slot;

#define MP_MAX_LINES 256      /* lines of one M_WRITEBACK answered here at most */

/* The ops it answers (fit_rpc/ops.py), M_FETCH's limit (pages.py), the REQUEST kind. */
typedef struct {
    uint16_t miss, fetch, writeback, echo;
    uint8_t request;
    uint32_t fetch_max;
} mp_ops;

typedef struct {
    uint64_t msgs, bytes_in, bytes_out;   /* requests answered; bytes, headers included */
} mp_opcount;

typedef struct {
    mp_opcount miss, fetch, writeback, echo;
    uint64_t fetched;         /* lines M_FETCH sent */
    uint64_t written;         /* lines stored: M_WRITEBACK's and victims */
    uint64_t victims;         /* victims that rode in an M_MISS */
} mp_counts;

typedef struct {
    /* set by the caller (mp_init) */
    char *arena;              /* the frames: frame f at arena + f * line */
    uint64_t frames;          /* how many */
    uint32_t line;
    mp_ops ops;
    uint32_t *bell;           /* the endpoint's bell word and eventfd (fitring.h) */
    int efd;
    /* the page table: open addressing, linear probing, at most half full */
    mp_slot *slots;
    uint64_t cap;             /* a power of two */
    uint64_t used;
    /* the inbox */
    uint32_t nrings, start;
    fr_ring *rings[MP_MAX_RINGS];
    fr_ring *replies[MP_MAX_RINGS];   /* the ring back on each one's link */
    int64_t who[MP_MAX_RINGS];        /* what each one's sender may name */
    mp_counts counts[MP_MAX_RINGS];
} mp_plane;

/* A plane over `frames` frames of `line` bytes at arena, its inbox's bell word and
 * eventfd those of the endpoint (a fresh mp_plane, zeroed). 0, or -ENOMEM.
 * mp_free: its page table's memory. */
int mp_init(mp_plane *mp, char *arena, uint64_t frames, uint32_t line, const mp_ops *ops,
            uint32_t *bell, int efd);
void mp_free(mp_plane *mp);

/* The page table. mp_set: 0, -ENOMEM, or -EINVAL (a frame outside the arena). */
int mp_set(mp_plane *mp, uint32_t pid, uint64_t vpage, int64_t frame);
void mp_del(mp_plane *mp, uint32_t pid, uint64_t vpage);
int64_t mp_get(const mp_plane *mp, uint32_t pid, uint64_t vpage);

/* The inbox rings, the rings back on the same links, and what each one's sender
 * may name (MP_NOBODY, MP_ANY_PID or a pid). Counters of ring i go with it:
 * take them (mp_take_counts) before the list changes. */
void mp_set_inbox(mp_plane *mp, fr_ring *const *rings, fr_ring *const *replies,
                  const int64_t *who, uint32_t n);

/* fs_next (fitserve.h) over the inbox rings, answering in C every message that is
 * the common case, until one is not: as fs_next, the index of its ring and *m
 * describing it (m->at < 0: the ring's -errno), or -1 (none now: timeout_ns 0),
 * -EAGAIN (woken with nothing due), -ETIMEDOUT; spin_ns and timeout_ns (-1:
 * forever) count from the call, over the whole run. */
int mp_run(mp_plane *mp, int64_t spin_ns, int64_t timeout_ns, fs_msg *m);

/* Ring i's counters into *out, and zeroed. */
void mp_take_counts(mp_plane *mp, uint32_t i, mp_counts *out);

#endif
