/* The native interposer: a dynamically linked program's TCP and UDP sockets
 * are the rack's.
 *
 * `splitrack run` preloads this library (LD_PRELOAD) into every program it
 * starts. It defines libc's socket calls; each looks at its descriptor and
 * either passes the call to libc (the next definition, dlsym RTLD_NEXT) or,
 * for a rack socket, makes the call of native/guest.h, which the one
 * bsdSocketStub implementation serves (splitrack/guest/interposer.py) in an
 * interpreter this library starts inside the program on its first
 * socket(AF_INET, SOCK_STREAM | SOCK_DGRAM):
 *
 *   - which descriptors are the rack's: `rack[fd]`, set when socket(),
 *     accept(), dup() made one here, cleared by close();
 *   - calls made by the interpreter itself (any thread with a Python thread
 *     state: the stub's own syscalls, the runtime's threads) always go to
 *     libc, so nothing loops back (`python_thread`);
 *   - poll, select and epoll go to the kernel: a rack descriptor is a real one
 *     whose readiness the stub keeps exact (splitrack/guest/bell.py) once the
 *     runtime is threaded; the first of them that names a rack socket makes it
 *     so (sr_watch), and until then blocking calls wait inline, a thread hop
 *     less a message;
 *   - AF_INET6 is EAFNOSUPPORT (the rack's NICs are IPv4), never the host's;
 *     any other network socket (raw, packet, netlink) stays the host's, said
 *     once on stderr;
 *   - fork(): the interpreter is made safe for the child (its lock, its
 *     threads); the child's inherited rack sockets work through its parent, and
 *     those it makes are its own, as for a Python program
 *     (splitrack/guest/forked.py);
 *   - exec(): rack descriptors are close-on-exec, but in a fork()ed child, whose
 *     new image takes those it kept open back from the parent (below);
 *   - exit(): every stub closes, so what was sent just before still leaves;
 *   - --memory rack (SPLITRACK_MEMORY=rack): the interpreter starts before main()
 *     and puts the program's malloc and anonymous mmap in rack pages
 *     (preload_memory.c, the other file of this library).
 *
 * A program with an interpreter of its own (python itself) makes its rack sockets
 * through the drop-in module (splitrack/guest/rsocket.py), without libc's socket().
 * A TCP or UDP socket that libc makes there all the same (a C library's: uvloop's
 * libuv; or Python's own with the drop-in off, python -I) is a stub too, served by
 * that interpreter (no second one is started), and so is a stub's descriptor that
 * detach() hands out (uvloop's create_server gives its listener's to libuv that
 * way): sr_interpose, which splitrack/guest/interposer.py calls.
 *
 * The interpreter is the one `splitrack run`'s pMonitor names: SPLITRACK_LIBPYTHON
 * (its shared library), SPLITRACK_PYTHONHOME, SPLITRACK_GUEST_SITE (the
 * directories where splitrack is installed), SPLITRACK_GUEST_LIB (native._guest).
 * If it cannot start, the program stops (exit status 127) rather than run on the
 * host's network.
 */
#define _GNU_SOURCE
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "guest.h"

#define RACK_FDS 65536
#define EXIT_CANNOT_RUN 127

static _Atomic unsigned char rack[RACK_FDS];   /* 1: the program's descriptor of a rack socket */
static int python_host;                        /* the program has an interpreter of its own */
static int (*py_is_up)(void);                  /* its Py_IsInitialized */
static int fit_over_tcp;                       /* the rack's FIT is ZeroMQ over TCP */
static int guest_up;                           /* the interpreter and native._guest are loaded */
static pthread_once_t guest_once = PTHREAD_ONCE_INIT;

/* Which calls are the interpreter's: a thread inside a call to native._guest (the
 * stub's own syscalls), or a thread of the interpreter's own (the runtime's threads:
 * a Python thread state, and never a caller of native._guest). A thread of the
 * program that called it keeps a thread state too (cffi keeps one per thread). In a
 * Python program every thread has one, so there only the first counts. */
