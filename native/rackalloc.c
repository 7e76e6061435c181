/*
 * rackalloc.c -- an allocator over the rack heap (CPython's hooks into it: rackpython.c).
 * Contract: rackmem.h.
 *
 * - Small blocks (<= SMALL_MAX): a 16-byte header (class, magic), then the
 *   block; size classes of 16 B up to 1 KiB, then quarter powers of two; carved from
 *   slabs, kept on a free list per class when freed (their pages stay).
 * - Large blocks: whole pages, page-aligned, their length in run_len[first page]
 *   (outside the heap); taken first-fit from the kept runs, else from the
 *   free runs, else carved from the top of the heap. A freed run is kept
 *   mapped while the kept runs hold at most a quarter of the extCache
 *   (rm_keep_bytes: its next use costs
 *   no fault); past that it goes back to the pager (rm_release: its pages
 *   dropped here and in the extCache) and to the free runs, merged with its
 *   neighbours: a block from those is zeros without a touch (calloc).
 * - Aligned blocks and mmap()'s runs (rm_memalign, rm_map, rm_unmap: a native
 *   program's, native/preload_memory.c) are page runs too; munmap may cut a run
 *   anywhere, the pieces left are runs of their own.
 * - One mutex: CPython's raw domain is called without the GIL.
 * Nothing here touches a heap page while holding a lock the pager takes.
 */
#define _GNU_SOURCE
#include <stddef.h>

#include "rackmem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096u
#define SMALL_MAX 32768u
#define SLAB (256u * 1024u)
#define NCLASSES 85
#define MAGIC 0x52414b4du   /* "MKAR" */
#define KEEP_BYTES (rm_keep_bytes())   /* freed page runs kept mapped (malloc's trim threshold) */

/* glibc's own allocator, for the run list's nodes: in a native program malloc
 * itself may be the rack's (native/preload_memory.c), which holds A.lock */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

typedef struct { uint32_t cls, magic; uint64_t pad; } small_head;
typedef struct run { uint64_t page, npages; struct run *next; } run;

