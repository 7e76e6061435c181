"""The parent's side of rack sockets across fork(): the twins, and the thread that serves a child.

At a fork (forked.py's `before_fork`) the parent makes a twin of every handle
the child inherits: one more handle (handles.py) of the same connection, so a
connection stays open while the child holds it. `serve_child`, a thread of the
parent from `after_fork_in_parent` on, takes the child's calls off the channel
(fork_channel.py) one at a time and makes each on the twin the call names:

    twin_of(stub, fd) -> handle        a twin of descriptor fd's connection (no lock taken)
    serve_child(rt, channel, theirs, pidfd=-1)
                                       the child's calls on `theirs` ({key: twin}) until
                                       it ends (the channel's EOF, or its pidfd), then
                                       closes the twins it still held
    close_twin(handle)                 a twin the child holds no more closes
    TWINS                              every child's twins here, by their own fd

Only the calls in `_CALLS` are made (others: EOPNOTSUPP; a key it does not
hold: EBADF); one that makes a handle (accept, dup) keeps it as a twin under a
new key past every descriptor number, its descriptor sent along. An exec()ed
image's `inherit` (token INHERIT) is answered by `_twins_of`.
"""

import errno
import itertools
import os
import select
import socket as _socket_module
from typing import Any

from splitrack.guest import handles, preloaded
from splitrack.guest.fork_channel import INHERIT, receive_message, send_message
from splitrack.guest.sockargs import err

_std = _socket_module.socket
_KEYS = itertools.count(1 << 20)   # the parent's keys of handles it makes later (accept, dup):
#                                    past every descriptor number (the inherited ones' keys)
TWINS: dict[int, Any] = {}     # the parent's: every child's handles here, by their own fd
NO_PIDFD = -2                  # serve_child's pidfd when there is none: the channel's end only
_CALLS = frozenset((            # what a child may ask its parent to make on its handle
    "connect", "connect_ex", "bind", "listen", "shutdown", "setsockopt", "getsockopt",
    "getsockname", "getpeername", "settimeout", "gettimeout", "setblocking", "getblocking",
    "recv", "recvfrom", "set_rack_mode", "send", "sendall", "sendto", "close", "accept",
    "dup", "fionread"))


def twin_of(stub: Any, fd: int) -> Any:
    """One more handle of descriptor fd's connection, for the child, made without the
    connection's lock (a thread may hold it across the fork: handles.forking). Its
    timeout is the connection's first handle's."""
    twin = _std.__new__(type(stub))
    _std.__init__(twin, _socket_module.AF_UNIX, _socket_module.SOCK_STREAM, 0,
                  preloaded.rack_fd(os.dup(fd)))   # (the parent's: out of its way)
    twin.__dict__ = stub.__dict__
    twin._gone, twin._timeout = False, stub._timeout
    handles.forking(twin, _std.fileno(twin))
    return twin


def serve_child(rt: Any, channel: Any, theirs: dict[int, Any], pidfd: int = -1) -> None:
    """The child's calls, one at a time, until it ends; then what it held closes. (The
    runtime goes threaded here, not in the fork's hook: that takes every stub's lock,
    and a thread may hold one until the fork has returned.) A fork()ed child says
    its pid first; a spawned one's pidfd is given (spawning.py), and closed here."""
    preloaded.signals_to_the_program()
    rt.go_threaded()
    try:
        if pidfd == -1:
            (pid, _), _ = receive_message(channel)   # the child says who it is first
            pidfd = preloaded.rack_fd(os.pidfd_open(pid))
        ready = select.poll()   # the channel, and the child's end: a process it started
        ready.register(channel.fileno(), select.POLLIN)   # may hold the channel too (an
        if pidfd >= 0:                                    # exec()ed image's inherits it)
            ready.register(pidfd, select.POLLIN)
        while True:
            if any(fd == pidfd for fd, _ in ready.poll()):
                return
            try:
                request, _ = receive_message(channel)
            except (EOFError, OSError):
                return
            fds: list[int] = []
            try:
                token, method, args = request
                reply = (True, _made(theirs, token, method, args, fds))
            except Exception as exc:   # (whatever the call raised goes to the child)
                reply = (False, exc if isinstance(exc, OSError) else
                         OSError(errno.EIO, f"{type(exc).__name__}: {exc}"))
            try:
                send_message(channel, reply, fds)
            except OSError:
                return
    except (EOFError, OSError):
        return   # the child ended before it said who it is
    finally:
        for handle in theirs.values():
            close_twin(handle)
        channel.close()
        if pidfd >= 0:
            os.close(pidfd)


def close_twin(handle: Any) -> None:
    TWINS.pop(_std.fileno(handle), None)
    try:
        handle.close()
    except OSError:
        pass


def _made(theirs: dict[int, Any], token: int, method: str, args: tuple, fds: list[int]) -> Any:
    """The child's call, on its handle `token`; a new handle's descriptor into fds."""
    if token == INHERIT and method == "inherit":
        return _twins_of(theirs, args[0])
    handle = theirs.get(token)
    if handle is None:
        raise err(errno.EBADF)
    if method not in _CALLS:
        raise err(errno.EOPNOTSUPP)
    if method == "close":
        close_twin(theirs.pop(token))
        return None
    if method in ("accept", "dup"):   # a new handle: its descriptor goes to the child
        new, *rest = handle.accept() if method == "accept" else (handle.dup(),)
        return (_new_twin(theirs, new, fds), new.type == _socket_module.SOCK_DGRAM, *rest)
    return getattr(handle, method)(*args)


def _new_twin(theirs: dict[int, Any], new: Any, fds: list[int] | None = None) -> int:
    """A handle made here for the child: its key (its descriptor into fds, if given)."""
    key = next(_KEYS)
    theirs[key] = TWINS[_std.fileno(new)] = new
    if fds is not None:
        fds.append(_std.fileno(new))
    return key


def _twins_of(theirs: dict[int, Any], inodes: list[tuple[int, Any]]
              ) -> dict[int, tuple[int, bool]]:
    """Which of an exec()ed image's socket descriptors (fd, inode) are the child's rack
    sockets here (every handle of a connection shares its inode): {fd: (key, dgram)},
    a handle here for each (one it had, else a dup). The handles no descriptor took
    were its old image's, closed by exec(): they close here too."""
    pool: dict[Any, list[tuple[int, Any]]] = {}
    for key, twin in list(theirs.items()):
        if _std.fileno(twin) >= 0:
            pool.setdefault(handles.inode(_std.fileno(twin)), []).append((key, twin))
    sample = {ino: held[0][1] for ino, held in pool.items()}
    got: dict[int, tuple[int, bool]] = {}
    for fd, ino in inodes:
        ino = tuple(ino)
        if ino not in sample:
            continue   # not a rack socket: the kernel's
        key = pool[ino].pop()[0] if pool[ino] else _new_twin(theirs, sample[ino].dup())
        got[fd] = (key, sample[ino].type == _socket_module.SOCK_DGRAM)
    for held in pool.values():
        for key, _ in held:
            close_twin(theirs.pop(key))
    return got
