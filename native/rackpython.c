/*
 * rackpython.c -- CPython's allocators into the rack heap (rm_install_python,
 * rackmem.h): its raw domain and pymalloc's arenas take blocks from
 * rackalloc.c; a block made before the hooks went in goes back to the
 * allocator that made it (realloc of one leaves it there).
 */
#define _GNU_SOURCE
#undef Py_LIMITED_API   /* PyMem_SetAllocator is not in the limited API */
#include <Python.h>

#include "rackmem.h"

#include <errno.h>

static PyMemAllocatorEx prev_raw;
static PyObjectArenaAllocator prev_arena;

static void *raw_malloc(void *ctx, size_t n) { (void)ctx; return rm_malloc(n ? n : 1); }

static void *raw_calloc(void *ctx, size_t n, size_t size) {
    (void)ctx;
    return rm_calloc(n ? n : 1, size ? size : 1);
}

static void *raw_realloc(void *ctx, void *p, size_t n) {
    (void)ctx;
    if (p && !rm_owns(p))   /* a block from before: it stays where it is */
        return prev_raw.realloc(prev_raw.ctx, p, n);
    return rm_realloc(p, n ? n : 1);
}

static void raw_free(void *ctx, void *p) {
    (void)ctx;
    if (rm_owns(p)) rm_free(p); else if (p) prev_raw.free(prev_raw.ctx, p);
}

static void *arena_alloc(void *ctx, size_t n) { (void)ctx; return rm_malloc(n); }

static void arena_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    if (rm_owns(p)) rm_free(p); else prev_arena.free(prev_arena.ctx, p, n);
}

int rm_install_python(void) {
    if (!rm_base())
        return -EINVAL;
    PyMemAllocatorEx raw = {NULL, raw_malloc, raw_calloc, raw_realloc, raw_free};
    PyObjectArenaAllocator arena = {NULL, arena_alloc, arena_free};
    PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &prev_raw);
    PyObject_GetArenaAllocator(&prev_arena);
    PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &raw);
    PyObject_SetArenaAllocator(&arena);
    return 0;
}
