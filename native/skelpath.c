/*
 * skelpath.c -- the nComponent's data plane. Contract: skelpath.h.
 *
 * Each handler below does what its Python twin does in the common case, in
 * the same order, and hands the rest back: readable() is Skeleton.readable
 * with Ddio.deliver (Dma's), flush() is Skeleton.flush with Ddio.pull and
 * confirm, on_send() and on_credit() are NMonitor.n_send (Ddio.load) and
 * n_credit.
 */
#include "skelpath.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "fitheader.h"

#define SK_N_BYTES 8            /* the payload of N_SEND, N_CREDIT, STUB_DATA, STUB_SENT */
#define SK_FD_MASK 0xFFFFu      /* a fast connection's sk names its fd in its low bits */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kp_init(kp_plane *kp, int epfd, const kp_ops *ops) {
    kp->epfd = epfd;
    kp->ops = *ops;
    kc_init(&kp->connect, ops->magic, ops->version, ops->reply, ops->n_connect);
}

void kp_set_inbox(kp_plane *kp, fr_ring *const *rings, const uint32_t *peers,
                  fr_ring *const *replies, uint32_t n) {
    kp->truncated = n > KP_MAX_RINGS;
    if (n > KP_MAX_RINGS)
        n = KP_MAX_RINGS;   /* the rest stay Python's: its serve() reads every ring */
    for (uint32_t i = 0; i < n; i++) {
        kp->rings[i] = rings[i];
        kp->ring_peer[i] = peers[i] < KP_MAX_PEERS ? peers[i] : KP_NO_PEER;
        kp->replies[i] = replies[i];
    }
    kp->nrings = n;
}

void kp_grant(kp_plane *kp, uint32_t p, uint64_t homes, uint64_t inbox) {
    if (p < KP_MAX_PEERS) {
        kp->grants[p] = homes;
        kp->inboxes[p] = inbox;
    }
}

int kp_watch(kp_plane *kp, int fd, uint32_t mask) {
    if (fd < 0 || fd >= KP_MAX_FDS)
        return -EBADF;
    uint32_t *have = &kp->masks[fd];
    if (*have == mask)
        return 0;
    struct epoll_event ev = {.events = mask, .data.fd = fd};
    int op = !mask ? EPOLL_CTL_DEL : *have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(kp->epfd, op, fd, &ev) < 0)
        return -errno;
    *have = mask;
    return 0;
}

uint32_t kp_wants(const kp_conn *c) {
    return (c->window ? EPOLLIN : 0) | (nring_used(c->tx) ? EPOLLOUT : 0);
}

int kp_add(kp_plane *kp, kp_conn *c) {
    if (c->fd < 0 || c->fd >= KP_MAX_FDS || (c->sk & SK_FD_MASK) != (uint32_t)c->fd)
        return -EBADF;
    kp->by_fd[c->fd] = c;
    return 0;
}

void kp_drop(kp_plane *kp, kp_conn *c) {
    if (c->fd >= 0 && c->fd < KP_MAX_FDS && kp->by_fd[c->fd] == c)
        kp->by_fd[c->fd] = NULL;
}

static void rewatch(kp_plane *kp, kp_conn *c) {
    kp_watch(kp, c->fd, kp_wants(c));
}

static kp_peer *peer_of(kp_plane *kp, uint32_t p) {
    static kp_peer sink;   /* a peer number past the table: counted nowhere */
    return p < KP_MAX_PEERS ? &kp->peers[p] : &sink;
}

/* Push op (stub, n) to c's stub; 0, or 1 with a KP_PUSH event in *out. */
static int handback(kp_conn *c) {
    c->fast = 0;   /* Python's now, until it says otherwise */
    return 1;
}

