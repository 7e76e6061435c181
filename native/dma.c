/*
 * dma.c -- dDMA's copies between DRAM rings and a ring mapped in an arena.
 * Contract: dma.h.
 *
 * nring.c walks both rings stretch by stretch; a stretch here is one memcpy
 * per run of the mapping it crosses.
 */
#include "dma.h"

#include <errno.h>
#include <string.h>

/* The run holding ring offset at (runs in order, covering the ring), inside the
 * arena; NULL if none is. */
static const dm_run *run_of(const dm_ring *ring, uint64_t at) {
    uint32_t lo = 0, hi = ring->nruns;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring->runs[mid].at <= at)
            lo = mid;
        else
            hi = mid;
    }
    const dm_run *r = &ring->runs[lo];
    if (!ring->nruns || at < r->at || at - r->at >= r->len || r->off > ring->arena_size ||
        r->len > ring->arena_size - r->off)
        return NULL;
    return r;
}

static int64_t copy(const void *r, char *dram, uint64_t at, uint64_t k, int store) {
    const dm_ring *ring = r;
    uint64_t done = 0;
    while (done < k) {
        const dm_run *run = run_of(ring, at + done);
        if (!run)
            return done ? (int64_t)done : -EINVAL;
        uint64_t n = run->at + run->len - (at + done);
        if (n > k - done)
            n = k - done;
        char *mem = ring->arena + run->off + (at + done - run->at);
        if (store)
            memcpy(mem, dram + done, n);
        else
            memcpy(dram + done, mem, n);
        done += n;
    }
    return (int64_t)done;
}

int64_t dm_store(nring *rx, const dm_ring *ring, uint64_t pos, uint32_t n) {
    return nring_store_to(rx, copy, ring, ring->size, pos, n);
}

int64_t dm_fetch(nring *tx, const dm_ring *ring, uint64_t pos, uint32_t n) {
    return nring_fetch_from(tx, copy, ring, ring->size, pos, n);
}
