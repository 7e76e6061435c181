/* A native program's memory, for `splitrack run --memory rack` (tests/test_rackmem_native.py):
 * usage: rackheap MIB. It allocates about MIB MiB with every call of the malloc family and
 * anonymous mmap, fills each block with bytes of its own, reads them all back twice, gives
 * some back (free, a munmap of part of a mapping) and allocates again, then tries fork().
 * Prints how many blocks lie in a rack heap, "fork: <errno name>", "ok"; exits
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
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    printf("fork: %s\n", child < 0 ? strerrorname_np(errno) : "made a child");
    printf("ok\n");
    return 0;
}
