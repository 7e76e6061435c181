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

/* Per-process counters (one slot per attached process) and their totals. */
typedef struct {
    uint64_t hits, misses, evictions, writebacks, zerofills, fetches, flushes;
} xc_counters_t;

/* A dirty victim handed back by xc_miss_begin, to be written back. */
typedef struct {
    uint32_t pid;      /* 0: no dirty victim */
    uint32_t home;     /* index of its home mComponent */
    uint64_t vpage;
} xc_victim_t;

/* Bytes a segment needs for this geometry (0 if the geometry is invalid). */
uint64_t xc_segment_size(uint64_t capacity, uint32_t line_size, uint32_t ways);

/* Format a fresh segment (the pMonitor does this once). */
int xc_format(void *base, uint64_t size, uint64_t capacity, uint32_t line_size,
              uint32_t ways, uint32_t policy);

/* Check that `base` holds a formatted segment of `size` bytes (-EPROTONOSUPPORT:
 * one another version of this file formatted). */
int xc_check(void *base, uint64_t size);

/* Geometry of a formatted segment. */
uint32_t xc_line_size(void *base);
uint32_t xc_ways(void *base);
uint32_t xc_nsets(void *base);
uint32_t xc_set_of(void *base, uint32_t pid, uint64_t vpage);

/* Counter slots: a process takes one when it attaches; the pMonitor releases
 * it (folding its counters into the totals) when the process ends. */
int xc_slot_acquire(void *base, uint32_t pid);
int xc_slot_release(void *base, uint32_t pid);
int xc_counters(void *base, uint32_t pid, xc_counters_t *out); /* pid 0: all */
int xc_count(void *base, int slot, int which, uint64_t n);     /* 0..6 as above */

/* Hits: copy [vaddr, vaddr+len) out of / into cached lines, stopping at the
 * first line that is not cached. Returns the bytes copied (len: all hit). */
int64_t xc_read(void *base, int slot, uint32_t pid, uint64_t vaddr, void *dst, uint64_t len);
int64_t xc_write(void *base, int slot, uint32_t pid, uint64_t vaddr, const void *src,
                 uint64_t len);

/* The miss transaction (see above). xc_miss_begin returns 1 if the line is
 * present after all (nothing locked), 0 if the set is locked and the caller
 * must finish with xc_miss_end or xc_miss_abort, -EBUSY if every way of the set
 * is another process's pinned line (nothing locked). victim_buf: line_size bytes.
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

/* Flush one line: if cached and dirty, copy it to out, mark it clean, and
 * return 1 (home in *home); 0 if there is nothing to write back. */
int xc_clean(void *base, uint32_t pid, uint64_t vpage, void *out, uint32_t *home);

/* Flush a run of pages at once: for each page of [vpage, vpage+npages) that is
 * cached and dirty, homed at `home`, copy its line to out + k * line_size, note
 * its page in vpages[k] and mark it clean, for at most `max` lines. Stops early
 * at a dirty line of another home (not cleaned: *other_home says which). Returns
 * k; *next is the page to go on from. */
int64_t xc_clean_run(void *base, uint32_t pid, uint64_t vpage, uint64_t npages, uint32_t home,
                     void *out, uint64_t max, uint64_t *vpages, uint64_t *next,
                     uint32_t *other_home);

/* Drop cached lines without writing them back: one page range, or every line
 * of a process (its exit). Return how many lines were dropped. */
int64_t xc_invalidate(void *base, uint32_t pid, uint64_t vpage, uint64_t npages);
int64_t xc_drop_pid(void *base, uint32_t pid);

#endif