static int push(kp_plane *kp, kp_conn *c, uint16_t op, uint32_t n, kp_event *out) {
    fit_header h = {kp->ops.magic, (uint8_t)kp->ops.version, (uint8_t)kp->ops.oneway, op, 0,
                    0, SK_N_BYTES, 0, 0};
    uint32_t body[2] = {c->stub, n};
    if (c->push && fr_send2(c->push, (const char *)&h, HEADER_BYTES, (const char *)body,
                            SK_N_BYTES) == 0) {
        kp_peer *p = peer_of(kp, c->owner);
        if (op == kp->ops.stub_data) {
            p->tx_data++;
            p->tx_data_bytes += HEADER_BYTES + SK_N_BYTES;
        } else if (op == kp->ops.stub_data_dma) {
            p->tx_data_dma++;
            p->tx_data_dma_bytes += HEADER_BYTES + SK_N_BYTES;
        } else {
            p->tx_sent++;
            p->tx_sent_bytes += HEADER_BYTES + SK_N_BYTES;
        }
        return 0;
    }
    *out = (kp_event){.fd = c->fd, .sk = c->sk, .kind = KP_PUSH, .op = op, .value = n};
    return handback(c);
}

/* n bytes from rx into the stub's receive ring at rpos (store), or from its send
 * ring at tpos into tx (Ddio._store, _fetch; Dma's): the bytes copied (fewer: a
 * line that is not cached, or a DMA ring not mapped yet). */
static int64_t copy(kp_conn *c, uint32_t n, int store) {
    int64_t done;
    if (c->dma) {
        const dm_ring *ring = store ? c->rdma : c->tdma;
        done = !ring ? 0 : store ? dm_store(c->rx, ring, c->rpos, n)
                                 : dm_fetch(c->tx, ring, c->tpos, n);
    } else {
        done = store ? dd_store(c->rx, &c->rbuf, c->rpos, n)
                     : dd_fetch(c->tx, &c->tbuf, c->tpos, n);
        if (done > 0)
            c->lines_bytes += (uint64_t)done;
    }
    return done < 0 ? 0 : done;
}

/* The kernel socket is readable (Skeleton.readable, Ddio.deliver). */
static int readable(kp_plane *kp, kp_conn *c, kp_event *out) {
    uint64_t max = c->window < c->recv_chunk ? c->window : c->recv_chunk;
    if (!max) {
        rewatch(kp, c);
        return 0;
    }
    int64_t n = nring_recv(c->rx, c->fd, (uint32_t)max);
    if (n == -EAGAIN)
        return 0;
    int64_t done = n > 0 ? copy(c, (uint32_t)n, 1) : 0;
    c->rpos += (uint64_t)done;
    if (n <= 0 || done < n) {   /* EOF, an error, or a line that is not cached */
        *out = (kp_event){.fd = c->fd, .sk = c->sk, .kind = KP_RECEIVED, .value = n,
                          .stored = (uint64_t)done};
        return handback(c);
    }
    c->window -= (uint64_t)n;
    c->bytes_in += (uint64_t)n;
    int r = push(kp, c, c->dma ? kp->ops.stub_data_dma : kp->ops.stub_data, (uint32_t)n, out);
    if (!c->window)
        rewatch(kp, c);
    return r;
}

/* Hand tx to the kernel, refilling it from the stub's send ring; confirm what was
 * pulled, in batches (Skeleton.flush, Ddio.pull, Ddio.confirm). */
static int flush(kp_plane *kp, kp_conn *c, kp_event *out) {
    nring *tx = c->tx;
    for (;;) {
        uint32_t space = nring_space(tx);
        uint64_t k = c->pending < space ? c->pending : space;
        if (k) {
            int64_t done = copy(c, (uint32_t)k, 0);
            c->tpos += (uint64_t)done;
            c->pending -= (uint64_t)done;
            c->unconfirmed += (uint64_t)done;
            if ((uint64_t)done < k) {   /* a line that is not cached (evicted: at home) */
                rewatch(kp, c);
                *out = (kp_event){.fd = c->fd, .sk = c->sk, .kind = KP_FLUSH};
                return handback(c);
            }
        }
        uint32_t used = nring_used(tx);
        int64_t sent = used ? nring_send(tx, c->fd) : 0;
        if (sent == -EAGAIN)
            sent = 0;
        if (sent < 0) {   /* the connection broke: what tx held goes nowhere now */
            tx->head = tx->tail;
            rewatch(kp, c);
            *out = (kp_event){.fd = c->fd, .sk = c->sk, .kind = KP_FAIL, .value = -sent};
            return handback(c);
        }
        c->bytes_out += (uint64_t)sent;
        if ((uint64_t)sent < used || !sent || !c->pending)
            break;   /* the kernel is full, or nothing more waits */
    }
    rewatch(kp, c);
    if (c->unconfirmed >= c->sent_batch) {   /* the stub blocks only at a full ring */
        uint64_t n = c->unconfirmed;
        c->unconfirmed = 0;
        return push(kp, c, kp->ops.stub_sent, (uint32_t)n, out);
    }
    return 0;
}