static __thread int in_guest, program_thread;
#define GUEST(fn, ...) ({ in_guest++; program_thread = 1; \
                          __typeof__(fn(__VA_ARGS__)) r_ = fn(__VA_ARGS__); in_guest--; r_; })

/* ---- libc's definitions ---------------------------------------------------------------- */
#define REAL(ret, name, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    static ret (*libc_##name(void))(__VA_ARGS__) { \
        if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); \
        return real_##name; }

REAL(int, socket, int, int, int)
REAL(int, bind, int, const struct sockaddr *, socklen_t)
REAL(int, connect, int, const struct sockaddr *, socklen_t)
REAL(int, listen, int, int)
REAL(int, accept, int, struct sockaddr *, socklen_t *)
REAL(int, accept4, int, struct sockaddr *, socklen_t *, int)
REAL(ssize_t, send, int, const void *, size_t, int)
REAL(ssize_t, sendto, int, const void *, size_t, int, const struct sockaddr *, socklen_t)
REAL(ssize_t, sendmsg, int, const struct msghdr *, int)
REAL(ssize_t, recv, int, void *, size_t, int)
REAL(ssize_t, recvfrom, int, void *, size_t, int, struct sockaddr *, socklen_t *)
REAL(ssize_t, recvmsg, int, struct msghdr *, int)
REAL(ssize_t, read, int, void *, size_t)
REAL(ssize_t, write, int, const void *, size_t)
REAL(ssize_t, readv, int, const struct iovec *, int)
REAL(ssize_t, writev, int, const struct iovec *, int)
REAL(int, close, int)
REAL(int, shutdown, int, int)
REAL(int, getsockopt, int, int, int, void *, socklen_t *)
REAL(int, setsockopt, int, int, int, const void *, socklen_t)
REAL(int, getsockname, int, struct sockaddr *, socklen_t *)
REAL(int, getpeername, int, struct sockaddr *, socklen_t *)
REAL(int, fcntl, int, int, ...)
REAL(int, fcntl64, int, int, ...)
REAL(int, ioctl, int, unsigned long, ...)
REAL(int, dup, int)
REAL(int, dup2, int, int)
REAL(int, dup3, int, int, int)
REAL(int, poll, struct pollfd *, nfds_t, int)
REAL(int, ppoll, struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)
REAL(int, select, int, fd_set *, fd_set *, fd_set *, struct timeval *)
REAL(int, pselect, int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)
REAL(int, epoll_ctl, int, int, int, struct epoll_event *)

/* ---- native._guest, in an interpreter of the program's own ------------------------------- */
static struct {
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
    int (*dup)(int, int);
    int (*exit)(void);
    int (*watch)(void);
    int (*inherit)(const int *, int, int *);
    int (*memory)(void);
} sr;

static PyThreadState *(*py_this_thread)(void);   /* PyGILState_GetThisThreadState */
static PyGILState_STATE (*py_ensure)(void);
static void (*py_release)(PyGILState_STATE);
static void (*py_before_fork)(void), (*py_after_parent)(void), (*py_after_child)(void);
static PyGILState_STATE fork_gil;

static void cannot_run(const char *what, const char *why)
{
    fprintf(stderr, "splitrack: cannot start the rack's sockets in this program: %s%s%s\n",
            what, why ? ": " : "", why ? why : "");
    _exit(EXIT_CANNOT_RUN);
}

static void *need(void *lib, const char *symbol)
{
    void *p = dlsym(lib, symbol);
    if (!p)
        cannot_run(symbol, dlerror());
    return p;
}

static const char SITE_CODE[] =
    "import os, site, sys\n"
    "for d in reversed(os.environ.get('SPLITRACK_GUEST_SITE', '').split(os.pathsep)):\n"
    "    if d:\n"
    "        known = set(sys.path)\n"
    "        site.addsitedir(d)\n"
    "        sys.path[:] = [d] + [p for p in sys.path if p != d]\n";

/* Python starts in a thread of its own, so that no thread of the program keeps a
 * Python thread state (which `python_thread` takes for the interpreter's). */
