/*
 * xcflush.c -- the extCache's flush and invalidate: a page's dirty line copied
 * out for its home (xc_clean, xc_clean_run: the pMonitor's flusher and a
 * process's write-back) and lines dropped (xc_invalidate, xc_drop_pid: a
 * region freed, a process ended), whether in a set's way or in the victim
 * cache (victim.c). Contract: extcache.h; invariants: extcache.c.
 */
#define _GNU_SOURCE
#include "extcache.h"

#include <errno.h>
#include <string.h>

#include "xclayout.h"

/* One page's dirty line (a way's or a victim entry's) copied to mem and marked
 * clean: 1 (its home in *home), 0 if none, -EXDEV if of a home other than want
 * (XC_NONE: any; not copied, *home says which), -ETIMEDOUT (extcache.h). */
static int clean_one(void *base, uint32_t pid, uint64_t p, uint32_t want, char *mem,
                     uint32_t *home) {
    uint32_t s = xc_set_of(base, pid, p);
    int rc = -EAGAIN;
    for (uint64_t waited = 0; rc == -EAGAIN; rc = xc_wait_flush(rc, &waited)) {
        xc_lock(&set_at(base, s)->lock);
        int w = xc_find(base, s, pid, p);
        xc_tag_t *t = w >= 0 ? tag_at(base, s, (uint32_t)w) : NULL;
        if (!t) {
            rc = vc_clean(base, pid, p, want, mem, home);
        } else if (!t->dirty) {
            rc = 0;
        } else if (want != XC_NONE && t->home != want) {
            *home = t->home;
            rc = -EXDEV;
        } else {
            memcpy(mem, line_at(base, s, (uint32_t)w), H(base)->line_size);
            t->dirty = 0;
            *home = t->home;
            rc = 1;
        }
        xc_unlock(&set_at(base, s)->lock);
    }
    return rc;
}

int xc_clean(void *base, uint32_t pid, uint64_t vpage, void *out, uint32_t *home) {
    uint32_t line = H(base)->line_size, at_home = 0;
    char bounce[XC_BOUNCE];
    char *mem = xc_in_heap(out) && line <= XC_BOUNCE ? bounce : out;
    int rc = clean_one(base, pid, vpage, XC_NONE, mem, &at_home);
    if (rc == 1) {
        if (mem == bounce) memcpy(out, bounce, line);
        *home = at_home;
    }
    return rc;
}

int64_t xc_clean_run(void *base, uint32_t pid, uint64_t vpage, uint64_t npages, uint32_t home,
                     void *out, uint64_t max, uint64_t *vpages, uint64_t *next,
                     uint32_t *other_home) {
    uint64_t k = 0, p = vpage, line = H(base)->line_size;
    char bounce[XC_BOUNCE];
    int bounced = xc_in_heap(out) && line <= XC_BOUNCE;   /* (and vpages: written unlocked) */
    uint32_t other = home, at;
    for (; p < vpage + npages && k < max; p++) {
        int rc = clean_one(base, pid, p, home, bounced ? bounce : (char *)out + k * line, &at);
        if (rc == -EXDEV) {   /* another home's: the caller's turn */
            other = at;
            break;
        }
        if (rc < 0) {
            if (k == 0)
                return rc;
            break;            /* these k first; the next call says why it stops */
        }
        if (rc == 1) {
            if (bounced) memcpy((char *)out + k * line, bounce, line);
            vpages[k++] = p;
        }
    }
    *other_home = other;
    *next = p;
    return (int64_t)k;
}

static int64_t drop_where(void *base, uint32_t pid, uint64_t first, uint64_t npages) {
    xc_header_t *h = H(base);
    int64_t dropped = 0;
    for (uint32_t s = 0; s < h->nsets; s++) {
        xc_lock(&set_at(base, s)->lock);
        for (uint32_t w = 0; w < h->ways; w++) {
            xc_tag_t *t = tag_at(base, s, w);
            if (t->valid && t->pid == pid && t->vpage - first < npages) {
                t->valid = 0;
                dropped++;
            }
        }
        xc_unlock(&set_at(base, s)->lock);
    }
    return dropped + vc_drop(base, pid, first, npages);
}

int64_t xc_invalidate(void *base, uint32_t pid, uint64_t vpage, uint64_t npages) {
    xc_header_t *h = H(base);
    if (npages > (uint64_t)h->nsets * h->ways)
        return drop_where(base, pid, vpage, npages);
    int64_t dropped = 0;
    for (uint64_t p = vpage; p < vpage + npages; p++) {
        uint32_t s = xc_set_of(base, pid, p);
        xc_lock(&set_at(base, s)->lock);
        int w = xc_find(base, s, pid, p);
        if (w >= 0) {
            tag_at(base, s, (uint32_t)w)->valid = 0;
            dropped++;
        }
        xc_unlock(&set_at(base, s)->lock);
    }
    return dropped + vc_drop(base, pid, vpage, npages);
}

int64_t xc_drop_pid(void *base, uint32_t pid) {
    return drop_where(base, pid, 0, UINT64_MAX);
}
