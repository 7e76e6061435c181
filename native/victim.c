/*
 * victim.c -- the extCache's victim cache (LegoOS's PCACHE_EVICTION_VICTIM).
 * Contract: extcache.h (its public part) and xclayout.h (what extcache.c calls).
 *
 * `n` fully-associative entries of whole lines in the pComponent's segment,
 * each EMPTY, CLEAN, DIRTY or FLUSHING (xclayout.h), under one robust mutex
 * that is taken after a set's lock, never before. A miss's victim moves into
 * an entry (vc_store); a miss that finds its page in one moves it back into
 * the set (vc_hit); the pMonitor writes the DIRTY ones home
 * (xc_victim_flush_begin / _end); flushes and drops see them (vc_clean,
 * vc_drop).
 *
 * Invariants:
 * - A page's entry is made and taken only with the page's set locked, so a
 *   holder of that lock that reads `used` == 0 knows the page has none.
 * - At most n entries are not EMPTY, but inside vc_hit: its set's evicted line
 *   goes into the spare slot before the hit's entry is freed (a process that
 *   died there may leave n + 1, until entries are freed: vc_hit then replaces
 *   a CLEAN one, or waits for the flusher to make one CLEAN).
 * - A FLUSHING entry changes only in xc_victim_flush_end (vc_drop marks it
 *   `dropped`); until then no miss of its page goes home, where its bytes are
 *   on their way.
 * - A line moving between a way and an entry is recorded first (xc_move_t):
 *   a process that dies mid-move leaves one copy or two, never none, and the
 *   next holder of the lock drops the extra one (vlock).
 */
#define _GNU_SOURCE
#include <string.h>

#include "xclayout.h"

#define FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)   /* a death sees program order */

static inline xc_victims_t *V(void *base) { return &H(base)->vc; }

uint64_t vc_bytes(uint32_t victims, uint32_t line_size) {
    return victims ? (uint64_t)(victims + 1) * line_size : 0;
}

int vc_format(void *base, uint32_t victims) {
    xc_victims_t *v = V(base);
    memset(v, 0, sizeof *v);
    v->n = victims;
    v->slots = victims ? victims + 1 : 0;
    memset(ventry_at(base, 0), 0, v->slots * sizeof(xc_ventry_t));
    return xc_init_mutex(&v->lock);
}

/* An entry's new state, its counts kept (lock held). */
static void set_state(xc_victims_t *v, xc_ventry_t *x, uint8_t to) {
    __atomic_store_n(&v->used, v->used + (to != VC_EMPTY) - (x->state != VC_EMPTY),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&v->dirty, v->dirty + (to == VC_DIRTY) - (x->state == VC_DIRTY),
                     __ATOMIC_RELEASE);
    if (to == VC_EMPTY) {
        x->gen++;
        x->dropped = 0;
    }
    x->state = to;
}

/* Lock the entries. If their last holder died, finish its move: the entry is
 * the extra copy if the way's tag holds the page (the line is in the set), and
 * count again. (The dead process held the move's set lock too: whoever holds it
 * now changes no tag before taking this lock, so the tag can be read here.) */
static void vlock(void *base) {
    xc_victims_t *v = V(base);
    if (pthread_mutex_lock(&v->lock) != EOWNERDEAD)
        return;
    xc_move_t *m = &v->move;
    if (m->entry) {
        xc_tag_t *t = tag_at(base, m->set, m->way);
        xc_ventry_t *x = ventry_at(base, m->entry - 1);
        if (t->valid && t->pid == m->pid && t->vpage == m->vpage && x->state != VC_FLUSHING) {
            x->state = VC_EMPTY;
            x->gen++;
        }
        m->entry = 0;
    }
    uint32_t used = 0, dirty = 0;
    for (uint32_t e = 0; e < v->slots; e++) {
        used += ventry_at(base, e)->state != VC_EMPTY;
        dirty += ventry_at(base, e)->state == VC_DIRTY;
    }
    __atomic_store_n(&v->used, used, __ATOMIC_RELEASE);
    __atomic_store_n(&v->dirty, dirty, __ATOMIC_RELEASE);
    pthread_mutex_consistent(&v->lock);
}

static void vunlock(void *base) { pthread_mutex_unlock(&V(base)->lock); }

/* The entry holding (pid, vpage), in any state but EMPTY; -1 if none (locked). */
static int vfind(void *base, uint32_t pid, uint64_t vpage) {
    for (uint32_t e = 0; e < V(base)->slots; e++) {
        xc_ventry_t *x = ventry_at(base, e);
        if (x->state != VC_EMPTY && x->vpage == vpage && x->pid == pid)
            return (int)e;
    }
    return -1;
}

