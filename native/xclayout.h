/*
 * xclayout.h -- the extCache segment's layout, private to extcache.c,
 * victim.c and xcflush.c (the interface is extcache.h):
 *
 *   xc_header_t | xc_set_t[nsets] | xc_tag_t[nsets*ways] | xc_ventry_t[vslots]
 *   | lines[nsets*ways] | victim lines[vslots]
 *
 * The victim cache (victim.c) has `victims` entries at rest and one spare
 * slot (vslots = victims + 1, or 0 without one): a victim hit evicts a line
 * of the set into a slot before it frees its own, so it always finds one.
 */
#ifndef SPLITRACK_XCLAYOUT_H
#define SPLITRACK_XCLAYOUT_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "extcache.h"

#define XC_MAGIC 0x31435845u /* "EXC1" */
#define XC_VERSION 5u        /* 5: the victim cache */
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

typedef struct {
    uint32_t pid;
    uint32_t used;
    xc_counters_t c;
} xc_slot_t;

/* A victim-cache entry's states (victim.c). */
#define VC_EMPTY 0
#define VC_CLEAN 1      /* its home holds these bytes too */
#define VC_DIRTY 2      /* only here: the pMonitor's flusher writes it home */
#define VC_FLUSHING 3   /* being written home: no miss of its page goes there meanwhile */

typedef struct {
    uint64_t vpage;
    uint64_t stamp;   /* when it came in: the oldest CLEAN one is replaced first */
    uint64_t gen;     /* bumped at every fill and free: a flush's entry is still its own */
    uint32_t pid;
    uint16_t home;
    uint8_t state;
    uint8_t dropped;  /* FLUSHING, then invalidated: EMPTY (not CLEAN) once written */
} xc_ventry_t;

/* A line moving between a set's way and a victim entry (both locks held): what
 * a process that dies mid-move leaves for the next victim-lock holder to
 * repair. After the move the page is in exactly one of the two places; if the
 * way's tag still (or already) holds (pid, vpage), the entry is the extra copy. */
typedef struct {
    uint32_t entry;   /* the entry's index + 1; 0: no move in progress */
    uint32_t set, way, pid;
    uint64_t vpage;
} xc_move_t;

typedef struct {
    pthread_mutex_t lock;   /* robust, process-shared; taken after a set's, never before */
    uint32_t n, slots;      /* entries at rest (the spec's `victim`), slots (n + 1 or 0) */
    uint32_t used;          /* entries not EMPTY (read unlocked, atomically: victim.c) */
    uint32_t dirty;         /* DIRTY entries (the flusher's look without the lock) */
    uint64_t clock;
    uint64_t flushed;       /* entries the flusher wrote home (a total: no process's) */
    xc_move_t move;
} xc_victims_t;

typedef struct {
    uint32_t magic, version;
    uint32_t line_size, ways, nsets, policy;
    uint64_t size, sets_off, tags_off, ventries_off, lines_off, vlines_off;
    pthread_mutex_t slots_lock;
    xc_counters_t departed;         /* folded-in counters of ended processes */
    xc_slot_t slots[XC_MAX_SLOTS];
    xc_victims_t vc;
} xc_header_t;

typedef struct {
    pthread_mutex_t lock;
    uint64_t clock;   /* its LRU/FIFO stamps (only a set's own ways are compared): under
                         the lock, so no atomic shared by every process is bumped */
    char pad[64 - (sizeof(pthread_mutex_t) + sizeof(uint64_t)) % 64];
} xc_set_t;

typedef struct {
    uint64_t vpage;
    uint64_t stamp;
    uint32_t pid;
    uint16_t home;
    uint8_t valid;
    uint8_t dirty;
    uint8_t pinned;   /* a page of pid's rack heap maps this line (xc_miss_begin) */
} xc_tag_t;

