/*
 * fitring.h -- FIT's message rings in shared memory, and their doorbells.
 *
 * The shm transport (fit_rpc/shm_transport.py) connects two endpoints with one
 * *segment*: a memfd that both processes map, holding two rings, one each way.
 * Each ring has exactly one producer (the process that writes it) and one
 * consumer (the process that reads it). Layout of a segment:
 *
 *   fr_segment header (4 KiB) | ring 0 data (cap bytes) | ring 1 data (cap bytes)
 *
 * Ring 0 carries messages from the side that made the segment (the connector)
 * to the other (the acceptor); ring 1 the other way.
 *
 * A ring is a byte stream of records, each 8-byte aligned:
 *
 *   u32 length | u32 FR_MARK | [u64 due] | length payload bytes | padding to 8
 *
 * (`due` only on a ring with an interconnect model: below.)
 * A record never wraps: when it does not fit before the end of the data area,
 * the producer writes a skip record (length FR_SKIP) and starts over at 0. It
 * also starts over at 0 early, whenever the ring is empty, so that a ring of
 * small messages keeps touching the same few pages.
 *
 * Positions only grow (64 bits): `head` is what the producer has published,
 * `tail` what the consumer has consumed; used = head - tail <= cap. The
 * producer never overwrites what is unread (that is LegoOS FIT's ack, for
 * free): a full ring makes it wait, never drop.
 *
 * Memory ordering. The producer writes a record, then publishes head with a
 * release store; the consumer reads head with an acquire load, so it never
 * sees a half-written record (nor one of a producer that died while writing:
 * its head was never published). Each side keeps its own position in private
 * memory (fr_ring) and checks what it reads from the other: a peer that
 * writes garbage into a ring makes that ring report -EBADMSG, never crashes
 * the reader.
 *
 * Doorbells, without lost wake-ups. A consumer about to sleep stores 1 into
 * its bell word, issues a full fence and checks its rings once more; a
 * producer publishes head, issues a full fence and reads the bell word, and
 * writes the consumer's eventfd only if it is set. With a full fence on both
 * sides, at least one of them sees the other's store (Dekker): either the
 * consumer finds the message, or the producer rings. An endpoint's inbound
 * rings share one bell word (in a page only the consumer may write: the
 * transport seals it against writes by others) and one eventfd, so an
 * endpoint sleeps on one fd, which epoll, select and asyncio can watch.
 * A producer that waits for space sets the ring's `want_space`; the consumer
 * that frees space then rings the producer's eventfd.
 *
 * Where the consumer waits. The word after a bell word (FR_BELL_CPU, on the
 * same line) is the CPU, plus one, on which its consumer last began a wait
 * (fr_wait, fr_published_cpu): 0 if never. A producer that commits while the
 * bell is down (the consumer is awake: spinning, or at work) and finds that
 * CPU to be its own learns that the consumer is queued behind it on this
 * CPU; if this thread then waits for that consumer's answer (a call:
 * fr_waiting_for) and its first yield does not hand it the CPU, its spin stops
 * (fr_spin_yield): it sleeps, and the consumer runs, rather than spin while the
 * kernel keeps the CPU for it. A stale word (the consumer moved since its wait
 * began) costs at most one early sleep.
 *
 * The interconnect model (the rack spec's [fabric], fit_rpc/fabric.py). The
 * connector may give each ring of a segment a model (fr_set_model, before it
 * hands the segment over): a latency and a bandwidth. Each side copies it into
 * its private handle when it attaches, and on such a ring every record carries
 * `due`, the CLOCK_MONOTONIC nanosecond before which the consumer must not take
 * it. The producer stamps it at commit, from its own state, without sleeping:
 *
 *   start = max(now, free_at);  free_at = start + bytes / bandwidth;
 *   due = free_at + latency
 *
 * (free_at: when the link has finished carrying the previous message; bytes:
 * the record's payload), so messages stay in order and a ring carries no more
 * than its bandwidth. The consumer's side treats a record that is not yet due
 * as not there (fr_peek, fr_ready), and every wait wakes at its due time: it
 * spins within FR_DUE_SPIN_NS of it, without yielding the CPU (a yield to a
 * busy task comes back a time slice later), and sleeps when farther, waking
 * FR_DUE_SPIN_NS early (fr_wait; fr_arm says when, for an outside loop's
 * timer: fr_timer_at). A ring without a model has no `due`, reads no clock,
 * and behaves as before.
 *
 * Functions return a negative errno for what the caller must handle
 * (-EAGAIN: nothing now; -EBADMSG: the peer broke the ring; -EMSGSIZE: a
 * record larger than the ring could ever hold) and never block, except
 * fr_wait and fr_wait_space, which spin then sleep as asked.
 */
