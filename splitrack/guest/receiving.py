"""recv() of a bsdSocketStub: what the data path holds, as Linux's socket gives it.

`Receiving` is the part of BsdSocketStub (stub.py) that receives; its state is
the stub's. recv, recv_into, recvfrom(_into) and recvmsg take what the
connection's data path (datapath.py) holds (recvmsg_into: scattered into its
buffers): the bytes, b"" at EOF or after a
shutdown, the connection's error once (then the socket is broken: b""), and
ENOTCONN before it is connected. A blocking recv waits for something (as its
timeout says); MSG_WAITALL and SO_RCVLOWAT make it wait for that many bytes (a
blocking socket only: with a timeout CPython's socket is non-blocking, where the
kernel ignores both); MSG_PEEK leaves them; MSG_DONTWAIT does not wait (with a
timeout, CPython waits first: so does the stub); MSG_NOSIGNAL, MSG_MORE and
the like change nothing, as in Linux's TCP. An error after some bytes were
read returns them, and the next call reports it, as Linux does. fionread() is
ioctl FIONREAD's answer: what a recv would get now.
"""

import errno
import socket
from typing import Any

from native.fitring import Interrupted
from splitrack.guest import preloaded
from splitrack.guest.sockargs import err, scatter
from splitrack.guest.sockopts import RCVLOWAT, RCVTIMEO

_PEEK, _DONTWAIT, _WAITALL = (int(f) for f in (   # plain ints: IntFlag is slow
    socket.MSG_PEEK, socket.MSG_DONTWAIT, socket.MSG_WAITALL))
_IGNORED = int(socket.MSG_NOSIGNAL | socket.MSG_CMSG_CLOEXEC | socket.MSG_MORE   # as Linux's
               | socket.MSG_EOR | socket.MSG_CONFIRM)                              # TCP does
_UNKNOWN = ~(_PEEK | _DONTWAIT | _WAITALL | _IGNORED)


_OWN_DEADLINE = -1.0   # (_recv_some's deadline not given: its own, from its timeout)

