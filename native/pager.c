/*
 * pager.c -- the rack heap's fault handler. Contract: rackmem.h.
 *
 * Invariants:
 * - A heap page is mapped (RESIDENT) exactly while its line is pinned in the
 *   extCache under (pid, page): installed by serve_miss, unpinned by unpin()
 *   (the extCache evicts it) or rm_release (freed).
 * - Page states change under pg_lock only; FIT calls go under link_lock only.
 *   Neither is held by code that may touch an unmapped heap page, so no fault
 *   ever waits for a lock its own faulter holds.
 * - TOUCHED: the page was installed once, so its home may hold its bytes
 *   (a miss asks it); otherwise a miss is a zero-fill with no message.
 */
#define _GNU_SOURCE
#include "pager.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "extcache.h"
#include "fitheader.h"

PAGER_OWN pager_state R = {.pg_lock = PTHREAD_MUTEX_INITIALIZER,
                           .link_lock = PTHREAD_MUTEX_INITIALIZER};

uint64_t rm_base(void) { return R.c.base; }

/* A quarter of the extCache: freed pages kept mapped fit beside the live ones. */
uint64_t rm_keep_bytes(void) {
    return R.c.xc ? (uint64_t)xc_nsets(R.c.xc) * xc_ways(R.c.xc) * PAGE / 4 : 0;
}
uint64_t rm_reserve(void) { return R.c.reserve; }

/* The kernel's madvise: in a native program madvise() is the interposer's, which
 * gives rack pages to rm_release (native/preload_memory.c). */
static inline int advise(void *addr, size_t len, int advice) {
    return (int)syscall(SYS_madvise, addr, len, advice);
}

/* ---- the pages ---------------------------------------------------------------- */

