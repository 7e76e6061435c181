/* The native interposer's own parts, shared by its files (none of it is
 * exported from the library: hidden visibility).
 *
 *   preload.c         which descriptors are the rack's, the interpreter it starts,
 *                     fork() and exec(); the contract of the whole interposer
 *   preload_socket.c  the socket calls on rack descriptors (socket ... getsockopt)
 *   preload_vector.c  sendmsg, recvmsg, writev, readv; SCM_RIGHTS of rack descriptors
 *   preload_fd.c      the descriptor calls: fcntl, ioctl, dup, close_range
 *   preload_wait.c    the waits: poll, select, epoll's (read the runtime's inbox)
 *   preload_copy.c    sendfile, splice, sendmmsg, recvmmsg on rack descriptors
 *   preload_stdio.c   fdopen and dprintf on rack descriptors (glibc's stdio skips write)
 *   preload_signal.c  the program's signal handlers, wrapped: which ran (EINTR); SIGINT
 *                     kept from the interpreter's start
 *
 * Interface:
 *   rack[fd]        1: the program's descriptor of a rack socket; MAYBE: inherited
 *                   by an exec()ed image, asked about on first use (preload.c); OWN:
 *                   a Python program's own socket object's (sr_own)
 *   is_rack(fd)     fd is a rack socket's, and the call is the program's
 *   is_own(fd)      fd is a Python program's socket object's, and the call is the
 *                   program's: only the calls on the descriptor itself (read, write,
 *                   readv, writev, FIONREAD, sendfile, dup2 onto another) come here
 *   rack_send, rack_recv, rack_sendto, rack_recvfrom
 *                   a send or recv on a rack descriptor (no is_rack asked)
 *   say_once        a line on stderr, the first time
 *   python_thread() the call is the interpreter's own (it goes to libc)
 *   GUEST(sr.fn, ...) a call of native/guest.h, counted as the interpreter's
 *   fast_recv       fr_recv (native/fastrecv.h), asked before sr.recv: a stream's
 *                   bytes already there, taken without the interpreter
 *   libc_NAME()     libc's definition of NAME (REAL(...) declares it, per file)
 *   ret(r)          -errno -> -1 with errno set, as libc returns
 *   mark(fd)        a new rack descriptor into the table (ret() of a -errno)
 *   start_guest     once (guest_once): the interpreter and native._guest loaded
 *   watch(fd)       the first wait on a rack socket makes readiness exact, and the
 *                   runtime polled (polled_waits: preload_wait.c) or threaded
 */
#ifndef SPLITRACK_PRELOAD_H
#define SPLITRACK_PRELOAD_H

#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#define RACK_FDS 65536
#define EXIT_CANNOT_RUN 127
#define MAYBE 2          /* rack[fd] of an inherited socket not asked about yet */
#define OWN 3            /* rack[fd] of a Python program's own socket object (sr_own) */

#pragma GCC visibility push(hidden)

extern _Atomic unsigned char rack[RACK_FDS];
extern int python_host;                  /* the program has an interpreter of its own */
extern int (*py_is_up)(void);            /* its Py_IsInitialized */
extern int fit_over_tcp;                 /* the rack's FIT is ZeroMQ over TCP */
extern int guest_up;                     /* the interpreter and native._guest are loaded */
extern pthread_once_t guest_once, inherit_once;
extern _Atomic int inheriting;           /* meanwhile MAYBE is no rack socket */
extern _Atomic int watched;              /* readiness is exact (sr_watch made it) */
extern _Atomic int polled_waits;         /* the program's waits read the inbox (polled) */
extern PyThreadState *(*py_this_thread)(void);   /* PyGILState_GetThisThreadState */

/* Which calls are the interpreter's: a thread inside a call to native._guest (the
 * stub's own syscalls), or a thread of the interpreter's own (the runtime's threads:
 * a Python thread state, and never a caller of native._guest). A thread of the
 * program that called it keeps a thread state too (cffi keeps one per thread). In a
 * Python program every thread has one, so there only the first counts. */