static void *start_python(void *unused)
{
    (void)unused;
    const char *lib = getenv("SPLITRACK_LIBPYTHON"), *home = getenv("SPLITRACK_PYTHONHOME");
    if (!lib || !home)
        cannot_run("SPLITRACK_LIBPYTHON and SPLITRACK_PYTHONHOME are not set", NULL);
    void *py = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!py)
        cannot_run(lib, dlerror());
    void (*init_config)(PyConfig *) = need(py, "PyConfig_InitIsolatedConfig");
    PyStatus (*set_home)(PyConfig *, wchar_t **, const char *) = need(py, "PyConfig_SetBytesString");
    PyStatus (*init)(const PyConfig *) = need(py, "Py_InitializeFromConfig");
    void (*clear)(PyConfig *) = need(py, "PyConfig_Clear");
    int (*run)(const char *) = need(py, "PyRun_SimpleString");
    PyThreadState *(*save)(void) = need(py, "PyEval_SaveThread");
    py_this_thread = need(py, "PyGILState_GetThisThreadState");
    py_ensure = need(py, "PyGILState_Ensure");
    py_release = need(py, "PyGILState_Release");
    py_before_fork = need(py, "PyOS_BeforeFork");
    py_after_parent = need(py, "PyOS_AfterFork_Parent");
    py_after_child = need(py, "PyOS_AfterFork_Child");

    PyConfig config;
    init_config(&config);   /* isolated: no PYTHONPATH, no drop-in, no user site */
    config.install_signal_handlers = 0;   /* the program's signals stay the program's */
    config.site_import = 0;               /* only SPLITRACK_GUEST_SITE's packages */
    PyStatus status = set_home(&config, &config.home, home);
    if (!status._type != 0 /* an error, or an exit */)
        status = init(&config);
    clear(&config);
    if (status._type != 0 /* an error, or an exit */)
        cannot_run("the interpreter", status.err_msg);
    if (run(SITE_CODE) != 0)
        cannot_run("SPLITRACK_GUEST_SITE", "see above");
    save();
    return NULL;
}

/* (the interpreter's fork hooks make syscalls of their own: in_guest) */
static void before_fork(void) { in_guest++; fork_gil = py_ensure(); py_before_fork(); }
static void after_fork_parent(void) { py_after_parent(); py_release(fork_gil); in_guest--; }
static void after_fork_child(void) { py_after_child(); py_release(fork_gil); in_guest--; }
static void at_exit(void) { GUEST(sr.exit); }

static void start_guest(void)
{
    pthread_t t;
    if (python_host)   /* its own interpreter runs native._guest */
        py_this_thread = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    else if (pthread_create(&t, NULL, start_python, NULL) != 0 || pthread_join(t, NULL) != 0)
        cannot_run("a thread to start the interpreter in", strerror(errno));
    const char *path = getenv("SPLITRACK_GUEST_LIB");
    void *lib = path ? dlopen(path, RTLD_NOW) : NULL;
    if (!lib)
        cannot_run("SPLITRACK_GUEST_LIB", path ? dlerror() : "not set");
    sr.socket = need(lib, "sr_socket");
    sr.bind = need(lib, "sr_bind");
    sr.connect = need(lib, "sr_connect");
    sr.listen = need(lib, "sr_listen");
    sr.accept = need(lib, "sr_accept");
    sr.send = need(lib, "sr_send");
    sr.recv = need(lib, "sr_recv");
    sr.shutdown = need(lib, "sr_shutdown");
    sr.close = need(lib, "sr_close");
    sr.name = need(lib, "sr_name");
    sr.setsockopt = need(lib, "sr_setsockopt");
    sr.getsockopt = need(lib, "sr_getsockopt");
    sr.blocking = need(lib, "sr_blocking");
    sr.dup = need(lib, "sr_dup");
    sr.exit = need(lib, "sr_exit");
    sr.watch = need(lib, "sr_watch");
    sr.inherit = need(lib, "sr_inherit");
    sr.memory = need(lib, "sr_memory");
    int (*ready)(void) = need(lib, "sr_ready");
    if (GUEST(ready) != 1)   /* its init code failed: cffi printed why */
        cannot_run("native._guest", "see above");
    if (!python_host) {   /* (python's os.fork and exit do these themselves) */
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        atexit(at_exit);
    }
    guest_up = 1;
}

