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
 *   - a recv of a stream's bytes already there (more than it asks for) is
 *     taken in C, without the interpreter (native/fastrecv.h: fast_recv);
 *   - calls made by the interpreter itself (any thread with a Python thread
 *     state: the stub's own syscalls, the runtime's threads) always go to
 *     libc, so nothing loops back (`python_thread`);
 *   - poll, select and epoll go to the kernel: a rack descriptor is a real one
 *     whose readiness the stub keeps exact (splitrack/guest/bell.py) once the
 *     first of them names a rack socket (sr_watch); until then blocking calls
 *     wait inline, and from then on the waits read the runtime's inbox
 *     themselves (preload_wait.c): no thread hop a message either way;
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
 *   - signals stay the program's: the interpreter's start leaves SIGINT as it
 *     was, and a handler without SA_RESTART ends a blocking accept, recv, send
 *     or connect's handshake it interrupts with EINTR, any handler a send that
 *     did part with that part (preload_signal.c: its handlers are wrapped to say
 *     which ran; native/fitwait.c asks sr_signal_ends_call);
 *   - the rack's own descriptors live past the program's (preload_fd.c: rack_own);
 *   - --memory rack (SPLITRACK_MEMORY=rack): the interpreter starts before main()
 *     and puts the program's malloc and anonymous mmap in rack pages
 *     (preload_memory.c, preloaded too then).
 *
 * A program with an interpreter of its own (python itself) makes its rack sockets
 * through the drop-in module (splitrack/guest/rsocket.py), without libc's socket().
 * A TCP or UDP socket that libc makes there all the same (a C library's: uvloop's
 * libuv; or Python's own with the drop-in off, python -I) is a stub too, served by
 * that interpreter (no second one is started), and so is a stub's descriptor that
 * detach() hands out (uvloop's create_server gives its listener's to libuv that
 * way): sr_interpose, which splitrack/guest/interposer.py calls. A stub's own
 * descriptor is marked OWN (sr_own, from splitrack/guest/own_fds.py): the calls the
 * program makes on the descriptor itself (os.read, os.write, os.sendfile,
 * ioctl(FIONREAD), os.dup2...) come here, to that stub, and the stub's own (close,
 * dup, fcntl) stay libc's. While subprocess's fork_exec runs (sr_spawning, from
 * splitrack/guest/spawning.py) every call of the child it forks or vforks is
 * libc's; so are those the stub marks as its own (sr_quiet: the fork channel's).
 *
 * The interpreter is the one `splitrack run`'s pMonitor names: SPLITRACK_LIBPYTHON
 * (its shared library), SPLITRACK_PYTHONHOME, SPLITRACK_GUEST_SITE (the
 * directories where splitrack is installed), SPLITRACK_GUEST_LIB (native._guest).
 * If it cannot start, the program stops (exit status 127) rather than run on the
 * host's network.
 *
 * The library's files: this one (which descriptors are the rack's, the interpreter,
 * fork() and exec()), preload_socket.c (the socket calls), preload_vector.c
 * (sendmsg, recvmsg, writev, readv), preload_fd.c (fcntl, ioctl, dup,
 * close_range), preload_wait.c (poll, select, epoll), preload_copy.c (sendfile,
 * splice, sendmmsg, recvmmsg), preload_stdio.c (fdopen, dprintf),
 * preload_signal.c (the program's signal handlers, wrapped); preload.h is what they
 * share. preload_memory.c is native._preload_memory, preloaded with --memory rack.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Atomic unsigned char rack[RACK_FDS];
int python_host;
int (*py_interrupt)(int);
int (*py_is_up)(void);
int fit_over_tcp;
int guest_up;
_Atomic int guest_starting;   /* start_guest runs: the interpreter, the runtime (rack_own) */
__thread int starting_here;    /* ... on this thread (the caller's, the interpreter's) */
pthread_once_t guest_once = PTHREAD_ONCE_INIT;
__thread int in_guest, program_thread, interruptible;
__thread pid_t spawning;
struct guest_calls sr;
long (*fast_recv)(int, void *, size_t);

/* ---- native._guest, in an interpreter of the program's own ------------------------------- */
PyThreadState *(*py_this_thread)(void);
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
    "import os, signal, site, sys\n"   /* (signal: its first import takes SIGINT; below) */
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
    starting_here = 1;
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

    keep_program_sigint(1);
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
    keep_program_sigint(0);   /* (SITE_CODE imported signal: it takes nothing later) */
    save();
    return NULL;
}

