/*
 * ddio.h -- dDDIO's copies, in C: between the nComponent's DRAM rings and a
 * process's extCache lines (the paper, Fig. 5; monitors/data_paths.py).
 *
 * A socket's two rings in the process's virtual memory (its receive ring and
 * its send ring) live, while cached, in the extCache lines of its pComponent,
 * a segment the nMonitor maps (a FIT region). dDDIO copies straight between
 * those lines and the nComponent's DRAM rings (nring.h), under each set's
 * lock (xc_read / xc_write), as Intel DDIO writes into a CPU's cache. These
 * two functions are the hit path of that copy: one native call moves all the
 * bytes of one event, wrapping in both rings, and stops at the first line
 * that is not cached. The caller goes on from that line (its miss brings it
 * from the process's home mComponent: data_paths.py, in Python).
 *
 * Stream offsets: the bytes of a socket's stream go round the process's ring,
 * byte `pos` of the stream at ring->start + pos % ring->size -- the same walk
 * the bsdSocketStub makes (splitrack/nic_path.py).
 *
 * Both return the bytes copied (>= 0; fewer than asked: a line was not
 * cached), or -EINVAL for a ring of no bytes. (The walk over both rings is
 * nring.h's: nring_store_to, nring_fetch_from.)
 */
#ifndef SPLITRACK_DDIO_H
#define SPLITRACK_DDIO_H

#include <stdint.h>

#include "nring.h"

/* One of a process's socket rings, as dDDIO sees it. */
typedef struct {
    void *xc;         /* the pComponent's extCache segment, mapped */
    uint32_t pid;     /* the process that owns the ring */
    uint64_t start;   /* the ring's first virtual address */
    uint64_t size;    /* its bytes (> 0) */
} dd_ring;

/* Receive: min(n, used) bytes from the front of rx into `ring` from stream
 * offset pos, into its cached lines; the bytes copied leave rx. */
int64_t dd_store(nring *rx, const dd_ring *ring, uint64_t pos, uint32_t n);

/* Send: min(n, space) bytes of `ring` from stream offset pos, from its cached
 * lines, into tx's free space; the bytes copied join tx. */
int64_t dd_fetch(nring *tx, const dd_ring *ring, uint64_t pos, uint32_t n);

#endif