static inline int python_thread(void)
{
    return guest_up && (in_guest || (!python_host && !program_thread && py_this_thread() != NULL));
}

/* ---- exec(): the rack sockets an image of a fork()ed child inherited ------------------- */
/* A fork()ed child of a rack program reaches its parent's rack sockets over a channel
 * it keeps across exec(), named by SPLITRACK_FORK_CHANNEL ("fd:pid", for this pid
 * only: splitrack/guest/forked.py). An image it exec()s marks every socket
 * descriptor it inherited MAYBE; the first call on one of them starts the guest,
 * which asks the parent which are its (sr_inherit): those are rack sockets from then
 * on, the rest the kernel's. (An inetd-style server: accept, fork, dup2 the
 * connection onto 0 and 1, exec.) */
#define MAYBE 2
#define MAYBE_FDS 1024   /* the inherited descriptors looked at */
static pthread_once_t inherit_once = PTHREAD_ONCE_INIT;
static _Atomic int inheriting;   /* meanwhile MAYBE is no rack socket (the guest's own calls) */

/* This process is a fork()ed child of a rack program, with a channel to its parent:
 * the channel's descriptor, else -1. */
static int forked_child(void)
{
    const char *env = getenv("SPLITRACK_FORK_CHANNEL");
    const char *colon = env ? strchr(env, ':') : NULL;
    return colon && atol(colon + 1) == (long)getpid() ? atoi(env) : -1;
}

static void note_inherited(void)   /* (at load) */
{
    int channel = forked_child();
    if (channel < 0)
        return;
    struct stat st;
    for (int fd = 0; fd < MAYBE_FDS; fd++)
        if (fd != channel && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
            atomic_store(&rack[fd], MAYBE);
}

static void adopt_inherited(void)
{
    int fds[MAYBE_FDS], is[MAYBE_FDS], n = 0;
    atomic_store(&inheriting, 1);
    pthread_once(&guest_once, start_guest);
    for (int fd = 0; fd < MAYBE_FDS; fd++)
        if (atomic_load(&rack[fd]) == MAYBE)
            fds[n++] = fd;
    int r = GUEST(sr.inherit, fds, n, is);
    if (r < 0)
        fprintf(stderr, "splitrack: the rack sockets this program inherited are not its: %s\n",
                strerror(-r));
    for (int i = 0; i < n; i++)
        atomic_store(&rack[fds[i]], r == 0 && is[i] ? 1 : 0);
    atomic_store(&inheriting, 0);
}

/* fd is a rack socket's, and the call is the program's. */
static inline int is_rack(int fd)
{
    if (fd < 0 || fd >= RACK_FDS)
        return 0;
    int v = atomic_load_explicit(&rack[fd], memory_order_relaxed);
    if (v == MAYBE) {   /* (not while python itself starts: the guest needs it up) */
        if (atomic_load(&inheriting) || (python_host && !py_is_up()))
            return 0;
        pthread_once(&inherit_once, adopt_inherited);
        v = atomic_load(&rack[fd]);
    }
    return v == 1 && !python_thread();
}

static inline long ret(long r)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static int mark(int fd)
{
    if (fd < 0)
        return ret(fd);
    if (fd >= RACK_FDS) {   /* beyond the table: never the program's */
        GUEST(sr.close, fd);
        errno = EMFILE;
        return -1;
    }
    atomic_store(&rack[fd], 1);
    return fd;
}

/* ---- readiness: the first wait on a rack socket makes the runtime threaded ------------- */
static _Atomic int watched;

static inline void watch(int fd)
{
    if (!atomic_load_explicit(&watched, memory_order_relaxed) && is_rack(fd)
        && !atomic_exchange(&watched, 1))
        GUEST(sr.watch);
}

/* In a Python program, a rack socket libc made, or a descriptor handed over, is C
 * code's (libuv's), whose waits may not come through here (libuv can hand its
 * epoll_ctl calls to io_uring): threaded at once. */
static void watch_now(void)
{
    if (!atomic_exchange(&watched, 1))
        GUEST(sr.watch);
}

/* A Python program's stub descriptor, handed out by detach(), is interposed from now
 * on (splitrack/guest/interposer.py calls this: in a Python program only). */
__attribute__((visibility("default"))) void sr_interpose(int fd)
{
    pthread_once(&guest_once, start_guest);
    if (fd >= 0 && fd < RACK_FDS)
        atomic_store(&rack[fd], 1);
    watch_now();
}

/* ---- addresses -------------------------------------------------------------------------- */
static int in_address(const struct sockaddr *addr, socklen_t len, uint32_t *ip, int *port)
{
    if (!addr || len < sizeof(struct sockaddr_in))
        return -EINVAL;
    if (addr->sa_family != AF_INET)
        return -EAFNOSUPPORT;
    const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
    *ip = ntohl(in->sin_addr.s_addr);
    *port = ntohs(in->sin_port);
    return 0;
}

static void out_address(uint32_t ip, int port, struct sockaddr *addr, socklen_t *len)
{
    if (!addr || !len)
        return;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(ip)};
    memcpy(addr, &in, *len < sizeof in ? *len : sizeof in);
    *len = sizeof in;   /* as the kernel: the full size, even if truncated */
}