/* (the interpreter's fork hooks make syscalls of their own: in_guest) */
static void before_fork(void) { in_guest++; fork_gil = py_ensure(); py_before_fork(); }
static void after_fork_parent(void) { py_after_parent(); py_release(fork_gil); in_guest--; }
static void after_fork_child(void) { py_after_child(); py_release(fork_gil); in_guest--; }
/* exit(): the program's stdio first (glibc flushes it only after the atexit handlers,
 * when a stream on a rack socket, preload_stdio.c, would find its stub closed), then
 * every stub's bytes out and its socket closed */
static void at_exit(void)
{
    fflush(NULL);
    GUEST(sr.exit);
}

void start_guest(void)
{
    pthread_t t;
    atomic_store(&guest_starting, 1);
    starting_here = 1;
    if (python_host) {   /* its own interpreter runs native._guest */
        py_this_thread = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
        py_interrupt = dlsym(RTLD_DEFAULT, "PyErr_SetInterruptEx");
    } else if (pthread_create(&t, NULL, start_python, NULL) != 0 || pthread_join(t, NULL) != 0)
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
    sr.fionread = need(lib, "sr_fionread");
    sr.dup = need(lib, "sr_dup");
    sr.exit = need(lib, "sr_exit");
    sr.watch = need(lib, "sr_watch");
    sr.wait_begin = need(lib, "sr_wait_begin");
    sr.wait_end = need(lib, "sr_wait_end");
    sr.inherit = need(lib, "sr_inherit");
    sr.memory = need(lib, "sr_memory");
    int (*ready)(void) = need(lib, "sr_ready");
    if (GUEST(ready) != 1)   /* its init code failed: cffi printed why */
        cannot_run("native._guest", "see above");
    void *(*fast)(void) = need(lib, "sr_fast_recv");
    fast_recv = (long (*)(int, void *, size_t))GUEST(fast);
    if (!python_host) {   /* (python's os.fork and exit do these themselves) */
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        atexit(at_exit);
    }
    guest_up = 1;
    starting_here = 0;
    atomic_store(&guest_starting, 0);
}

/* ---- exec(): the rack sockets an image of a fork()ed child inherited ------------------- */
/* A fork()ed child of a rack program reaches its parent's rack sockets over a channel
 * it keeps across exec(), named by SPLITRACK_FORK_CHANNEL ("fd:pid", for this pid
 * only: splitrack/guest/forked.py; or "fd:^spawner", a channel a Python rack program
 * made for a program it started with subprocess, which the first process to use it
 * claims: splitrack/guest/spawning.py). An image it exec()s marks every socket
 * descriptor it inherited MAYBE; the first call on one of them starts the guest,
 * which asks the parent which are its (sr_inherit): those are rack sockets from then
 * on, the rest the kernel's. (An inetd-style server: accept, fork, dup2 the
 * connection onto 0 and 1, exec.) */
#define MAYBE_FDS 1024   /* the inherited descriptors looked at */
pthread_once_t inherit_once = PTHREAD_ONCE_INIT;
_Atomic int inheriting;   /* meanwhile MAYBE is no rack socket (the guest's own calls) */

/* This process is a fork()ed child of a rack program, with a channel to its parent:
 * the channel's descriptor, else -1. */