extern __thread int in_guest, program_thread;
/* A Python program's subprocess starts a program (fork_exec, splitrack/guest/spawning.py):
 * `spawning` is the pid of the process that does (this thread's, 0: none), and the
 * child it forks or vforks (which shares this thread's memory) makes only the
 * kernel's calls, and changes nothing here (spawned_child). */
extern __thread pid_t spawning;
static inline int spawned_child(void)
{
    return spawning && spawning != getpid();
}
void resolve_socket_calls(void);   /* libc's definitions found now, not in that child */
void resolve_fd_calls(void);
#define GUEST_CALL(fn, ...) ({ in_guest++; program_thread = 1; \
                               __typeof__(fn(__VA_ARGS__)) r_ = fn(__VA_ARGS__); in_guest--; r_; })
#define GUEST(fn, ...) ({ if (!in_guest) interruptible = 0; GUEST_CALL(fn, __VA_ARGS__); })
/* GUEST for a call that a signal handler without SA_RESTART ends with EINTR while it
 * waits, as Linux's does: accept, recv and send (sr_signal_ends_call: preload_signal.c;
 * a send that queued bytes returns their count, also after a handler with SA_RESTART,
 * which a finite SO_RCVTIMEO or SO_SNDTIMEO lets end any wait: sr_any_handler_ends).
 * No other: a close, a call whose answer changes the stub's state
 * must not end half done (connect: GUEST_LATER, below), and any other call of the
 * program clears the mark, should a handler have longjmp()ed out of one of these. */
extern __thread int interruptible;
void interruptible_begins(void);   /* (preload_signal.c: marks the thread, notes its count) */
void keep_program_sigint(int save);   /* (preload_signal.c) 1: note SIGINT, 0: put it back */
#define GUEST_INTERRUPTIBLE(fn, ...) ({ interruptible_begins(); \
        __typeof__(fn(__VA_ARGS__)) i_ = GUEST_CALL(fn, __VA_ARGS__); interruptible = 0; i_; })
/* GUEST_INTERRUPTIBLE for a call only part of whose wait is: connect, whose handshake's
 * wait the stub makes interruptible itself (sr_wait_interruptible), once the answer
 * that sets its state is in; the handlers' runs count from the call's start. */
#define GUEST_LATER(fn, ...) ({ interruptible_begins(); interruptible = 0; \
        __typeof__(fn(__VA_ARGS__)) l_ = GUEST_CALL(fn, __VA_ARGS__); interruptible = 0; l_; })

/* native._guest's functions (native/guest.h), found when it is loaded */
extern struct guest_calls {
    int (*socket)(int, int, int);
    int (*bind)(int, uint32_t, int);
    int (*connect)(int, uint32_t, int);
    int (*listen)(int, int);
    int (*accept)(int, int, uint32_t *, int *);
    long (*send)(int, const void *, size_t, int, int, uint32_t, int);
    long (*recv)(int, void *, size_t, int, uint32_t *, int *);
    int (*shutdown)(int, int);
    int (*close)(int);
    int (*name)(int, int, uint32_t *, int *);
    int (*setsockopt)(int, int, int, const void *, int);
    int (*getsockopt)(int, int, int, void *, int *);
    int (*blocking)(int, int);
    int (*fionread)(int);
    int (*dup)(int, int);
    int (*exit)(void);
    int (*watch)(int);
    int (*wait_begin)(int, int *, int, int *);
    int (*wait_end)(void);
    int (*inherit)(const int *, int, int *);
    int (*memory)(void);
} sr;
/* fr_recv (native/fastrecv.h): a stream's recv of bytes already there, no interpreter */
extern long (*fast_recv)(int fd, void *buf, size_t n);