static int wp(uint64_t addr, int on) {
    struct uffdio_writeprotect w = {{addr, PAGE}, on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    return ioctl(R.uffd, UFFDIO_WRITEPROTECT, &w);
}

static void wake(uint64_t addr) {
    struct uffdio_range r = {addr, PAGE};
    ioctl(R.uffd, UFFDIO_WAKE, &r);
}

/* xc_miss_begin's unpin: the extCache evicts a pinned line of this process
 * (set locked, pg_lock held). */
static int unpin(void *ctx, uint64_t vpage, void *line) {
    (void)ctx;
    uint64_t addr = vpage * PAGE;
    if (addr < R.c.base || addr - R.c.base >= R.c.reserve)
        return 0;   /* not this heap's (a heap of an image before exec): just a line */
    uint8_t *s = &R.state[(addr - R.c.base) / PAGE];
    if (!(*s & RESIDENT))
        return 0;
    int dirty = (*s & DIRTY) != 0;
    if (dirty) {
        if (wp(addr, 1) < 0)   /* writers now fault, and wait for this thread */
            fatal("write-protecting %#lx: %s", (unsigned long)addr, strerrordesc_np(errno));
        if (!rm_protected())
            memcpy(line, (void *)addr, PAGE);
        else if (syscall(SYS_pread64, R.mem, line, PAGE, addr) != PAGE)   /* (the page may */
            fatal("reading page %#lx: %s", (unsigned long)addr,    /* be PROT_NONE now) */
                  strerrordesc_np(errno));
    }
    advise((void *)addr, PAGE, MADV_DONTNEED);
    *s &= (uint8_t)~(RESIDENT | DIRTY);
    R.st.evictions++;
    R.st.resident--;
    R.st.writebacks += (uint64_t)dirty;
    return dirty;
}

static void install(uint64_t addr, const char *data, int write) {
    struct uffdio_copy cp = {addr, (uint64_t)(data ? data : R.zero), PAGE,
                             write ? 0 : UFFDIO_COPY_MODE_WP, 0};
    if (ioctl(R.uffd, UFFDIO_COPY, &cp) < 0 && errno != EEXIST)
        fatal("installing page %#lx: %s", (unsigned long)addr, strerrordesc_np(errno));
    uint8_t *s = &R.state[(addr - R.c.base) / PAGE];
    *s = (uint8_t)(RESIDENT | TOUCHED | (write ? DIRTY : 0));
    R.st.resident++;
}

/* A first write to a page never there is most often a heap growing through
 * fresh pages: the next ones that were never there either come in with it,
 * zero-filled and writable (so dirty: a page is written back when it leaves
 * even if the program never wrote it), one fault for FAULT_AROUND pages. */
static void zero_fill_ahead(uint64_t addr) {
    uint64_t n = 0;
    for (; n < FAULT_AROUND - 1 && addr + n * PAGE - R.c.base < R.reserved; n++) {
        uint64_t a = addr + n * PAGE;
        uint8_t *s = &R.state[(a - R.c.base) / PAGE];
        xc_victim_t v;
        if (*s & (RESIDENT | TOUCHED) ||
            xc_miss_begin(R.c.xc, R.c.slot, R.c.pid, a / PAGE, &v, R.victim, unpin, NULL) != 0)
            break;
        if (v.pid && v.home >= (uint32_t)R.c.nhomes) {
            xc_miss_abort(R.c.xc, R.c.pid, a / PAGE);
            break;
        }
        if (v.pid)
            pager_writeback(v.home, v.pid, v.vpage, R.victim);
        xc_miss_end(R.c.xc, R.c.slot, R.c.pid, a / PAGE, R.c.home, NULL, 1);
        *s = RESIDENT | TOUCHED | DIRTY;
        R.st.zero_fills++;
        R.st.resident++;
    }
    if (n == 0)
        return;
    struct uffdio_copy cp = {addr, (uint64_t)R.zero, n * PAGE, 0, 0};
    if (ioctl(R.uffd, UFFDIO_COPY, &cp) == 0)
        return;
    if (errno != ENOENT)   /* (ENOENT: the range spans two mappings, the program's
                              madvise() or mprotect() split the heap: a page at a time) */
        fatal("installing pages at %#lx: %s", (unsigned long)addr, strerrordesc_np(errno));
    for (uint64_t done = cp.copy > 0 ? (uint64_t)cp.copy / PAGE : 0; done < n; done++) {
        struct uffdio_copy one = {addr + done * PAGE, (uint64_t)R.zero, PAGE, 0, 0};
        if (ioctl(R.uffd, UFFDIO_COPY, &one) < 0 && errno != EEXIST)
            fatal("installing page %#lx: %s", (unsigned long)one.dst, strerrordesc_np(errno));
    }
}

/* A line of this process into the extCache (pg_lock held): fetched from
 * homes[home] with M_MISS (fetch), else `data` (NULL: zeros); the set's victim,
 * if dirty, piggybacked on the M_MISS or written back first; pinned (a heap
 * page, whose mapped page the victim's unpin drops) or not. Returns 0 with
 * *bytes the line's (R.out's or data), 1 if it was there already, XC_VICTIM_HIT
 * if the victim cache had it (installed; *bytes its copy in R.victim), or a
 * negative errno (-EBUSY: extcache.h; the M_MISS's error). */
static int fill(uint64_t vpage, uint32_t home, const char *data, int fetch, int pin,
                const char **bytes) {
    xc_victim_t v;
    int rc = xc_miss_begin(R.c.xc, R.c.slot, R.c.pid, vpage, &v, R.victim,
                           pin ? unpin : NULL, NULL);
    if (rc == 0 && v.pid && v.home >= (uint32_t)R.c.nhomes) {
        xc_miss_abort(R.c.xc, R.c.pid, vpage);
        return -EINVAL;   /* a victim homed where the pager has no link */
    }
    if (rc == XC_VICTIM_HIT)
        *bytes = R.victim;
    if (rc != 0)
        return rc;
    int piggyback = fetch && v.pid && v.home == home;
    if (v.pid && !piggyback)
        pager_writeback(v.home, v.pid, v.vpage, R.victim);
    *bytes = data;
    if (fetch) {
        miss_req m = {R.c.pid, vpage, piggyback ? v.pid : 0, piggyback ? v.vpage : 0};
        memcpy(R.req, &m, sizeof m);
        if (piggyback)
            memcpy(R.req + sizeof m, R.victim, PAGE);
        uint32_t len;
        pthread_mutex_lock(&R.link_lock);
        rc = pager_call(home, OP_M_MISS, R.req, sizeof m + (piggyback ? PAGE : 0), &len);
        pthread_mutex_unlock(&R.link_lock);
        if (rc == 0 && len != PAGE)
            rc = -EPROTO;
        if (rc < 0) {
            xc_miss_abort(R.c.xc, R.c.pid, vpage);
            return rc;
        }
        *bytes = R.out + HEADER_BYTES;
    }
    xc_miss_end(R.c.xc, R.c.slot, R.c.pid, vpage, home, *bytes, pin);
    return 0;
}

static void serve_miss(uint64_t addr, int write) {
    uint64_t vpage = addr / PAGE;
    int touched = (R.state[(addr - R.c.base) / PAGE] & TOUCHED) != 0;
    const char *data;
    int rc;
    /* (from the victim cache: ours only if this image touched the page already) */
    for (int tries = 0; (rc = fill(vpage, R.c.home, NULL, touched, 1, &data)) == 1 ||
                        (rc == XC_VICTIM_HIT && !touched); tries++) {
        if (tries == 2)
            break;
        xc_invalidate(R.c.xc, R.c.pid, vpage, 1);   /* a line of an image before exec */
    }
    if (rc == XC_VICTIM_HIT && touched)
        rc = 0;   /* data: the line's bytes, as a miss's */
    if (rc == -EBUSY)
        fatal("the extCache set of page %#lx is full of other rack-memory programs' "
              "pages: give the pComponent a larger extCache", (unsigned long)addr);
    if (rc != 0)
        fatal("the miss of page %#lx: %s", (unsigned long)addr,
              strerrordesc_np(rc < 0 ? -rc : EEXIST));
    if (touched) R.st.misses++; else R.st.zero_fills++;
    install(addr, data, write);
    if (write && !data)
        zero_fill_ahead(addr + PAGE);
}

static void serve(const struct uffd_msg *m) {
    uint64_t addr = m->arg.pagefault.address & ~(uint64_t)(PAGE - 1);
    if (addr < R.c.base || addr - R.c.base >= R.reserved) {
        pager_say("access to %#lx, which the rack heap never handed out",
            (unsigned long)m->arg.pagefault.address);
        signal(SIGSEGV, SIG_DFL);
        kill(getpid(), SIGSEGV);
        pause();
    }
    pthread_mutex_lock(&R.pg_lock);
    uint8_t *s = &R.state[(addr - R.c.base) / PAGE];
    R.st.faults++;
    if (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
        if (*s & RESIDENT) {     /* the first write since the page came in: now dirty */
            *s |= DIRTY;
            R.st.write_faults++;
            if (wp(addr, 0) < 0)
                fatal("un-write-protecting %#lx: %s", (unsigned long)addr, strerrordesc_np(errno));
        } else {
            wake(addr);          /* evicted meanwhile: the retry faults it in */
        }
    } else if (*s & RESIDENT) {
        wake(addr);              /* two threads faulted on it: served already */
    } else {
        serve_miss(addr, (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE) != 0);
    }
    pthread_mutex_unlock(&R.pg_lock);
}

static pthread_t pager_thread;   /* (not a __thread flag: a dlopened library's TLS is
                                   malloc()ed on first use, and malloc asks this) */

int rm_in_pager(void) { return R.started && pthread_equal(pthread_self(), pager_thread); }

static void *pager(void *arg) {
    (void)arg;
    struct uffd_msg msgs[16];
    for (;;) {
        ssize_t n = read(R.uffd, msgs, sizeof msgs);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            fatal("reading the page faults: %s", strerrordesc_np(errno));
        }
        for (ssize_t i = 0; i < n / (ssize_t)sizeof msgs[0]; i++)
            if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
                serve(&msgs[i]);
    }
    return NULL;
}

