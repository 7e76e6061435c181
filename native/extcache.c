/*
 * extcache.c -- the pComponent's extCache. Contract: extcache.h.
 *
 * Invariants:
 * - A tag is valid only while its line holds that (pid, vpage)'s bytes.
 * - Tags and lines of a set change only under that set's lock.
 * - Within a set, a (pid, vpage) is cached in at most one way.
 * - Counter slot `slot` is written only by the process that owns it.
 * - A (pid, vpage) is in a set's way or in a victim entry, never both, except
 *   while the set's lock is held (victim.c moves lines between the two).
 * The segment's layout: xclayout.h.
 */
#define _GNU_SOURCE
#include "extcache.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "xclayout.h"

int xc_init_mutex(pthread_mutex_t *m) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -rc;
}

/* Lock, repairing a mutex whose owner died: the set is consistent at every
 * point where a process can die (tags are invalidated before lines change). */
void xc_lock(pthread_mutex_t *m) {
    if (pthread_mutex_lock(m) == EOWNERDEAD)
        pthread_mutex_consistent(m);
}

/* The offsets of a segment's parts (xclayout.h); returns its size, 0 if invalid. */
static uint64_t layout(uint64_t capacity, uint32_t line_size, uint32_t ways, uint32_t victims,
                       xc_header_t *h) {
    if (line_size < 64 || (line_size & (line_size - 1)) || ways == 0 ||
        victims > XC_VICTIM_MAX)
        return 0;
    uint64_t nsets = capacity / line_size / ways;
    if (nsets == 0 || nsets > UINT32_MAX)
        return 0;
    uint64_t vslots = victims ? victims + 1 : 0;
    h->sets_off = ALIGN_UP(sizeof(xc_header_t), 64);
    h->tags_off = h->sets_off + nsets * sizeof(xc_set_t);
    h->ventries_off = ALIGN_UP(h->tags_off + nsets * ways * sizeof(xc_tag_t), 64);
    h->lines_off = ALIGN_UP(h->ventries_off + vslots * sizeof(xc_ventry_t), 4096);
    h->vlines_off = h->lines_off + nsets * ways * line_size;
    return h->vlines_off + vc_bytes(victims, line_size);
}

uint64_t xc_segment_size(uint64_t capacity, uint32_t line_size, uint32_t ways,
                         uint32_t victims) {
    xc_header_t h;
    return layout(capacity, line_size, ways, victims, &h);
}