int forked_child(void)
{
    const char *env = getenv("SPLITRACK_FORK_CHANNEL");
    const char *colon = env ? strchr(env, ':') : NULL;
    if (!colon)
        return -1;
    if (colon[1] != '^')
        return atol(colon + 1) == (long)getpid() ? atoi(env) : -1;
    struct ucred cred;   /* spawned: a channel its spawner made (claimed at first use) */
    socklen_t len = sizeof cred;
    return getsockopt(atoi(env), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0
           && cred.pid == atol(colon + 2) ? atoi(env) : -1;
}

/* A spawned program's channel, not claimed yet ("fd:^spawner:token:,dev.ino,...,"): the
 * rack sockets it was given, by inode (else NULL: a fork()ed child's, any socket may be). */
static const char *spawned_sockets(void)
{
    const char *env = getenv("SPLITRACK_FORK_CHANNEL");
    const char *spawner = env ? strstr(env, ":^") : NULL;
    return spawner ? strchr(spawner + 2, ':') : NULL;
}

static void note_inherited(void)   /* (at load) */
{
    int channel = forked_child();
    if (channel < 0)
        return;
    const char *only = spawned_sockets();
    struct stat st;
    char key[48];
    for (int fd = 0; fd < MAYBE_FDS; fd++)
        if (fd != channel && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
            snprintf(key, sizeof key, ",%lu.%lu,", (unsigned long)st.st_dev,
                     (unsigned long)st.st_ino);
            if (!only || strstr(only, key))
                atomic_store(&rack[fd], MAYBE);
        }
}

void adopt_inherited(void)
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

void say_once(_Atomic int *said, const char *line)
{
    if (!atomic_exchange(said, 1))
        fprintf(stderr, "splitrack: %s\n", line);
}

/* A new descriptor of a rack socket, made by the stub: the program's from now on. */
int mark(int fd)
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

/* ---- readiness: the first wait on a rack socket makes it exact (preload_wait.c) -------- */
_Atomic int watched;

/* In a Python program, a rack socket libc made, or a descriptor handed over, is C
 * code's (libuv's), whose waits may not come through here (libuv can hand its
 * epoll_ctl calls to io_uring): threaded at once. */
void watch_now(void)
{
    if (!atomic_exchange(&watched, 1))
        GUEST(sr.watch, 0);
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
/* A Python program's socket object's descriptor: the calls it makes on the descriptor
 * itself are the stub's (is_own; splitrack/guest/own_fds.py calls this). */
__attribute__((visibility("default"))) void sr_own(int fd)
{
    unsigned char none = 0;
    if (fd >= 0 && fd < RACK_FDS)
        atomic_compare_exchange_strong(&rack[fd], &none, OWN);
}

/* The calls this thread makes from now on (1) are the stub's own, libc's; until 0
 * (splitrack/guest/preloaded.py: quiet) */
__attribute__((visibility("default"))) void sr_quiet(int on)
{
    in_guest += on ? 1 : -1;
}

/* subprocess starts a program from this thread (spawning.py): on (1) or off (0) */
__attribute__((visibility("default"))) void sr_spawning(int on)
{
    if (on) {   /* (dlsym, in the vfork()ed child, could wait for a lock another held) */
        resolve_socket_calls();
        resolve_fd_calls();
    }
    spawning = on ? getpid() : 0;
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
    if (!python_host && (atomic_load(&rack[0]) == MAYBE || atomic_load(&rack[1]) == MAYBE ||
                         atomic_load(&rack[2]) == MAYBE)) {
        /* an inetd-style program's stdin or stdout: asked about now, before main(), as
         * its stdio would write them without a call through here (a spawned program's
         * are known to be rack sockets already: they are asked about, and the channel
         * claimed, at their first use, so that a shell does not take what the
         * program it starts uses) */
        if (!spawned_sockets())
            pthread_once(&inherit_once, adopt_inherited);
        for (int fd = 0; fd <= 2; fd++)
            if (atomic_load(&rack[fd]) != 0)
                std_rebind(fd);
    }
}