#ifndef SPLITRACK_FITRING_H
#define SPLITRACK_FITRING_H

#include <stdint.h>

#define FR_MAGIC 0x47464954       /* "TIFG": a formatted segment */
#define FR_VERSION 2
#define FR_HEADER_BYTES 4096      /* the segment header; ring data follows */
#define FR_RECORD_BYTES 8         /* a record's length and mark */
#define FR_MARK 0x21544946        /* "FIT!": every record carries it */
#define FR_SKIP 0xFFFFFFFF        /* a skip record's length: go on at offset 0 */
#define FR_EARLY_WRAP 65536       /* an empty ring starts over at 0 past this offset */
#define FR_CONTENDED_NS 20000     /* a sched_yield this long: another task held the CPU
                                     (100 us was tried: evaluation.md) */
#define FR_CONTENDED_TURNS 2      /* ... so many of them in a row: it wants the CPU */
#define FR_CONTENDED_SLICE_NS 200000  /* ... or one this long: a CPU-bound task's time slice */
#define FR_SHORT_YIELDS 64        /* so many short yields in a row: the CPU is shared fairly */
#define FR_LOST_SLICES 3          /* so many slices lost, FR_SHORT_YIELDS apart at most: */
#define FR_NO_SPIN_NS 1000000     /* then a thread's waits sleep at once for so
                                     long (1 ms), then it tries a yield again; twice as */
#define FR_NO_SPIN_MAX_NS 1000000000  /* long each time that loses a slice too, up to 1 s */
#define FR_PEER_AFTER_NS 20000   /* a spin this long looks where its peer is ... */
#define FR_PEER_EVERY_NS 20000   /* ... and again this often (fr_spin_yield) */
#define FR_HANDED_NS 1500         /* a yield back sooner ran nobody else (a switch there
                                     and back costs more) */
#define FR_DUE_BYTES 8            /* a modelled ring's record: its due time after the mark */
#define FR_DUE_SPIN_NS 100000     /* a waiter this close to a due time spins to it (a wake-up
                                     from sleep, timer slack off, is ~50 us late on a VM) */
#define FR_NEVER 0xFFFFFFFFFFFFFFFF  /* a due time: nothing is published */
#define FR_BELL_CPU 1             /* bell[FR_BELL_CPU]: its consumer's CPU + 1 (a wait's) */

/* The shared part of one ring: each position on a cache line of its own. */
typedef struct {
    uint64_t head;           /* bytes published by the producer (release) */
    uint32_t want_space;     /* the producer waits for the consumer to free space */
    uint32_t pad0[13];
    uint64_t tail;           /* bytes consumed by the consumer (release) */
    uint32_t pad1[14];
} fr_ctl;

/* A ring's interconnect model, as the connector set it. */
typedef struct {
    uint32_t on;             /* 1: the ring has a model (its records carry `due`) */
    uint32_t pad;
    uint64_t latency_ns;     /* added to every message */
    uint64_t bytes_per_s;    /* the ring's bandwidth (0: no limit) */
} fr_model;