int xc_format(void *base, uint64_t size, uint64_t capacity, uint32_t line_size, uint32_t ways,
              uint32_t policy, uint32_t victims) {
    xc_header_t *h = H(base);
    if (size < sizeof *h)
        return -EINVAL;
    memset(h, 0, sizeof *h);
    uint64_t need = layout(capacity, line_size, ways, victims, h);
    if (need == 0 || need > size || policy > XC_FIFO)
        return -EINVAL;
    h->line_size = line_size;
    h->ways = ways;
    h->nsets = (uint32_t)(capacity / line_size / ways);
    h->policy = policy;
    h->size = size;
    int rc = xc_init_mutex(&h->slots_lock);
    for (uint32_t s = 0; rc == 0 && s < h->nsets; s++) {
        rc = xc_init_mutex(&set_at(base, s)->lock);
        set_at(base, s)->clock = 0;
    }
    if (rc == 0)
        rc = vc_format(base, victims);
    if (rc)
        return rc;
    memset(tag_at(base, 0, 0), 0, (uint64_t)h->nsets * ways * sizeof(xc_tag_t));
    h->version = XC_VERSION;
    __atomic_store_n(&h->magic, XC_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int xc_check(void *base, uint64_t size) {
    xc_header_t *h = H(base);
    if (size < sizeof *h || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != XC_MAGIC ||
        h->size != size)
        return -EINVAL;
    return h->version == XC_VERSION ? 0 : -EPROTONOSUPPORT;   /* another build's layout */
}

uint32_t xc_line_size(void *base) { return H(base)->line_size; }
uint32_t xc_ways(void *base) { return H(base)->ways; }
uint32_t xc_nsets(void *base) { return H(base)->nsets; }
uint32_t xc_victims(void *base) { return H(base)->vc.n; }

/* The page number's low bits, as a CPU cache (and LegoOS's pcache) indexes its
 * sets: consecutive pages fill consecutive sets, so a region no larger than the
 * cache never conflicts with itself; the pid's hash offsets each process's
 * pages, so two processes' same addresses are not all in one set. */
uint32_t xc_set_of(void *base, uint32_t pid, uint64_t vpage) {
    uint64_t offset = (uint64_t)pid * 0x9E3779B97F4A7C15ull;
    return (uint32_t)((vpage + (offset >> 32)) % H(base)->nsets);
}

/* ---- counters ----------------------------------------------------------- */

static void add(xc_counters_t *to, const xc_counters_t *c) {
    to->hits += c->hits; to->misses += c->misses; to->evictions += c->evictions;
    to->writebacks += c->writebacks; to->zerofills += c->zerofills;
    to->fetches += c->fetches; to->flushes += c->flushes;
    to->victim_hits += c->victim_hits; to->victim_stores += c->victim_stores;
    to->victim_flushes += c->victim_flushes;
}

int xc_slot_acquire(void *base, uint32_t pid) {
    xc_header_t *h = H(base);
    int found = -ENOSPC;
    xc_lock(&h->slots_lock);
    for (int i = 0; i < XC_MAX_SLOTS; i++) {
        if (h->slots[i].used && h->slots[i].pid == pid) { found = i; break; }
        if (!h->slots[i].used && found < 0) found = i;
    }
    if (found >= 0 && !h->slots[found].used) {
        memset(&h->slots[found], 0, sizeof h->slots[found]);
        h->slots[found].pid = pid;
        h->slots[found].used = 1;
    }
    xc_unlock(&h->slots_lock);
    return found;
}

int xc_slot_release(void *base, uint32_t pid) {
    xc_header_t *h = H(base);
    int rc = -ENOENT;
    xc_lock(&h->slots_lock);
    for (int i = 0; i < XC_MAX_SLOTS; i++)
        if (h->slots[i].used && h->slots[i].pid == pid) {
            add(&h->departed, &h->slots[i].c);
            h->slots[i].used = 0;
            rc = 0;
        }
    xc_unlock(&h->slots_lock);
    return rc;
}

int xc_counters(void *base, uint32_t pid, xc_counters_t *out) {
    xc_header_t *h = H(base);
    memset(out, 0, sizeof *out);
    int rc = pid ? -ENOENT : 0;
    xc_lock(&h->slots_lock);
    if (pid == 0) {
        add(out, &h->departed);
        out->victim_flushes += __atomic_load_n(&h->vc.flushed, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < XC_MAX_SLOTS; i++)
        if (h->slots[i].used && (pid == 0 || h->slots[i].pid == pid)) {
            add(out, &h->slots[i].c);
            rc = 0;
        }
    xc_unlock(&h->slots_lock);
    return rc;
}

int xc_count(void *base, int slot, int which, uint64_t n) {
    if (slot < 0 || slot >= XC_MAX_SLOTS || which < 0 || which >= XC_NCOUNTERS)
        return -EINVAL;
    uint64_t *c = &H(base)->slots[slot].c.hits;
    __atomic_fetch_add(&c[which], n, __ATOMIC_RELAXED);
    return 0;
}

/* ---- lookup and hits ---------------------------------------------------- */

/* Copy one line's part (at most XC_BOUNCE bytes if buf is in a rack heap: access_range
 * cuts it so); returns 1 on hit, 0 on miss. */
static int access_line(void *base, int slot, uint32_t pid, uint64_t vaddr, char *buf,
                       uint64_t len, int write) {
    xc_header_t *h = H(base);
    uint64_t vpage = vaddr / h->line_size, off = vaddr % h->line_size;
    uint32_t s = xc_set_of(base, pid, vpage);
    char bounce[XC_BOUNCE];
    char *mem = xc_in_heap(buf) ? bounce : buf;
    if (write && mem == bounce)
        memcpy(bounce, buf, len);
    xc_lock(&set_at(base, s)->lock);
    int w = xc_find(base, s, pid, vpage);
    if (w >= 0) {
        xc_tag_t *t = tag_at(base, s, (uint32_t)w);
        if (write) {
            memcpy(line_at(base, s, (uint32_t)w) + off, mem, len);
            t->dirty = 1;
        } else {
            memcpy(mem, line_at(base, s, (uint32_t)w) + off, len);
        }
        if (h->policy == XC_LRU)
            t->stamp = tick(base, s);
    }
    xc_unlock(&set_at(base, s)->lock);
    if (w >= 0 && !write && mem == bounce)
        memcpy(buf, bounce, len);
    xc_counters_t *c = ctr(base, slot);
    if (w >= 0) c->hits++; else c->misses++;
    return w >= 0;
}

static int64_t access_range(void *base, int slot, uint32_t pid, uint64_t vaddr, char *buf,
                            uint64_t len, int write) {
    uint64_t line = H(base)->line_size, done = 0;
    while (done < len) {
        uint64_t a = vaddr + done;
        uint64_t n = line - a % line;
        if (n > len - done) n = len - done;
        if (n > XC_BOUNCE && xc_in_heap(buf + done)) n = XC_BOUNCE;
        if (!access_line(base, slot, pid, a, buf + done, n, write))
            break;
        done += n;
    }
    return (int64_t)done;
}

int64_t xc_read(void *base, int slot, uint32_t pid, uint64_t vaddr, void *dst, uint64_t len) {
    return access_range(base, slot, pid, vaddr, (char *)dst, len, 0);
}

int64_t xc_write(void *base, int slot, uint32_t pid, uint64_t vaddr, const void *src,
                 uint64_t len) {
    return access_range(base, slot, pid, vaddr, (char *)src, len, 1);
}

/* ---- the miss transaction ----------------------------------------------- */

/* The way a miss in set s fills: an empty one, else the least recently used
 * (LRU) or first filled (FIFO) of the ways it may take. A pinned line is taken
 * only by its own process's pager (own: pid's), which unmaps the page first;
 * and a pager takes no unpinned way once XC_PINNED_MAX(ways) are pinned, so
 * the lines of splitrack.guest.vm and of socket buffers always have ways left.
 * XC_NONE if there is no way to take. */
#define XC_PINNED_MAX(ways) ((ways) - ((ways) / 4 > 1 ? (ways) / 4 : 1))
uint32_t xc_choose_way(void *base, uint32_t s, uint32_t pid, int own) {
    uint32_t ways = H(base)->ways, empty = XC_NONE, best = XC_NONE, mine = XC_NONE, pinned = 0;
    uint64_t oldest = UINT64_MAX, my_oldest = UINT64_MAX;
    for (uint32_t w = 0; w < ways; w++) {
        xc_tag_t *t = tag_at(base, s, w);
        if (!t->valid) {
            if (empty == XC_NONE) empty = w;
            continue;
        }
        pinned += t->pinned;
        if (t->pinned && !(own && t->pid == pid))
            continue;
        if (t->stamp < oldest) { oldest = t->stamp; best = w; }
        if (t->pinned && t->stamp < my_oldest) { my_oldest = t->stamp; mine = w; }
    }
    if (own && pinned >= XC_PINNED_MAX(ways))
        return mine;
    return empty != XC_NONE ? empty : best;
}

int xc_wait_flush(int rc, uint64_t *waited_us) {
    if (rc != -EAGAIN)
        return rc;
    if (*waited_us >= XC_VICTIM_WAIT_MAX_US)
        return -ETIMEDOUT;
    usleep(XC_VICTIM_WAIT_US);
    *waited_us += XC_VICTIM_WAIT_US;
    return -EAGAIN;
}

int xc_miss_begin(void *base, int slot, uint32_t pid, uint64_t vpage, xc_victim_t *victim,
                  void *victim_buf, xc_unpin_fn unpin, void *ctx) {
    uint32_t s = xc_set_of(base, pid, vpage);
    memset(victim, 0, sizeof *victim);
    int rc = -EAGAIN;
    for (uint64_t waited = 0; rc == -EAGAIN; rc = xc_wait_flush(rc, &waited)) {
        xc_lock(&set_at(base, s)->lock);
        rc = xc_find(base, s, pid, vpage) >= 0 ? 1
             : vc_hit(base, slot, s, pid, vpage, victim_buf, unpin, ctx);
        if (rc != 0)
            xc_unlock(&set_at(base, s)->lock);
    }
    if (rc != 0)
        return rc;   /* present after all, served from the victim cache, or an error */
    uint32_t w = xc_choose_way(base, s, pid, unpin != NULL);
    if (w == XC_NONE) {
        xc_unlock(&set_at(base, s)->lock);
        return -EBUSY;
    }
    xc_tag_t *t = tag_at(base, s, w);
    if (t->valid && t->pinned && unpin(ctx, t->vpage, line_at(base, s, w)))
        t->dirty = 1;   /* the page had been written: its bytes are in the line now */
    if (t->valid && vc_store(base, slot, s, w))
        return 0;       /* the victim cache has it: nothing to write back */
    if (t->valid && t->dirty) {
        victim->pid = t->pid;
        victim->home = t->home;
        victim->vpage = t->vpage;
        memcpy(victim_buf, line_at(base, s, w), H(base)->line_size);
    }
    return 0; /* the set stays locked until xc_miss_end / xc_miss_abort */
}

int xc_miss_end(void *base, int slot, uint32_t pid, uint64_t vpage, uint32_t home,
                const void *data, int pin) {
    uint32_t s = xc_set_of(base, pid, vpage);
    /* the way xc_miss_begin chose (pin there: an unpin function), or, if it moved
     * the victim into the victim cache, an empty one */
    uint32_t w = xc_choose_way(base, s, pid, pin);
    if (w == XC_NONE) {
        xc_unlock(&set_at(base, s)->lock);
        return -EINVAL;
    }
    xc_tag_t *t = tag_at(base, s, w);
    xc_counters_t *c = ctr(base, slot);
    if (t->valid) {
        c->evictions++;
        if (t->dirty) c->writebacks++;
    }
    t->valid = 0; /* a process dying below leaves the way empty, never torn */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (data) {
        memcpy(line_at(base, s, w), data, H(base)->line_size);
        c->fetches++;
    } else {
        memset(line_at(base, s, w), 0, H(base)->line_size);
        c->zerofills++;
    }
    t->pid = pid;
    t->vpage = vpage;
    t->home = (uint16_t)home;
    t->dirty = 0;
    t->pinned = (uint8_t)(pin != 0);
    t->stamp = tick(base, s);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    t->valid = 1;
    xc_unlock(&set_at(base, s)->lock);
    return 0;
}

int xc_miss_abort(void *base, uint32_t pid, uint64_t vpage) {
    xc_unlock(&set_at(base, xc_set_of(base, pid, vpage))->lock);
    return 0;
}
