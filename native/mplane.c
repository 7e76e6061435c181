/*
 * mplane.c -- the mComponent's data plane. Contract: mplane.h.
 */
#include "mplane.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fitheader.h"

#define FIRST_CAP 1024u

static uint64_t home(const mp_plane *mp, uint32_t pid, uint64_t vpage) {
    uint64_t h = vpage * 0x9E3779B97F4A7C15ull ^ (uint64_t)pid * 0xC2B2AE3D27D4EB4Full;
    return (h ^ (h >> 29)) & (mp->cap - 1);
}

/* The slot holding (pid, vpage), or the empty one where it would go. */
static uint64_t find(const mp_plane *mp, uint32_t pid, uint64_t vpage) {
    uint64_t i = home(mp, pid, vpage);
    while (mp->slots[i].used && (mp->slots[i].pid != pid || mp->slots[i].vpage != vpage))
        i = (i + 1) & (mp->cap - 1);
    return i;
}

static int grow(mp_plane *mp, uint64_t cap) {
    mp_slot *old = mp->slots;
    uint64_t old_cap = mp->cap;
    mp_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    mp->slots = slots;
    mp->cap = cap;
    for (uint64_t i = 0; i < old_cap; i++)
        if (old[i].used)
            mp->slots[find(mp, old[i].pid, old[i].vpage)] = old[i];
    free(old);
    return 0;
}

int mp_init(mp_plane *mp, char *arena, uint64_t frames, uint32_t line, const mp_ops *ops,
            uint32_t *bell, int efd) {
    mp->arena = arena;
    mp->frames = frames;
    mp->line = line;
    mp->ops = *ops;
    mp->bell = bell;
    mp->efd = efd;
    mp->used = 0;
    mp->cap = 0;
    mp->slots = NULL;
    return grow(mp, FIRST_CAP);
}

void mp_free(mp_plane *mp) {
    free(mp->slots);
    mp->slots = NULL;
    mp->cap = mp->used = 0;
}

int mp_set(mp_plane *mp, uint32_t pid, uint64_t vpage, int64_t frame) {
    if (!mp->slots)
        return -ENOMEM;   /* freed */
    if (frame < 0 || (uint64_t)frame >= mp->frames)
        return -EINVAL;
    if ((mp->used + 1) * 2 > mp->cap && grow(mp, mp->cap * 2) < 0)
        return -ENOMEM;
    mp_slot *s = &mp->slots[find(mp, pid, vpage)];
    if (!s->used) {
        s->used = 1;
        s->pid = pid;
        s->vpage = vpage;
        mp->used++;
    }
    s->frame = frame;
    return 0;
}

void mp_del(mp_plane *mp, uint32_t pid, uint64_t vpage) {
    if (!mp->slots)
        return;
    uint64_t mask = mp->cap - 1, i = find(mp, pid, vpage), j = i;
    if (!mp->slots[i].used)
        return;
    /* backward shift: each entry after the hole that may move into it does, so
     * that every entry stays reachable from its home without a gap */
    for (;;) {
        j = (j + 1) & mask;
        if (!mp->slots[j].used)
            break;
        uint64_t k = home(mp, mp->slots[j].pid, mp->slots[j].vpage);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            mp->slots[i] = mp->slots[j];
            i = j;
        }
    }
    mp->slots[i].used = 0;
    mp->used--;
}

int64_t mp_get(const mp_plane *mp, uint32_t pid, uint64_t vpage) {
    if (!mp->slots)
        return MP_NO_FRAME;
    const mp_slot *s = &mp->slots[find(mp, pid, vpage)];
    return s->used ? s->frame : MP_NO_FRAME;
}