/* The segment header (FR_HEADER_BYTES, of which this is the start). */
typedef struct {
    uint32_t magic, version;
    uint32_t cap;            /* data bytes of each ring, a multiple of 8 */
    uint32_t pad;
    uint32_t bell[2][16];    /* channel segments: each side's bell word, a line each */
    fr_ctl ctl[2];
    fr_model model[2];       /* all zero: no model (read once, at attach) */
} fr_segment;

/* One side's private handle on one ring (never in shared memory). */
typedef struct {
    fr_ctl *ctl;             /* in the segment */
    char *data;              /* in the segment: cap bytes */
    uint32_t cap;            /* as checked when the segment was mapped */
    uint64_t pos;            /* producer: its head; consumer: its tail */
    uint32_t reserved;       /* producer: record bytes reserved, not yet committed */
    uint32_t skip;           /* producer: bytes the reservation skips to reach offset 0 */
    uint32_t peeked;         /* consumer: record bytes of the message peeked */
    uint64_t seen;           /* producer: the consumer's tail when last read */
    const uint32_t *peer_bell; /* producer: the consumer's bell word (read only) */
    int peer_efd;            /* the other side's eventfd: the consumer's (producer side),
                                the producer's (consumer side, for want_space) */
    uint32_t hdr;            /* a record's header bytes: FR_RECORD_BYTES (+ FR_DUE_BYTES) */
    uint32_t modeled;        /* the ring has a model (copied at attach) */
    uint64_t latency_ns, bytes_per_s;   /* the model, copied at attach */
    uint64_t free_at;        /* producer: when the link has carried its last message */
} fr_ring;

/* Bytes of a segment with two rings of cap data bytes each (cap rounded up to 8). */
uint64_t fr_segment_size(uint32_t cap);

/* Format a fresh segment of `size` bytes (the connector does this once). */
int fr_format(void *seg, uint64_t size, uint32_t cap);

/* Check a segment made by the other side: its magic, version and that `size`
 * holds two rings of its cap; returns the cap (> 0) or -EINVAL. */
int64_t fr_check(void *seg, uint64_t size);

/* Give ring `which` of a fresh segment an interconnect model (the connector,
 * before the segment is handed over and before either side attaches). */
void fr_set_model(void *seg, int which, uint64_t latency_ns, uint64_t bytes_per_s);

/* Fill a handle for ring `which` (0 or 1) of a checked segment (its model too). */
void fr_attach(fr_ring *r, void *seg, uint32_t cap, int which, const uint32_t *peer_bell,
               int peer_efd);

/* The largest payload one record of this ring can carry. */
uint32_t fr_max_payload(const fr_ring *r);

/* ---- producer ----------------------------------------------------------- */

/* Reserve room for a payload of n bytes: the offset in r->data where it goes
 * (>= 0), -EAGAIN if the ring has no room now, -EMSGSIZE if it never will,
 * -EBADMSG if the consumer broke the ring. At most one reservation at a time. */
int64_t fr_reserve(fr_ring *r, uint32_t n);

/* Publish the reserved record, its payload cut to n bytes (n <= the reserved
 * size), stamped with its due time on a modelled ring, and ring the consumer's
 * doorbell if it sleeps. */
void fr_commit(fr_ring *r, uint32_t n);

/* Reserve, copy a then b (either may be empty), commit: one message of na+nb
 * bytes. Returns 0 or what fr_reserve returned. */
int fr_send2(fr_ring *r, const char *a, uint32_t na, const char *b, uint32_t nb);

/* Wait until n bytes of payload fit: spin up to spin_ns, then sleep on
 * own_efd (the producer's own eventfd, rung by the consumer) up to timeout_ns
 * in all (< 0: forever). 0 when they fit, -ETIMEDOUT, -EMSGSIZE, -EBADMSG. */
