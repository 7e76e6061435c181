/*
 * skelconnect.c -- the data plane's connect(). Contract: skelconnect.h.
 *
 * kc_connect does what NMonitor.n_connect does in the common case, in the
 * same order (checks, the socket, its options, the kernel's connect, the
 * handshake's state, the reply), and leaves every other case in the ring.
 */
#include "skelconnect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24   /* Linux 4.2 */
#endif

#include "fitheader.h"

typedef struct __attribute__((packed)) {
    uint32_t stub, sk;
    uint8_t src[4], dst[4];
    uint16_t port;
    uint8_t mode, flags;
    uint32_t window;
    uint64_t rbuf;
    uint32_t rbuf_size;
    uint64_t tbuf;
    uint32_t tbuf_size;
    double timeout;
    char home[KC_HOME_BYTES];
    uint16_t nopts, ninbox;
} kc_request;

typedef struct __attribute__((packed)) {
    int32_t level, opt, value;
} kc_opt;

typedef struct __attribute__((packed)) {
    uint32_t sk;
    uint8_t local[4];
    uint16_t port, flags;
} kc_reply;

#define REQUEST_BYTES 76
#define REPLY_BYTES 12
#define ERROR_TEXT 64   /* an error reply's text (strerror) at most */

_Static_assert(sizeof(kc_request) == REQUEST_BYTES, "N_CONNECT's fixed part is 76 bytes");
_Static_assert(sizeof(kc_reply) == REPLY_BYTES, "N_CONNECT's reply is 12 bytes");

void kc_init(kc_state *s, uint16_t magic, uint16_t version, uint16_t reply, uint16_t op) {
    s->magic = magic;
    s->version = version;
    s->reply = reply;
    s->op = op;
    s->hold = 1;
    s->policy = -1;
}

#define RESET_ON_FORK 0x40000000   /* SCHED_RESET_ON_FORK, as sched_getscheduler reports it */

/* Hold this CPU until release(): SCHED_FIFO (skelconnect.h, "the CPU is held").
 * 1 if it is held now. */
static int hold(kc_state *s) {
    if (s->hold && s->policy < 0) {
        s->policy = sched_getscheduler(0);
        int own = s->policy & ~RESET_ON_FORK;
        if (s->policy < 0)
            s->hold_error = errno;
        if (s->policy < 0 || own == SCHED_FIFO || own == SCHED_RR || own == 6 /* DEADLINE */)
            s->hold = 0;   /* unknown, or real-time already: left as it is */
    }
    if (!s->hold)
        return 0;
    struct sched_param first = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &first) == 0)
        return 1;
    s->hold = 0;
    s->hold_error = errno;
    return 0;
}

static void release(kc_state *s, int held) {
    if (!held)
        return;
    struct sched_param own = {.sched_priority = 0};
    if (sched_setscheduler(0, s->policy, &own) != 0) {   /* (giving real-time up is always
                                                             allowed; if it failed anyway:
                                                             plain SCHED_OTHER, no more holds) */
        s->hold = 0;
        s->hold_error = errno;
        sched_setscheduler(0, SCHED_OTHER, &own);
    }
    s->held++;
}

int kc_allow(kc_state *s, int32_t level, int32_t opt) {
    if (s->nallowed >= KC_ALLOWED)
        return -ENOSPC;
    s->allowed[s->nallowed][0] = level;
    s->allowed[s->nallowed][1] = opt;
    s->nallowed++;
    return 0;
}

void kc_home(kc_state *s, uint32_t i, const char *id) {
    if (i >= KC_HOMES)
        return;
    memset(s->homes[i], 0, KC_HOME_BYTES);
    strncpy(s->homes[i], id, KC_HOME_BYTES);
    if (i >= s->nhomes)
        s->nhomes = i + 1;
}

static kc_pool *pool_of(kc_state *s, uint32_t addr) {
    for (uint32_t i = 0; i < s->npools; i++)
        if (s->pools[i].addr == addr)
            return &s->pools[i];
    return NULL;
}

uint32_t kc_next_sk(kc_state *s, int32_t fd) {
    s->next_hi = (s->next_hi + 1) & 0xFFFF;
    if (!s->next_hi)
        s->next_hi = 1;
    return s->next_hi << 16 | (fd >= 0 && fd < 0xFFFF ? (uint32_t)fd : 0xFFFF);
}