void mp_set_inbox(mp_plane *mp, fr_ring *const *rings, fr_ring *const *replies,
                  const int64_t *who, uint32_t n) {
    if (n > MP_MAX_RINGS)
        n = MP_MAX_RINGS;
    memcpy(mp->rings, rings, n * sizeof *rings);
    memcpy(mp->replies, replies, n * sizeof *replies);
    memcpy(mp->who, who, n * sizeof *who);
    memset(mp->counts, 0, n * sizeof *mp->counts);
    mp->nrings = n;
    mp->start = 0;
}

/* The layouts of fit_rpc/pages.py, read once from the ring: the peer may scribble. */
typedef struct __attribute__((packed)) {
    uint32_t pid;
    uint64_t vpage;
    uint32_t vpid;
    uint64_t vvpage;
} miss_req;
typedef struct __attribute__((packed)) {
    uint32_t pid;
    uint64_t vpage;
    uint32_t n;
} fetch_req;
typedef struct __attribute__((packed)) {
    uint32_t pid;
    uint32_t n;
} writeback_req;
_Static_assert(sizeof(miss_req) == MP_MISS_BYTES, "MISS is <IQIQ>");
_Static_assert(sizeof(fetch_req) == MP_FETCH_BYTES, "FETCH is <IQI>");
_Static_assert(sizeof(writeback_req) == MP_WRITEBACK_BYTES, "WRITEBACK is <II>");

static char *frame_at(const mp_plane *mp, int64_t frame) {
    return mp->arena + (uint64_t)frame * mp->line;
}

static void count(mp_opcount *c, const fs_msg *m, uint64_t out) {
    c->msgs++;
    c->bytes_in += m->len;
    c->bytes_out += HEADER_BYTES + out;
}

/* Each answers ring i's request (payload p, n bytes) if it is the common case:
 * 1 answered and released, 0 not (nothing answered; a line it stored is stored
 * again by Python, the same bytes). */
static int miss(mp_plane *mp, uint32_t i, const fs_msg *m, const char *p, uint32_t n) {
    miss_req q;
    if (n != sizeof q && n != sizeof q + mp->line)
        return 0;
    memcpy(&q, p, sizeof q);
    int64_t who = mp->who[i], frame = mp_get(mp, q.pid, q.vpage), vframe = -1;
    if ((who != MP_ANY_PID && who != (int64_t)q.pid) || frame < 0)
        return 0;
    if (q.vpid || n != sizeof q) {   /* a victim of the same process, its page held */
        if (n != sizeof q + mp->line || q.vpid != q.pid ||
            (vframe = mp_get(mp, q.vpid, q.vvpage)) < 0)
            return 0;
        memcpy(frame_at(mp, vframe), p + sizeof q, mp->line);
    }
    if (fs_answer(mp->replies[i], mp->rings[i], NULL, m->op, m->seq, frame_at(mp, frame),
                  mp->line, 0) != 0)   /* (NULL: counted here, in mp->counts) */
        return 0;   /* the ring back is full (or broken): Python's reply says so */
    mp_counts *c = &mp->counts[i];
    count(&c->miss, m, mp->line);
    if (vframe >= 0) {
        c->victims++;
        c->written++;
    }
    return 1;
}

static int fetch(mp_plane *mp, uint32_t i, const fs_msg *m, const char *p, uint32_t n) {
    fetch_req q;
    int64_t frames[MP_MAX_LINES];
    if (n != sizeof q)
        return 0;
    memcpy(&q, p, sizeof q);
    if (mp->who[i] != (int64_t)q.pid || !q.n || q.n > mp->ops.fetch_max || q.n > MP_MAX_LINES)
        return 0;
    for (uint32_t j = 0; j < q.n; j++)
        if ((frames[j] = mp_get(mp, q.pid, q.vpage + j)) < 0)
            return 0;
    uint32_t bytes = q.n * mp->line;
    int64_t at = fs_reply_begin(mp->replies[i], m->op, m->seq, bytes);
    if (at < 0)
        return 0;
    for (uint32_t j = 0; j < q.n; j++)
        memcpy(mp->replies[i]->data + at + (uint64_t)j * mp->line, frame_at(mp, frames[j]),
               mp->line);
    fr_commit(mp->replies[i], HEADER_BYTES + bytes);
    fr_consume(mp->rings[i]);
    mp_counts *c = &mp->counts[i];
    count(&c->fetch, m, bytes);
    c->fetched += q.n;
    return 1;
}

