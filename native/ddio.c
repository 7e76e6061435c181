/*
 * ddio.c -- dDDIO's copies between DRAM rings and extCache lines. Contract: ddio.h.
 *
 * nring.c walks both rings stretch by stretch; a stretch here is xc_read or
 * xc_write, which take each set's lock for the lines they touch and stop at
 * the first line that is not cached.
 */
#include "ddio.h"

#include "extcache.h"

static int64_t copy(const void *r, char *dram, uint64_t at, uint64_t k, int store) {
    const dd_ring *ring = r;
    /* slot -1: the nComponent's copies count in no process's counters */
    uint64_t vaddr = ring->start + at;
    return store ? xc_write(ring->xc, -1, ring->pid, vaddr, dram, k)
                 : xc_read(ring->xc, -1, ring->pid, vaddr, dram, k);
}

int64_t dd_store(nring *rx, const dd_ring *ring, uint64_t pos, uint32_t n) {
    return nring_store_to(rx, copy, ring, ring->size, pos, n);
}

int64_t dd_fetch(nring *tx, const dd_ring *ring, uint64_t pos, uint32_t n) {
    return nring_fetch_from(tx, copy, ring, ring->size, pos, n);
}