/* One more socket for pool p (Proxy.for_connect's, in C): 0 or -errno. */
static int make_one(kc_state *s, kc_pool *p) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0)
        return -(s->error = errno);
    struct sockaddr_in at = {.sin_family = AF_INET};
    memcpy(&at.sin_addr, &p->addr, 4);
    if (setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&at, sizeof at) < 0 || fd >= 0xFFFF) {
        s->error = fd >= 0xFFFF ? EMFILE : errno;   /* (past 0xFFFF: no fast connection) */
        close(fd);
        return -s->error;
    }
    p->ready[p->n++] = (kc_socket){fd, kc_next_sk(s, fd)};
    return 0;
}

static int fill(kc_state *s, kc_pool *p) {
    int made = 0;
    while (p->n < KC_POOL && make_one(s, p) == 0)
        made++;
    return made;
}

int kc_source(kc_state *s, uint32_t addr) {
    kc_pool *p = pool_of(s, addr);
    if (!p) {
        if (s->npools >= KC_SOURCES)
            return -ENOSPC;
        p = &s->pools[s->npools++];
        p->addr = addr;
        p->n = 0;
    }
    fill(s, p);
    return 0;
}

int kc_fill(kc_state *s) {
    int made = 0;
    for (uint32_t i = 0; i < s->npools; i++)
        made += fill(s, &s->pools[i]);
    return made;
}

uint32_t kc_pool_count(const kc_state *s, uint32_t addr) {
    for (uint32_t i = 0; i < s->npools; i++)
        if (s->pools[i].addr == addr)
            return s->pools[i].n;
    return 0;
}

void kc_close(kc_state *s) {
    for (uint32_t i = 0; i < s->npools; i++) {
        kc_pool *p = &s->pools[i];
        while (p->n)
            close(p->ready[--p->n].fd);
    }
}

uint64_t kc_inbox_hash(const char *inbox, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++) {
        h ^= (uint8_t)inbox[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int allowed(const kc_state *s, int32_t level, int32_t opt) {
    for (uint32_t i = 0; i < s->nallowed; i++)
        if (s->allowed[i][0] == level && s->allowed[i][1] == opt)
            return 1;
    return 0;
}

/* The home's grant bit, or -1 if it is none of the homes listed. */
static int home_bit(const kc_state *s, const char *home) {
    for (uint32_t i = 0; i < s->nhomes; i++)
        if (!memcmp(s->homes[i], home, KC_HOME_BYTES))
            return (int)i;
    return -1;
}

/* A ring [start, size] the nMonitor takes: size > 0, start + size <= 2^64. */
static int ring_ok(uint64_t start, uint32_t size) {
    return size && (!start || size <= 0 - start);
}

/* Whether the request is one this file takes (every check the nMonitor's Python
 * would make, or would fail it with: those stay Python's). */
static int takes(const kc_state *s, uint64_t grant, uint64_t inbox, const kc_request *q,
                 const char *body, uint32_t len, int *bit) {
    if (len < REQUEST_BYTES || q->nopts > KC_MAX_OPTS ||
        len != REQUEST_BYTES + q->nopts * sizeof(kc_opt) + q->ninbox)
        return 0;
    if (q->sk || q->mode > 1 || !s->dram || !ring_ok(q->rbuf, q->rbuf_size) ||
        !ring_ok(q->tbuf, q->tbuf_size))
        return 0;
    if (q->flags & KC_FLAG_TIMEOUT && !(isfinite(q->timeout) && q->timeout >= 0))
        return 0;
    const char *named = body + REQUEST_BYTES + q->nopts * sizeof(kc_opt);
    if (kc_inbox_hash(named, q->ninbox) != inbox)
        return 0;   /* not the inbox checked for this sender: Python says EPERM */
    *bit = home_bit(s, q->home);
    return *bit >= 0 && (grant >> *bit & 1);
}

/* The handshake's state after a non-blocking connect: 0 done, an errno, or -1
 * pending (NMonitor._handshake). */
static int handshake(int fd, int rc) {
    if (rc == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EAGAIN)
        return errno;
    int err = 0;
    socklen_t n = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0)
        return errno;
    if (err)
        return err;
    struct sockaddr_in peer;
    socklen_t pn = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &pn) < 0)
        return errno == ENOTCONN ? -1 : errno;
    return 0;
}

