/* The native interposer's signal handlers: which of the program's ran, so that a
 * blocking rack call ends with EINTR when Linux's would (native/preload.c states the
 * whole interposer's contract).
 *
 * Linux ends a blocking accept or recv with EINTR when a handler runs during it,
 * unless that handler was installed with SA_RESTART. A rack call's wait is the
 * stub's (spinning, then sleeping in the kernel, from Python), so the interposer
 * keeps the count itself:
 *   - a handler the program installs with sigaction(), signal(), bsd_signal() or
 *     sysv_signal() is installed wrapped (`ran`), with the program's mask and flags:
 *     the wrapper counts a run of a handler without SA_RESTART (`interrupting`),
 *     then calls the program's; sigaction() gives the program back its own handler
 *     as the old one, never the wrapper;
 *   - accept and recv (GUEST_INTERRUPTIBLE, preload.h) note the count as they start;
 *   - the stub's wait asks sr_signal_ends_call (native/fitwait.c: before it sleeps,
 *     and when a signal cuts its sleep short): yes if the count moved since, so a
 *     handler that ran while the stub spun ends the call too.
 * A Python program's handlers are Python's: its calls go to libc as they are (its
 * waits raise KeyboardInterrupt there). Handlers installed some other way (sigset,
 * or libc's own calls) are not counted: their calls go on, as with SA_RESTART.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <string.h>

REAL(int, sigaction, int, const struct sigaction *, struct sigaction *)

static struct sigaction programs[NSIG];   /* each signal's action, as the program set it */
static _Atomic unsigned long interrupting;   /* runs of a handler without SA_RESTART */
static __thread unsigned long call_began;   /* `interrupting` as this thread's call began */

static void ran(int sig, siginfo_t *info, void *context)
{
    const struct sigaction *a = &programs[sig];
    int flags = a->sa_flags;
    if (!(flags & SA_RESTART))
        atomic_fetch_add_explicit(&interrupting, 1, memory_order_relaxed);
    if (flags & SA_SIGINFO)
        a->sa_sigaction(sig, info, context);
    else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
        a->sa_handler(sig);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (python_host || sig <= 0 || sig >= NSIG)
        return libc_sigaction()(sig, act, old);
    struct sigaction wrapped, was, before = programs[sig];
    const struct sigaction *give = act;
    if (act && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN) {
        wrapped = *act;   /* (sa_handler and sa_sigaction share their place) */
        wrapped.sa_sigaction = ran;
        wrapped.sa_flags |= SA_SIGINFO;
        give = &wrapped;
    }
    if (act)
        programs[sig] = *act;   /* before the kernel's: a signal right after finds it */
    int r = libc_sigaction()(sig, give, &was);
    if (r != 0) {
        programs[sig] = before;
        return r;
    }
    if (old)   /* the program's own; SA_RESETHAND may have put SIG_DFL back meanwhile */
        *old = was.sa_sigaction == ran ? before : was;
    return 0;
}

static sighandler_t install(int sig, sighandler_t handler, int flags, int mask_it)
{
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    if (mask_it)
        sigaddset(&act.sa_mask, sig);
    act.sa_flags = flags;
    return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

/* glibc's signal() is BSD's: SA_RESTART, the signal masked while its handler runs */
sighandler_t signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESTART, 1);
}

sighandler_t bsd_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESTART, 1);
}

sighandler_t sysv_signal(int sig, sighandler_t handler)
{
    return install(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
}

int siginterrupt(int sig, int flag)
{
    struct sigaction act;
    if (sigaction(sig, NULL, &act) != 0)
        return -1;
    act.sa_flags = flag ? act.sa_flags & ~SA_RESTART : act.sa_flags | SA_RESTART;
    return sigaction(sig, &act, NULL);
}

void interruptible_begins(void)
{
    call_began = atomic_load_explicit(&interrupting, memory_order_relaxed);
}

/* A native program's accept or recv (GUEST_INTERRUPTIBLE, on this thread) waits:
 * has a handler without SA_RESTART run since it began? native/fitwait.c asks before
 * the stub's wait sleeps and when a signal cuts the sleep short: then the call ends
 * with EINTR, as Linux's would. Elsewhere (a Python program, any other call, the
 * interpreter's own threads) never. */
__attribute__((visibility("default"))) int sr_signal_ends_call(void)
{
    return !python_host && interruptible &&
           atomic_load_explicit(&interrupting, memory_order_relaxed) != call_began;
}
