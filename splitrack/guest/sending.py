"""send() of a bsdSocketStub: into the data path's window, as Linux's socket takes it.

`Sending` is the part of BsdSocketStub (stub.py) that sends; its state is the
stub's. send, sendall, sendmsg (no ancillary data), sendto (its address ignored, as
Linux's TCP ignores it) and sendfile put bytes into the connection's data
path (datapath.py) as far as its window takes them. The hot case, a send that
packing holds back on a connection through an nComponent, is one native call
made from send() itself (`_held`: sp_hold), because at 4 KiB a Python frame or
an object more costs a tenth of the throughput; the rest takes a put. A
blocking send waits for room for the rest (as its timeout says); a
non-blocking one sends what fits, or BlockingIOError; MSG_DONTWAIT likewise.
The connection's error is reported once, then EPIPE; after SHUT_WR, a peer that
closed (a FIT shortcut), or before a connection, EPIPE, as Linux's TCP says.
"""

import errno
import socket
from typing import Any

from native import stubpath
from native.fitring import Interrupted
from splitrack.guest import preloaded
from splitrack.guest.sockargs import bytes_view, err
from splitrack.guest.sockopts import SNDTIMEO

_DONTWAIT, _NOSIGNAL = int(socket.MSG_DONTWAIT), int(socket.MSG_NOSIGNAL)   # plain ints
_NOT_HELD = ~(_DONTWAIT | _NOSIGNAL)   # flags a held send cannot honour (it neither waits
#                                        nor fails)
_hold, _from_buffer = stubpath.lib.sp_hold, stubpath.ffi.from_buffer


class Sending:
    """BsdSocketStub's send calls."""

    __slots__ = ()   # (its state is the stub's)

    def send(self, data: Any, flags: int = 0) -> int:
        path = self._path   # (no call at all where nothing is held back: a shortcut's, or
        #                     TCP_NODELAY's sends, whose every 0.1 us is a round trip's)
        if path is not None and path.packs and not flags & _NOT_HELD and (
                n := self._held(data, path)):
            return n
        return self._send_now(data if type(data) is bytes else bytes_view(data), flags)

    def _held(self, data: Any, path: Any) -> int:
        """The hot case in one native call: all of `data` held back for packing
        (sp_hold), on a connection through an nComponent that can send. The count
        sent, or 0: nothing was taken, and the general way decides. `path`: the
        stub's, which packs (the caller looked, unlocked; it is checked again here)."""
        lock = self._lock
        lock.acquire()   # (not `with`: the hot path)
        try:
            if path is not self._path or self._peer is None or (
                    self._error or self._shut_wr or self._broken or self._dead
                    or self._peer_gone or self._gone):
                return 0
            if type(data) is bytes:   # (passed as it is: cffi hands C its own bytes)
                buf, n = data, len(data)
            else:
                try:
                    buf = _from_buffer(data)   # (any flat buffer; its length in bytes)
                except (TypeError, BufferError):   # not one: the general way says what
                    return 0
                n = len(buf)
            if not _hold(path.c, buf, n):
                return 0
            if self._rt.exact:
                self._sync_writable()
        finally:
            lock.release()
        if path.pump_due:
            path.pump()
        return n

    def _send_now(self, view: bytes | memoryview, flags: int) -> int:
        """send(): one put if the socket can send and the window takes it all (the hot
        case); the general loop (`_send`) for the rest."""
        sent = 0
        if view and not flags:
            lock = self._lock
            lock.acquire()   # (not `with`: the hot path, and `with` costs 0.25 us more)
            try:
                path = self._path
                if path is not None and self._peer is not None and not (
                        self._error or self._shut_wr or self._broken or self._dead
                        or self._peer_gone or self._gone):
                    sent = path.put(view)
                    if self._rt.exact:   # a full window: fileno() is not writable
                        self._sync_writable()
            finally:
                lock.release()
            if path is not None and path.pump_due:   # a program that only sends
                path.pump()
            if sent == len(view) or (sent and self._timeout == 0.0):
                return sent
        if not sent:
            return self._send(view, flags)
        preloaded.any_handler_ends(True)   # (a native program's: a signal ends it with `sent`)
        try:   # the window took part of it: a blocking send waits for room for the rest
            return sent + self._send(memoryview(view)[sent:], flags)
        except (TimeoutError, BlockingIOError) as exc:   # (BlockingIOError: SO_SNDTIMEO)
            if type(exc) not in (TimeoutError, BlockingIOError):   # FitTimeout: the rack
                raise                                               # failed, not the wait
            return sent
        except Interrupted:   # a native program's signal: what went, as Linux's send says
            return sent

    def _send(self, view: bytes | memoryview, flags: int) -> int:
        if flags & ~(_DONTWAIT | _NOSIGNAL):
            raise err(errno.EOPNOTSUPP)
        view = memoryview(view)   # slices of what is left: no copies
        nonblocking = self._timeout == 0.0 or flags & _DONTWAIT
        if self._pending is not None:   # a connect whose handshake goes on
            self._await_connect(nonblocking)
        deadline = None   # computed if it must wait (this is the hot path)
        sent, total, pumped, told = 0, len(view), False, False
        while True:
            with self._lock:
                if self._error or self._shut_wr or self._broken or self._dead or \
                        self._peer is None or self._peer_gone or self._gone:
                    self._check_sendable()
                if sent < total:
                    sent += self._path.put(view if not sent else view[sent:])
                    if self._rt.exact:
                        self._sync_writable()
            if self._path.pump_due:   # a program that only sends
                self._path.pump()
            if sent == total or (sent and nonblocking):
                return sent
            if nonblocking:
                if not pumped:   # the credit the skeleton gave back meanwhile, first (as a
                    self._rt.pump()   # non-blocking recv reads what it said)
                    pumped = True
                    continue
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            if deadline is None:
                deadline = self._deadline(SNDTIMEO)
            if sent and not told:
                preloaded.any_handler_ends(True)   # (as above)
                told = True
            try:
                room = self._path.wait_writable(deadline)
            except Interrupted:   # a native program's signal: EINTR if nothing went yet
                if sent:
                    return sent
                raise
            if not room:
                if sent:
                    return sent
                raise self._gave_up()

    def _check_sendable(self) -> None:
        if self._dead or self._gone:
            raise err(errno.EBADF)
        if self._error:
            raise err(self._error_once())
        if self._shut_wr or self._broken or self._peer_gone or self._peer is None:
            raise err(errno.EPIPE)   # (never connected, too: Linux's TCP says EPIPE)

    def sendall(self, data: Any, flags: int = 0) -> None:
        path = self._path   # (as send's)
        if path is not None and path.packs and not flags & _NOT_HELD and self._held(data, path):
            return
        view = data if type(data) is bytes else bytes_view(data)
        done = self._send_now(view, flags)   # a blocking send sends it all; else the rest
        while done < len(view):
            done += self._send(memoryview(view)[done:], flags)

    def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0,
                address: Any = None) -> int:
        if ancdata or address is not None:
            raise err(errno.EOPNOTSUPP)
        return self.send(b"".join(bytes(memoryview(b).cast("B")) for b in buffers), flags)

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        return self.send(data, 0 if address is None else flags_or_address)

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        return self._sendfile_use_send(file, offset, count)
