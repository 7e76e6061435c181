/*
 * stubpath.h -- a bsdSocketStub's two rings through the nComponent, in C: the
 * hot path of splitrack/nic_path.py.
 *
 * A connected stub whose bytes cross a NIC keeps a receive ring and a send
 * ring in its process's rack memory, cached in the pComponent's extCache
 * lines; its bsdSocketSkeleton walks the same rings (monitors/data_paths.py).
 * An sp_path is that connection's whole state on the stub's side; these
 * functions are its hot path, one native call per send() or recv(), made
 * with the stub's lock held (one caller at a time), but for sp_take_more,
 * which a native program's recv makes without it (fastrecv.h): so the
 * receive side (rhead, unacked) is also under the path's own `rlock`.
 *
 * Stream offsets: byte `pos` of a direction's stream lives at
 * start + pos % size of its ring.
 *
 * Receive: the skeleton says how many bytes it put into the ring's lines
 * (STUB_DATA: the caller adds them to rtail); sp_take copies them out. The
 * caller gives read bytes back to the skeleton (N_CREDIT) once `unacked`
 * reaches its credit size.
 *
 * Send: sp_put writes bytes into the send ring's lines, within the window
 * (`credit`: the ring's bytes the skeleton has not confirmed, STUB_SENT), and
 * decides by the packing rule whether they go to the skeleton now (SP_SENT:
 * the caller announces the `held` bytes, N_SEND, then calls sp_announced) or
 * are held back (SP_HELD, SP_HOLDING). A send is held when packing is on
 * (`pack`), fewer than pack_max bytes would then be held, and either a batch
 * is held that is younger than pack_delay_ns, or bytes are in flight
 * (announced, not confirmed) and the last announcement was less than
 * pack_gap_ns ago. A held send smaller than a line waits in `stage` (room for
 * two lines) until a line's worth is there; the staged bytes go into the ring
 * before anything after them, and before any announcement (sp_unstage).
 *
 * Misses. The copies go only through cached lines (the set's lock held, as
 * every extCache hit), and stop at the first that is not cached, its address
 * in `miss`: the caller faults that line in (splitrack/vm.py: a zero-fill, or
 * an M_MISS to its home, reading ahead) and calls again for the rest. What a
 * call copied before the miss counts; so every call makes progress, however
 * small the extCache.
 *
 * Times are CLOCK_MONOTONIC nanoseconds, the clock of Python's
 * time.monotonic().
 */
#ifndef SPLITRACK_STUBPATH_H
#define SPLITRACK_STUBPATH_H

#include <stdint.h>

#define SP_SENT 0       /* the bytes are in the ring: announce the held bytes now */
#define SP_HELD 1       /* held back, in a batch already held */
#define SP_HOLDING 2    /* held back, the first of a new batch (held_since is now) */
#define SP_FULL 3       /* the window is full: nothing taken */
#define SP_MISS -1      /* a line is not cached (its address: miss): nothing taken */
#define SP_MISSED 8     /* or'ed into a verdict: a miss stopped the copy after *taken bytes */

typedef struct {
    /* the process's view of the extCache */
    void *xc;               /* the pComponent's segment, mapped */
    int32_t slot;           /* the process's counter slot */
    uint32_t pid;
    uint32_t line;          /* bytes of a line */
    uint32_t pack;          /* 1: a send may be held back (packing on, no TCP_NODELAY) */
    /* the rings, [start, start + size) of the process's virtual memory */
    uint64_t rstart, rsize, tstart, tsize;
    /* receive */
    uint64_t rhead;         /* read by the program */
    uint64_t rtail;         /* put there by the skeleton (STUB_DATA) */
    uint64_t unacked;       /* read, not yet given back (N_CREDIT) */
    /* send */
    uint64_t tpos;          /* written into the ring (the staged bytes not yet) */
    uint64_t credit;        /* send window left: tsize - unconfirmed */
    uint64_t held;          /* written or staged, not yet announced */
    uint64_t held_since;    /* when the first held byte was taken (ns) */
    uint64_t announced;     /* when bytes last went to the skeleton (ns) */
    uint32_t staged;        /* bytes in stage */
    uint32_t watched;       /* on an sp_watch's list */
    uint32_t rlock;         /* the receive side's lock: rhead, unacked (sp_take, fastrecv.h) */
    uint32_t fast;          /* 1: a native program's recv may take without the interpreter */
    uint32_t faulting;      /* 1: the stub's take stopped at a miss, and faults the line in
                             * before it goes on (sp_take sets it; the stub clears it) */
    uint32_t unclocked;     /* sp_hold's holds since it last read the clock */
    char *stage;            /* 2 * line bytes */
    /* packing */
    uint64_t pack_max;      /* bytes held at most */
    uint64_t pack_delay;    /* ns a batch is held at most */
    uint64_t pack_gap;      /* ns after an announcement in which a new batch may start */
    /* out */
    uint64_t miss;          /* SP_MISS: the first address that is not cached */
} sp_path;

