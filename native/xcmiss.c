/*
 * xcmiss.c -- an extCache line's miss in one native call. Contract: xcmiss.h.
 */
#include "xcmiss.h"

#include <string.h>

#include "extcache.h"
#include "fitcall.h"
#include "fitheader.h"

int xm_miss(xm_miss_t *m, uint64_t vpage, uint32_t home, fs_caller *c, fr_ring *tx,
            uint32_t seq, int64_t timeout_ns) {
    xc_victim_t v;
    int rc = xc_miss_begin(m->xc, m->slot, m->pid, vpage, &v, m->req + XM_HEAD, NULL, NULL);
    if (rc < 0) {
        m->err = rc;
        return XM_FAILED;
    }
    if (rc != 0)
        return XM_CACHED;
    int piggyback = v.pid && v.home == home;
    uint32_t vpid = piggyback ? v.pid : 0;
    uint64_t vvpage = piggyback ? v.vpage : 0;
    memcpy(m->req, &m->pid, 4);   /* MISS's <I Q I Q>: x86 is little-endian */
    memcpy(m->req + 4, &vpage, 8);
    memcpy(m->req + 12, &vpid, 4);
    memcpy(m->req + 16, &vvpage, 8);
    m->len = XM_HEAD + (piggyback ? m->line : 0);
    if (v.pid && !piggyback) {
        m->vpid = v.pid;
        m->vhome = v.home;
        m->vvpage = v.vpage;
        return XM_VICTIM;
    }
    if (!c)
        return XM_UNSENT;
    fs_counts *counts = c->counts;   /* counted here once the line came, not by fs_call */
    c->counts = NULL;                /* (a plain reply of the wrong size is Python's) */
    rc = fs_call(c, tx, m->op, seq, m->req, m->len, timeout_ns);
    c->counts = counts;
    if (rc < 0 || rc == FC_UNSENT || rc == FC_SENT)
        return rc < 0 ? rc : rc == FC_UNSENT ? XM_UNSENT : XM_SENT;
    if (!c->plain || c->len != HEADER_BYTES + m->line)
        return XM_READ;
    fs_counted(counts, m->op, (uint64_t)HEADER_BYTES + m->len, c->len);
    rc = xc_miss_end(m->xc, m->slot, m->pid, vpage, home, c->out + HEADER_BYTES, 0);
    if (rc < 0) {
        m->err = rc;
        return XM_FAILED;
    }
    return XM_DONE;
}