class Receiving:
    """BsdSocketStub's recv calls."""

    __slots__ = ()   # (its state is the stub's)
    _lanes = True    # a blocking recv may take its path's fast lane (a datagram's may not:
                     # its own _take reads the records)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return self._recv(bufsize, flags, None)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        size = len(view)
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        if nbytes > size:
            raise ValueError("buffer too small for requested bytes")
        return self._recv(nbytes or size, flags, view)

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        return self.recv(bufsize, flags), None   # a connected stream: no address, as Linux

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        return self.recv_into(buffer, nbytes, flags), None

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple:
        return self.recv(bufsize, flags), [], 0, None

    def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0) -> tuple:
        buffers = list(buffers)
        data = self.recv(sum(memoryview(b).nbytes for b in buffers), flags)
        return scatter(data, buffers), [], 0, None

    def fionread(self) -> int:
        """ioctl FIONREAD (SIOCINQ): the bytes a recv would get now without waiting,
        what the skeleton pushed meanwhile read first if none are known (a program
        that only asks, never waits, still sees them come); a listening socket has
        none to say (EINVAL, as Linux's TCP). (Not `pending`: ssl's name.)"""
        if self._dead or self._gone:
            raise err(errno.EBADF)
        if self._listening:
            raise err(errno.EINVAL)
        count = self._buffered()
        if not count:
            self._rt.pump()
            count = self._buffered()
        return count

    def _buffered(self) -> int:
        with self._lock:
            path = self._path
            return 0 if path is None or self._broken else path.pending()

    def _recv(self, want: int, flags: int, view: memoryview | None) -> Any:
        """recv (view None: returns bytes) or recv_into (returns the count). A plain
        blocking recv on a healthy connection tries its path's fast lane first
        (datapath.py: take_next), straight from here, not a frame deeper: on a core
        shared with another process every frame counts (docs/evaluation.md); else,
        or if the lane says None, _recv_some."""
        if self._dead or self._gone:
            raise err(errno.EBADF)
        if flags & _UNKNOWN:
            raise err(errno.EOPNOTSUPP)
        if want == 0:
            return b"" if view is None else 0
        if self._timeout is None and not flags & (_PEEK | _DONTWAIT):
            if flags & _WAITALL:
                return self._recv_all(want, view, want)
            lowat = self._opts.get(RCVLOWAT)   # (sockopts.py)
            if lowat and lowat > 1:
                return self._recv_all(want, view, min(lowat, want))
        path = self._path
        if flags or path is None or not self._lanes or self._timeout == 0.0 or (
                self._pending is not None or self._error or self._eof or self._shut_rd
                or self._broken):
            return self._recv_some(want, flags, view)
        deadline = None if self._timeout is None and RCVTIMEO not in self._opts else (
            self._deadline())   # (None: never; in line, a frame fewer)
        got = path.take_next(want, view, deadline)   # (None: take() and the wait say)
        return got if got is not None else self._recv_some(want, 0, view, deadline)

    def _recv_some(self, want: int, flags: int, view: memoryview | None,
                   deadline: float | None = _OWN_DEADLINE) -> Any:
        """What is there, up to `want` (waiting, as the timeout says, for something; or
        until `deadline`, a caller's): taken under the stub's lock, else waited for."""
        if self._pending is not None:   # a connect whose handshake goes on
            self._await_connect(self._timeout == 0.0 or bool(flags & _DONTWAIT))
        if deadline == _OWN_DEADLINE:
            deadline = self._deadline()
        lock, pumped = self._lock, False
        while True:
            lock.acquire()   # (not `with`: a hot path, and `with` costs 0.25 us more here)
            try:
                got = self._take(want, view, peek=bool(flags & _PEEK))
            finally:
                lock.release()
            if got is not None:
                return got
            nonblocking = self._timeout == 0.0 or (flags & _DONTWAIT and self._timeout is None)
            if nonblocking and not pumped:   # what the skeleton said meanwhile, first
                self._rt.pump()
                pumped = True
                continue
            if flags & _DONTWAIT and self._timeout is None:   # (with a timeout, CPython
                raise BlockingIOError(errno.EAGAIN,            # waits first, as here)
                                      "Resource temporarily unavailable")
            self._wait_readable(deadline)

    def _recv_all(self, want: int, view: memoryview | None, target: int) -> Any:
        """A blocking recv that waits for `target` bytes (MSG_WAITALL: all it asked for;
        SO_RCVLOWAT: that many), EOF or an error, and returns up to `want`; an error
        after some bytes returns them, and the next call reports it (as Linux does).
        (With a timeout CPython's socket is non-blocking, where the kernel ignores
        MSG_WAITALL: so does the caller, and SO_RCVLOWAT too.)"""
        out, got = bytearray(), 0
        deadline = self._deadline()   # (SO_RCVTIMEO bounds the whole call, as Linux's)
        told = False
        while got < target:
            if got and not told:   # (a native program's: a signal ends it with `got`)
                preloaded.any_handler_ends(True)
                told = True
            try:
                part = self._recv_some(want - got, 0, None if view is None else view[got:],
                                       deadline)
            except (BlockingIOError, Interrupted):   # SO_RCVTIMEO's end, or a signal's
                if not got:                          # (a native program's): what came,
                    raise                            # or EAGAIN / EINTR, as Linux's
                break
            except OSError as exc:
                if not got or not exc.errno:
                    raise
                with self._lock:   # reported by the next call
                    self._error, self._broken = exc.errno, False
                break
            if not part:
                break
            if view is None:
                out += part
                got += len(part)
            else:
                got += part
        return bytes(out) if view is None else got

    def _take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        """Received bytes (lock held): bytes, or a count when reading into `view`;
        an empty result at EOF; None if the caller must wait."""
        if self._path is not None and not self._broken:
            got = self._path.take(want, view, peek)
            if got is not None:
                return got
        if self._error:
            raise err(self._error_once())
        if self._eof or self._shut_rd or self._broken or self._dead:
            return b"" if view is None else 0
        if self._peer is None:
            raise err(errno.ENOTCONN)
        return None

    def _error_once(self) -> int:
        """(lock held) The error, which is reported once, as Linux does; then the
        socket is broken, and recv reads nothing more: not in C either."""
        code, self._error, self._broken = self._error, 0, True
        off = getattr(self._path, "quick_off", None)
        if off is not None:
            off()
        return code

    def quick_path(self) -> Any:
        """The NicPath whose recvs of bytes already there a native program may take
        in C from now on (native/fastrecv.h: no other of recv's rules applies
        then), or None: a datagram socket, a shortcut, not connected, broken."""
        with self._lock:
            quick = getattr(self._path, "quick", None)
            if (quick is None or self.type != socket.SOCK_STREAM or self._broken
                    or self._dead or self._gone):
                return None
            return quick()

    def _drained(self) -> None:
        """The path has no more buffered bytes: fileno() stops being readable."""
        if self._rung and not (self._eof or self._error or self._shut_rd):
            self._hush()   # (looked at here first: rung, most often, it is not)
