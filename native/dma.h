/*
 * dma.h -- dDMA's copies, in C: between the nComponent's DRAM rings and a
 * process's socket ring where its home mComponent's arena holds it (the
 * paper, Fig. 5; monitors/data_paths.py's Dma, rack_memory.py's RingMap).
 *
 * The skeleton maps each of a socket's two rings once, as an RDMA NIC
 * registers memory (M_DMA_MAP: every page of it gets a frame, pinned for as
 * long as the socket lives). A mapped ring is a list of runs: a stretch of
 * the ring and where its bytes lie in the arena, a region the nMonitor maps.
 * These two functions are the copies of one event between a DRAM ring
 * (nring.h) and a mapped ring, wrapping in both, as ddio.h's are for
 * extCache lines; a mapped ring has every byte in the arena, so they copy
 * all that is asked. Stream offsets as in ddio.h: byte `pos` of the stream
 * at start + pos % size.
 *
 * Both return the bytes copied, or -EINVAL for a ring of no bytes or runs
 * that do not cover it inside the arena (the caller checked them when it
 * mapped the ring: monitors/rack_memory.py). (The walk over both rings is
 * nring.h's: nring_store_to, nring_fetch_from.)
 */
#ifndef SPLITRACK_DMA_H
#define SPLITRACK_DMA_H

#include <stdint.h>

#include "nring.h"

/* One run of a mapped ring: ring offset `at`, arena offset `off`, `len` bytes. */
typedef struct {
    uint64_t at, off, len;
} dm_run;

/* A socket ring as mapped in its home's arena (runs in ring order, covering it). */
typedef struct {
    char *arena;          /* the home mComponent's arena, mapped */
    uint64_t arena_size;
    uint64_t start;       /* the ring's first virtual address */
    uint64_t size;        /* its bytes (> 0) */
    const dm_run *runs;
    uint32_t nruns;
} dm_ring;

/* Receive: min(n, used) bytes from the front of rx into `ring` from stream
 * offset pos; the bytes copied leave rx. */
int64_t dm_store(nring *rx, const dm_ring *ring, uint64_t pos, uint32_t n);

/* Send: min(n, space) bytes of `ring` from stream offset pos into tx's free
 * space; the bytes copied join tx. */
int64_t dm_fetch(nring *tx, const dm_ring *ring, uint64_t pos, uint32_t n);

#endif