int fr_wait_space(fr_ring *r, uint32_t n, int own_efd, int64_t spin_ns, int64_t timeout_ns);

/* ---- consumer ----------------------------------------------------------- */

/* The next message: its payload's offset in r->data (>= 0) and its length in
 * *len; -EAGAIN if there is none (or, on a modelled ring, it is not due yet);
 * -EBADMSG if the producer broke the ring. The payload stays valid until
 * fr_consume. */
int64_t fr_peek(fr_ring *r, uint32_t *len);

/* Consume the message last peeked; ring the producer if it waits for space. */
void fr_consume(fr_ring *r);

/* Whether a message (or a broken ring) waits, due or not, without consuming
 * anything: whether the producer published anything not yet consumed. */
int fr_pending(const fr_ring *r);

/* ---- waiting: one consumer, many rings, one bell ------------------------- */

/* Index of a ring among rings[0..n) that has a message due (or a broken
 * ring), looking from `start` round, or -1. */
int fr_ready(fr_ring *const *rings, int n, int start);

/* When the first message published on rings[0..n) is due: 0 if one is now,
 * FR_NEVER if none is published (CLOCK_MONOTONIC ns). */
uint64_t fr_next_due(fr_ring *const *rings, int n);

/* Arm the bell before sleeping on the eventfd: 1 if armed (nothing is due,
 * nor will be within FR_DUE_SPIN_NS), 0 if something is (the bell is left
 * down: do not sleep). *due: when the first message published becomes due
 * (FR_NEVER: none is): a sleeper must wake then, FR_DUE_SPIN_NS early. */
int fr_arm(fr_ring *const *rings, int n, uint32_t *bell, uint64_t *due);

/* After waking (or instead of sleeping): bell down, eventfd drained. Returns
 * whether the eventfd had been rung. */
int fr_disarm(uint32_t *bell, int efd);

/* Wait for a message on any of rings[0..n): spin up to spin_ns (yielding the
 * CPU between looks), then arm the bell and sleep on efd and fds[0..nfds)
 * (their hang-ups: a peer's end of the rendezvous) up to timeout_ns (< 0:
 * forever). A message published but not due is waited for until it is (the
 * model, above). Returns a ring index (>= 0), n + k when fds[k] hung up or
 * has data, -EAGAIN when woken with nothing due (a doorbell with nothing
 * behind it, or a message not yet due; a signal, too), -EINTR when a signal
 * handler interrupted a native program's rack call that ends with EINTR (as
 * Linux's would: fr_signal_ends_call), or -ETIMEDOUT. Leaves the bell down. */
int fr_wait(fr_ring *const *rings, int n, int start, uint32_t *bell, int efd,
            const int *fds, int nfds, int64_t spin_ns, int64_t timeout_ns);

/* Whether a signal handler has ended the rack call this thread waits in: a native
 * program's accept, recv or send, in which a handler without SA_RESTART ran (asked of
 * splitrack's native interposer, native/preload_signal.c: sr_signal_ends_call, where
 * it is loaded; 0 elsewhere). fr_wait asks when a signal cuts its sleep short, and
 * fs_next and fs_recv_into before they wait with nothing there (fitserve.h), so
 * that a handler that ran while the stub was busy ends the call at its next wait. */
int fr_signal_ends_call(void);

/* A timer an outside loop sleeps on beside the eventfd, for a due time: a
 * timerfd (CLOCK_MONOTONIC, non-blocking), or -errno. fr_timer_at makes it
 * readable at at_ns (absolute; 0: disarmed, and no longer readable). */
int fr_timer_new(void);
void fr_timer_at(int tfd, uint64_t at_ns);

/* Ring an eventfd once (a wake-up for a thread of this process, say). */
void fr_ring_efd(int efd);

/* Drain an eventfd: whether it had been rung. */
int fr_drain_efd(int efd);

/* CLOCK_MONOTONIC in ns: the clock of due times. */
uint64_t fr_now_ns(void);

