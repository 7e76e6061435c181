/*
 * pager_link.c -- the pager's FIT calls to the mComponents. Contract: pager.h,
 * rackmem.h (rm_grow).
 */
#define _GNU_SOURCE
#include "pager.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fitcall.h"
#include "fitheader.h"
#include "fitring.h"
#include "kernel_poll.h"

/* fit_rpc/header.py; fit_rpc/pages.py's WRITEBACK layout */
#define FIT_MAGIC 0x5446
#define FIT_VERSION 2
#define FIT_REQUEST 1
#define FIT_REPLY 2

typedef struct __attribute__((packed)) { uint32_t pid, n; } writeback_req;

int pager_call(uint32_t h, uint16_t op, const char *payload, uint32_t n, uint32_t *len) {
    fr_ring *tx = R.c.tx[h], *rx = R.c.rx[h];
    fit_header head = {FIT_MAGIC, FIT_VERSION, FIT_REQUEST, op, 0, ++R.seq, n, 0, 0};
    uint32_t got = 0, cap = HEADER_BYTES + PAGE * 2;
    int64_t left = R.c.timeout_ns;
    int rc = fr_call(tx, (const char *)&head, HEADER_BYTES, payload, n, (fr_ring *const *)&rx, 1,
                     0, R.c.bell, R.c.efd, &R.c.hup[h], 1, R.c.spin_ns, left, R.out, cap, &got);
    if (rc == FC_UNSENT) {
        if (fr_wait_space(tx, HEADER_BYTES + n, R.c.efd, R.c.spin_ns, left) < 0)
            fatal("mComponent %u takes no requests (its ring stayed full)", h);
        rc = fr_call(tx, (const char *)&head, HEADER_BYTES, payload, n,
                     (fr_ring *const *)&rx, 1, 0, R.c.bell, R.c.efd, &R.c.hup[h], 1,
                     R.c.spin_ns, left, R.out, cap, &got);
    }
    for (int woken = 0; rc == FC_SENT; woken++) {   /* a wake-up with nothing: wait on */
        struct pollfd p = {R.c.hup[h], POLLIN, 0};
        struct timespec now = {0, 0};
        if (kernel_ppoll(&p, 1, &now) > 0 || woken > 1000)
            fatal("mComponent %u is gone or silent (op %#x, page fault of pid %u)", h, op,
                  R.c.pid);
        rc = fr_call(NULL, NULL, 0, NULL, 0, (fr_ring *const *)&rx, 1, 0, R.c.bell, R.c.efd,
                     &R.c.hup[h], 1, R.c.spin_ns, left, R.out, cap, &got);
    }
    if (rc < 0)
        fatal("the link to mComponent %u broke (%s)", h, strerrordesc_np(-rc));
    fit_header *back = (fit_header *)R.out;
    if (got < HEADER_BYTES || back->magic != FIT_MAGIC || back->kind != FIT_REPLY ||
        back->seq != head.seq || back->length != got - HEADER_BYTES)
        fatal("mComponent %u answered op %#x with a malformed reply", h, op);
    *len = back->length;
    return back->err ? -(int)back->err : 0;
}

void pager_writeback(uint32_t home, uint32_t pid, uint64_t vpage, const char *line) {
    writeback_req w = {pid, 1};
    memcpy(R.req, &w, sizeof w);
    memcpy(R.req + sizeof w, line, PAGE);
    memcpy(R.req + sizeof w + PAGE, &vpage, sizeof vpage);
    uint32_t len;
    pthread_mutex_lock(&R.link_lock);
    int rc = pager_call(home, OP_M_WRITEBACK, R.req, sizeof w + PAGE + sizeof vpage, &len);
    pthread_mutex_unlock(&R.link_lock);
    if (rc < 0)
        fatal("write-back of page %#lx to mComponent %u: %s", (unsigned long)vpage, home,
              strerrordesc_np(-rc));
}

int rm_grow(uint64_t upto) {
    int rc = 0;
    pthread_mutex_lock(&R.link_lock);
    while (rc == 0 && R.reserved < upto) {
        if (R.reserved + R.c.chunk > R.c.reserve) { rc = -ENOMEM; break; }
        char json[160];
        int n = snprintf(json + 4, sizeof json - 4,
                         "{\"pid\":%u,\"start\":%llu,\"length\":%llu}", R.c.pid,
                         (unsigned long long)(R.c.base + R.reserved),
                         (unsigned long long)R.c.chunk);
        uint32_t u = (uint32_t)n, len;
        memcpy(json, &u, 4);
        rc = pager_call(R.c.home, OP_M_ALLOC, json, 4 + u, &len);
        if (rc == 0)
            R.reserved += R.c.chunk;
    }
    R.st.reserved = R.reserved;
    pthread_mutex_unlock(&R.link_lock);
    return rc;
}
