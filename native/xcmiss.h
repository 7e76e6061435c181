/*
 * xcmiss.h -- an extCache line's miss to its home mComponent in one native
 * call, for splitrack.guest.vm over the shm transport.
 *
 * A miss is a transaction (extcache.h): lock the set and pick a victim
 * (xc_miss_begin), ask the home for the line (M_MISS, fit_rpc/pages.py's MISS
 * layout, a dirty victim of the same home piggybacked as in LegoOS), install
 * it (xc_miss_end). Made from Python, each step went through a layer of it,
 * and the call through the Endpoint's and the transport's: about 4 us of a
 * 13 us miss whose message alone takes 7. xm_miss makes the common case in
 * C, the call by fs_call (fitserve.h) on the link to the home, the line
 * installed from where the reply landed; whatever is not the common case is
 * handed back where it stands, for Python to go on as before:
 *
 *   XM_DONE     the line is installed, the set unlocked
 *   XM_CACHED   no miss after all (the line is there, or the victim cache
 *               had it and installed it): nothing locked, nothing sent
 *   XM_VICTIM   the set locked, nothing sent: the dirty victim's home is
 *               another (m->vpid, vhome, vvpage; its line at req +
 *               XM_HEAD): the caller writes it back, then asks with req's
 *               first XM_HEAD bytes
 *   XM_UNSENT   the set locked, nothing sent: the link's ring has no room;
 *               req's first m->len bytes are the request
 *   XM_SENT     the set locked, the request out (seq): the wait ended
 *               otherwise (fs_call's FC_SENT)
 *   XM_READ     the set locked, the request out: what came back is not the
 *               plain reply of a line (read into the landing, c->len bytes)
 *   < 0         the set locked: fs_call's -errno (a broken ring: -EBADMSG;
 *               the request may be out)
 *   XM_FAILED   nothing locked: xc_miss_begin failed (nothing sent), or
 *               xc_miss_end did after the reply (it unlocks); m->err the
 *               negative errno
 *
 * c NULL: no call, the request only: XM_UNSENT (or XM_CACHED, XM_VICTIM,
 * XM_FAILED), for a caller that sends it another way. `req` holds XM_HEAD +
 * the line's bytes. Not for a process with a rack heap:
 * its misses are the pager's (rackmem.h: rm_xc_fill), whose buffers are
 * not in the heap.
 */
#ifndef SPLITRACK_XCMISS_H
#define SPLITRACK_XCMISS_H

#include <stdint.h>

#include "fitserve.h"

#define XM_HEAD 24   /* MISS: <I Q I Q> pid, vpage, victim pid, victim vpage */
#define XM_DONE 0
#define XM_CACHED 1
#define XM_VICTIM 2
#define XM_UNSENT 3
#define XM_SENT 4
#define XM_FAILED 5
#define XM_READ 6

typedef struct {
    void *xc;           /* the extCache segment's base */
    int slot;
    uint32_t pid;
    uint32_t line;      /* its line size */
    uint16_t op;        /* M_MISS's */
    char *req;          /* the request, built here */
    uint32_t len;       /* out: its bytes */
    uint32_t vpid;      /* out, XM_VICTIM: the dirty victim */
    uint32_t vhome;
    uint64_t vvpage;
    int err;            /* out, XM_FAILED: the -errno */
} xm_miss_t;

int xm_miss(xm_miss_t *m, uint64_t vpage, uint32_t home, fs_caller *c, fr_ring *tx,
            uint32_t seq, int64_t timeout_ns);

#endif