/* N_SEND (N_SEND_DMA): the stub put n more bytes into its send ring (Ddio.load). */
static int on_send(kp_plane *kp, kp_conn *c, uint32_t n, kp_event *out) {
    c->pending += n;
    if (c->pending > c->tbuf.size) {   /* more than its ring holds: a broken stub */
        *out = (kp_event){.fd = c->fd, .sk = c->sk, .kind = KP_FAIL, .value = ENOBUFS};
        return handback(c);
    }
    return flush(kp, c, out);
}

/* One kernel event of a fast connection (NMonitor._skeleton_event). */
static int kernel_event(kp_plane *kp, kp_conn *c, uint32_t ev, kp_event *out) {
    if ((ev & EPOLLIN || (ev & EPOLLERR && c->window)) && readable(kp, c, out))
        return 1;
    if (ev & (EPOLLOUT | EPOLLERR) && nring_used(c->tx))
        return flush(kp, c, out);
    if (ev & ~(uint32_t)(EPOLLIN | EPOLLOUT) && !kp_wants(c))
        kp_watch(kp, c->fd, 0);   /* a hang-up nobody waits on: stop polling it */
    return 0;
}

/* An N_CONNECT at the head of inbox ring i (skelconnect.h): 1 taken (consumed,
 * answered, an event in *out if it made a connection: *nout moved), 0 Python's. */
static int on_connect(kp_plane *kp, uint32_t i, const fit_header *h, int64_t off,
                      uint32_t len, kp_event *out, int *nout) {
    fr_ring *r = kp->rings[i];
    uint32_t peer = kp->ring_peer[i], replied = 0;
    kc_made *made = &kp->made[*nout];
    int got = kc_connect(&kp->connect, kp->grants[peer], kp->inboxes[peer], kp->replies[i],
                         h->seq, r->data + off + HEADER_BYTES, len - HEADER_BYTES, made,
                         &replied);
    if (got == KC_PYTHON)
        return 0;
    fr_consume(r);
    kp->messages++;
    kp_peer *p = peer_of(kp, peer);
    p->rx_connect++;
    p->rx_connect_bytes += len;
    p->tx_connect++;
    p->tx_connect_bytes += replied;
    if (got == KC_FAILED) {
        p->connect_errors++;
        return 1;
    }
    made->peer = peer;
    out[*nout] = (kp_event){.fd = made->fd, .sk = made->sk, .kind = KP_CONNECTED,
                            .value = *nout};
    (*nout)++;
    return 1;
}

/* The inbox rings: the fast messages at their heads. Returns the work done; events
 * go to out[*nout...max); kp->inbox says a message waits for Python. */