/* ---- the calls -------------------------------------------------------------------------- */
static void say_once(_Atomic int *said, const char *line)
{
    if (!atomic_exchange(said, 1))
        fprintf(stderr, "splitrack: %s\n", line);
}

int socket(int domain, int type, int protocol)
{
    static _Atomic int said_host;
    int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    int network = (domain == AF_INET || domain == AF_INET6)
                  && (kind == SOCK_STREAM || kind == SOCK_DGRAM);
    if (python_thread() || (python_host && (!network || fit_over_tcp)))
        return libc_socket()(domain, type, protocol);
    if (domain == AF_INET6 && (kind == SOCK_STREAM || kind == SOCK_DGRAM)) {
        errno = EAFNOSUPPORT;   /* the rack's NICs are IPv4: never the host's */
        return -1;
    }
    if (domain != AF_INET || (kind != SOCK_STREAM && kind != SOCK_DGRAM)) {
        if (domain != AF_UNIX && domain != AF_LOCAL && !python_host)   /* (the drop-in says) */
            say_once(&said_host, "a raw, packet or netlink socket is the host's, not the "
                                 "rack's: only TCP and UDP over IPv4 cross the rack");
        return libc_socket()(domain, type, protocol);
    }
    pthread_once(&guest_once, start_guest);
    if (python_host)
        watch_now();
    return mark(GUEST(sr.socket, domain, type, protocol));
}

/* bind or connect: the stub's, with the address as guest.h takes it */
static int to_address(int fd, const struct sockaddr *addr, socklen_t len,
                      int (*call)(int, uint32_t, int))
{
    uint32_t ip;
    int port, r = in_address(addr, len, &ip, &port);
    return ret(r ? r : GUEST(call, fd, ip, port));
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    return is_rack(fd) ? to_address(fd, addr, len, sr.bind) : libc_bind()(fd, addr, len);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    return is_rack(fd) ? to_address(fd, addr, len, sr.connect)
                       : libc_connect()(fd, addr, len);
}

int listen(int fd, int backlog)
{
    return is_rack(fd) ? ret(GUEST(sr.listen, fd, backlog)) : libc_listen()(fd, backlog);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    if (!is_rack(fd))
        return libc_accept4()(fd, addr, len, flags);
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
        errno = EINVAL;
        return -1;
    }
    uint32_t ip = 0;
    int port = 0, conn = GUEST(sr.accept, fd, flags, &ip, &port);
    if (conn >= 0)
        out_address(ip, port, addr, len);
    return mark(conn);
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? accept4(fd, addr, len, 0) : libc_accept()(fd, addr, len);
}