/* ---- lines for the process's other rack memory ------------------------------ */

int rm_xc_fill(uint64_t vpage, uint32_t home, const void *data, int fetch) {
    char line[PAGE];
    if (data)
        memcpy(line, data, PAGE);   /* (data may be a heap page: copied before any lock) */
    if (home >= (uint32_t)R.c.nhomes || !R.started)
        return -EINVAL;
    const char *bytes;
    pthread_mutex_lock(&R.pg_lock);   /* the pager's buffers and links are ours meanwhile */
    int rc = fill(vpage, home, data ? line : NULL, fetch, 0, &bytes);
    pthread_mutex_unlock(&R.pg_lock);
    return rc == XC_VICTIM_HIT ? 1 : rc;   /* cached now, as if it had been */
}

/* ---- freeing ------------------------------------------------------------------ */

void rm_release(uint64_t addr, uint64_t len) {
    pthread_mutex_lock(&R.pg_lock);
    advise((void *)addr, len, MADV_DONTNEED);
    uint64_t first = (addr - R.c.base) / PAGE, n = len / PAGE;
    for (uint64_t i = first; i < first + n; i++) {
        if (R.state[i] & RESIDENT)
            R.st.resident--;
        R.state[i] = 0;   /* its bytes are garbage now: the next use is a zero-fill */
    }
    xc_invalidate(R.c.xc, R.c.pid, addr / PAGE, n);
    R.st.released += n;
    pthread_mutex_unlock(&R.pg_lock);
}

void rm_get_stats(rm_stats *out) {
    pthread_mutex_lock(&R.pg_lock);
    *out = R.st;
    pthread_mutex_unlock(&R.pg_lock);
    out->in_use = rm_in_use();
}

