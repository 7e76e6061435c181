/*
 * pager.h -- what the rack heap's pager's files share; the interface is rackmem.h.
 *
 *   pager.c       the fault handler: the pages' states, a miss, the pager thread,
 *                 lines for the process's other rack memory, freeing, start
 *   pager_link.c  its FIT calls to the mComponents (M_ALLOC, M_MISS, M_WRITEBACK),
 *                 one at a time under link_lock, in the pager's own buffers
 *   pager_say.c   its one line on stderr, formatted without libc's stdio
 *
 * Their one state is `R` (this library's own: hidden from the program, which may
 * have symbols of its own under the native interposer).
 */
#ifndef SPLITRACK_PAGER_H
#define SPLITRACK_PAGER_H

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "rackmem.h"

#define PAGE 4096u
#define RESIDENT 1u
#define DIRTY 2u
#define TOUCHED 4u
#define FAULT_AROUND 16   /* pages a first write to a fresh page brings in at once */

/* fit_rpc/ops.py; fit_rpc/pages.py's MISS layout */
#define OP_M_ALLOC 0x0401
#define OP_M_MISS 0x0403
#define OP_M_WRITEBACK 0x0404

typedef struct __attribute__((packed)) { uint32_t pid; uint64_t vpage; uint32_t vpid;
                                         uint64_t vvpage; } miss_req;

#define PAGER_OWN __attribute__((visibility("hidden")))

typedef struct {
    rm_config c;
    int uffd, mem;                  /* the userfaultfd; /proc/self/mem */
    uint8_t *state;                 /* per heap page */
    pthread_mutex_t pg_lock, link_lock;
    uint64_t reserved;              /* bytes from base reserved at the home */
    uint32_t seq;
    char *out, *req, *zero, *victim;
    rm_stats st;
    int started;
} pager_state;

extern PAGER_OWN pager_state R;

/* (pager_say.c) One line on stderr: "splitrack: rack memory: " and the message.
 * Knows %s, %u, %#x and %#lx. */
PAGER_OWN void pager_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* pager_say(), then end the program (errno strings: strerrordesc_np's, never a
 * locale's) */
#define fatal(...) do { pager_say(__VA_ARGS__); _exit(RM_EXIT_STATUS); } while (0)

/* (pager_link.c, link_lock held) One request to homes[h], its reply's payload in
 * R.out + HEADER_BYTES (*len bytes). Returns 0, the reply's error (negative
 * errno), or fails the program if the mComponent is gone or silent. */
PAGER_OWN int pager_call(uint32_t h, uint16_t op, const char *payload, uint32_t n,
                         uint32_t *len);

/* (pager_link.c) A dirty line of process pid's page vpage to its home (M_WRITEBACK);
 * fails the program if it cannot be. */
PAGER_OWN void pager_writeback(uint32_t home, uint32_t pid, uint64_t vpage, const char *line);

#endif
