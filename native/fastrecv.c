/*
 * fastrecv.c -- a native program's recv() without the interpreter. Contract:
 * fastrecv.h.
 *
 * Each entry has a lock of its own, held by fr_recv while it uses the path
 * (only tried: if another thread's fr_recv, fr_on or fr_off holds it, this
 * recv is the stub's) and by fr_off while it clears it, so a path is never
 * used after fr_off returns.
 */
#include "fastrecv.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FR_FDS 65536   /* as the interposer's table of rack descriptors */

typedef struct {
    uint32_t lock;
    sp_path *p;
} fr_entry;

static fr_entry *table;   /* FR_FDS entries, made by the first fr_on */
static uint64_t taken;    /* bytes fr_recv took since fr_taken last looked */
static pthread_mutex_t making = PTHREAD_MUTEX_INITIALIZER;

static void child_forgets(void) {
    if (table)   /* (the parent's sockets: the child reaches them through it) */
        memset(table, 0, FR_FDS * sizeof *table);
    taken = 0;
}

static void lock(fr_entry *e) {
    while (__atomic_exchange_n(&e->lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void unlock(fr_entry *e) {
    __atomic_store_n(&e->lock, 0, __ATOMIC_RELEASE);
}

int fr_on(int fd, sp_path *p) {
    if (fd < 0 || fd >= FR_FDS)
        return -1;
    if (!__atomic_load_n(&table, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&making);
        if (!table) {
            fr_entry *t = calloc(FR_FDS, sizeof *t);
            if (!t) {
                pthread_mutex_unlock(&making);
                return -1;
            }
            pthread_atfork(NULL, NULL, child_forgets);
            __atomic_store_n(&table, t, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&making);
    }
    fr_entry *e = &table[fd];
    lock(e);
    __atomic_store_n(&e->p, p, __ATOMIC_RELAXED);
    unlock(e);
    return 0;
}

void fr_off(int fd) {
    fr_entry *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t || fd < 0 || fd >= FR_FDS)
        return;
    lock(&t[fd]);
    __atomic_store_n(&t[fd].p, NULL, __ATOMIC_RELAXED);
    unlock(&t[fd]);
}

long fr_recv(int fd, void *buf, size_t want) {
    fr_entry *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t || fd < 0 || fd >= FR_FDS || !__atomic_load_n(&t[fd].p, __ATOMIC_RELAXED))
        return -1;
    fr_entry *e = &t[fd];
    if (__atomic_exchange_n(&e->lock, 1, __ATOMIC_ACQUIRE))
        return -1;   /* another thread's: the stub serves this one */
    long r = e->p ? (long)sp_take_more(e->p, buf, want) : -1;
    unlock(e);
    if (r > 0)
        __atomic_fetch_add(&taken, (uint64_t)r, __ATOMIC_RELAXED);
    return r;
}

uint64_t fr_taken(void) {
    return __atomic_exchange_n(&taken, 0, __ATOMIC_RELAXED);
}
