/*
 * dma.c -- dDMA's copies between DRAM rings and a ring mapped in an arena.
 * Contract: dma.h.
 *
 * Each step copies the longest stretch that is contiguous everywhere: it
 * ends where the DRAM ring wraps, where the process's ring wraps, where its
 * run ends, or at the end of what is asked.
 */
#include "dma.h"

#include <errno.h>
#include <string.h>

/* The run holding ring offset at (runs in order, covering the ring). */
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

static int64_t walk(const nring *r, uint64_t rpos, const dm_ring *ring, uint64_t pos,
                    uint32_t n, int store) {
    if (!ring->size || !r->cap)
        return -EINVAL;
    uint64_t done = 0;
    while (done < n) {
        uint64_t off = (rpos + done) % r->cap, at = (pos + done) % ring->size;
        const dm_run *run = run_of(ring, at);
        if (!run)
            return done ? (int64_t)done : -EINVAL;
        uint64_t k = n - done;
        if (k > r->cap - off)
            k = r->cap - off;
        if (k > ring->size - at)
            k = ring->size - at;
        if (k > run->at + run->len - at)
            k = run->at + run->len - at;
        char *mem = ring->arena + run->off + (at - run->at);
        if (store)
            memcpy(mem, r->base + off, k);
        else
            memcpy(r->base + off, mem, k);
        done += k;
    }
    return (int64_t)done;
}

int64_t dm_store(nring *rx, const dm_ring *ring, uint64_t pos, uint32_t n) {
    uint32_t used = nring_used(rx);
    int64_t done = walk(rx, rx->head, ring, pos, n < used ? n : used, 1);
    if (done > 0)
        nring_drop(rx, (uint32_t)done);
    return done;
}

int64_t dm_fetch(nring *tx, const dm_ring *ring, uint64_t pos, uint32_t n) {
    uint32_t space = nring_space(tx);
    int64_t done = walk(tx, tx->tail, ring, pos, n < space ? n : space, 0);
    if (done > 0)
        nring_commit(tx, (uint32_t)done);
    return done;
}
