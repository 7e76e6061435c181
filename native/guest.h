/* The rack socket calls a native program makes, served by the bsdSocketStub.
 *
 * native/preload.c (the interposer, LD_PRELOAD) catches libc's socket calls
 * on rack descriptors and makes these; native._guest, built with cffi's
 * embedding API from this header, runs them in an interpreter started inside
 * the program, where splitrack/guest/interposer.py calls the one stub
 * implementation (splitrack/guest/stub.py, datagram.py).
 *
 * Each returns what libc's call returns, or -errno (never sets errno).
 * Addresses are IPv4, ip and port in host byte order. A descriptor is the
 * program's: fileno() of one handle of a stub, whose readiness is exact once
 * the program's runtime is polled (sr_watch: the program polls, selects or
 * uses epoll on a rack socket; until then its blocking calls wait inline,
 * and from then on its waits read the inbox: neither costs a thread hop a
 * message).
 */
#ifndef SPLITRACK_GUEST_H
#define SPLITRACK_GUEST_H

#include <stddef.h>
#include <stdint.h>

int sr_socket(int domain, int type, int protocol);            /* a new rack socket's fd */
int sr_bind(int fd, uint32_t ip, int port);
int sr_connect(int fd, uint32_t ip, int port);                /* -EINPROGRESS if non-blocking */
int sr_listen(int fd, int backlog);
int sr_accept(int fd, int flags, uint32_t *ip, int *port);    /* flags: SOCK_NONBLOCK|CLOEXEC */
/* to: 0 send, 1 sendto (ip, port), -errno an address that is not IPv4 (a stream
 * ignores it, as Linux's TCP does; a datagram socket fails with it) */
long sr_send(int fd, const void *buf, size_t len, int flags, int to, uint32_t ip, int port);
/* ip, port (if not NULL): a datagram's sender; port -1 for a stream (none) */
long sr_recv(int fd, void *buf, size_t len, int flags, uint32_t *ip, int *port);
int sr_shutdown(int fd, int how);
int sr_close(int fd);
int sr_name(int fd, int peer, uint32_t *ip, int *port);      /* getsockname / getpeername */
int sr_setsockopt(int fd, int level, int name, const void *value, int len);
int sr_getsockopt(int fd, int level, int name, void *value, int *len);
int sr_blocking(int fd, int blocking);                        /* -1: ask (1 blocking, 0 not) */
int sr_fionread(int fd);  /* FIONREAD: the bytes a recv would get now (a datagram: the next's) */
int sr_dup(int fd, int newfd);   /* newfd, the kernel's dup of fd, is one more handle of it */
int sr_exit(void);                                            /* exit(): every stub closes */
/* From now on, exact readiness (the program waits on a rack socket); polled: 1 if its waits
 * (native/preload_wait.c) read the runtime's inbox from now on (sr_wait_begin), 0 if a thread
 * of the runtime's does (a Python program: polled 0; or a fork()ed server's) */
int sr_watch(int polled);
/* A polled wait, before it sleeps: what waits in the inbox and the FIT shortcut channels is
 * handed out; with arm, this thread then holds them, armed, and their n descriptors are in
 * fds (at most room): sleep on them beside the program's, at most *most_ms (-1: no limit),
 * then sr_wait_end(). Else (nothing held):
 *   -EAGAIN  another thread reads them: sleep on the program's alone, at most *most_ms
 *   -ENOSPC  room is too small: *most_ms descriptors are needed
 *   -ENOENT  no runtime here yet (a fork()ed child's): the kernel's wait, this time
 *   -ENOTSUP the runtime is threaded: the kernel's waits from now on */
int sr_wait_begin(int arm, int *fds, int room, int *most_ms);
int sr_wait_end(void);   /* disarm, hand out what came: 1 if anything came, else 0 */
int sr_ready(void);                                           /* 1 once the stub is loaded */
/* fr_recv of native/fastrecv.h (the stub's recv of bytes already there, without the
 * interpreter), which the interposer asks before sr_recv; NULL: none */
void *sr_fast_recv(void);
/* --memory rack, before main(): the program's heap in rack pages (rackmem.py's install(),
 * which turns native/preload_memory.c's malloc and mmap to them); 0, or -errno after one
 * line on stderr saying why not */
int sr_memory(void);
/* exec(): which of these n socket descriptors, inherited by an image a fork()ed child
 * of a rack program exec()ed, are its parent's rack sockets (rack[i] = 1): they are
 * rack descriptors from now on (splitrack/guest/forked.py) */
int sr_inherit(const int *fds, int n, int *rack);

#endif