static int writeback(mp_plane *mp, uint32_t i, const fs_msg *m, const char *p, uint32_t n) {
    writeback_req q;
    int64_t frames[MP_MAX_LINES];
    if (n < sizeof q)
        return 0;
    memcpy(&q, p, sizeof q);
    if (mp->who[i] != (int64_t)q.pid || !q.n || q.n > MP_MAX_LINES ||
        n != sizeof q + (uint64_t)q.n * (mp->line + sizeof(uint64_t)))
        return 0;
    const char *lines = p + sizeof q, *vpages = lines + (uint64_t)q.n * mp->line;
    for (uint32_t j = 0; j < q.n; j++) {
        uint64_t vpage;
        memcpy(&vpage, vpages + j * sizeof vpage, sizeof vpage);
        if ((frames[j] = mp_get(mp, q.pid, vpage)) < 0)
            return 0;   /* a first write-back: Python takes its frame */
    }
    for (uint32_t j = 0; j < q.n; j++)
        memcpy(frame_at(mp, frames[j]), lines + (uint64_t)j * mp->line, mp->line);
    if (fs_answer(mp->replies[i], mp->rings[i], NULL, m->op, m->seq, "", 0, 0) != 0)
        return 0;
    mp_counts *c = &mp->counts[i];
    count(&c->writeback, m, 0);
    c->written += q.n;
    return 1;
}

/* FIT's ping (the Endpoint's own op, fit_rpc/endpoint.py): its payload back. */
static int echo(mp_plane *mp, uint32_t i, const fs_msg *m, const char *p, uint32_t n) {
    if (fs_answer(mp->replies[i], mp->rings[i], NULL, m->op, m->seq, p, n, 0) != 0)
        return 0;
    count(&mp->counts[i].echo, m, n);
    return 1;
}

static int serve(mp_plane *mp, uint32_t i, const fs_msg *m) {
    if (!m->plain || m->kind != mp->ops.request || mp->who[i] == MP_NOBODY || !mp->replies[i])
        return 0;
    const char *p = mp->rings[i]->data + m->at + HEADER_BYTES;
    uint32_t n = m->len - HEADER_BYTES;
    if (m->op == mp->ops.miss)
        return miss(mp, i, m, p, n);
    if (m->op == mp->ops.fetch)
        return fetch(mp, i, m, p, n);
    if (m->op == mp->ops.writeback)
        return writeback(mp, i, m, p, n);
    if (m->op == mp->ops.echo)
        return echo(mp, i, m, p, n);
    return 0;
}

int mp_run(mp_plane *mp, int64_t spin_ns, int64_t timeout_ns, fs_msg *m) {
    int64_t deadline = timeout_ns > 0 ? (int64_t)fr_now_ns() + timeout_ns : timeout_ns;
    for (;;) {
        int64_t left = deadline;
        if (deadline > 0 && (left = deadline - (int64_t)fr_now_ns()) <= 0)
            left = 0;
        int i = fs_next(mp->rings, (int)mp->nrings, (int)mp->start, mp->bell, mp->efd,
                        spin_ns, left, m);
        if (i < 0)
            return i == -1 && deadline > 0 ? -ETIMEDOUT : i;
        mp->start = (uint32_t)(i + 1) % mp->nrings;
        if (m->at < 0 || !serve(mp, (uint32_t)i, m))
            return i;   /* Python's: a broken ring, or not the common case */
    }
}

void mp_take_counts(mp_plane *mp, uint32_t i, mp_counts *out) {
    if (i >= mp->nrings) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = mp->counts[i];
    memset(&mp->counts[i], 0, sizeof mp->counts[i]);
}
