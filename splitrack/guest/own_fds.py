"""A Python program's rack socket descriptors, as the native interposer knows them.

A rack socket's fileno() is one end of its bell (bell.py), a descriptor that
only says whether the stub has bytes or room. A call the program makes on the
descriptor itself rather than on the socket object would be the kernel's on
the bell: os.write's bytes lost, os.read finding none of the socket's. Such
calls come from os.read, os.write, os.readv, os.writev, os.sendfile,
fcntl.ioctl(FIONREAD), io.FileIO over the descriptor (open(fd), os.fdopen),
os.dup2 of it (onto stdout, then print). So every handle's descriptor is
made known to the interposer (native/preload.c, which `splitrack run`
preloads into Python programs too), which then sends those calls here
(splitrack/guest/interposer.py); its other calls, the stub's own (close, dup,
fcntl), stay the kernel's:

- each is made on the handle that owns the descriptor, with what CPython's
  socket gives: a handle with a timeout has a non-blocking descriptor, so
  those calls do not wait (EAGAIN), and a handle without one waits;
- a dup2 of it makes the new descriptor an interposed handle of the same
  socket, which counts as a reference (closing the original then keeps the
  connection, as on Linux);
- the interposer forgets a descriptor when it closes, or when dup2 puts
  another file at its number.

Without the interposer (none is preloaded), nothing is marked.

    note(handle, fd)   handle, a socket object of the program, is over descriptor fd
    again(fd)          a handle's descriptor, whose mark a dup2 onto it took, is marked again
    handle(fd)         the live handle over fd, or None
"""

import _socket
import weakref
from typing import Any

from splitrack.guest import preloaded

_OWN: dict[int, Any] = {}   # descriptor -> a weak reference to its handle


def note(handle: Any, fd: int) -> None:
    mark = preloaded.call("sr_own")
    if mark is not None:
        _OWN[fd] = weakref.ref(handle)
        mark(fd)


def again(fd: int) -> None:
    """fd, a handle's, is marked again (a dup2 onto it took the mark: a pipe shortcut's
    end replaced the bell, face.py)."""
    mark = preloaded.call("sr_own")
    if mark is not None and fd in _OWN:
        mark(fd)


def handle(fd: int) -> Any:
    ref = _OWN.get(fd)
    found = ref() if ref is not None else None
    return found if found is not None and _socket.socket.fileno(found) == fd else None
