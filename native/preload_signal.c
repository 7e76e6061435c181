/* The native interposer's signal handlers: which of the program's ran, so that a
 * blocking rack call ends with EINTR when Linux's would (native/preload.c states the
 * whole interposer's contract).
 *
 * Linux ends a blocking accept, recv, send or connect (its handshake's wait) with
 * EINTR when a handler runs on its thread during it, unless that handler was
 * installed with SA_RESTART (or the socket has a finite SO_RCVTIMEO or SO_SNDTIMEO:
 * then any handler); a send or MSG_WAITALL recv that did part of its work returns
 * that part, SA_RESTART or not. A rack call's wait is the stub's (spinning,
 * then sleeping in the kernel, from Python), so the interposer keeps the count itself:
 *   - a handler the program installs with sigaction(), signal() (and its aliases
 *     bsd_signal, ssignal; sysv_signal, __sysv_signal: what signal() is under strict
 *     ISO C) is installed wrapped (`ran`), with the program's mask and flags: the
 *     wrapper counts, on the thread it runs on, its runs, and those of a handler
 *     without SA_RESTART apart, then calls the program's; sigaction() gives the
 *     program back its own handler as the old one, never the wrapper;
 *   - accept, recv and send (GUEST_INTERRUPTIBLE, preload.h) note the thread's
 *     count as they start; connect too (GUEST_LATER), but the stub makes its wait
 *     interruptible only for the handshake (sr_wait_interruptible); the stub says
 *     when any handler ends a call too (sr_any_handler_ends: it did part of its
 *     work; its wait has a finite SO_RCVTIMEO or SO_SNDTIMEO);
 *   - the stub's wait asks sr_signal_ends_call (native/fitwait.c: before it waits
 *     with nothing there, and when a signal cuts its sleep short): yes if the count
 *     moved since, so a handler that ran while the stub was busy ends the call too.
 * The table of the program's actions is double-buffered: a handler running while
 * sigaction() changes it reads one whole action, the old or the new. A vfork()ed
 * child (which shares the parent's memory until it execs) goes straight to libc.
 * The interpreter the interposer starts leaves SIGINT as it found it
 * (keep_program_sigint). A Python program's handlers are Python's: its calls go to
 * libc as they are (its waits raise KeyboardInterrupt there). Handlers installed
 * some other way (sigset, libc's own calls) are not counted: their calls go on, as
 * with SA_RESTART.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <string.h>

REAL(int, sigaction, int, const struct sigaction *, struct sigaction *)

static struct sigaction programs[2][NSIG];   /* each signal's action, as the program set it */
static _Atomic int current[NSIG];            /* ... which of the two is the one in force */
static sigset_t interrupting;                 /* siginterrupt(sig, 1): signal() omits SA_RESTART */
static pid_t owner;                           /* the process whose table this is (not a vfork child) */
static __thread unsigned long ran_here __attribute__((tls_model("initial-exec")));
static __thread unsigned long ran_any __attribute__((tls_model("initial-exec")));
static __thread unsigned long call_began;     /* ran_here as this thread's rack call began */
static __thread unsigned long began_any;      /* ... ran_any then */
static __thread unsigned long any_from;       /* ran_any from which any handler's run ends */
static __thread int any_ends;                 /* ... the call (sr_any_handler_ends) */

static void ran(int sig, siginfo_t *info, void *context)
{
    const struct sigaction *a = &programs[atomic_load(&current[sig])][sig];
    ran_any++;   /* (with SA_RESTART too: it ends a call that did part of its work) */
    if (!(a->sa_flags & SA_RESTART))
        ran_here++;
    int guest = in_guest;   /* (a rack call it came in: the handler's own calls are the */
    in_guest = 0;           /* program's, as its descriptors are) */
    if (a->sa_flags & SA_SIGINFO)
        a->sa_sigaction(sig, info, context);
    else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
        a->sa_handler(sig);
    in_guest = guest;
}

static void forked(void)
{
    owner = getpid();
}

__attribute__((constructor)) static void signals_owned(void)
{
    owner = getpid();
    pthread_atfork(NULL, NULL, forked);   /* (not run in a vfork()ed child) */
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (python_host || sig <= 0 || sig >= NSIG || getpid() != owner)
        return libc_sigaction()(sig, act, old);
    int now = atomic_load(&current[sig]);
    struct sigaction wrapped, was, before = programs[now][sig];
    const struct sigaction *give = act;
    int handler = act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
    if (handler) {
        wrapped = *act;   /* (sa_handler and sa_sigaction share their place) */
        wrapped.sa_sigaction = ran;
        wrapped.sa_flags |= SA_SIGINFO;
        give = &wrapped;
        programs[!now][sig] = *act;   /* in force before the kernel's: a signal right */
        atomic_store(&current[sig], !now);   /* after the change finds it whole */
    }
    int r = libc_sigaction()(sig, give, &was);
    if (r != 0) {
        atomic_store(&current[sig], now);
        return r;
    }
    if (act && !handler) {   /* SIG_DFL, SIG_IGN: the table follows the kernel */
        programs[!now][sig] = *act;
        atomic_store(&current[sig], !now);
    }
    if (old)   /* the program's own; SA_RESETHAND may have put SIG_DFL back meanwhile */
        *old = was.sa_sigaction == ran ? before : was;
    return 0;
}

