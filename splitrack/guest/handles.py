"""The descriptors of one rack socket: dup(), socket.fromfd(), socket(fileno=), detach().

On Linux, dup() gives a second descriptor of one open socket: both read and
write the same connection, and the connection closes when the last of them
is closed. A bsdSocketStub (stub.py) is a Python object whose fileno() is one
end of a socketpair (or a pipe shortcut's end), so the same holds here this
way:

- the connection's own descriptor (`_fd`, held by the socket object `_own`) is
  private: the stub polls, rings and fills it, a pipe shortcut reads and
  writes through it, and only the connection's end closes it;
- every handle is a BsdSocketStub object of its own, over a descriptor of its
  own (a dup of `_fd`), with its own timeout, as CPython's socket objects
  are; all of them share one `__dict__`: the connection's state;
- `_handles` counts the handles and the descriptors detach() handed out;
  closing a handle closes only its descriptor, until the last one, which
  closes the connection; a handle the garbage collector takes closes its
  descriptor and is counted gone at the next change (it takes no lock: the
  collector may run where the stub's lock is held), so a connection whose
  last handle the collector took closes at the process's next socket wait or
  rack call (`reap`), or at its exit;
- a descriptor is known to be a rack socket's by its socket's inode (a dup, a
  detach()ed descriptor, one socket.fromfd() dups, are the same socket);
- detach() hands out the handle's descriptor as a reference: a socket(fileno=)
  that takes it back does not count it twice. Taken over before the detach
  (`new = socket(fileno=old.fileno()); old.detach()`, as ssl does), it is
  counted once too. Closed with os.close() instead, it keeps the connection
  until the process ends (the kernel's descriptor table is not ours to watch).

A fork()ed child's descriptors are handles made for it at the fork, served by
its parent (forked.py), which an image it exec()s takes back. Not covered: a
rack socket across an exec() with no fork() before (each image's stub state is
its own), and dup2() onto a rack socket's descriptor from Python (the native
interposer covers it).
"""

import os
from collections import Counter, deque
from typing import Any

from splitrack.guest import own_fds

_BY_INODE: dict[tuple[int, int], dict[str, Any]] = {}   # socket inode -> shared state


def inode(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def shared_state(fd: int) -> dict[str, Any] | None:
    """The state of the rack socket fd is a descriptor of, or None."""
    key = inode(fd)
    return None if key is None else _BY_INODE.get(key)


def first(sock: Any, fd: int) -> None:
    """sock, over descriptor fd, is a new rack socket's first handle."""
    sock._gone = False
    sock._handles, sock._loose, sock._fds = 1, set(), Counter({fd: 1})
    sock._dropped = deque()   # descriptors of handles the collector took (stub.__del__)
    sock._forking = deque()   # ... and of handles made at a fork for the child (forked.py)
    rekey(sock)
    own_fds.note(sock, fd)


def adopt(sock: Any, fd: int, state: dict[str, Any]) -> None:
    """sock, just made over descriptor fd of a rack socket, is one more handle of it."""
    sock.__dict__ = state
    sock._gone = False
    with sock._lock:
        _count_dropped(sock)
        if fd in sock._loose:   # a descriptor detach() handed out: counted already
            sock._loose.discard(fd)
        else:
            sock._handles += 1
            sock._fds[fd] += 1
    own_fds.note(sock, fd)


def release(sock: Any, fd: int) -> bool | None:
    """Handle sock (over descriptor fd) closes: None if it was closed already (by
    another thread, or detached), else whether it was the last reference (the
    caller then closes the connection)."""
    with sock._lock:
        if sock._gone:
            return None
        sock._gone = True
        _count_dropped(sock)
        _drop(sock, fd)
        sock._handles -= 1
        last = sock._handles <= 0
    if last:
        _BY_INODE.pop(sock._key, None)
    return last


def detach(sock: Any, fd: int) -> bool:
    """Handle sock hands out its descriptor fd (detach()): False if it was closed
    already. The descriptor stays a reference, unless another handle was made over
    the same number meanwhile (it is that handle's now)."""
    with sock._lock:
        if sock._gone:
            return False
        sock._gone = True
        _count_dropped(sock)
        if sock._fds[fd] > 1:   # taken over already: one reference, the other handle's
            _drop(sock, fd)
            sock._handles -= 1
        else:
            sock._loose.add(fd)
    return True


def live_fds(sock: Any) -> list[int]:
    """The descriptors of the socket still open: its own and its handles'."""
    return [fd for fd in {sock._fd, *sock._fds} if inode(fd) == sock._key]


def rekey(sock: Any) -> None:
    """sock's descriptors now name another socket (a pipe shortcut took them over)."""
    old = sock.__dict__.get("_key")
    if old is not None:
        _BY_INODE.pop(old, None)
    sock._key = inode(sock._fd)
    _BY_INODE[sock._key] = sock.__dict__


DROPPED: deque[dict[str, Any]] = deque()   # states with handles the collector took


def dropped(sock: Any, fd: int) -> None:
    """Handle sock (over fd) is being collected: no lock taken here (stub.__del__)."""
    sock._dropped.append(fd)
    DROPPED.append(sock.__dict__)


def reap(rt: Any) -> None:
    """Count the collected handles gone (a socket call about to wait does it, and the
    runtime's calls and waits); a connection whose last handle went closes now."""
    while DROPPED:
        state = DROPPED.popleft()
        first = rt.stubs.get(state.get("_id"))   # the registered handle: its methods
        if first is None:
            continue   # closed meanwhile
        with first._lock:
            before = first._handles
            _count_dropped(first)
            last = first._handles <= 0 < before
        if last:
            _BY_INODE.pop(first._key, None)
            first._close_connection()


def forking(sock: Any, fd: int) -> None:
    """One more handle, over descriptor fd, made at a fork for the child (forked.py): no
    lock taken (another thread may hold it across the fork); counted at the next
    handle change, before any handle is counted gone, so no close in between can be
    taken for the last."""
    sock._forking.append(fd)


def _count_dropped(sock: Any) -> None:
    """(lock held) The handles made at a fork since: counted; the ones the collector
    took since: gone, each with its descriptor."""
    while sock._forking:
        fd = sock._forking.popleft()
        sock._handles += 1
        sock._fds[fd] += 1
    while sock._dropped:
        _drop(sock, sock._dropped.popleft())
        sock._handles -= 1


def _drop(sock: Any, fd: int) -> None:
    sock._fds[fd] -= 1
    if sock._fds[fd] <= 0:
        del sock._fds[fd]
