/*
 * mplane.h -- the mComponent's data plane, in C: its page table, and M_MISS
 * answered straight from the arena (monitors/mmonitor.py, memory_plane.py).
 *
 * In LegoOS the mComponent serves a pComponent's cache miss in its kernel: a
 * page-table look-up and the page sent back. Here the mMonitor is Python, and
 * a miss served through its handler costs more CPU than the round trip's
 * rings; on a core two processes share, that CPU is what the caller waits
 * for. So the common case is served here, the way the nComponent's data plane
 * (skelpath.h) serves N_SEND:
 *
 *   the endpoint's wait for its next inbox message is mp_run (the transport
 *   calls it where it would call fs_next: fit_rpc/shm_receiving.py), which
 *   answers each M_MISS that is plain (well-formed, untraced, no piggybacked
 *   victim), from a sender vouched for and allowed to name the process (its
 *   own pid; an nComponent any), for a page the table holds: the reply is
 *   the frame's bytes, written from the arena straight into the ring back
 *   (fs_answer), the request released with it; and waits on.
 *
 * Everything else is returned as fs_next returns it, in its ring, for Python
 * (whose Endpoint answers it as before): any other op, a victim riding along,
 * a page with no frame (a zero fill: Python checks the region), a sender not
 * vouched for or naming another's pid (Python says EPERM), a full ring back.
 * Every ring is still read in order.
 *
 * The page table: (pid, vpage) -> frame, the one Python's AddressSpace keeps
 * (monitors/page_table.py mirrors every change here, mp_set / mp_del).
 * A page it holds is inside a region of its process (a region takes its
 * pages when it goes), so a hit needs no region check.
 *
 * Identity: each inbox ring comes with what its sender may name (mp_set_inbox):
 * MP_NOBODY (not vouched for yet, or a component: Python serves it),
 * MP_ANY_PID (an nComponent: dDDIO fills any process's lines), or a pid.
 *
 * Counters: misses answered here, and their bytes each way (header included),
 * per inbox ring (mp_take_counts), for the Endpoint's counters and the
 * mMonitor's own to take in.
 *
 * Ownership: the caller owns the rings and the arena; it gives the ring list
 * anew (mp_set_inbox) before a run whenever it changed. One thread only.
 */
#ifndef SPLITRACK_MPLANE_H
#define SPLITRACK_MPLANE_H

#include <stdint.h>

#include "fitring.h"
#include "fitserve.h"

#define MP_MAX_RINGS 4096     /* inbox rings at most (more: Python reads the rest) */
#define MP_NOBODY -1          /* an inbox ring's sender that is not served here */
#define MP_ANY_PID -2         /* ... that may name any process (an nComponent) */
#define MP_NO_FRAME -1        /* mp_get: the table holds no frame for the page */

typedef struct {
    uint64_t vpage;
    uint32_t pid;
    uint32_t used;            /* 0: an empty slot */
    int64_t frame;
} mp_slot;

typedef struct {
    uint64_t misses;          /* M_MISS answered here */
    uint64_t bytes_in;        /* their requests' bytes, headers included */
    uint64_t bytes_out;       /* their replies' */
} mp_counts;

typedef struct {
    /* set by the caller (mp_init) */
    char *arena;              /* the frames: frame f at arena + f * line */
    uint64_t frames;          /* how many */
    uint32_t line;
    uint16_t op_miss;         /* M_MISS's op (fit_rpc/ops.py) */
    uint32_t miss_bytes;      /* its request's payload: pages.py's MISS */
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
int mp_init(mp_plane *mp, char *arena, uint64_t frames, uint32_t line, uint16_t op_miss,
            uint32_t miss_bytes, uint32_t *bell, int efd);
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
