/*
 * stubpath.c -- a bsdSocketStub's rings through the nComponent. Contract: stubpath.h.
 *
 * Every copy is between a flat buffer and one of the process's rings, in at
 * most two pieces (where the ring wraps), each through the extCache's hit
 * path (xc_read / xc_write: each line under its set's lock), which stops at
 * the first line that is not cached.
 */
#include "stubpath.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "extcache.h"

void sp_init(sp_path *p, void *xc, int32_t slot, uint32_t pid, uint32_t line,
             uint64_t rstart, uint64_t rsize, uint64_t tstart, uint64_t tsize, char *stage,
             uint64_t pack_max, uint64_t pack_delay, uint64_t pack_gap) {
    memset(p, 0, sizeof *p);
    p->xc = xc;
    p->slot = slot;
    p->pid = pid;
    p->line = line;
    p->rstart = rstart;
    p->rsize = rsize;
    p->tstart = tstart;
    p->tsize = tsize;
    p->credit = tsize;
    p->stage = stage;
    p->pack_max = pack_max;
    p->pack_delay = pack_delay;
    p->pack_gap = pack_gap;
}

uint64_t sp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Up to n bytes between buf and the ring [start, start + size) from stream
 * offset pos: the bytes copied, all n or up to the first address that is not
 * cached (then in *miss). */
static uint64_t ring_copy(sp_path *p, uint64_t start, uint64_t size, uint64_t pos, char *buf,
                          uint64_t n, int write, uint64_t *miss) {
    uint64_t done = 0;
    while (done < n) {
        uint64_t at = (pos + done) % size, k = n - done;
        if (k > size - at)
            k = size - at;
        int64_t got = write ? xc_write(p->xc, p->slot, p->pid, start + at, buf + done, k)
                            : xc_read(p->xc, p->slot, p->pid, start + at, buf + done, k);
        if (got < 0)
            got = 0;   /* (a broken segment: the caller's fault path says why) */
        done += (uint64_t)got;
        if ((uint64_t)got < k) {
            *miss = start + at + (uint64_t)got;
            break;
        }
    }
    return done;
}

int sp_unstage(sp_path *p) {
    if (!p->staged)
        return 0;
    uint64_t done = ring_copy(p, p->tstart, p->tsize, p->tpos, p->stage, p->staged, 1, &p->miss);
    p->tpos += done;
    p->staged -= (uint32_t)done;
    if (p->staged) {
        memmove(p->stage, p->stage + done, p->staged);
        return SP_MISS;
    }
    return 0;
}

int sp_put(sp_path *p, const char *buf, uint64_t n, uint64_t *taken) {
    uint64_t credit = p->credit, now = 0;
    int hold = 0, fresh = 0;
    *taken = 0;
    if (!credit)
        return SP_FULL;
    if (n > credit)
        n = credit;
    if (p->pack && p->held + n < p->pack_max) {
        now = sp_now();
        if (p->held)        /* a batch is held: it goes on unless it is due */
            hold = now - p->held_since < p->pack_delay;
        else                /* a new one, if bytes are in flight and the last went just now */
            hold = fresh = p->tsize - credit > 0 && now - p->announced < p->pack_gap;
    }
    int missed = 0;
    if (hold && n < p->line && p->staged < p->line) {
        /* a small held send: into the stage, the stage into the ring at a line's worth */
        memcpy(p->stage + p->staged, buf, n);
        p->staged += (uint32_t)n;
        if (p->staged >= p->line && sp_unstage(p) == SP_MISS)
            missed = SP_MISSED;   /* taken all the same: it is staged */
    } else {
        if (sp_unstage(p) == SP_MISS)
            return SP_MISS;
        uint64_t k = ring_copy(p, p->tstart, p->tsize, p->tpos, (char *)buf, n, 1, &p->miss);
        if (!k && n)
            return SP_MISS;
        if (k < n) {
            n = k;
            missed = SP_MISSED;
        }
        p->tpos += n;
    }
    if (fresh) {   /* (the watch reads these two from its thread) */
        __atomic_store_n(&p->held_since, now, __ATOMIC_RELAXED);
        p->unclocked = 0;
    }
    p->credit = credit - n;
    __atomic_store_n(&p->held, p->held + n, __ATOMIC_RELAXED);
    *taken = n;
    return (hold ? (fresh ? SP_HOLDING : SP_HELD) : SP_SENT) | missed;
}

int sp_hold(sp_path *p, const char *buf, uint64_t n) {
    if (!n || !p->pack || !p->held || n > p->credit || p->held + n >= p->pack_max)
        return 0;
    if (++p->unclocked >= SP_CLOCK_EVERY) {   /* the batch's age, now and then */
        p->unclocked = 0;
        if (sp_now() - p->held_since >= p->pack_delay)
            return 0;
    }
    if (p->staged + n < p->line) {   /* into the stage, which stays short of a line */
        memcpy(p->stage + p->staged, buf, n);
        p->staged += (uint32_t)n;
    } else if (p->staged
               || ring_copy(p, p->tstart, p->tsize, p->tpos, (char *)buf, n, 1, &p->miss) < n) {
        return 0;   /* the stage would fill, or a miss (what was copied lies past tpos:
                       not yet the stream's) */
    } else {
        p->tpos += n;
    }
    p->credit -= n;
    __atomic_store_n(&p->held, p->held + n, __ATOMIC_RELAXED);
    return 1;
}