/* A fresh path over the extCache xc (segment base) for process pid (counter slot
 * `slot`), its rings [rstart, rstart + rsize) and [tstart, tstart + tsize), both
 * empty, the send window the whole send ring; `stage` is 2 * line bytes that
 * outlive it; packing's limits in bytes and ns. Not packing until told (pack). */
void sp_init(sp_path *p, void *xc, int32_t slot, uint32_t pid, uint32_t line,
             uint64_t rstart, uint64_t rsize, uint64_t tstart, uint64_t tsize, char *stage,
             uint64_t pack_max, uint64_t pack_delay, uint64_t pack_gap);

/* Now, in ns (CLOCK_MONOTONIC). */
uint64_t sp_now(void);

/* Send: take up to n bytes of buf, as far as the window goes, into the ring or
 * the stage (*taken of them). Returns the verdict for them, SP_SENT, SP_HELD or
 * SP_HOLDING, with SP_MISSED or'ed in if a miss stopped the copy before n; or
 * SP_FULL (the window is full) or SP_MISS, both with nothing taken. */
int sp_put(sp_path *p, const char *buf, uint64_t n, uint64_t *taken);

/* sp_put's hot case, all or nothing, in one call: all n bytes held back, in
 * the batch already held (SP_HELD), into the stage while it stays short of a
 * line or else into the ring's cached lines, with the window open for them.
 * 1 if so; 0 if not, with nothing taken (the caller then calls sp_put). The
 * batch's age is looked at every SP_CLOCK_EVERY holds, not at each: a clock
 * read costs as much as a small send's copy, and a batch held a few sends past
 * pack_delay (1 ms) is still one the flusher would have sent about then. */
#define SP_CLOCK_EVERY 8
int sp_hold(sp_path *p, const char *buf, uint64_t n);

/* The staged bytes into the ring (before an announcement): 0 when none is left,
 * SP_MISS when a miss stopped it (the rest is still staged). */
int sp_unstage(sp_path *p);

/* The held bytes have gone to the skeleton: none is held, announced is now. */
void sp_announced(sp_path *p);

/* Receive: copy up to `want` received bytes into dst, from `skip` bytes past
 * the first unread one; unless peek, the bytes copied are read (rhead moves;
 * skip must then be 0). Returns the bytes copied: fewer than were there if a
 * miss stopped it (then `miss` is its address, and `faulting` is set until
 * the caller clears it: no recv in C takes meanwhile, so the caller's bytes
 * stay one stretch of the stream); else `miss` is 0: another thread's recv
 * took the rest first (fastrecv.h). Under `rlock`. */
uint64_t sp_take(sp_path *p, char *dst, uint64_t want, uint64_t skip, int peek);

/* The bytes read and not yet given back to the skeleton, if at least `least`:
 * what the caller sends as N_CREDIT, and then says it did (sp_credited: n
 * fewer unacked; a send that failed leaves them unacked). Else 0. */
uint64_t sp_credit_due(sp_path *p, uint64_t least);
void sp_credited(sp_path *p, uint64_t n);

/* A native program's recv without the interpreter (fastrecv.h): all `want`
 * bytes, only if more than `want` wait (the socket stays readable: nothing
 * to hush), every line of them is cached, `fast` is on, the stub is not
 * faulting, and fewer than half the ring's bytes are unacked (else the
 * stub's recv takes them, and gives the credit back). Returns `want`, or -1:
 * none taken (dst may have been written), ask the stub. */
int64_t sp_take_more(sp_path *p, char *dst, uint64_t want);

/* `fast` on or off, under the lock: once off, no such recv is copying. */
void sp_fast(sp_path *p, int on);

/* The receive side's lock (a spin lock: it is held for one copy at most). */
void sp_rlock(sp_path *p);
void sp_runlock(sp_path *p);

/* ---- the watch: held batches that nobody sends ------------------------------ */

/* A thread of its own (no Python, so no interpreter lock) that sleeps until the
 * first held batch of the paths it watches is pack_delay old and then, if that
 * batch is still held (the program did not send it with a later send), rings
 * `efd`, an eventfd the runtime's flusher thread reads; it rings again every
 * pack_delay / 4 while a batch stays held past its time. A program that keeps
 * sending announces its own batches, so the watch wakes only itself. Paths are
 * read without their owner's lock (held and held_since are single words). */
typedef struct sp_watch sp_watch;

/* A running watch ringing efd; NULL if no thread could be made (errno). */
sp_watch *sp_watch_start(int efd);

/* p holds a new batch: watch it (and wake the watch if it had nothing to wait
 * for). A path already watched stays once on the list. */
void sp_watch_add(sp_watch *w, sp_path *p);

/* Watch p no more (before it goes). */
void sp_watch_remove(sp_watch *w, sp_path *p);

#endif