/* A send on a broken connection raises SIGPIPE, unless MSG_NOSIGNAL: as Linux's. */
static ssize_t sent(long r, int flags)
{
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
        raise(SIGPIPE);
    return ret(r);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
               socklen_t len)
{
    if (!is_rack(fd))
        return libc_sendto()(fd, buf, n, flags, addr, len);
    uint32_t ip = 0;
    int port = 0, to = addr ? in_address(addr, len, &ip, &port) : 0;   /* -errno if not IPv4 */
    return sent(GUEST(sr.send, fd, buf, n, flags, addr && !to ? 1 : to, ip, port), flags);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    return is_rack(fd) ? sent(GUEST(sr.send, fd, buf, n, flags, 0, 0, 0), flags)
                       : libc_send()(fd, buf, n, flags);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    return is_rack(fd) ? sent(GUEST(sr.send, fd, buf, n, 0, 0, 0, 0), 0) : libc_write()(fd, buf, n);
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
    if (!is_rack(fd))
        return libc_recvfrom()(fd, buf, n, flags, addr, len);
    uint32_t ip = 0;
    int port = 0;
    long r = GUEST(sr.recv, fd, buf, n, flags, addr ? &ip : NULL, addr ? &port : NULL);
    if (r >= 0 && addr && port < 0 && len)
        *len = 0;   /* a stream's: no address, as Linux's TCP says */
    else if (r >= 0 && addr)
        out_address(ip, port, addr, len);
    return ret(r);
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    return is_rack(fd) ? ret(GUEST(sr.recv, fd, buf, n, flags, NULL, NULL))
                       : libc_recv()(fd, buf, n, flags);
}

ssize_t read(int fd, void *buf, size_t n)
{
    return is_rack(fd) ? ret(GUEST(sr.recv, fd, buf, n, 0, NULL, NULL)) : libc_read()(fd, buf, n);
}

/* _FORTIFY_SOURCE's checked reads (Debian builds its programs with them). */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t room)
{
    if (n > room)
        abort();
    return read(fd, buf, n);
}

ssize_t __recv_chk(int fd, void *buf, size_t n, size_t room, int flags)
{
    if (n > room)
        abort();
    return recv(fd, buf, n, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t room, int flags,
                       struct sockaddr *addr, socklen_t *len)
{
    if (n > room)
        abort();
    return recvfrom(fd, buf, n, flags, addr, len);
}

/* Vectors go through one buffer: a stub's send and recv take one. */
static size_t iov_total(const struct iovec *iov, int count)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += iov[i].iov_len;
    return total;
}

static ssize_t send_vector(int fd, const struct iovec *iov, int count, int flags,
                           const struct sockaddr *addr, socklen_t len)
{
    if (count == 1)
        return sendto(fd, iov[0].iov_base, iov[0].iov_len, flags, addr, len);
    size_t total = iov_total(iov, count), at = 0;
    char *flat = malloc(total ? total : 1);
    if (!flat) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < count; i++) {
        memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    ssize_t r = sendto(fd, flat, total, flags, addr, len);
    free(flat);
    return r;
}

static ssize_t recv_vector(int fd, const struct iovec *iov, int count, int flags,
                           struct sockaddr *addr, socklen_t *len)
{
    if (count == 1)
        return recvfrom(fd, iov[0].iov_base, iov[0].iov_len, flags, addr, len);
    size_t total = iov_total(iov, count);
    char *flat = malloc(total ? total : 1);
    if (!flat) {
        errno = ENOMEM;
        return -1;
    }
    ssize_t r = recvfrom(fd, flat, total, flags, addr, len);
    for (size_t at = 0, i = 0; r > 0 && at < (size_t)r; i++) {
        size_t k = iov[i].iov_len < (size_t)r - at ? iov[i].iov_len : (size_t)r - at;
        memcpy(iov[i].iov_base, flat + at, k);
        at += k;
    }
    free(flat);
    return r;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (!is_rack(fd))
        return libc_sendmsg()(fd, msg, flags);
    if (msg->msg_controllen) {
        errno = EOPNOTSUPP;   /* no ancillary data on rack sockets */
        return -1;
    }
    return send_vector(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
                       msg->msg_namelen);
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    if (!is_rack(fd))
        return libc_recvmsg()(fd, msg, flags);
    msg->msg_controllen = 0;
    msg->msg_flags = 0;
    return recv_vector(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
                       msg->msg_name ? &msg->msg_namelen : NULL);
}