static void record(xc_victims_t *v, uint32_t e, uint32_t s, uint32_t w, uint32_t pid,
                   uint64_t vpage) {
    v->move.set = s;
    v->move.way = w;
    v->move.pid = pid;
    v->move.vpage = vpage;
    FENCE();
    v->move.entry = e + 1;
    FENCE();
}

/* Move the valid line of way w of set s into an entry (both locks held): an
 * EMPTY one while fewer than n are used (spare: any EMPTY one), else the oldest
 * CLEAN one but `keep` (its page is at its home: it just goes). 1 if moved (the
 * way is empty now), 0 if no entry could take it. */
static int put(void *base, uint32_t s, uint32_t w, int spare, int keep) {
    xc_victims_t *v = V(base);
    int f = -1;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t e = 0; e < v->slots; e++) {
        xc_ventry_t *x = ventry_at(base, e);
        if (x->state == VC_EMPTY && (spare || v->used < v->n)) {
            f = (int)e;
            break;
        }
        if (x->state == VC_CLEAN && (int)e != keep && x->stamp < oldest) {
            oldest = x->stamp;
            f = (int)e;
        }
    }
    if (f < 0)
        return 0;
    xc_tag_t *t = tag_at(base, s, w);
    xc_ventry_t *x = ventry_at(base, (uint32_t)f);
    record(v, (uint32_t)f, s, w, t->pid, t->vpage);
    set_state(v, x, VC_EMPTY);
    FENCE();
    memcpy(vline_at(base, (uint32_t)f), line_at(base, s, w), H(base)->line_size);
    x->pid = t->pid;
    x->vpage = t->vpage;
    x->home = t->home;
    x->stamp = ++v->clock;
    FENCE();
    set_state(v, x, t->dirty ? VC_DIRTY : VC_CLEAN);
    FENCE();
    t->valid = 0;
    FENCE();
    v->move.entry = 0;
    return 1;
}

/* Entry e's line into the empty way w of set s (both locks held), as
 * xc_miss_end installs one (pinned if pin), dirty if the entry was; the entry
 * is freed. */
static void get(void *base, uint32_t e, uint32_t s, uint32_t w, int pin) {
    xc_victims_t *v = V(base);
    xc_ventry_t *x = ventry_at(base, e);
    xc_tag_t *t = tag_at(base, s, w);
    record(v, e, s, w, x->pid, x->vpage);
    t->valid = 0;
    FENCE();
    memcpy(line_at(base, s, w), vline_at(base, e), H(base)->line_size);
    t->pid = x->pid;
    t->vpage = x->vpage;
    t->home = x->home;
    t->dirty = x->state == VC_DIRTY;
    t->pinned = (uint8_t)(pin != 0);
    t->stamp = tick(base, s);
    FENCE();
    t->valid = 1;
    FENCE();
    set_state(v, x, VC_EMPTY);
    FENCE();
    v->move.entry = 0;
}

int vc_hit(void *base, int slot, uint32_t s, uint32_t pid, uint64_t vpage, void *out,
           xc_unpin_fn unpin, void *ctx) {
    xc_victims_t *v = V(base);
    if (!v->n || !__atomic_load_n(&v->used, __ATOMIC_ACQUIRE))
        return 0;
    vlock(base);
    int e = vfind(base, pid, vpage);
    int rc = e < 0 ? 0 : ventry_at(base, (uint32_t)e)->state == VC_FLUSHING ? -EAGAIN
                                                                          : XC_VICTIM_HIT;
    uint32_t w = rc == XC_VICTIM_HIT ? xc_choose_way(base, s, pid, unpin != NULL) : XC_NONE;
    if (rc == XC_VICTIM_HIT && w == XC_NONE)
        rc = -EBUSY;
    if (rc != XC_VICTIM_HIT) {
        vunlock(base);
        return rc;
    }
    xc_tag_t *t = tag_at(base, s, w);
    xc_counters_t *c = ctr(base, slot);
    if (t->valid) {   /* the set's victim takes the spare slot */
        if (t->pinned && unpin && unpin(ctx, t->vpage, line_at(base, s, w)))
            t->dirty = 1;
        if (put(base, s, w, 1, e)) {
            c->victim_stores++;
        } else if (t->dirty) {   /* (no slot: see the invariants) until one is CLEAN */
            vunlock(base);
            return -EAGAIN;
        }
        t->valid = 0;            /* (or a clean line, dropped) */
        c->evictions++;
    }
    get(base, (uint32_t)e, s, w, unpin != NULL);
    memcpy(out, line_at(base, s, w), H(base)->line_size);
    c->victim_hits++;
    vunlock(base);
    return XC_VICTIM_HIT;
}

int vc_store(void *base, int slot, uint32_t s, uint32_t w) {
    if (!V(base)->n)
        return 0;
    vlock(base);
    int moved = put(base, s, w, 0, -1);
    vunlock(base);
    if (moved) {
        ctr(base, slot)->evictions++;
        ctr(base, slot)->victim_stores++;
    }
    return moved;
}

