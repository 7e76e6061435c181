"""The descriptors of one rack socket: dup(), socket.fromfd(), socket(fileno=), detach().

On Linux, dup() gives a second descriptor of one open socket: both read and
write the same connection, and the connection closes when the last of them
is closed. A bsdSocketStub (stub.py) is a Python object whose fileno() is one
end of a socketpair (or a pipe shortcut's end), so the same holds here this
way:

- every handle of one rack socket is a BsdSocketStub object of its own, with
  its own descriptor (a dup of the first one's) and its own timeout, as
  CPython's socket objects have; all of them share one `__dict__`: the
  connection's state (its path, its skeleton, its buffers, errors, EOF);
- `_handles` counts the descriptors that refer to it; close() of a handle
  closes only its descriptor, until the last one, which closes the connection;
- a descriptor is known to be a rack socket's by its socket's inode (a dup, a
  detach()ed fd, or an fd that crossed exec() are the same socket);
- the first handle keeps its descriptor open until the last handle closes:
  a pipe shortcut reads through its socket object (shortcuts.PipePath);
- detach() hands out a descriptor that still counts as a reference: a
  socket(fileno=) that takes it back does not count it twice. If the program
  closes it with os.close() instead, the connection lives until the process
  ends (the kernel's fd table is not ours to watch).

Not covered: a rack socket shared across fork() (each process's stub state is
its own), and dup2() onto a rack socket's descriptor.
"""

import os
from typing import Any

_BY_INODE: dict[tuple[int, int], dict[str, Any]] = {}   # socket inode -> shared state


def _inode(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def shared_state(fd: int) -> dict[str, Any] | None:
    """The state of the rack socket fd is a descriptor of, or None."""
    key = _inode(fd)
    return None if key is None else _BY_INODE.get(key)


def first(sock: Any) -> None:
    """sock is a new rack socket's first handle (its descriptor: sock._fd)."""
    sock._gone = False
    sock._handles, sock._loose, sock._fds, sock._primary = 1, set(), {sock._fd}, sock
    rekey(sock)


def adopt(sock: Any, fd: int, state: dict[str, Any]) -> None:
    """sock, just made over descriptor fd of a rack socket, is one more handle of it."""
    sock.__dict__ = state
    sock._gone = False
    with sock._lock:
        if fd in sock._loose:   # a descriptor detach() handed out: counted already
            sock._loose.discard(fd)
        else:
            sock._handles += 1
        sock._fds.add(fd)


def release(sock: Any, fd: int) -> bool:
    """Handle sock (descriptor fd) is closed: whether it was the last one (the
    caller then closes the connection). Caller holds nothing."""
    with sock._lock:
        sock._gone = True
        sock._fds.discard(fd)
        sock._handles -= 1
        last = sock._handles <= 0
    if last:
        _BY_INODE.pop(sock._key, None)
    return last


def loose(sock: Any, fd: int) -> None:
    """fd, a descriptor of sock's socket, was handed out by detach(): a reference."""
    with sock._lock:
        sock._gone = True
        sock._loose.add(fd)
        sock._fds.add(fd)


def rekey(sock: Any) -> None:
    """sock's descriptors now name another socket (a pipe shortcut took them over)."""
    old = sock.__dict__.get("_key")
    if old is not None:
        _BY_INODE.pop(old, None)
    sock._key = _inode(sock._fd)
    _BY_INODE[sock._key] = sock.__dict__
