/*
 * fastrecv.h -- a native program's recv() without the interpreter, when its
 * bytes are there already.
 *
 * The interposer (native/preload_socket.c) hands every recv(), read() and
 * address-less recvfrom() of a rack descriptor to the bsdSocketStub, through
 * the interpreter (native/guest.h). Most of a streaming reader's calls find
 * more bytes in the receive ring than they ask for: those need none of the
 * stub's logic, only a copy out of the ring's extCache lines. So the
 * interposer first asks fr_recv, which serves exactly that case (stubpath.h:
 * sp_take_more) and says -1 for everything else, which the stub then serves.
 *
 * The table maps a descriptor to its connection's sp_path. The stub's side
 * (splitrack/guest/interposer.py) puts a descriptor in once the stub has
 * served a recv on it (fr_on), and takes it out when the descriptor closes
 * (fr_off): once fr_off returns, no fr_recv is using that path, so it may be
 * freed. A path that stops being the socket's plain stream (released, or
 * broken: the stub's recv must say so) is turned off in the path itself
 * (sp_fast). A fork()ed child starts with an empty table: its rack sockets
 * are its parent's (splitrack/guest/forked.py).
 *
 * Credit: what fr_recv reads is given back to the skeleton (N_CREDIT), a
 * batch at a time, by the program's next polled wait (the interposer's), or
 * by the stub's next recv (fr_recv leaves it to the stub at half the ring).
 *
 * Ordering: the stub's side moves rtail with a plain store after the lines
 * are written (dDDIO) or dropped (dDMA); sp_take_more reads it with an
 * acquire load, which is enough on x86 (stores are not reordered), the
 * machines this runs on.
 */
#ifndef SPLITRACK_FASTRECV_H
#define SPLITRACK_FASTRECV_H

#include <stddef.h>
#include <stdint.h>

#include "stubpath.h"

/* fd's recv may take from p from now on: 0; -1 if fd is out of range (or no
 * memory for the table): then the stub serves every recv, as before. */
int fr_on(int fd, sp_path *p);

/* fd's recv is the stub's again (its descriptor closed). */
void fr_off(int fd);

/* Up to `want` bytes of fd's stream into buf: the count, or -1 (none taken:
 * not in the table, busy in another thread, or a case for the stub). */
long fr_recv(int fd, void *buf, size_t want);

/* The bytes fr_recv took since the last call (so a wait looks for credit to
 * give back only after some were: not at every wait of a busy server). */
uint64_t fr_taken(void);

#endif