static inline xc_header_t *H(void *base) { return (xc_header_t *)base; }
static inline xc_set_t *set_at(void *b, uint32_t s) {
    return (xc_set_t *)((char *)b + H(b)->sets_off) + s;
}
static inline xc_tag_t *tag_at(void *b, uint32_t s, uint32_t w) {
    return (xc_tag_t *)((char *)b + H(b)->tags_off) + (uint64_t)s * H(b)->ways + w;
}
static inline char *line_at(void *b, uint32_t s, uint32_t w) {
    return (char *)b + H(b)->lines_off + ((uint64_t)s * H(b)->ways + w) * H(b)->line_size;
}
static inline xc_ventry_t *ventry_at(void *b, uint32_t e) {
    return (xc_ventry_t *)((char *)b + H(b)->ventries_off) + e;
}
static inline char *vline_at(void *b, uint32_t e) {
    return (char *)b + H(b)->vlines_off + (uint64_t)e * H(b)->line_size;
}

static inline uint64_t tick(void *base, uint32_t s) {   /* (s locked) */
    return ++set_at(base, s)->clock;
}

static inline xc_counters_t *ctr(void *base, int slot) {
    static xc_counters_t sink; /* a process without a slot still works, uncounted */
    return (slot >= 0 && slot < XC_MAX_SLOTS) ? &H(base)->slots[slot].c : &sink;
}

/* extcache.c: robust mutexes (lock repairs one whose owner died), and the way
 * a miss in set s takes (XC_NONE: none it may take). */
#define XC_NONE UINT32_MAX
int xc_init_mutex(pthread_mutex_t *m);
void xc_lock(pthread_mutex_t *m);
uint32_t xc_choose_way(void *base, uint32_t s, uint32_t pid, int own);

/* victim.c, for extcache.c; `s` is locked by the caller in each. */
uint64_t vc_bytes(uint32_t victims, uint32_t line_size);   /* its lines' bytes */
int vc_format(void *base, uint32_t victims);
/* Before a miss goes to the home: 0 (not in the victim cache), XC_VICTIM_HIT (its
 * line installed in set s from there, copied to out too), -EAGAIN (being flushed:
 * wait, then ask again), -EBUSY (no way it may take: extcache.h). */
int vc_hit(void *base, int slot, uint32_t s, uint32_t pid, uint64_t vpage, void *out,
           xc_unpin_fn unpin, void *ctx);
/* A miss's victim, the valid line in way w of set s, into the victim cache: 1 if
 * it went there (the way is empty now), 0 if no entry could take it. */
int vc_store(void *base, int slot, uint32_t s, uint32_t w);
/* Flush: a DIRTY entry of (pid, vpage) copied to out and marked CLEAN: 1 (home in
 * *home); 0 if none; -EAGAIN if being flushed; -EXDEV if of a home other than
 * `want` (XC_NONE: any), not copied (*home says which). */
int vc_clean(void *base, uint32_t pid, uint64_t vpage, uint32_t want, void *out, uint32_t *home);
/* Invalidate: entries of pid in [first, first+npages) dropped (no set locked). */
int64_t vc_drop(void *base, uint32_t pid, uint64_t first, uint64_t npages);

/* A set's way holding (pid, vpage), or -1 (s locked). */
static inline int xc_find(void *base, uint32_t s, uint32_t pid, uint64_t vpage) {
    uint32_t ways = H(base)->ways;
    for (uint32_t w = 0; w < ways; w++) {
        xc_tag_t *t = tag_at(base, s, w);
        if (t->valid && t->vpage == vpage && t->pid == pid)
            return (int)w;
    }
    return -1;
}

static inline void xc_unlock(pthread_mutex_t *m) { pthread_mutex_unlock(m); }

/* A buffer in a rack heap (its pages may fault into this extCache: copies into or
 * out of one go through a bounce buffer of XC_BOUNCE bytes, never under a lock). */
static inline int xc_in_heap(const void *p) {
    return (uint64_t)p - XC_HEAP_LO < XC_HEAP_HI - XC_HEAP_LO;
}

#define XC_BOUNCE 4096u   /* (rack heaps need 4 KiB lines: a bounced piece is at most one) */

/* A page being flushed from the victim cache (-EAGAIN): nothing locked, wait a
 * little before looking again; -ETIMEDOUT once that flush has taken too long
 * (extcache.c). */
int xc_wait_flush(int rc, uint64_t *waited_us);

#endif