static int read_inbox(kp_plane *kp, kp_event *out, int max, int *nout) {
    int work = 0;
    for (uint32_t i = 0; i < kp->nrings && *nout < max; i++) {
        fr_ring *r = kp->rings[i];
        uint32_t peer = kp->ring_peer[i];
        for (;;) {
            uint32_t len;
            int64_t off = fr_peek(r, &len);
            if (off == -EAGAIN)
                break;
            if (off < 0 || peer == KP_NO_PEER || len < HEADER_BYTES) {
                kp->inbox = 1;   /* a broken ring, a link not vouched for, not FIT */
                break;
            }
            fit_header h;
            memcpy(&h, r->data + off, HEADER_BYTES);
            if (h.op == kp->ops.n_connect && h.kind == kp->ops.request &&
                h.magic == kp->ops.magic && h.version == kp->ops.version && !h.trace &&
                h.length == len - HEADER_BYTES && on_connect(kp, i, &h, off, len, out, nout)) {
                work++;
                if (*nout >= max)
                    break;
                continue;
            }
            if (len != HEADER_BYTES + SK_N_BYTES) {
                kp->inbox = 1;   /* another op */
                break;
            }
            uint32_t body[2];
            memcpy(body, r->data + off + HEADER_BYTES, SK_N_BYTES);
            kp_conn *c = kp->by_fd[body[0] & SK_FD_MASK];
            int send = c && h.op == (c->dma ? kp->ops.n_send_dma : kp->ops.n_send);
            int credit = h.op == kp->ops.n_credit;
            if (h.magic != kp->ops.magic || h.version != kp->ops.version ||
                h.kind != kp->ops.oneway || h.trace || h.length != SK_N_BYTES ||
                !(send || credit) || !c || c->sk != body[0] || !c->fast || c->owner != peer) {
                kp->inbox = 1;   /* Python's: it answers it as it should (EPERM, EBADF...) */
                break;
            }
            fr_consume(r);
            work++;
            kp->messages++;
            kp_peer *p = peer_of(kp, peer);
            if (send && c->dma) {
                p->rx_send_dma++;
                p->rx_send_dma_bytes += len;
                *nout += on_send(kp, c, body[1], &out[*nout]);
            } else if (send) {
                p->rx_send++;
                p->rx_send_bytes += len;
                *nout += on_send(kp, c, body[1], &out[*nout]);
            } else {
                p->rx_credit++;
                p->rx_credit_bytes += len;
                c->window += body[1];
                rewatch(kp, c);
            }
            if (*nout >= max)
                break;
        }
    }
    return work;
}

static int handed_back(kp_plane *kp, const kp_event *out, int n) {
    for (int i = 0; i < n; i++)
        if (out[i].kind != KP_EVENT)
            kp->handed_back++;
    return n;
}

int kp_run(kp_plane *kp, int64_t spin_ns, uint64_t until_ns, kp_event *out, int max) {
    struct epoll_event evs[64];
    uint64_t idle_since = 0;
    int nout = 0;
    if (max > KP_MAX_EVENTS)
        max = KP_MAX_EVENTS;   /* (made[] has that many) */
    kp->inbox = kp->truncated;   /* rings past KP_MAX_RINGS: Python's serve() reads them */
    if (kp->bell)
        fr_published_cpu(kp->bell);
    for (;;) {
        int work = read_inbox(kp, out, max, &nout);
        int room = max - nout < 64 ? max - nout : 64;
        int k = room > 0 ? epoll_wait(kp->epfd, evs, room, 0) : 0;
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            kp_conn *c = fd >= 0 && fd < KP_MAX_FDS ? kp->by_fd[fd] : NULL;
            if (!c || !c->fast) {
                out[nout++] = (kp_event){.fd = fd, .kind = KP_EVENT, .events = evs[i].events};
                continue;
            }
            work++;
            kp->kernel_events++;
            nout += kernel_event(kp, c, evs[i].events, &out[nout]);
        }
        if (nout || kp->inbox)
            return handed_back(kp, out, nout);
        uint64_t t = now_ns();
        if (t >= until_ns)
            return 0;
        if (work) {
            idle_since = 0;
            continue;
        }
        if (!idle_since)
            idle_since = t;
        if ((int64_t)(t - idle_since) >= spin_ns || !fr_spin_yield(t - idle_since))
            return 0;   /* idle: the caller sleeps */
    }
}

void kp_take_counts(kp_plane *kp, uint32_t p, kp_peer *out) {
    if (p >= KP_MAX_PEERS) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = kp->peers[p];
    memset(&kp->peers[p], 0, sizeof kp->peers[p]);
}
