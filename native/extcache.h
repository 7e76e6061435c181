/*
 * extcache.h -- the pComponent's extCache (LegoOS ExCache / pcache), in C.
 *
 * One shared-memory segment per pComponent holds the whole cache, so every
 * emulated process of that pComponent maps it and shares it:
 *
 *   xc_header_t | xc_set_t[nsets] | xc_tag_t[nsets*ways] | lines[nsets*ways]
 *
 * Lines are line_size bytes (4 KiB by default), tagged (pid, virtual page),
 * set-associative with `ways` ways, evicted LRU or FIFO, with a dirty bit.
 * Each set has its own pthread mutex, PROCESS_SHARED and ROBUST: a process
 * that dies holding it does not wedge the others (the next locker repairs it).
 *
 * Hits are served entirely here (xc_read / xc_write). A miss is a three-step
 * transaction, with the set's lock held throughout so that no other process
 * can see a half-done miss (a blocking cache with one miss in flight per set):
 *
 *   xc_miss_begin  lock the set; if the line is now present, unlock and say so;
 *                  else choose a victim way and, if it holds a dirty line, copy
 *                  that line out (with its tag and home) for write-back;
 *   ...            the caller fetches the line from its home mComponent and
 *                  writes the dirty victim back (the two may share a message);
 *   xc_miss_end    install the line (data, or zeros for a first touch) in the
 *                  victim's way and unlock; or xc_miss_abort: unlock, no change.
 *
 * The victim's tag stays valid until xc_miss_end, so a process killed in the
 * middle loses nothing: the victim is still cached (and dirty) or already
 * written back.
 *
 * The victim cache (optional: `victims` entries, 0 for none; LegoOS's
 * PCACHE_EVICTION_VICTIM, code in victim.c): xc_miss_begin moves the victim
 * into it rather than handing it back (the miss then writes nothing back), and
 * serves a miss from it when the line is there (no message at all). Its DIRTY
 * entries are written home by the pMonitor (xc_victim_flush_begin/_end); a miss
 * never goes to the home for a page whose entry is being flushed: it waits.
 * A page is in one place at a time, a set's way or an entry; flushes
 * (xc_clean, xc_clean_run) and drops (xc_invalidate, xc_drop_pid) see both.
 * One robust mutex guards the entries, always taken after a set's lock.
 *
 * Every function returns a negative errno on misuse (a broken invariant is a
 * bug in the caller, and the Python layer turns it into an exception).
 */
#ifndef SPLITRACK_EXTCACHE_H
#define SPLITRACK_EXTCACHE_H

#include <stdint.h>

/* Where rack heaps live (native/rackmem.h): a page there may be unmapped, and
 * touching it waits for its process's pager, which may need any set's lock. So
 * no copy to or from memory in this window is made with a set locked: such
 * bytes go through a buffer on the stack (xc_read, xc_write, xc_clean,
 * xc_clean_run). xc_miss_begin's victim_buf and xc_miss_end's data must not be
 * in it (a rack heap's process fills lines with rm_xc_fill, which copies). */
#define XC_HEAP_LO 0x500000000000
#define XC_HEAP_HI 0x600000000000

#define XC_LRU 0
#define XC_FIFO 1
#define XC_MAX_SLOTS 256   /* processes with counters at once, per pComponent */
#define XC_VICTIM_MAX 64   /* victim-cache entries at most (the spec's `victim`) */
#define XC_VICTIM_WAIT_US 20             /* a miss of a page being flushed looks again */
#define XC_VICTIM_WAIT_MAX_US 10000000   /* ... for this long: then the pMonitor is gone */
#define XC_VICTIM_HIT 2    /* xc_miss_begin: served from the victim cache */

/* Per-process counters (one slot per attached process) and their totals:
 * victim_hits (misses served from the victim cache), victim_stores (victims
 * that went into it), victim_flushes (entries its flusher wrote home: in the
 * totals only, the pMonitor's work). */
typedef struct {
    uint64_t hits, misses, evictions, writebacks, zerofills, fetches, flushes;
    uint64_t victim_hits, victim_stores, victim_flushes;
} xc_counters_t;
#define XC_NCOUNTERS 10

/* A dirty victim handed back by xc_miss_begin, to be written back. */
typedef struct {
    uint32_t pid;      /* 0: no dirty victim */
    uint32_t home;     /* index of its home mComponent */
    uint64_t vpage;
} xc_victim_t;

/* Bytes a segment needs for this geometry (0 if the geometry is invalid). */
uint64_t xc_segment_size(uint64_t capacity, uint32_t line_size, uint32_t ways,
                         uint32_t victims);

/* Format a fresh segment (the pMonitor does this once). */
int xc_format(void *base, uint64_t size, uint64_t capacity, uint32_t line_size,
              uint32_t ways, uint32_t policy, uint32_t victims);

/* Check that `base` holds a formatted segment of `size` bytes (-EPROTONOSUPPORT:
 * one another version of this file formatted). */
int xc_check(void *base, uint64_t size);

/* Geometry of a formatted segment. */
uint32_t xc_line_size(void *base);
uint32_t xc_ways(void *base);
uint32_t xc_nsets(void *base);
uint32_t xc_victims(void *base);
uint32_t xc_set_of(void *base, uint32_t pid, uint64_t vpage);

/* Counter slots: a process takes one when it attaches; the pMonitor releases
 * it (folding its counters into the totals) when the process ends. */
