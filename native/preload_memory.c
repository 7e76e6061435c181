/* The native interposer's memory half: with `splitrack run --memory rack`, a
 * program's malloc family and its anonymous mmap()s take rack pages.
 *
 * Contract:
 *   - malloc, calloc, realloc, free, posix_memalign, aligned_alloc, memalign,
 *     valloc, pvalloc, malloc_usable_size and reallocarray are defined here
 *     (glibc lets a preloaded library replace them all; its own calls come
 *     here too). Until the rack heap is on they are glibc's (__libc_*); from
 *     then on they are the rack allocator's (native/rackalloc.c), whose pages
 *     the pager serves (native/pager.c). A block made before stays glibc's
 *     and goes back to it when freed; realloc() moves it into the rack heap.
 *   - mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0),
 *     plain anonymous memory, is a run of rack pages (zeros); munmap() of
 *     rack pages gives them back, whole runs or any part of one. Any other
 *     mmap (files, shared, fixed, stacks, huge pages) is the kernel's.
 *   - fork() and daemon() are refused (EOPNOTSUPP, one line on stderr) once the
 *     heap is on: the child would not have its pages. vfork, posix_spawn and
 *     exec work.
 *   - mprotect() of rack pages is applied (rm_protect: they go back read-write
 *     when given back, and the pager can still read them).
 *   - The pager thread never gets a rack block: it alone serves their faults.
 *
 * A library of its own (native._preload_memory), preloaded only for --memory rack
 * (splitrack/native_run.py): otherwise a program's allocator is its own, glibc's or
 * one it links (redis-server's jemalloc), which these definitions would shadow.
 *
 * Who turns it on: splitrack/guest/rackmem.py, once the pager runs, calls
 * sr_heap_on with rackmem.h's functions. In a native program that happens
 * before main(), from preload.c's constructor (sr_memory, native/guest.h); in
 * a Python program the drop-in's install() does it, so what C extensions
 * malloc (numpy's arrays) is the rack's too.
 *
 *   - madvise() of rack pages: MADV_DONTNEED, MADV_FREE and MADV_REMOVE drop them
 *     (rm_release: zeros on the next touch); fork and dump advice go to the
 *     kernel; hints (huge pages, read-ahead) do nothing: a rack page is a line.
 *
 * Not covered (docs/memory.md): an allocator linked into the program itself
 * (its malloc is found before this one: said on stderr; its anonymous mmap()s
 * are rack pages all the same), and mremap() of rack pages (EINVAL here, so a
 * program falls back to mmap and copy).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

/* sr_heap_on's table, in this order (splitrack/guest/rackmem.py: HEAP_TABLE) */
enum { H_MALLOC, H_CALLOC, H_REALLOC, H_FREE, H_MEMALIGN, H_USABLE, H_MAP, H_UNMAP,
       H_RELEASE, H_PROTECT, H_IN_PAGER, H_BASE, H_RESERVE, H_SLOTS };

static struct {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    void *(*memalign)(size_t, size_t);
    size_t (*usable)(void *);
    void *(*map)(size_t);
    int (*unmap)(void *, size_t);
    void (*release)(uint64_t, uint64_t);
    int (*protect)(void *, size_t, int);
    int (*in_pager)(void);
    uintptr_t base, reserve;
} rm;
static _Atomic int heap_on;
static void *this_malloc(size_t n);

/* Turn the rack heap on: 0, or -EINVAL for a short table. */
__attribute__((visibility("default"))) int sr_heap_on(void *const *table, int n)
{
    if (n < H_SLOTS)
        return -EINVAL;
    rm.malloc = table[H_MALLOC];
    rm.calloc = table[H_CALLOC];
    rm.realloc = table[H_REALLOC];
    rm.free = table[H_FREE];
    rm.memalign = table[H_MEMALIGN];
    rm.usable = table[H_USABLE];
    rm.map = table[H_MAP];
    rm.unmap = table[H_UNMAP];
    rm.release = table[H_RELEASE];
    rm.protect = table[H_PROTECT];
    rm.in_pager = table[H_IN_PAGER];
    rm.base = (uintptr_t)table[H_BASE];
    rm.reserve = (uintptr_t)table[H_RESERVE];
    if (dlsym(RTLD_DEFAULT, "malloc") != (void *)this_malloc)
        dprintf(2, "splitrack: --memory rack: this program has a malloc of its own, which "
                   "stays host memory (its anonymous mmap()s are rack pages)\n");
    atomic_store(&heap_on, 1);
    return 0;
}

static inline int rack(void)   /* this call takes rack pages */
{
    return atomic_load_explicit(&heap_on, memory_order_acquire) && !rm.in_pager();
}

static inline int owned(const void *p)
{
    return atomic_load_explicit(&heap_on, memory_order_acquire)
           && (uintptr_t)p - rm.base < rm.reserve;
}

static inline void *fail_null(void *p)
{
    if (!p)
        errno = ENOMEM;
    return p;
}

void *malloc(size_t n)
{
    return rack() ? fail_null(rm.malloc(n ? n : 1)) : __libc_malloc(n);
}

/* this file's malloc (&malloc is the program's, if it has one of its own) */
static void *this_malloc(size_t n) __attribute__((alias("malloc"), copy(malloc)));

void *calloc(size_t n, size_t size)
{
    if (!rack())
        return __libc_calloc(n, size);
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    if (!n || !size)
        n = size = 1;   /* (a block of its own, as malloc(0)) */
    return fail_null(rm.calloc(n, size));
}

void free(void *p)
{
    if (owned(p))
        rm.free(p);
    else if (p)
        __libc_free(p);
}