int vc_clean(void *base, uint32_t pid, uint64_t vpage, uint32_t want, void *out,
             uint32_t *home) {
    xc_victims_t *v = V(base);
    if (!v->n || !__atomic_load_n(&v->used, __ATOMIC_ACQUIRE))
        return 0;
    vlock(base);
    int e = vfind(base, pid, vpage), rc = 0;
    xc_ventry_t *x = e >= 0 ? ventry_at(base, (uint32_t)e) : NULL;
    if (x && x->state == VC_FLUSHING) {
        rc = -EAGAIN;
    } else if (x && x->state == VC_DIRTY) {
        *home = x->home;
        rc = want != XC_NONE && x->home != want ? -EXDEV : 1;
        if (rc == 1) {
            memcpy(out, vline_at(base, (uint32_t)e), H(base)->line_size);
            set_state(v, x, VC_CLEAN);
        }
    }
    vunlock(base);
    return rc;
}

int64_t vc_drop(void *base, uint32_t pid, uint64_t first, uint64_t npages) {
    xc_victims_t *v = V(base);
    int64_t dropped = 0;
    if (!v->n)
        return 0;
    vlock(base);
    for (uint32_t e = 0; e < v->slots; e++) {
        xc_ventry_t *x = ventry_at(base, e);
        if (x->state == VC_EMPTY || x->pid != pid || x->vpage - first >= npages)
            continue;
        if (x->state == VC_FLUSHING)
            x->dropped = 1;   /* its flush ends it; until then no miss goes home */
        else
            set_state(v, x, VC_EMPTY);
        dropped++;
    }
    vunlock(base);
    return dropped;
}

/* ---- from outside a miss ------------------------------------------------- */

int xc_victim_holds(void *base, uint32_t pid, uint64_t vpage) {
    if (!V(base)->n)
        return 0;
    vlock(base);
    int e = vfind(base, pid, vpage);
    vunlock(base);
    return e >= 0;
}

/* Entries in one of `states` (a bit per state), of pid (0: of any). */
static int entries_in(void *base, uint32_t pid, unsigned states) {
    xc_victims_t *v = V(base);
    int n = 0;
    if (!v->n)
        return 0;
    vlock(base);
    for (uint32_t e = 0; e < v->slots; e++) {
        xc_ventry_t *x = ventry_at(base, e);
        n += (states >> x->state & 1) && (pid == 0 || x->pid == pid);
    }
    vunlock(base);
    return n;
}

int xc_victim_entries(void *base, uint32_t pid) {
    return entries_in(base, pid, 1u << VC_CLEAN | 1u << VC_DIRTY | 1u << VC_FLUSHING);
}

int xc_victim_unclean(void *base) {
    return entries_in(base, 0, 1u << VC_DIRTY | 1u << VC_FLUSHING);
}

int64_t xc_victim_flush_begin(void *base, uint64_t max, void *out, xc_victim_t *who,
                              uint64_t *gens) {
    xc_victims_t *v = V(base);
    uint64_t k = 0, line = H(base)->line_size;
    if (!v->n || !__atomic_load_n(&v->dirty, __ATOMIC_ACQUIRE))
        return 0;
    vlock(base);
    for (uint32_t e = 0; e < v->slots && k < max; e++) {
        xc_ventry_t *x = ventry_at(base, e);
        if (x->state != VC_DIRTY)
            continue;
        set_state(v, x, VC_FLUSHING);
        memcpy((char *)out + k * line, vline_at(base, e), line);
        who[k].pid = x->pid;
        who[k].home = x->home;
        who[k].vpage = x->vpage;
        gens[k++] = x->gen;
    }
    vunlock(base);
    return (int64_t)k;
}

int xc_victim_flush_end(void *base, uint32_t pid, uint64_t vpage, uint64_t gen, int how) {
    xc_victims_t *v = V(base);
    if (!v->n)
        return -ENOENT;
    vlock(base);
    int e = vfind(base, pid, vpage);
    xc_ventry_t *x = e >= 0 ? ventry_at(base, (uint32_t)e) : NULL;
    if (!x || x->state != VC_FLUSHING || x->gen != gen) {
        vunlock(base);
        return -ENOENT;
    }
    if (how == XC_FLUSH_WRITTEN)
        __atomic_fetch_add(&v->flushed, 1, __ATOMIC_RELAXED);   /* (read unlocked) */
    if (x->dropped || how == XC_FLUSH_GONE)
        set_state(v, x, VC_EMPTY);
    else
        set_state(v, x, how == XC_FLUSH_WRITTEN ? VC_CLEAN : VC_DIRTY);
    vunlock(base);
    return 0;
}
