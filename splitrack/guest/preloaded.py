"""The native interposer's own calls, where `splitrack run` preloaded it (native/preload.c).

The interposer exports a few functions for the Python code in a rack program
to tell it things: sr_interpose (a descriptor C code takes over), sr_own (a
socket object's descriptor), sr_spawning (subprocess is starting a program),
sr_heap_on (the rack heap is on), sr_quiet (the calls that follow are the
stub's own), sr_any_handler_ends and sr_wait_interruptible (a native
program's call and the signals that end it: native/preload_signal.c), sr_rack_fd
(a descriptor of the rack's own: native/preload_fd.c). A Python started
without the preload (outside `splitrack run`) has none of them, and has
nothing to tell.

    call(name) -> the function (ctypes), or None where the interposer is not loaded
    native_call(name) -> the same, in a native program only (None in a Python one)
    with quiet():  the libc calls this thread makes meanwhile are the stub's own, which
                   the interposer passes to libc as they are (sr_quiet)
    signals_to_the_program()   this thread, one of the rack's own, takes no signal
    any_handler_ends(from_now)  a handler with SA_RESTART ends the native call this
                   thread is in too (sr_any_handler_ends)
    rack_fd(fd) -> fd  a descriptor the rack keeps, moved past a native program's own
                   (sr_rack_fd)
    with interruptible():  a native connect's handshake may end with EINTR meanwhile
                   (sr_wait_interruptible)
"""

import contextlib
import ctypes
import functools
import signal
from collections.abc import Callable, Iterator
from typing import Any


@functools.cache
def call(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None


@functools.cache
def native_call(name: str) -> Any:
    """call(name) in a native program; None in a Python one, where the signal marks
    below do nothing (its signals are Python's): a hot path skips their ctypes call."""
    native = call("sr_native")
    return call(name) if native is not None and native() else None


@contextlib.contextmanager
def _marked(name: str, find: Callable[[str], Any] = call) -> Iterator[None]:
    """The interposer's flag `name` set (1) for what runs inside, then cleared (0)."""
    mark = find(name)
    if mark is None:
        yield
        return
    mark(1)
    try:
        yield
    finally:
        mark(0)


def quiet() -> contextlib.AbstractContextManager[None]:
    return _marked("sr_quiet")


def signals_to_the_program() -> None:
    """This thread, one of the rack's own in a program (the inbox thread, the flusher,
    a fork()ed child's server), takes none of the program's signals: the kernel runs
    the program's handlers on its own threads, whose rack calls they end (a native
    program's: native/preload_signal.c), as on Linux."""
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())


def any_handler_ends(from_now: bool) -> None:
    """A handler with SA_RESTART ends the native program's call this thread is in too,
    as Linux's restarts nothing then: from now on (it has done part of its work -- a
    send queued some bytes, a MSG_WAITALL recv has some --, and returns that part), or
    since it began (from_now False: its wait has a finite SO_RCVTIMEO or SO_SNDTIMEO)."""
    mark = native_call("sr_any_handler_ends")
    if mark is not None:
        mark(int(from_now))


def interruptible() -> contextlib.AbstractContextManager[None]:
    """The wait inside, a native program's connect()'s for its handshake (the state the
    nComponent's answer set is in place), ends with EINTR when a handler without
    SA_RESTART runs, as Linux's connect does (ring.py's Interrupted)."""
    return _marked("sr_wait_interruptible", native_call)


def rack_fd(fd: int) -> int:
    """fd, a descriptor the rack's own code keeps in a native program but made where the
    interposer does not see it (a pidfd: a raw system call), or a socket's dup (which it
    leaves where the kernel put it), moved past the program's own, so that those are
    numbered as on Linux (native/preload_fd.c); elsewhere fd as it is."""
    move = call("sr_rack_fd")
    return fd if move is None else move(fd)