void sp_announced(sp_path *p) {
    __atomic_store_n(&p->held, 0, __ATOMIC_RELAXED);
    p->announced = sp_now();
}

void sp_rlock(sp_path *p) {
    for (unsigned spins = 0; __atomic_exchange_n(&p->rlock, 1, __ATOMIC_ACQUIRE); spins++) {
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();   /* its holder is copying, and may share this CPU */
        }
    }
}

void sp_runlock(sp_path *p) {
    __atomic_store_n(&p->rlock, 0, __ATOMIC_RELEASE);
}

uint64_t sp_take(sp_path *p, char *dst, uint64_t want, uint64_t skip, int peek) {
    sp_rlock(p);
    p->miss = 0;
    uint64_t avail = __atomic_load_n(&p->rtail, __ATOMIC_ACQUIRE) - p->rhead, k = 0;
    if (skip < avail) {
        k = want < avail - skip ? want : avail - skip;
        uint64_t asked = k;
        k = ring_copy(p, p->rstart, p->rsize, p->rhead + skip, dst, k, 0, &p->miss);
        if (k < asked)
            p->faulting = 1;
        if (!peek) {
            p->rhead += k;
            p->unacked += k;
        }
    }
    sp_runlock(p);
    return k;
}

int64_t sp_take_more(sp_path *p, char *dst, uint64_t want) {
    int64_t r = -1;
    uint64_t miss;   /* (not the path's: the stub's own call may be reading it) */
    sp_rlock(p);
    uint64_t avail = __atomic_load_n(&p->rtail, __ATOMIC_ACQUIRE) - p->rhead;
    if (p->fast && !p->faulting && want && avail > want && p->unacked < p->rsize / 2
        && ring_copy(p, p->rstart, p->rsize, p->rhead, dst, want, 0, &miss) == want) {
        p->rhead += want;
        p->unacked += want;
        r = (int64_t)want;
    }
    sp_runlock(p);
    return r;
}

void sp_fast(sp_path *p, int on) {
    sp_rlock(p);
    p->fast = (uint32_t)on;
    sp_runlock(p);
}

uint64_t sp_credit_due(sp_path *p, uint64_t least) {
    sp_rlock(p);
    uint64_t n = p->unacked >= least ? p->unacked : 0;
    sp_runlock(p);
    return n;
}

void sp_credited(sp_path *p, uint64_t n) {
    sp_rlock(p);
    p->unacked -= n;
    sp_runlock(p);
}

/* ---- the watch ----------------------------------------------------------- */

struct sp_watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* on CLOCK_MONOTONIC */
    sp_path **paths;
    uint32_t n, cap;
    int efd;
    int idle;                 /* the thread waits with nothing to wait for */
    pthread_t thread;
};

static void *watch_main(void *arg) {
    sp_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        uint64_t now = sp_now(), next = UINT64_MAX;
        int overdue = 0;
        for (uint32_t i = 0; i < w->n; i++) {
            sp_path *p = w->paths[i];
            if (!__atomic_load_n(&p->held, __ATOMIC_RELAXED))
                continue;
            uint64_t due = __atomic_load_n(&p->held_since, __ATOMIC_RELAXED) + p->pack_delay;
            if (due <= now) {   /* still held past its time: the flusher's, then again later */
                overdue = 1;
                due = now + p->pack_delay / 4;
            }
            if (due < next)
                next = due;
        }
        if (overdue) {
            uint64_t one = 1;
            if (write(w->efd, &one, sizeof one) < 0) {
                /* a full eventfd: the flusher has been rung already */
            }
        }
        if (next == UINT64_MAX) {
            w->idle = 1;
            pthread_cond_wait(&w->cv, &w->mu);
            w->idle = 0;
        } else {
            struct timespec at = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
            pthread_cond_timedwait(&w->cv, &w->mu, &at);
        }
    }
    return NULL;
}

sp_watch *sp_watch_start(int efd) {
    sp_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&w->mu, NULL);
    w->efd = efd;
    sigset_t all, was;   /* the thread takes none of the program's signals: they are */
    sigfillset(&all);    /* its own threads' (a native program's handlers end their calls) */
    pthread_sigmask(SIG_SETMASK, &all, &was);
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    if (rc) {
        free(w);
        errno = rc;
        return NULL;
    }
    pthread_detach(w->thread);   /* it lives as long as the process */
    return w;
}

void sp_watch_add(sp_watch *w, sp_path *p) {
    pthread_mutex_lock(&w->mu);
    if (!p->watched) {
        if (w->n == w->cap) {
            uint32_t cap = w->cap ? 2 * w->cap : 16;
            sp_path **grown = realloc(w->paths, cap * sizeof *grown);
            if (!grown) {   /* unwatched: its batch leaves with the program's next call */
                pthread_mutex_unlock(&w->mu);
                return;
            }
            w->paths = grown;
            w->cap = cap;
        }
        w->paths[w->n++] = p;
        p->watched = 1;
        pthread_cond_signal(&w->cv);
    } else if (w->idle) {
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

void sp_watch_remove(sp_watch *w, sp_path *p) {
    pthread_mutex_lock(&w->mu);
    for (uint32_t i = 0; i < w->n; i++) {
        if (w->paths[i] == p) {
            w->paths[i] = w->paths[--w->n];
            break;
        }
    }
    p->watched = 0;
    pthread_mutex_unlock(&w->mu);
}
