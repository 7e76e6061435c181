"""A pipe shortcut's data path: two programs of one pComponent, over a Unix stream pair.

The intra-rack shortcut between two stubs of the same pComponent (shortcuts.py
makes it, at connect() and at accept()) is a Unix-domain stream pair, a pipe in
both directions (BSD built its pipes this way). The kernel holds the bytes and
does the flow control; the stub's fileno() becomes the pair's end
(`StubFace.take_over`), so select sees it both ways. `PipePath` is the stub's
data path over it (datapath.py), and uses only the stub's face (face.py).
Ends: close or SHUT_WR is EOF for the peer; the kernel says the rest (EPIPE,
ECONNRESET, EOF when a process dies). Its methods run with the stub's lock
held, but for the waits.
"""

import _socket
import fcntl
import select
import socket
import sys
import termios
import time
from typing import Any

from native.fitring import lib as _fitring
from native.ring import ring_error
from splitrack.params import PEER_CHECK_S, SHORTCUT_PIPE_BYTES

_std = _socket.socket  # the kernel's socket type (C), whatever socket.socket is made later
_spin_readable, _wait_fd = _fitring.fr_spin_readable, _fitring.fr_wait_fd
_IN, _OUT = select.POLLIN, select.POLLOUT
_DONTWAIT, _PEEK = int(socket.MSG_DONTWAIT), int(socket.MSG_PEEK)   # plain ints: an IntFlag's
_SEND = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)               # | is 3 Python calls


class PipePath:
    """Same pComponent: a Unix-domain stream pair. The stub's fileno() becomes its end."""

    name = "pipe"
    pump_due = False   # (a NicPath's: its sender reads the inbox; the kernel tells this one)
    packs = False      # (a NicPath's: no sends held back here)

    def __init__(self, stub: Any, fd: int):
        self.stub = stub._face   # (face.py: all of the stub a path may touch)
        self.sock = self.stub.take_over(fd)   # fileno() is the pipe's end from now on
        _roomy(self.sock)
        self.fd = self.sock.fileno()
        self.spin_ns = int(self.stub.runtime.spin_s * 1e9)   # (rack.poll_us: the process's)

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        flags = _DONTWAIT | _PEEK if peek else _DONTWAIT
        try:   # the stub's own socket object holds the fd: the kernel's recv on it
            data = self.sock.recv(want, flags) if view is None else None
            n = len(data) if view is None else self.sock.recv_into(view, want, flags)
        except BlockingIOError:
            return None
        if n == 0:
            self.stub.set_eof()   # the peer shut down or closed (or its process ended)
            return None
        return data if view is None else n

    def take_next(self, want: int, view: memoryview | None, deadline: float | None
                  ) -> Any:
        """A blocking recv's fast lane (receiving.py; the stub's lock not held): the
        wait for the pipe, then take() -- not take() first, whose nothing is an
        exception, then the stub's wait. None: the deadline passed, or EOF (take()
        set it), for the general way to say."""
        if not (self.spin_ns and _spin_readable(self.fd, self.spin_ns)) and not self._wait(
                _IN, deadline):   # (the spin in line: a frame fewer)
            return None
        return self.take(want, view, False)

    def put(self, chunk: memoryview) -> int:
        try:
            return self.sock.send(chunk, _SEND)
        except BlockingIOError:
            return 0

    def pending(self) -> int:   # (the kernel's count of the pipe's bytes)
        return int.from_bytes(fcntl.ioctl(self.sock.fileno(), termios.FIONREAD, bytes(4)),
                              sys.byteorder, signed=True)

    def can_send(self) -> bool:
        return _wait_fd(self.fd, _OUT, 0) > 0

    roomy = can_send   # (the pipe's fileno() says its own POLLOUT)

    def pushed(self, op: int, payload: memoryview) -> None:
        pass   # a pipe carries its own bytes; nothing comes through the inbox

    def wait_readable(self, deadline: float | None) -> bool:
        if self.spin_ns and _spin_readable(self.fd, self.spin_ns):
            return True
        return self._wait(_IN, deadline) or self.stub.readable()

    def wait_writable(self, deadline: float | None) -> bool:
        return self._wait(_OUT, deadline)   # (no spin: the reader needs the CPU)

    def _wait(self, events: int, deadline: float | None) -> bool:
        """The pipe polled (fr_wait_fd); inline, the process's inbox is looked at
        between slices (a listener of this process may have a shortcut connection
        waiting). A reader spins on the pipe first, for rack.poll_us
        (fr_spin_readable, as a FIT waiter spins: a sleep and a wake-up across cores
        cost more than a round trip). A native program's handler without SA_RESTART
        ends the wait (ring.py's Interrupted), as the kernel's pipe wait ends."""
        while True:
            got = _wait_fd(self.fd, events, _ns(deadline, PEER_CHECK_S))
            if got > 0:
                return True
            if got < 0:
                raise ring_error(got, "pipe shortcut's wait")
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.stub.runtime.pump()

    def shutdown(self, how: int) -> None:
        try:
            self.sock.shutdown(how)   # SHUT_WR: the peer reads EOF
        except OSError:
            pass   # the peer is gone already

    def release(self) -> None:
        pass   # the pipe's end is the socket's own fd; closing the socket closes it


def _roomy(sock: Any) -> None:
    """As much room as a loopback TCP connection has (an echo of 1 MiB must not
    deadlock): a Unix stream's bytes count against the sender's SO_SNDBUF, which
    root may raise past net.core.wmem_max."""
    for opt in (_SO_SNDBUFFORCE, socket.SO_SNDBUF):
        try:
            _std.setsockopt(sock, socket.SOL_SOCKET, opt, SHORTCUT_PIPE_BYTES)
            return
        except OSError:
            continue


_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)   # Linux's number


def _ns(deadline: float | None, most_s: float) -> int:
    """A wait's time in ns: until a monotonic deadline (None: none), at most most_s."""
    left = most_s if deadline is None else min(most_s, deadline - time.monotonic())
    return max(0, int(left * 1e9))