/* ---- start -------------------------------------------------------------------- */

/* A descriptor the pager keeps, made where the native interposer does not see (a raw
 * system call): re-made by a dup, which it moves past the program's own descriptors
 * (native/preload_fd.c: rack_own), so those are numbered as on Linux. */
static int kept(int fd) {
    int dup = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0)
        return fd;
    close(fd);
    return dup;
}

int rm_start(const rm_config *cfg, char *why, int cap) {
#define FAIL(e, ...) do { snprintf(why, (size_t)cap, __VA_ARGS__); return -(e); } while (0)
    if (R.started)
        FAIL(EALREADY, "the rack heap is started already");
    if (xc_ways(cfg->xc) < 2)
        FAIL(EINVAL, "rack memory needs an extCache of 2 ways or more (a way of each set "
             "stays for lines no page maps)");
    if (xc_line_size(cfg->xc) != PAGE)
        FAIL(EINVAL, "rack memory needs the rack's line to be the page size (4KiB), not %u B",
             xc_line_size(cfg->xc));
    if (cfg->nhomes < 1 || cfg->nhomes > RM_MAX_HOMES || cfg->home >= (uint32_t)cfg->nhomes ||
        cfg->chunk % PAGE || cfg->reserve % cfg->chunk || cfg->base % PAGE ||
        cfg->base < XC_HEAP_LO || cfg->base + cfg->reserve > XC_HEAP_HI)
        FAIL(EINVAL, "bad rack heap geometry");
    R.c = *cfg;
    if (!R.out) {
        R.out = malloc(HEADER_BYTES + PAGE * 2);
        R.req = malloc(PAGE * 2 + 64);
        R.zero = calloc(FAULT_AROUND, PAGE);
        R.victim = malloc(PAGE);
        R.seq = 1u << 30;   /* (the endpoint's own calls, before, counted from 1) */
    }
    if (!R.out || !R.req || !R.zero || !R.victim)
        FAIL(ENOMEM, "no memory for the pager's state");
    R.reserved = 0;   /* the first chunk first: -EEXIST, an image before exec() was here */
    int rc = rm_grow(cfg->chunk);
    if (rc < 0)
        FAIL(-rc, "the home mComponent reserves no rack heap at %#llx: %s",
             (unsigned long long)cfg->base, strerrordesc_np(-rc));
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (fd < 0 && (errno == EPERM || errno == ENOSYS)) {   /* (the device: a policy's choice) */
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        fd = dev < 0 ? -1 : ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC);
        if (dev >= 0) close(dev);
    }
    if (fd < 0)
        FAIL(errno, "userfaultfd is not available here (%s): it takes root or "
             "vm.unprivileged_userfaultfd=1 to serve faults the kernel takes too; "
             "use --memory host", strerrordesc_np(errno));
    struct uffdio_api api = {UFFD_API, UFFD_FEATURE_PAGEFAULT_FLAG_WP, 0, };
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        close(fd);
        FAIL(EOPNOTSUPP, "this kernel's userfaultfd cannot write-protect anonymous memory: "
             "use --memory host");
    }
    void *at = mmap((void *)cfg->base, cfg->reserve, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (at == MAP_FAILED) {
        close(fd);
        FAIL(errno, "cannot reserve %llu bytes at %#llx for the rack heap: %s",
             (unsigned long long)cfg->reserve, (unsigned long long)cfg->base,
             strerrordesc_np(errno));
    }
    advise(at, cfg->reserve, MADV_DONTFORK);   /* a child gets none of it (rackmem.py) */
    struct uffdio_register reg = {{cfg->base, cfg->reserve},
                                  UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, 0};
    if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0) {
        int e = errno;
        munmap(at, cfg->reserve);
        close(fd);
        FAIL(e, "userfaultfd refuses the rack heap: %s", strerrordesc_np(e));
    }
    R.uffd = kept(fd);
    R.mem = kept(open("/proc/self/mem", O_RDONLY | O_CLOEXEC));   /* (reads pages mprotect()ed) */
    size_t npages = cfg->reserve / PAGE;
    R.state = mmap(NULL, npages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                   MAP_NORESERVE, -1, 0);
    if (R.state == MAP_FAILED)
        FAIL(ENOMEM, "no memory for the pager's state");
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the program's signals are not its */
    pthread_t t;
    rc = pthread_create(&t, NULL, pager, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc)
        FAIL(rc, "cannot start the pager thread: %s", strerrordesc_np(rc));
    pthread_detach(t);
    pager_thread = t;
    R.started = 1;
    return 0;
#undef FAIL
}
