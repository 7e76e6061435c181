"""os.sendfile on a rack socket's descriptor, for Python programs (native ones have
the interposer's: native/preload_copy.c).

A rack socket's fileno() is one end of its bell (bell.py), which only says
whether the stub has bytes or room. The kernel's sendfile into it would put the
file's bytes there, where nobody reads them: asyncio's loop.sock_sendfile and
loop.sendfile call os.sendfile (aiohttp's file responses, for one), and such a
program hung with none of its bytes sent. So rsocket.install() puts sendfile()
below in os's place:

- on a descriptor of a rack socket (handles.shared_state): a slice of the file,
  read at the offset (os.pread; offset None: at, and then past, the file's
  position), is sent through a handle of the socket made for the call (a dup of
  the descriptor, closed after), without waiting, as the kernel's sendfile on a
  non-blocking socket (which the descriptor underneath always is, whatever the
  handle's timeout: a blocking handle's caller gets EAGAIN too, and waits for
  writability itself, as asyncio does): the count the window took, or
  BlockingIOError if it took none; the socket's errors as send's;
- on any other descriptor, and with BSD's headers, trailers or flags, it is the
  kernel's.
"""

import errno
import os
import socket
from typing import Any

from splitrack.guest import handles
from splitrack.guest.stub import BsdSocketStub

SLICE = 256 * 1024   # bytes read and offered to the socket per call, at most
_kernel_sendfile = os.sendfile


def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int, *args: Any,
             **kwargs: Any) -> int:
    if args or kwargs or handles.shared_state(out_fd) is None:
        return _kernel_sendfile(out_fd, in_fd, offset, count, *args, **kwargs)
    if count < 0 or (offset is not None and offset < 0):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    at = os.lseek(in_fd, 0, os.SEEK_CUR) if offset is None else offset
    data = os.pread(in_fd, min(count, SLICE), at)
    if not data:
        return 0
    fd = os.dup(out_fd)
    try:
        handle = BsdSocketStub(fileno=fd)
    except BaseException:
        os.close(fd)
        raise
    try:
        sent = handle.send(data, socket.MSG_DONTWAIT)
    finally:
        handle.close()
    if offset is None:
        os.lseek(in_fd, at + sent, os.SEEK_SET)
    return sent


def install() -> None:
    os.sendfile = sendfile


def uninstall() -> None:
    os.sendfile = _kernel_sendfile