ssize_t writev(int fd, const struct iovec *iov, int count)
{
    return is_rack(fd) ? send_vector(fd, iov, count, 0, NULL, 0) : libc_writev()(fd, iov, count);
}

ssize_t readv(int fd, const struct iovec *iov, int count)
{
    return is_rack(fd) ? recv_vector(fd, iov, count, 0, NULL, NULL)
                       : libc_readv()(fd, iov, count);
}

int shutdown(int fd, int how)
{
    return is_rack(fd) ? ret(GUEST(sr.shutdown, fd, how)) : libc_shutdown()(fd, how);
}

int close(int fd)
{
    if (!is_rack(fd))
        return libc_close()(fd);
    atomic_store(&rack[fd], 0);   /* first: once closed, the number may be reused */
    return ret(GUEST(sr.close, fd));
}

static int rack_name(int fd, int peer, struct sockaddr *addr, socklen_t *len)
{
    uint32_t ip = 0;
    int port = 0, r = GUEST(sr.name, fd, peer, &ip, &port);
    if (r == 0)
        out_address(ip, port, addr, len);
    return ret(r);
}

int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? rack_name(fd, 0, addr, len) : libc_getsockname()(fd, addr, len);
}

int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
    return is_rack(fd) ? rack_name(fd, 1, addr, len) : libc_getpeername()(fd, addr, len);
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    return is_rack(fd) ? ret(GUEST(sr.setsockopt, fd, level, name, value, (int)len))
                       : libc_setsockopt()(fd, level, name, value, len);
}

int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    if (!is_rack(fd))
        return libc_getsockopt()(fd, level, name, value, len);
    int n = (int)*len, r = GUEST(sr.getsockopt, fd, level, name, value, &n);
    if (r == 0)
        *len = (socklen_t)n;
    return ret(r);
}

/* ---- descriptors: flags, dup ----------------------------------------------------------- */

/* A new descriptor of a rack socket (the kernel's dup of `fd`) is one more handle of it. */
static int one_more(int fd, int newfd)
{
    if (newfd < 0)
        return newfd;
    int r = GUEST(sr.dup, fd, newfd);
    if (r < 0) {
        libc_close()(newfd);
        return ret(r);
    }
    return mark(newfd);
}

/* fcntl on a rack socket: O_NONBLOCK is the stub's (its descriptor stays non-blocking
 * underneath: the runtime reads it); a dup is one more handle; the rest is the kernel's. */
static int rack_fcntl(int fd, int cmd, long arg, int (*next)(int, int, ...))
{
    switch (cmd) {
    case F_GETFL: {
        int flags = next(fd, F_GETFL), blocking = GUEST(sr.blocking, fd, -1);
        if (flags < 0 || blocking < 0)
            return flags < 0 ? flags : ret(blocking);
        return blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK;
    }
    case F_SETFL:
        return ret(GUEST(sr.blocking, fd, !(arg & O_NONBLOCK)));
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        return one_more(fd, next(fd, F_DUPFD_CLOEXEC, arg));
    default:
        return next(fd, cmd, arg);
    }
}

/* (Python.h asks for 64-bit file offsets, under which glibc's header names fcntl
 * fcntl64: both symbols are defined here by their own names.) */
int fcntl_any(int fd, int cmd, ...) __asm__("fcntl");
int fcntl_64(int fd, int cmd, ...) __asm__("fcntl64");

int fcntl_any(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);   /* (every command's argument fits: int, long or pointer) */
    va_end(ap);
    return is_rack(fd) ? rack_fcntl(fd, cmd, arg, libc_fcntl()) : libc_fcntl()(fd, cmd, arg);
}

