"""The door into a bsdSocketStub that its data paths and its runtime use.

A stub (stub.py) is the socket object a program holds: whatever names it has,
the program sees, and may subclass over (a subclass's `self.lock`, `path` or
`wake` must stay the program's). So what the rest of the rack program needs of
a stub is not on it, but here: `stub._face`, one `StubFace` per connection
(every handle of it shares it, handles.py). The data paths (datapath.py:
NicPath, PipePath, FitPath) hold the face, never the stub, and the runtime
(runtime.py) reaches a stub through its face; nothing else of the stub's is
theirs to touch.

With the stub's lock held (as a path's methods run), unless it says otherwise:
    wake()                fileno() readable: data, EOF, an error or a connection waits
    wake_senders()        what a sender waits for changed
    drained()             the path holds no more received bytes
    set_eof()             the peer sends no more
    set_error(code[, after_eof])   the connection failed: the next call says so, once
    enqueue_accept(info)  a connection for accept()
    take_over(fd)         fileno() becomes fd's end (a pipe shortcut's)
    readable(), can_send()              the waits' tests
    park_readable(t), park_writable(t)  the waits' sleeps (unlocked)
    pushed(op, payload)   a push for this socket (unlocked: it takes the lock)
    holds(path)           path is its data path still (not closed, not replaced)
    option(level, opt), runtime, lock, path, ncomponent, dead, id (the runtime's for it,
    which every push to it starts with)
and the runtime's (unlocked): sync_bell(went_exact), component_gone(), close_connection(),
after_fork().
"""

import os
import threading
from typing import Any

from splitrack.guest import handles, own_fds


class StubFace:
    __slots__ = ("_s", "id", "readable", "can_send", "wake", "wake_senders", "drained",
                 "pushed")

    def __init__(self, stub: Any):
        self._s = stub   # (the connection's state is shared by all its handles)
        self.id = stub._id   # the runtime's for it: every push to it starts with it
        # What runs for every message, bound once (a layer of Python less each time):
        self.readable = stub._readable   # the waits' tests
        self.can_send = stub._can_send
        self.wake = stub._ring           # what its data path tells it
        self.wake_senders = stub._wake_senders
        self.drained = stub._drained
        self.pushed = stub._pushed       # a push for this socket (unlocked: it takes the lock)

    # ---- what it is ------------------------------------------------------------------
    @property
    def runtime(self) -> Any:
        """The process's rack runtime (runtime.py)."""
        return self._s._rt

    @property
    def lock(self) -> threading.Condition:
        """The stub's lock, as a Condition: `with face.lock` takes it."""
        return self._s._cond

    @property
    def path(self) -> Any:
        """The connection's data path (datapath.py), None before it has one."""
        return self._s._path

    @property
    def ncomponent(self) -> str | None:
        """The nComponent that holds its skeleton (None: none yet, or a shortcut)."""
        return self._s._n

    @property
    def dead(self) -> bool:
        """Closed: its path is released, or about to be."""
        return self._s._dead

    def holds(self, path: Any) -> bool:
        """(lock held) `path` is its data path still: not closed, not replaced."""
        s = self._s
        return not s._dead and s._path is path

    def option(self, level: int, opt: int) -> int | None:
        """The value the program set for a socket option (None: never set)."""
        return self._s._opts.get((level, opt))

    # ---- what its data path tells it ------------------------------------------------------
    def set_eof(self) -> None:
        """The peer sends no more: recv reads what is buffered, then b""."""
        self._s._eof = True

    def set_error(self, code: int, after_eof: bool = True) -> None:
        """The connection failed with errno `code`, unless an error waits already (or,
        after_eof False, the peer had sent EOF: what it sent is all there): the next
        call reports it, once. Waiters wake either way."""
        s = self._s
        if not s._error and (after_eof or not s._eof):
            s._error = code
        s._ring()
        s._wake_senders()

    def enqueue_accept(self, info: dict[str, Any]) -> None:
        self._s._enqueue_accept(info)

    def take_over(self, fd: int) -> Any:
        """fileno() becomes fd's end (a pipe shortcut's): fd is dup2'ed over the
        descriptor of the connection and of every handle (handles.py) and closed; the
        bell goes, fd's readiness is its own. Returns the stub's own socket object,
        now fd's end."""
        s = self._s
        for own in handles.live_fds(s):
            os.dup2(fd, own, inheritable=False)
            own_fds.again(own)   # (the dup2 took the interposer's mark: own_fds.py)
        os.close(fd)
        handles.rekey(s)
        os.set_blocking(s._fd, False)
        s._bell.close()
        s._bell = None
        return s._own

    # ---- the waits ---------------------------------------------------------------------
    def park_readable(self, timeout: float | None) -> None:
        self._s._park_readable(timeout)

    def park_writable(self, timeout: float | None) -> None:
        self._s._park_writable(timeout)

    # ---- the runtime's -----------------------------------------------------------------
    def sync_bell(self, went_exact: bool) -> None:
        self._s._sync_bell(went_exact)

    def component_gone(self) -> None:
        self._s._component_gone()

    def close_connection(self) -> None:
        self._s._close_connection()

    def after_fork(self) -> None:
        """(the child's) This process is a fork()ed child of the one that made the
        socket: its state here is closed (the child's handles make their calls at the
        parent: forked.py), and its locks are new -- a thread of the parent may have
        held them at the fork (runtime.py)."""
        s = self._s
        s._dead = True
        s._lock = threading.Lock()
        s._cond = threading.Condition(s._lock)
