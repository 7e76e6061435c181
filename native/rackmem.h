/*
 * rackmem.h -- a program's whole memory in the rack (`splitrack run --memory
 * rack`): its heap's pages are rack pages, homed at an mComponent and cached
 * in its pComponent's extCache, as every page of a LegoOS process is.
 *
 * The rack heap is one reserved range of the process's address space,
 * registered with userfaultfd (missing and write-protect faults). Two parts:
 *
 *   pager.c      the fault handler, a thread of the program (its FIT calls in
 *                pager_link.c, its line on stderr in pager_say.c: pager.h): a
 *                missing page is an extCache miss (the line protocol of extcache.h: a zero-fill
 *                if the page was never there, else M_MISS to its home, a dirty
 *                victim piggybacked or written back); the line is then copied
 *                into the page, write-protected unless the fault was a write,
 *                so the first write faults once and marks the page dirty. The
 *                page's line stays pinned in the extCache while the page is
 *                mapped; when the extCache evicts it (only this process's pager
 *                may: xc_miss_begin's unpin), the page is write-protected, its
 *                bytes copied into the line if dirty (then written back as any
 *                dirty line), and dropped (MADV_DONTNEED): the next touch faults.
 *                It sleeps on its own FIT endpoint's bell (links to every
 *                mComponent, opened by splitrack/guest/rackmem.py), and touches
 *                no heap page but one it knows is mapped.
 *   rackalloc.c  an allocator over the heap (size classes, page runs) that
 *                CPython's raw domain and pymalloc's arenas use once
 *                rm_install_python() (rackpython.c) ran, and the native interposer's malloc
 *                and anonymous mmap (native/preload_memory.c) once told; blocks
 *                it did not allocate go to the allocator that was there before.
 *                The heap grows a chunk at a time, each reserved at the home
 *                first (M_ALLOC): none left is NULL, which CPython raises as
 *                MemoryError. A freed page run is
 *                dropped here and in the extCache, and its next use is a
 *                zero-fill again: no write-back, no message.
 *
 * A fault the pager cannot serve (its home is gone or silent, the extCache set
 * is full of other processes' pinned pages, an address the allocator never
 * handed out) ends the program: one line on stderr, then exit status
 * RM_EXIT_STATUS (or SIGSEGV for a stray address, as without the rack).
 * Functions return 0 or a negative errno; rm_start fills `why`.
 */
#ifndef SPLITRACK_RACKMEM_H
#define SPLITRACK_RACKMEM_H

#include <stddef.h>
#include <stdint.h>

#define RM_MAX_HOMES 16
#define RM_EXIT_STATUS 71

typedef struct {
    void *xc;                      /* the pComponent's extCache segment */
    int slot;                      /* this process's extCache counter slot */
    uint32_t pid;
    uint32_t home;                 /* index of the heap's home among homes */
    int nhomes;
    void *tx[RM_MAX_HOMES];        /* fr_ring *: the pager's requests to mComponent i */
    void *rx[RM_MAX_HOMES];        /* fr_ring *: its replies back */
    int hup[RM_MAX_HOMES];         /* the link's socket (readable: the peer hung up) */
    uint32_t *bell;                /* the pager endpoint's bell word and eventfd */
    int efd;
    int64_t spin_ns, timeout_ns;
    uint64_t base, reserve, chunk; /* the heap's range and its growth step (bytes) */
} rm_config;

typedef struct {
    uint64_t faults, zero_fills, misses, write_faults, evictions, writebacks;
    uint64_t resident, reserved, in_use, released;
} rm_stats;

/* Map and register the heap, start the pager thread. Once per process. */
int rm_start(const rm_config *cfg, char *why, int cap);

/* From now on CPython's raw domain and its object arenas use the rack heap. */
int rm_install_python(void);

/* The allocator itself (rackalloc.c), for tests and for native callers. */
void *rm_malloc(size_t n);
void *rm_calloc(size_t n, size_t size);
void *rm_realloc(void *p, size_t n);
void rm_free(void *p);
int rm_owns(const void *p);
uint64_t rm_in_use(void);                  /* bytes of blocks handed out and not freed */

/* What a native program's malloc family and anonymous mmap need besides
 * (native/preload_memory.c): aligned blocks (align a power of two; above 16 B
 * whole pages), a block's usable size, and page runs mapped and unmapped as
 * mmap/munmap do (zeros when mapped; munmap may cut a run anywhere, its pages
 * given back). rm_in_pager: the calling thread is the pager (it must never
 * be handed a heap block: it alone serves their faults). */
void *rm_memalign(size_t align, size_t n);
size_t rm_usable_size(void *p);
void *rm_map(size_t len);
int rm_unmap(void *addr, size_t len);
int rm_in_pager(void);
/* mprotect() of heap pages: applied (0 or -errno); from the first one on, pages go
 * back read-write when freed, and the pager reads a page it evicts through
 * /proc/self/mem (it may be PROT_NONE). rm_protected: has there been one. */
int rm_protect(void *addr, size_t len, int prot);
int rm_protected(void);

void rm_get_stats(rm_stats *out);

/* A line of the process's other rack memory (splitrack.guest.vm: its regions,
 * socket buffers) into the extCache, unpinned, as vm.py's miss would put it:
 * fetch: an M_MISS to homes[home] (a dirty victim piggybacked or written back),
 * else data's line (NULL: zeros). In a process with a rack heap, vm.py's misses
 * go here: no Python runs while a set is locked, since Python touches heap
 * pages whose faults may need that set (the pager). Returns 0, 1 if the line
 * was there already, or a negative errno (-EBUSY: extcache.h). */
int rm_xc_fill(uint64_t vpage, uint32_t home, const void *data, int fetch);

/* Between the two parts (pager.c serves rackalloc.c). */
int rm_grow(uint64_t upto);                   /* reserve chunks at the home up to base+upto */
void rm_release(uint64_t addr, uint64_t len); /* freed pages: dropped, next use zero-fills */
uint64_t rm_base(void);
uint64_t rm_reserve(void);
uint64_t rm_keep_bytes(void);                 /* freed page runs the allocator keeps mapped */

#endif