/* Apply the request's options; 0 or the errno of the first that failed. */
static int apply(int fd, const kc_opt *opts, uint16_t n) {
    for (uint16_t i = 0; i < n; i++) {
        kc_opt o;
        memcpy(&o, &opts[i], sizeof o);
        if (setsockopt(fd, o.level, o.opt, &o.value, sizeof o.value) < 0)
            return errno;
    }
    return 0;
}

int kc_connect(kc_state *s, uint64_t grant, uint64_t inbox, fr_ring *reply, uint32_t seq,
               const char *body, uint32_t len, kc_made *made, uint32_t *replied) {
    kc_request q;
    int bit;
    if (len < REQUEST_BYTES || !reply || !grant)
        return KC_PYTHON;
    memcpy(&q, body, REQUEST_BYTES);
    if (!takes(s, grant, inbox, &q, body, len, &bit))
        return KC_PYTHON;
    const kc_opt *opts = (const kc_opt *)(body + REQUEST_BYTES);
    for (uint16_t i = 0; i < q.nopts; i++) {
        kc_opt o;
        memcpy(&o, &opts[i], sizeof o);
        if (!allowed(s, o.level, o.opt))
            return KC_PYTHON;   /* ENOPROTOOPT: the Python answers it */
    }
    uint32_t addr;
    memcpy(&addr, q.src, 4);
    kc_pool *p = pool_of(s, addr);
    if (!p || !p->n)
        return KC_PYTHON;
    int64_t at = fr_reserve(reply, HEADER_BYTES + ERROR_TEXT);
    if (at < 0)
        return KC_PYTHON;   /* no room for the answer now: the Python waits for it */

    /* From here on the request is answered, one way or the other. */
    kc_socket sock = p->ready[--p->n];
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(q.port)};
    memcpy(&dst.sin_addr, q.dst, 4);
    int err = apply(sock.fd, opts, q.nopts);
    int held = !err && hold(s);
    if (!err)
        err = handshake(sock.fd, connect(sock.fd, (struct sockaddr *)&dst, sizeof dst));
    fit_header h = {s->magic, (uint8_t)s->version, (uint8_t)s->reply, s->op, 0, seq, 0, 0, 0};
    char *out = reply->data + at;
    if (err > 0) {
        close(sock.fd);
        const char *text = strerror(err);
        uint32_t n = (uint32_t)strnlen(text, ERROR_TEXT);
        h.err = (uint16_t)err;
        h.length = n;
        memcpy(out, &h, HEADER_BYTES);
        memcpy(out + HEADER_BYTES, text, n);
        fr_commit(reply, HEADER_BYTES + n);
        release(s, held);
        *replied = HEADER_BYTES + n;
        s->failed++;
        make_one(s, p);   /* the answer is out: the pool gets its socket back */
        return KC_FAILED;
    }
    kc_reply r = {.sk = sock.sk, .flags = err < 0 ? KC_FLAG_PENDING : 0};
    struct sockaddr_in local;
    socklen_t ln = sizeof local;
    if (getsockname(sock.fd, (struct sockaddr *)&local, &ln) == 0) {
        memcpy(r.local, &local.sin_addr, 4);
        r.port = ntohs(local.sin_port);
    }
    h.length = REPLY_BYTES;
    memcpy(out, &h, HEADER_BYTES);
    memcpy(out + HEADER_BYTES, &r, REPLY_BYTES);
    fr_commit(reply, HEADER_BYTES + REPLY_BYTES);
    release(s, held);
    *replied = HEADER_BYTES + REPLY_BYTES;
    make_one(s, p);
    s->dram--;
    s->made++;
    *made = (kc_made){.fd = sock.fd, .sk = sock.sk, .stub = q.stub, .mode = q.mode,
                      .pending = err < 0, .home = (uint32_t)bit, .window = q.window,
                      .rbuf_size = q.rbuf_size, .tbuf_size = q.tbuf_size,
                      .rbuf = q.rbuf, .tbuf = q.tbuf,
                      .timeout = q.flags & KC_FLAG_TIMEOUT ? q.timeout : -1.0};
    return KC_MADE;
}
