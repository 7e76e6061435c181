/* A native program's memory, for `splitrack run --memory rack` (tests/test_rackmem_native.py):
 * usage: rackheap MIB. It allocates about MIB MiB with every call of the malloc family and
 * anonymous mmap, fills each block with bytes of its own, reads them all back twice, gives
 * some back (free, a munmap of part of a mapping) and allocates again; asks for sizes no
 * heap has, a guard page (mprotect) it then unmaps, read-only pages that get evicted;
 * then tries fork(). Prints how many blocks lie in a rack heap, what the huge sizes
 * gave, "protected: ok", what realloc(p, 0) gives, "fork: <errno name>", "ok"; exits
 * 1 on the first byte that is wrong. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEAP_LO 0x500000000000ull   /* where rack heaps live (native/extcache.h) */
#define HEAP_HI 0x600000000000ull
#define MAXBLOCKS 100000

static unsigned char *block[MAXBLOCKS];
static size_t length[MAXBLOCKS];
static int nblocks, in_rack;

static unsigned char byte_of(int i, size_t k)
{
    return (unsigned char)(i * 131 + k * 7 + (k >> 12));
}

static void fill(int i)
{
    for (size_t k = 0; k < length[i]; k++)
        block[i][k] = byte_of(i, k);
}

static void check(int i, const char *when)
{
    for (size_t k = 0; k < length[i]; k++)
        if (block[i][k] != byte_of(i, k)) {
            printf("block %d (%zu B at %p) byte %zu wrong %s\n", i, length[i], (void *)block[i], k,
                   when);
            exit(1);
        }
}

static void add(void *p, size_t n)
{
    if (!p) {
        printf("allocation of %zu B failed: %s\n", n, strerror(errno));
        exit(1);
    }
    block[nblocks] = p;
    length[nblocks] = n;
    fill(nblocks++);
}

/* Blocks inside a rack heap: a mapping of 1 GiB or more in the window (/proc/self/maps;
 * glibc's own heap may lie in the window too, a PIE's brk, but it is small). */
static int count_in_rack_heap(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    unsigned long long lo, hi;
    int n = 0;
    char rest[512];
    while (maps && fscanf(maps, "%llx-%llx%511[^\n]", &lo, &hi, rest) == 3)
        if (lo >= HEAP_LO && hi <= HEAP_HI && hi - lo >= (1ull << 30))
            for (int i = 0; i < nblocks; i++)
                n += (uint64_t)block[i] >= lo && (uint64_t)block[i] < hi;
    if (maps)
        fclose(maps);
    return n;
}

int main(int argc, char **argv)
{
    size_t want = (size_t)atoi(argc > 1 ? argv[1] : "16") << 20, got = 0;
    for (int i = 0; got < want && nblocks < MAXBLOCKS - 8; i++) {
        size_t n = (size_t)(i % 7 == 0 ? 40000 + i % 5000 : 16 + (i * 37) % 3000);
        void *p;
        switch (i % 6) {
        case 0: add(malloc(n), n); break;
        case 1: {
            unsigned char *z = calloc(n, 1);
            for (size_t k = 0; z && k < n; k++)
                if (z[k]) { printf("calloc block not zero\n"); return 1; }
            add(z, n);
            break;
        }
        case 2: {
            unsigned char *r = malloc(100);
            memset(r, 0x5a, 100);
            r = realloc(r, n + 100);
            for (int k = 0; r && k < 100; k++)
                if (r[k] != 0x5a) { printf("realloc lost bytes\n"); return 1; }
            add(r, n + 100);
            break;
        }
        case 3:
            if (posix_memalign(&p, i % 2 ? 64 : 8192, n)) p = NULL;
            if (p && (uint64_t)p % (i % 2 ? 64 : 8192)) { printf("misaligned\n"); return 1; }
            add(p, n);
            break;
        case 4: add(aligned_alloc(4096, 4096), 4096); break;
        case 5: {
            void *m = mmap(NULL, 1 << 18, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            add(m == MAP_FAILED ? NULL : m, 1 << 18);
            break;
        }
        }
        got += length[nblocks - 1];
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nblocks; i++)
            check(i, pass ? "on the second pass" : "on the first pass");
    /* give back: every third malloc'd block, and the last 64 KiB of each mapping */
    for (int i = 0; i < nblocks; i++) {
        if (length[i] == 1 << 18) {
            if (munmap(block[i] + (1 << 18) - (1 << 16), 1 << 16)) {
                printf("munmap: %s\n", strerror(errno));
                return 1;
            }
            length[i] -= 1 << 16;
        } else if (i % 3 == 0 && length[i] != 4096) {
            free(block[i]);
            add(malloc(length[i]), length[i]);
            block[i] = block[nblocks - 1];   /* (the new one takes its place) */
            nblocks--;
            fill(i);
        }
    }
    for (int i = 0; i < nblocks; i++)
        check(i, "after giving back");
    in_rack = count_in_rack_heap();
    printf("blocks %d in_rack %d\n", nblocks, in_rack);
    /* sizes past any heap: NULL and ENOMEM, the block realloc() was given intact */
    volatile size_t huge = SIZE_MAX;
    void *p;
    errno = 0;
    int e1 = malloc(huge) == NULL ? errno : 0, e2 = posix_memalign(&p, 64, huge - 10);
    unsigned char *volatile keep = malloc(200000);   /* (volatile: gcc takes realloc()'s
                                                        failure for a free) */
    memset(keep, 7, 200000);
    errno = 0;
    int e3 = realloc(keep, huge - 100) == NULL ? errno : 0;
    printf("huge: %s %s %s %s\n", strerrorname_np(e1), strerrorname_np(e2),
           strerrorname_np(e3), keep[199999] == 7 ? "intact" : "lost");
    free(keep);
    /* a guard page (PROT_NONE), its mapping unmapped: the pages are plain ones again */
    unsigned char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) || munmap(m, 1 << 16)) {
        printf("guard page: %s\n", strerror(errno));
        return 1;
    }
    for (int k = 0; k < 64; k++)   /* (freed pages are used again first) */
        memset(malloc(1 << 16), k, 1 << 16);
    /* written pages made inaccessible, then evicted by what comes after (the pager
       reads them all the same): their bytes stay */
    unsigned char *ro = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
    memset(ro, 0x3c, 1 << 16);
    if (mprotect(ro, 1 << 16, PROT_NONE))
        return 1;
    for (int k = 0; k < 256; k++)   /* 4 MiB more than the extCache holds */
        memset(malloc(1 << 14), k, 1 << 14);
    if (mprotect(ro, 1 << 16, PROT_READ))
        return 1;
    for (int k = 0; k < 1 << 16; k++)
        if (ro[k] != 0x3c) {
            printf("read-only page byte %d wrong\n", k);
            return 1;
        }
    printf("protected: ok\n");
    printf("realloc 0: %s\n", realloc(malloc(10), 0) == NULL ? "NULL" : "a block");
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    printf("fork: %s\n", child < 0 ? strerrorname_np(errno) : "made a child");
    printf("ok\n");
    return 0;
}