int fcntl_64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return is_rack(fd) ? rack_fcntl(fd, cmd, arg, libc_fcntl64())
                       : libc_fcntl64()(fd, cmd, arg);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (is_rack(fd) && request == FIONBIO)
        return ret(GUEST(sr.blocking, fd, !*(int *)arg));
    return libc_ioctl()(fd, request, arg);
}

int dup(int fd)
{
    return is_rack(fd) ? one_more(fd, libc_fcntl()(fd, F_DUPFD_CLOEXEC, 0)) : libc_dup()(fd);
}

int dup3(int fd, int newfd, int flags)
{
    if (python_thread() || (!is_rack(fd) && !is_rack(newfd)))
        return libc_dup3()(fd, newfd, flags);
    if (fd == newfd) {
        errno = EINVAL;
        return -1;
    }
    if (is_rack(newfd))
        close(newfd);   /* as dup3's own closing of newfd, but the stub's */
    if (!is_rack(fd))
        return libc_dup3()(fd, newfd, flags);
    /* close-on-exec, unless an image exec()ed here can take it back (a fork()ed child's) */
    return one_more(fd, libc_dup3()(fd, newfd, forked_child() >= 0 ? flags : O_CLOEXEC));
}

int dup2(int fd, int newfd)
{
    if (python_thread() || (!is_rack(fd) && !is_rack(newfd)))
        return libc_dup2()(fd, newfd);
    if (fd == newfd)
        return newfd;
    return dup3(fd, newfd, 0);
}

static void watch_polled(const struct pollfd *fds, nfds_t n)
{
    for (nfds_t i = 0; guest_up && !watched && i < n; i++)
        watch(fds[i].fd);
}

static void watch_selected(int n, const fd_set *r, const fd_set *w, const fd_set *e)
{
    for (int fd = 0; guest_up && !watched && fd < n && fd < FD_SETSIZE; fd++)
        if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
            watch(fd);
}

/* (glibc declares poll's fds write-only; they are read here, as the kernel reads them) */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    watch_polled(fds, n);
    return libc_poll()(fds, n, timeout);
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
    watch_polled(fds, n);
    return libc_ppoll()(fds, n, timeout, mask);
}

/* _FORTIFY_SOURCE's checked polls */
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t room)
{
    if (n > room / sizeof *fds)
        abort();
    return poll(fds, n, timeout);
}

int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
                const sigset_t *mask, size_t room)
{
    if (n > room / sizeof *fds)
        abort();
    return ppoll(fds, n, timeout, mask);
}

int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
    watch_selected(n, r, w, e);
    return libc_select()(n, r, w, e, timeout);
}

int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
            const sigset_t *mask)
{
    watch_selected(n, r, w, e);
    return libc_pselect()(n, r, w, e, timeout, mask);
}

int epoll_ctl(int ep, int op, int fd, struct epoll_event *event)
{
    if (guest_up && op != EPOLL_CTL_DEL)
        watch(fd);
    return libc_epoll_ctl()(ep, op, fd, event);
}

__attribute__((constructor)) static void notice_python(void)
{
    /* python itself (or a program that embeds one): its own interpreter runs the drop-in */
    py_is_up = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    python_host = py_is_up != NULL;
    note_inherited();
    const char *global = getenv("SPLITRACK_GLOBAL");   /* FIT over ZeroMQ's TCP: its */
    fit_over_tcp = global && strncmp(global, "tcp://", 6) == 0;   /* sockets are the rack's */
    const char *memory = getenv("SPLITRACK_MEMORY");   /* (a Python's: rackmem.py) */
    if (!python_host && memory && strcmp(memory, "rack") == 0) {
        pthread_once(&guest_once, start_guest);   /* its heap in rack pages before main() */
        if (GUEST(sr.memory) < 0)                 /* (native/preload_memory.c) */
            _exit(EXIT_CANNOT_RUN);               /* (it said why) */
    }
}