void start_guest(void);
void adopt_inherited(void);
int forked_child(void);   /* a fork()ed child of a rack program: its channel's fd, else -1 */
int mark(int fd);
void watch_now(void);
void std_flush(int fd);    /* stdout's or stderr's buffer out, for fd 1 or 2 (preload_stdio.c) */
void std_rebind(int fd);   /* stdin, stdout or stderr (fd 0-2) over a rack socket: a stream of
                              the interposer's reads and writes (preload_stdio.c) */
ssize_t rack_send(int fd, const void *buf, size_t n, int flags);   /* (preload_socket.c) */
ssize_t rack_recv(int fd, void *buf, size_t n, int flags);
ssize_t rack_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
                    socklen_t len);
ssize_t rack_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                      socklen_t *len);
void say_once(_Atomic int *said, const char *line);   /* a line on stderr, the first time */
int passes_rack_socket(const struct msghdr *msg);   /* SCM_RIGHTS of a rack descriptor: refused
                                                       (said once) */

/* fd, made by the rack's own code in a native program (the guest's), moved out of the
 * program's way, past the descriptors it numbers as on Linux (preload_fd.c); any
 * other returned as it is */
int rack_own(int fd);
extern _Atomic int guest_starting;   /* (preload.c: while start_guest runs, and on which */
extern __thread int starting_here;   /* threads: the rack's own code's calls too) */

#pragma GCC visibility pop

/* libc's definition of `name`, looked up once (RTLD_NEXT: the one after this library) */
#define REAL(ret, name, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    static ret (*libc_##name(void))(__VA_ARGS__) { \
        if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); \
        return real_##name; }

static inline int python_thread(void)
{
    return spawned_child()
        || (guest_up && (in_guest || (!python_host && !program_thread && py_this_thread() != NULL)));
}

static inline int is_rack(int fd)
{
    if (fd < 0 || fd >= RACK_FDS)
        return 0;
    int v = atomic_load_explicit(&rack[fd], memory_order_relaxed);
    if (v == MAYBE) {   /* (not while python itself starts: the guest needs it up) */
        if (spawned_child() || atomic_load(&inheriting) || (python_host && !py_is_up()))
            return 0;
        pthread_once(&inherit_once, adopt_inherited);
        v = atomic_load(&rack[fd]);
    }
    return v == 1 && !python_thread();
}

/* A Python program's socket object makes its socket calls in Python (the stub), and
 * its own syscalls on its descriptor (close, dup, fcntl) are the kernel's; a call
 * made on the descriptor itself, by the program (os.read, os.write, io.FileIO...),
 * is the stub's: the guest is started for it (splitrack/guest/own_fds.py). */
static inline int is_own(int fd)
{
    if (fd < 0 || fd >= RACK_FDS
            || atomic_load_explicit(&rack[fd], memory_order_relaxed) != OWN || python_thread())
        return 0;
    pthread_once(&guest_once, start_guest);
    return 1;
}

extern int (*py_interrupt)(int);   /* PyErr_SetInterruptEx, in a Python program */

/* What a call on a Python program's own descriptor (is_own) returns: a Ctrl-C while the
 * stub waited said EINTR (splitrack/guest/interposer.py), and SIGINT is tripped again,
 * for Python to raise once the call returns (os.read checks its signals on EINTR). */
static inline long own_done(long r)
{
    if (r == -1 && errno == EINTR && py_interrupt)
        py_interrupt(SIGINT);
    return r;
}

/* fd closes, or another file takes its number: it is no Python socket object's now */
static inline void not_own(int fd)
{
    unsigned char own = OWN;
    if (fd >= 0 && fd < RACK_FDS && atomic_load_explicit(&rack[fd], memory_order_relaxed) == OWN
            && !spawned_child())
        atomic_compare_exchange_strong(&rack[fd], &own, 0);
}

static inline long ret(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static inline void watch(int fd)
{
    if (!atomic_load_explicit(&watched, memory_order_relaxed) && is_rack(fd)
        && !atomic_exchange(&watched, 1))
        atomic_store(&polled_waits, GUEST(sr.watch, !python_host) == 1);
}

#endif