/* One look's worth of yielding while spinning: 1 to keep spinning, 0 once the
 * CPU is contended: then the spinner sleeps, so that the work others have to do
 * gets done (on 2 cores a spinner otherwise costs more than the wake-up it
 * saves). Contended: a yield of this thread gave the CPU away for
 * FR_CONTENDED_SLICE_NS or more (a CPU-bound task had its slice), or
 * FR_CONTENDED_TURNS yields in a row each for FR_CONTENDED_NS or more. One
 * shorter yield is a neighbour's turn (a handler, a client's send): spinning on
 * through it keeps this CPU busy, so the next wake-up meant for it is not sent
 * across the CPUs, which costs 20-30 us on a VM whose idle CPUs halt. A thread
 * whose yields lost a whole slice FR_LOST_SLICES times, with fewer than
 * FR_SHORT_YIELDS short ones between, stops yielding: its waits get 0 at once
 * (they sleep) for FR_NO_SPIN_NS, twice as long each time the first yield after
 * that loses a slice too, up to FR_NO_SPIN_MAX_NS. On a CPU that a spinning task
 * also wants, each yield hands it a slice (4 ms at HZ 250): a wait that tried
 * one yield each time made every FIT round trip 4 ms with both cores kept busy.
 * A slice lost now and then (a neighbour that moved) does not stop the spin.
 * A spin that has gone on for FR_PEER_AFTER_NS (`spun_ns`: the caller's time
 * spinning so far) also stops if the process it waits for (fr_waiting_for) is
 * runnable on this very CPU (looked at every FR_PEER_EVERY_NS): a yield does
 * not hand it the CPU while the kernel deems it has had more than its share
 * (its last turn was long), so the spin only keeps it waiting. With a core kept
 * busy a connect()'s caller spun 120-180 us so, its nComponent queued behind
 * it (docs/evaluation.md). And a call's spin (a peer known: fr_waiting_for)
 * stops after its first yield, if that yield came back within FR_HANDED_NS
 * (nobody ran), after this thread committed a message whose consumer, awake,
 * last began a wait on this CPU (FR_BELL_CPU): it waits behind this thread,
 * and the kernel did not hand it the CPU. Where a yield does hand it over (a
 * FIT shortcut's peer, an answer in C), sleeping at once made round trips
 * 1-2 us longer with a core busy, so a yield is tried first. */
int fr_spin_yield(uint64_t spun_ns);

/* A consumer about to wait says on which CPU (its bell's FR_BELL_CPU word),
 * as fr_wait does; for a loop that spins with fr_spin_yield itself. */
void fr_published_cpu(uint32_t *bell);

/* (fr_commit's) The consumer of what this thread just committed is awake, and
 * began its last wait on CPU cpu1 - 1 (0: unknown): fr_spin_yield's to know. */
void fr_note_peer_cpu(uint32_t cpu1);

/* A wait on a kernel descriptor's readability (a pipe shortcut's), spun as a ring's
 * is: polled without sleeping until fd is readable (1: or hung up, or an error:
 * the caller's read says which) or spin_ns have passed or the CPU is contended
 * (fr_spin_yield; 0). One native call where a loop of Python calls was. */
int fr_spin_readable(int fd, int64_t spin_ns);

/* A wait on a kernel descriptor (a pipe shortcut's), up to timeout_ns (-1: no limit;
 * 0: a look): 1 when fd is ready for `events` (POLLIN, POLLOUT) or hung up or in
 * error, 0 when the time is up or a signal cut the wait short, -EINTR when a signal
 * ends the call it is in (fr_signal_ends_call, also asked before the wait: a handler
 * that ran while the stub was busy or spinning), else -errno. */
int fr_wait_fd(int fd, int events, int64_t timeout_ns);

/* The process this thread's spins wait for from now on (its pid; 0: none known). */
void fr_waiting_for(int pid);

#endif