static sighandler_t install(int sig, sighandler_t handler, int flags, int mask_it)
{
    if (handler == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (mask_it)
        sigaddset(&act.sa_mask, sig);
    act.sa_flags = flags;
    return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

/* glibc's signal() is BSD's: SA_RESTART (unless siginterrupt said otherwise), the
 * signal masked while its handler runs; System V's resets and restarts nothing */
sighandler_t signal(int sig, sighandler_t handler)
{
    int restart = sig > 0 && sig < NSIG && sigismember(&interrupting, sig) != 1;
    return install(sig, handler, restart ? SA_RESTART : 0, 1);
}

sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return signal(sig, handler);
}

sighandler_t ssignal(int sig, sighandler_t handler)
{
    return signal(sig, handler);
}

sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}

sighandler_t __sysv_signal(int sig, sighandler_t handler)
{
    return sysv_signal(sig, handler);
}

int siginterrupt(int sig, int flag)
{
    struct sigaction act;
    if (sigaction(sig, NULL, &act) != 0)
        return -1;
    if (flag) {
        sigaddset(&interrupting, sig);
        act.sa_flags &= ~SA_RESTART;
    } else {
        sigdelset(&interrupting, sig);
        act.sa_flags |= SA_RESTART;
    }
    return sigaction(sig, &act, NULL);
}

/* SIGINT as the program had it before the interpreter started. Python's signal module
 * takes SIGINT on its first import (KeyboardInterrupt) when it finds SIG_DFL there,
 * even with install_signal_handlers = 0; in a program whose interpreter is only the
 * stub's, nothing would ever raise it: Ctrl-C would only cut the wait it came in, and
 * the program go on, or end with its status and not SIGINT's. It is put back only if
 * the start changed it (another thread of the program may set its own meanwhile:
 * nothing else is touched). */
static struct sigaction program_sigint;

void keep_program_sigint(int save)
{
    struct sigaction now;
    if (save)
        sigaction(SIGINT, NULL, &program_sigint);
    else if (sigaction(SIGINT, NULL, &now) == 0 && now.sa_handler != program_sigint.sa_handler)
        sigaction(SIGINT, &program_sigint, NULL);
}

void interruptible_begins(void)
{
    interruptible = 1;
    call_began = ran_here;
    began_any = ran_any;
    any_ends = 0;
}

/* A native program's accept, recv or send (GUEST_INTERRUPTIBLE, on this thread) waits:
 * has a handler without SA_RESTART run on this thread since it began, or any handler
 * where the stub said any ends it (sr_any_handler_ends)? native/fitwait.c asks before
 * the stub's wait sleeps with nothing there and when a signal cuts the sleep short:
 * then the call ends, with EINTR or with what it did, as Linux's would. Elsewhere (a
 * Python program, any other call, the interpreter's own threads) never. */
__attribute__((visibility("default"))) int sr_signal_ends_call(void)
{
    return !python_host && interruptible &&
           (ran_here != call_began || (any_ends && ran_any != any_from));
}

/* Whether this process is a native program (not a Python one, whose signals are
 * Python's): the stub asks once, and makes the marks below only then. */
__attribute__((visibility("default"))) int sr_native(void)
{
    return !python_host;
}

/* The stub says: a handler with SA_RESTART ends the call this thread is in too, as
 * Linux's restarts nothing then: from now on (from_now 1: the call has done part of
 * its work -- a send queued some of its bytes, a MSG_WAITALL recv has some --, and
 * returns that part), or since the call began (0: its wait has a finite SO_RCVTIMEO or
 * SO_SNDTIMEO, with which the kernel's waits end with EINTR whatever the flags). */
__attribute__((visibility("default"))) void sr_any_handler_ends(int from_now)
{
    if (!interruptible)
        return;
    if (!from_now)
        any_from = began_any;
    else if (!any_ends)
        any_from = ran_any;
    any_ends = 1;
}

/* The stub says: the wait that follows, in a call begun with GUEST_LATER (connect:
 * its handshake's wait, once the nComponent's answer has set the stub's state), may
 * end with EINTR (on 1) as accept's may; or no more (0). */
__attribute__((visibility("default"))) void sr_wait_interruptible(int on)
{
    interruptible = on && in_guest;
}