int xc_slot_acquire(void *base, uint32_t pid);
int xc_slot_release(void *base, uint32_t pid);
int xc_counters(void *base, uint32_t pid, xc_counters_t *out); /* pid 0: all */
int xc_count(void *base, int slot, int which, uint64_t n);  /* 0..XC_NCOUNTERS-1 */

/* Hits: copy [vaddr, vaddr+len) out of / into cached lines, stopping at the
 * first line that is not cached. Returns the bytes copied (len: all hit). */
int64_t xc_read(void *base, int slot, uint32_t pid, uint64_t vaddr, void *dst, uint64_t len);
int64_t xc_write(void *base, int slot, uint32_t pid, uint64_t vaddr, const void *src,
                 uint64_t len);

/* The miss transaction (see above). xc_miss_begin returns 1 if the line is
 * present after all (nothing locked), XC_VICTIM_HIT if the victim cache had it
 * and it is installed now (as xc_miss_end would: pinned after an unpin) with
 * its bytes copied to victim_buf too (nothing locked; a caller treats it as 1,
 * a pager maps the bytes), 0 if the set is locked and the caller must finish
 * with xc_miss_end or xc_miss_abort (victim->pid 0 also when the victim went
 * into the victim cache), -EBUSY if every way of the set is another process's
 * pinned line (nothing locked), -ETIMEDOUT if the page's flush never ended
 * (the pMonitor is gone). victim_buf: line_size bytes.
 *
 * Pinned lines are a rack heap's (native/pager.c): a page of the process's own
 * address space maps the line's bytes (a copy it may have written since). Only
 * that process's pager evicts them: it passes `unpin` (others pass NULL, and
 * skip pinned ways), which is called, set locked, on a pinned victim of the
 * same pid to unmap the page; it returns 1 if it copied the page's newer bytes
 * into `line` (the victim is then dirty). xc_miss_end's `pin` must be 1 after
 * an xc_miss_begin with unpin, else 0: it pins the line it installs. A pager
 * takes no unpinned way of a set that has all but a quarter of its ways (at
 * least one) pinned: it evicts one of its own, or gets -EBUSY; the rest stay
 * for unpinned lines (splitrack.guest.vm's, socket buffers). */
typedef int (*xc_unpin_fn)(void *ctx, uint64_t vpage, void *line);
int xc_miss_begin(void *base, int slot, uint32_t pid, uint64_t vpage, xc_victim_t *victim,
                  void *victim_buf, xc_unpin_fn unpin, void *ctx);
int xc_miss_end(void *base, int slot, uint32_t pid, uint64_t vpage, uint32_t home,
                const void *data /* NULL: zero-fill */, int pin);
int xc_miss_abort(void *base, uint32_t pid, uint64_t vpage);

/* Flush one line: if cached and dirty (in a way or in the victim cache), copy
 * it to out, mark it clean, and return 1 (home in *home); 0 if there is nothing
 * to write back. An entry being flushed is waited for (-ETIMEDOUT: see above). */
int xc_clean(void *base, uint32_t pid, uint64_t vpage, void *out, uint32_t *home);

/* Flush a run of pages at once: for each page of [vpage, vpage+npages) that is
 * cached and dirty (as for xc_clean), homed at `home`, copy its line to out + k * line_size, note
 * its page in vpages[k] and mark it clean, for at most `max` lines. Stops early
 * at a dirty line of another home (not cleaned: *other_home says which). Returns
 * k; *next is the page to go on from. */
int64_t xc_clean_run(void *base, uint32_t pid, uint64_t vpage, uint64_t npages, uint32_t home,
                     void *out, uint64_t max, uint64_t *vpages, uint64_t *next,
                     uint32_t *other_home);

/* Drop cached lines without writing them back: one page range, or every line
 * of a process (its exit), victim entries too (one being flushed goes when its
 * flush ends; until then no miss of its page goes home). Return how many lines
 * were dropped. */
int64_t xc_invalidate(void *base, uint32_t pid, uint64_t vpage, uint64_t npages);
int64_t xc_drop_pid(void *base, uint32_t pid);

/* The victim cache from outside a miss. xc_victim_holds: 1 if an entry (in any
 * state) holds (pid, vpage) -- a read-ahead must not fetch that page from its
 * home. xc_victim_entries: entries not EMPTY (of pid; 0: of all).
 * xc_victim_unclean: entries DIRTY or FLUSHING, which no victim can take until
 * the flusher has written them home (while all are, a miss's victim goes home
 * instead). */
int xc_victim_holds(void *base, uint32_t pid, uint64_t vpage);
int xc_victim_entries(void *base, uint32_t pid);
int xc_victim_unclean(void *base);

/* The flusher (the pMonitor): take up to `max` DIRTY entries, mark them
 * FLUSHING, copy their lines to out + k * line_size and say whose they are in
 * who[k] and gens[k]; returns k. Once written home (or refused), end each:
 * XC_FLUSH_WRITTEN: CLEAN (EMPTY if dropped meanwhile); XC_FLUSH_FAILED: DIRTY
 * again, tried later; XC_FLUSH_GONE: EMPTY (its process or region is gone).
 * -ENOENT if that entry is not the flush's any more (cannot happen: a FLUSHING
 * entry changes only here). */
#define XC_FLUSH_WRITTEN 0
#define XC_FLUSH_FAILED 1
#define XC_FLUSH_GONE 2
int64_t xc_victim_flush_begin(void *base, uint64_t max, void *out, xc_victim_t *who,
                              uint64_t *gens);
int xc_victim_flush_end(void *base, uint32_t pid, uint64_t vpage, uint64_t gen, int how);

#endif