void *realloc(void *p, size_t n)
{
    if (owned(p) && !n) {   /* (glibc's: frees it) */
        rm.free(p);
        return NULL;
    }
    if (owned(p))
        return fail_null(rm.realloc(p, n));
    if (!p || !rack())
        return __libc_realloc(p, n);
    void *q = fail_null(rm.malloc(n ? n : 1));   /* a block from before: into the rack heap */
    if (q) {
        size_t old = malloc_usable_size(p);
        memcpy(q, p, old < n ? old : n);
        __libc_free(p);
    }
    return q;
}

void *reallocarray(void *p, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n * size);
}

static int aligned(size_t align, size_t n, void **out)
{
    if (!align || align & (align - 1) || align % sizeof(void *))
        return EINVAL;
    *out = rack() ? rm.memalign(align, n) : __libc_memalign(align, n);
    return *out ? 0 : ENOMEM;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p;
    int e = aligned(align, n, &p);
    if (!e)
        *out = p;
    return e;   /* (errno untouched, as glibc's) */
}

static void *aligned_or_null(size_t align, size_t n)   /* (align rounded up, as glibc's) */
{
    void *p;
    size_t at = sizeof(void *);
    while (at < align && at)
        at <<= 1;
    int e = at ? aligned(at, n, &p) : EINVAL;
    if (e) {
        errno = e;
        return NULL;
    }
    return p;
}

void *aligned_alloc(size_t align, size_t n) { return aligned_or_null(align, n); }
void *memalign(size_t align, size_t n) { return aligned_or_null(align, n); }
void *valloc(size_t n) { return aligned_or_null((size_t)sysconf(_SC_PAGESIZE), n); }

void *pvalloc(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return aligned_or_null(page, (n + page - 1) / page * page);
}

size_t malloc_usable_size(void *p)
{
    static size_t (*libc_usable)(void *);
    if (owned(p))
        return rm.usable(p);
    if (!p)
        return 0;
    if (!libc_usable) {   /* that of the library whose __libc_malloc made these blocks
                             (glibc's, or an allocator that defines it: tcmalloc), not the
                             next one, which may be another the program links (jemalloc) */
        Dl_info made;
        void *lib = dladdr((void *)__libc_malloc, &made) && made.dli_fname
                    ? dlopen(made.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
        libc_usable = lib ? dlsym(lib, "malloc_usable_size") : NULL;
        if (!libc_usable)
            libc_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
    }
    return libc_usable(p);
}

/* ---- anonymous memory ------------------------------------------------------- */

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!addr && len && prot == (PROT_READ | PROT_WRITE)
        && flags == (MAP_PRIVATE | MAP_ANONYMOUS) && rack()) {
        void *p = rm.map(len);
        if (p)
            return p;
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);   /* the kernel's */
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

int munmap(void *addr, size_t len)
{
    if (owned(addr)) {
        int r = rm.unmap(addr, len);
        if (r < 0) {
            errno = -r;
            return -1;
        }
        return 0;
    }
    return (int)syscall(SYS_munmap, addr, len);
}

int madvise(void *addr, size_t len, int advice)
{
    if (!owned(addr))
        return (int)syscall(SYS_madvise, addr, len, advice);
    if ((uintptr_t)addr % 4096 || len > rm.base + rm.reserve - (uintptr_t)addr) {
        errno = EINVAL;
        return -1;
    }
    switch (advice) {
    case MADV_DONTNEED:   /* the pages go: zeros on the next touch, as the kernel's */
    case MADV_FREE:
    case MADV_REMOVE:
        rm.release((uintptr_t)addr, (len + 4095) / 4096 * 4096);
        return 0;
    case MADV_DONTFORK:
    case MADV_DOFORK:
    case MADV_DONTDUMP:
    case MADV_DODUMP:
        return (int)syscall(SYS_madvise, addr, len, advice);
    default:   /* hints (huge pages, read-ahead...): a rack page is a 4 KiB line anyway */
        return 0;
    }
}

int mprotect(void *addr, size_t len, int prot)
{
    if (!owned(addr))
        return (int)syscall(SYS_mprotect, addr, len, prot);
    int r = rm.protect(addr, len, prot);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return 0;
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    if (owned(old)) {   /* (glibc's realloc of its own mmapped blocks never comes here) */
        errno = EINVAL;
        return MAP_FAILED;
    }
    va_list ap;
    va_start(ap, flags);
    void *new_addr = va_arg(ap, void *);
    va_end(ap);
    static void *(*libc_mremap)(void *, size_t, size_t, int, ...);
    if (!libc_mremap)
        libc_mremap = dlsym(RTLD_NEXT, "mremap");
    return libc_mremap(old, old_len, new_len, flags, new_addr);
}

/* ---- fork ------------------------------------------------------------------- */

static int refuse_fork(void)
{
    dprintf(2, "splitrack: fork() of a program with --memory rack: its child would not "
               "have its pages; use posix_spawn or vfork and exec, or --memory host\n");
    errno = EOPNOTSUPP;
    return -1;
}

int daemon(int nochdir, int noclose)   /* (glibc's forks inside, past fork() here) */
{
    static int (*libc_daemon)(int, int);
    if (atomic_load(&heap_on))
        return refuse_fork();
    if (!libc_daemon)
        libc_daemon = dlsym(RTLD_NEXT, "daemon");
    return libc_daemon(nochdir, noclose);
}

pid_t fork(void)
{
    static pid_t (*libc_fork)(void);
    if (atomic_load(&heap_on))
        return refuse_fork();
    if (!libc_fork)
        libc_fork = dlsym(RTLD_NEXT, "fork");
    return libc_fork();
}