static struct {
    pthread_mutex_t lock;
    uint32_t *run_len;          /* per heap page: a large block's pages, at its first */
    uint64_t top;               /* pages from the base handed out by the bump */
    char *slab, *slab_end;      /* where small blocks are carved */
    void *free_small[NCLASSES];
    run *free_runs;             /* released: address-sorted, merged */
    run *kept;                  /* freed and still mapped: address-sorted, merged,
                                   KEEP_BYTES at most */
    uint64_t kept_bytes;
    uint64_t in_use;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Classes 1..64: 16 B steps up to 1 KiB; 65..84: four to each power of two
 * after that, (2^k, 2^(k+1)] in quarters, up to 32 KiB (at most 25% lost). */
static inline uint32_t class_of(size_t n) {
    if (n <= 1024)
        return (uint32_t)((n + 15) / 16);
    uint32_t k = 63 - (uint32_t)__builtin_clzll(n - 1);   /* 2^k < n <= 2^(k+1) */
    size_t quarter = (size_t)1 << (k - 2);
    uint32_t j = (uint32_t)((n - ((size_t)1 << k) + quarter - 1) / quarter);   /* 1..4 */
    return 65 + (k - 10) * 4 + (j - 1);
}

static inline size_t class_size(uint32_t c) {
    if (c <= 64)
        return c * 16u;
    uint32_t k = 10 + (c - 65) / 4, j = (c - 65) % 4 + 1;
    return ((size_t)1 << k) + j * ((size_t)1 << (k - 2));
}

int rm_owns(const void *p) {
    uint64_t a = (uint64_t)p;
    return rm_base() && a >= rm_base() && a - rm_base() < rm_reserve();
}

static inline uint64_t page_of(const void *p) { return ((uint64_t)p - rm_base()) / PAGE; }

/* ---- page runs (lock held) -------------------------------------------------- */

/* Cut npages from the start of a list's first run that has them: 1 and its
 * first page in *page, or 0 if none has. */
static int cut_from(run **list, uint64_t npages, uint64_t *page) {
    for (run **at = list; *at; at = &(*at)->next) {
        run *r = *at;
        if (r->npages < npages)
            continue;
        *page = r->page;
        r->page += npages;
        r->npages -= npages;
        if (r->npages == 0) { *at = r->next; __libc_free(r); }
        return 1;
    }
    return 0;
}

/* A run of npages: a kept one (*zero = 0: its old bytes), else a released one or
 * the top's (*zero = 1: pages never there, or dropped). */
static void *take_run(uint64_t npages, int *zero) {
    uint64_t page;
    int kept = cut_from(&A.kept, npages, &page);
    *zero = !kept;
    if (kept)
        A.kept_bytes -= npages * PAGE;
    if (kept || cut_from(&A.free_runs, npages, &page)) {
        A.run_len[page] = (uint32_t)npages;
        return (void *)(rm_base() + page * PAGE);
    }
    if (!A.run_len) {
        /* (the kernel's mmap, never the interposer's, which would take A.lock) */
        A.run_len = (void *)syscall(SYS_mmap, NULL, rm_reserve() / PAGE * sizeof(uint32_t),
                                    PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (A.run_len == MAP_FAILED) { A.run_len = NULL; return NULL; }
    }
    if ((A.top + npages) * PAGE > rm_reserve() || rm_grow((A.top + npages) * PAGE) < 0)
        return NULL;   /* the home has no more room: MemoryError */
    page = A.top;
    A.top += npages;
    A.run_len[page] = (uint32_t)npages;
    return (void *)(rm_base() + page * PAGE);
}

/* Put a run into an address-sorted list, merged with its neighbours. */
static int insert_run(run **head, uint64_t page, uint64_t npages) {
    run **at = head, *prev = NULL;
    while (*at && (*at)->page < page) {
        prev = *at;
        at = &(*at)->next;
    }
    run *next = *at;
    if (prev && prev->page + prev->npages == page) {
        prev->npages += npages;
        if (next && prev->page + prev->npages == next->page) {
            prev->npages += next->npages;
            prev->next = next->next;
            __libc_free(next);
        }
        return 0;
    }
    if (next && page + npages == next->page) {
        next->page = page;
        next->npages += npages;
        return 0;
    }
    run *r = __libc_malloc(sizeof *r);   /* (libc's, even where malloc is the rack's) */
    if (!r)
        return -1;
    *r = (run){page, npages, next};
    *at = r;
    return 0;
}

static void give_run(uint64_t page, uint64_t npages) {
    A.run_len[page] = 0;
    if (rm_protected())   /* a page the program mprotect()ed is read-write again */
        syscall(SYS_mprotect, rm_base() + page * PAGE, npages * PAGE, PROT_READ | PROT_WRITE);
    if (A.kept_bytes + npages * PAGE <= KEEP_BYTES && insert_run(&A.kept, page, npages) == 0) {
        A.kept_bytes += npages * PAGE;   /* kept mapped, for the next one */
        return;
    }
    rm_release(rm_base() + page * PAGE, npages * PAGE);
    insert_run(&A.free_runs, page, npages);   /* (no memory for a node: the pages stay
                                                 unused, lost to this heap only) */
}

/* ---- the allocator ------------------------------------------------------------ */

/* *zero: whether the block is zeros already (a large one from released pages). */
static void *alloc_locked(size_t n, int *zero) {
    *zero = 0;
    if (n > SIZE_MAX - PAGE)
        return NULL;   /* (its page count would wrap) */
    if (n > SMALL_MAX) {
        uint64_t npages = (n + PAGE - 1) / PAGE;
        if (npages > UINT32_MAX)
            return NULL;
        void *p = take_run(npages, zero);
        if (p) A.in_use += npages * PAGE;
        return p;
    }
    int fresh;
    uint32_t c = class_of(n ? n : 1);
    size_t size = class_size(c);
    void *p = A.free_small[c];
    if (p) {
        A.free_small[c] = *(void **)p;
    } else {
        if (A.slab_end - A.slab < (ptrdiff_t)(sizeof(small_head) + size)) {
            char *s = take_run(SLAB / PAGE, &fresh);
            if (!s)
                return NULL;
            A.slab = s + sizeof(small_head);   /* no small block starts a run (rm_free) */
            A.slab_end = s + SLAB;
        }
        small_head *h = (small_head *)A.slab;
        h->cls = c;
        h->magic = MAGIC;
        p = A.slab + sizeof(small_head);
        A.slab += sizeof(small_head) + size;
    }
    A.in_use += size;
    return p;
}

static size_t size_locked(void *p) {
    uint64_t page = page_of(p);
    if ((uint64_t)p % PAGE == 0 && A.run_len && A.run_len[page])
        return (size_t)A.run_len[page] * PAGE;
    small_head *h = (small_head *)p - 1;
    return h->magic == MAGIC ? class_size(h->cls) : 0;
}

static void free_locked(void *p) {
    uint64_t page = page_of(p);
    if ((uint64_t)p % PAGE == 0 && A.run_len && A.run_len[page]) {
        A.in_use -= (uint64_t)A.run_len[page] * PAGE;
        give_run(page, A.run_len[page]);
        return;
    }
    small_head *h = (small_head *)p - 1;
    if (h->magic != MAGIC || h->cls == 0 || h->cls >= NCLASSES)
        abort();   /* not a block of this heap: a double free or a stray pointer */
    A.in_use -= class_size(h->cls);
    *(void **)p = A.free_small[h->cls];
    A.free_small[h->cls] = p;
}

void *rm_malloc(size_t n) {
    int zero;
    pthread_mutex_lock(&A.lock);
    void *p = alloc_locked(n, &zero);
    pthread_mutex_unlock(&A.lock);
    return p;
}

void *rm_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    int zero;
    pthread_mutex_lock(&A.lock);
    void *p = alloc_locked(n * size, &zero);
    pthread_mutex_unlock(&A.lock);
    if (p && !zero)
        memset(p, 0, n * size);   /* (released pages are zeros without a touch) */
    return p;
}

void *rm_realloc(void *p, size_t n) {
    if (!p)
        return rm_malloc(n);
    pthread_mutex_lock(&A.lock);
    size_t old = size_locked(p);
    if (n <= old && (old <= SMALL_MAX || n > old / 2)) {
        pthread_mutex_unlock(&A.lock);
        return p;
    }
    int zero;
    void *q = alloc_locked(n, &zero);
    pthread_mutex_unlock(&A.lock);
    if (q) {
        memcpy(q, p, old < n ? old : n);   /* (no lock: the copy may fault) */
        rm_free(p);
    }
    return q;
}

uint64_t rm_in_use(void) {
    pthread_mutex_lock(&A.lock);
    uint64_t n = A.in_use;
    pthread_mutex_unlock(&A.lock);
    return n;
}

void rm_free(void *p) {
    if (!p)
        return;
    pthread_mutex_lock(&A.lock);
    free_locked(p);
    pthread_mutex_unlock(&A.lock);
}

/* ---- for a native program's malloc and mmap (native/preload_memory.c) ---------- */

void *rm_memalign(size_t align, size_t n) {
    if (align <= 16)
        return rm_malloc(n);   /* (every block is 16-byte aligned) */
    if (n > SIZE_MAX - PAGE)
        return NULL;
    uint64_t npages = (n + PAGE - 1) / PAGE ? (n + PAGE - 1) / PAGE : 1;
    uint64_t extra = align > PAGE ? align / PAGE - 1 : 0;
    if (npages + extra > UINT32_MAX)
        return NULL;
    int zero;
    pthread_mutex_lock(&A.lock);
    char *p = take_run(npages + extra, &zero);
    if (p && extra) {   /* the aligned pages kept, the ones before and after given back */
        uint64_t first = page_of(p), lead = (-(uint64_t)p & (align - 1)) / PAGE;
        if (lead)
            give_run(first, lead);
        if (extra - lead)
            give_run(first + lead + npages, extra - lead);
        A.run_len[first + lead] = (uint32_t)npages;
        p += lead * PAGE;
    }
    if (p)
        A.in_use += npages * PAGE;
    pthread_mutex_unlock(&A.lock);
    return p;
}

size_t rm_usable_size(void *p) {
    pthread_mutex_lock(&A.lock);
    size_t n = size_locked(p);
    pthread_mutex_unlock(&A.lock);
    return n;
}

void *rm_map(size_t len) {
    if (!len || len > SIZE_MAX - PAGE)
        return NULL;
    uint64_t npages = (len + PAGE - 1) / PAGE;
    if (npages > UINT32_MAX)
        return NULL;
    int zero;
    pthread_mutex_lock(&A.lock);
    void *p = take_run(npages, &zero);
    if (p)
        A.in_use += npages * PAGE;
    pthread_mutex_unlock(&A.lock);
    if (p && !zero)
        memset(p, 0, npages * PAGE);   /* (no lock: it may fault) */
    return p;
}

/* The run holding page q: its first page, or UINT64_MAX (q is in none). */
static uint64_t run_holding(uint64_t q) {
    uint64_t r = q;
    while (r > 0 && !A.run_len[r])
        r--;
    return A.run_len[r] && r + A.run_len[r] > q ? r : UINT64_MAX;
}

int rm_unmap(void *addr, size_t len) {
    if ((uint64_t)addr % PAGE || !rm_owns(addr) || !len || len > SIZE_MAX - PAGE)
        return -EINVAL;
    uint64_t q = page_of(addr), end = q + (len + PAGE - 1) / PAGE;
    pthread_mutex_lock(&A.lock);
    if (!A.run_len || end > A.top)
        end = A.run_len ? A.top : q;   /* (pages never handed out are in no run) */
    uint64_t r = q < end ? run_holding(q) : UINT64_MAX;
    while (q < end) {
        if (r == UINT64_MAX) {   /* q is in no run: on to the next run's first page */
            while (q < end && !A.run_len[q])
                q++;
            if (q == end)
                break;
            r = q;
        }
        uint64_t run_end = r + A.run_len[r], stop = run_end < end ? run_end : end;
        A.run_len[r] = (uint32_t)(q - r);   /* [q, stop) leaves run r; what is left stays */
        if (run_end > stop)
            A.run_len[stop] = (uint32_t)(run_end - stop);
        A.in_use -= (stop - q) * PAGE;
        give_run(q, stop - q);
        q = stop;
        r = UINT64_MAX;
    }
    pthread_mutex_unlock(&A.lock);
    return 0;
}

static int protected_ever;

int rm_protect(void *addr, size_t len, int prot) {
    if (prot != (PROT_READ | PROT_WRITE))
        __atomic_store_n(&protected_ever, 1, __ATOMIC_RELEASE);
    return (int)syscall(SYS_mprotect, addr, len, prot) < 0 ? -errno : 0;
}

int rm_protected(void) { return __atomic_load_n(&protected_ever, __ATOMIC_ACQUIRE); }
