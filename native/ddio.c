/*
 * ddio.c -- dDDIO's copies between DRAM rings and extCache lines. Contract: ddio.h.
 *
 * Each step copies the longest run that is contiguous in both rings: it ends
 * where the DRAM ring wraps, where the process's ring wraps, or at the end of
 * what is asked. xc_read / xc_write take each set's lock for the lines they
 * touch and stop at the first line that is not cached.
 */
#include "ddio.h"

#include <errno.h>

#include "extcache.h"
#include "nring.h"

/* n bytes between DRAM ring r from its position rpos and `ring` from stream
 * offset pos, in runs; the bytes copied (or -errno if the first run failed). */
static int64_t walk(const nring *r, uint64_t rpos, const dd_ring *ring, uint64_t pos,
                    uint32_t n, int store) {
    if (!ring->size || !r->cap)
        return -EINVAL;
    uint64_t done = 0;
    while (done < n) {
        uint64_t off = (rpos + done) % r->cap, at = (pos + done) % ring->size;
        uint64_t k = n - done;
        if (k > r->cap - off)
            k = r->cap - off;
        if (k > ring->size - at)
            k = ring->size - at;
        /* slot -1: the nComponent's copies count in no process's counters */
        uint64_t vaddr = ring->start + at;
        int64_t got = store ? xc_write(ring->xc, -1, ring->pid, vaddr, r->base + off, k)
                            : xc_read(ring->xc, -1, ring->pid, vaddr, r->base + off, k);
        if (got < 0)
            return done ? (int64_t)done : got;
        done += (uint64_t)got;
        if ((uint64_t)got < k)
            break;   /* a line that is not cached */
    }
    return (int64_t)done;
}

int64_t dd_store(nring *rx, const dd_ring *ring, uint64_t pos, uint32_t n) {
    uint32_t used = nring_used(rx);
    int64_t done = walk(rx, rx->head, ring, pos, n < used ? n : used, 1);
    if (done > 0)
        nring_drop(rx, (uint32_t)done);
    return done;
}

int64_t dd_fetch(nring *tx, const dd_ring *ring, uint64_t pos, uint32_t n) {
    uint32_t space = nring_space(tx);
    int64_t done = walk(tx, tx->tail, ring, pos, n < space ? n : space, 0);
    if (done > 0)
        nring_commit(tx, (uint32_t)done);
    return done;
}
