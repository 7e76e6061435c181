"""The bsdSocketStub: a process's half of a rack socket (the paper's Section III).

`BsdSocketStub` is what `socket.socket(AF_INET, SOCK_STREAM)` makes inside a
program run with `splitrack run` (rsocket.py installs it). It behaves as a
Linux TCP socket, but its bytes go through the rack: bind/connect ask GNM for
the nComponent that owns the address and that nComponent's Proxy for a
bsdSocketSkeleton, which holds the real kernel socket; from then on stub and
skeleton talk directly (runtime.py carries the messages).

This file is the socket API and the connection's state (addresses, timeouts,
EOF, errors, the accept queue); connect() is connecting.py's, the socket
options sockopts.py's, fileno()'s readiness bell.py's, and what the API takes
and says (errors, addresses, timeouts) sockargs.py's. A connected stub's bytes take a path object:
`NicPath` (nic_path.py: through the skeleton, DMA or DDIO; the mode is the
rack's, or SPLITRACK_MODE from `splitrack run --mode`, or per socket
`set_rack_mode()`), or, to a listener of the rack, a shortcut: `PipePath`
(same pComponent) or `FitPath` (shortcuts.py). Path methods run with the
stub's lock held.

fileno() is a real descriptor (one end of a socketpair) that is readable
exactly while data, EOF, an error or a connection waits, and writable exactly
while a send would not block (a full window is not writable), so select,
selectors and asyncio work. Errors are OSError with Linux's
errno; timeouts are TimeoutError("timed out"); would-block is BlockingIOError.
dup, socket.fromfd, socket(fileno=) and detach make more handles of one
connection (handles.py). Not supported (EOPNOTSUPP): ancillary data, MSG_OOB.
AF_INET6 is refused (EAFNOSUPPORT); any other network socket (UDP, raw,
netlink) stays the host's, with a line on stderr that says so. A fork()ed
child neither uses its parent's rack sockets nor makes any (runtime.py).

In a traced process (`splitrack trace`, fit_rpc/tracing.py), each socket call
(the methods in `_OPERATIONS`) is recorded, and what it sends is caused by it.
Untraced, the class is as written here.
"""

import _socket
import errno
import operator
import os
import select
import socket as _socket_module
import threading
import time
from collections import deque
from typing import Any

from fit_rpc import Op, codec, tracing
from fit_rpc.netpath import SK, SK_ERR
from splitrack.guest import handles, shortcuts
from splitrack.guest.bell import Bell
from splitrack.guest.connecting import Connecting
from splitrack.guest.nic_path import NicPath
from splitrack.guest.runtime import FORKED, runtime
from splitrack.guest.sockargs import bytes_view, err, ipv4, timeout_value, warn_host_socket
from splitrack.guest.sockopts import LINGER, RCVLOWAT, Options

_std = _socket_module.socket          # the stdlib class, whatever is installed later
AF_INET, SOCK_STREAM = _socket_module.AF_INET, _socket_module.SOCK_STREAM
_TYPE_FLAGS = _socket_module.SOCK_NONBLOCK | _socket_module.SOCK_CLOEXEC
_LOCALHOST = "127.0.0.1"
_PEEK, _DONTWAIT, _NOSIGNAL, _WAITALL = (int(f) for f in (   # plain ints: IntFlag is slow
    _socket_module.MSG_PEEK, _socket_module.MSG_DONTWAIT, _socket_module.MSG_NOSIGNAL,
    _socket_module.MSG_WAITALL))
_DATA_OPS = frozenset(int(op) for op in (Op.STUB_DATA, Op.STUB_DATA_DMA, Op.STUB_SENT,
                                          Op.STUB_SC_DATA, Op.STUB_SC_CREDIT))


class _Meta(type):
    """isinstance(s, socket.socket) stays true for the stdlib sockets (AF_UNIX...)
    that `socket.socket(...)` still makes once the stub is installed."""

    def __instancecheck__(cls, obj: object) -> bool:
        if cls is BsdSocketStub:
            return isinstance(obj, _std)
        return type.__instancecheck__(cls, obj)   # a subclass is itself


class BsdSocketStub(Connecting, Options, Bell, _std, metaclass=_Meta):
    # A handle's own: its timeout and whether it is closed; the rest (`__dict__`) is
    # the connection's, shared by every handle of it (handles.py: dup, fromfd)
    __slots__ = ("__dict__", "_timeout", "_gone")

    def __new__(cls, family: int = -1, type: int = -1, proto: int = -1,
                fileno: int | None = None) -> Any:
        if fileno is not None and handles.shared_state(fileno) is not None:
            return _std.__new__(cls)   # one more descriptor of a rack socket
        family = AF_INET if family == -1 else family
        kind = SOCK_STREAM if type == -1 else type
        if fileno is None and family == _socket_module.AF_INET6:
            raise err(errno.EAFNOSUPPORT)   # the rack's NICs are IPv4: never the host's
        if fileno is not None or family != AF_INET or kind & ~_TYPE_FLAGS != SOCK_STREAM:
            if fileno is None:
                warn_host_socket(family, kind & ~_TYPE_FLAGS)
            return _std(family, type, proto, fileno)   # not TCP/IPv4: the kernel's own
        return _std.__new__(cls)

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1,
                 fileno: int | None = None):
        self._rt = runtime()
        if self._rt.forked:   # (before any descriptor is made: runtime.py)
            raise OSError(errno.EOPNOTSUPP, FORKED)
        if fileno is not None:   # (a rack socket's, or __new__ made a kernel socket)
            super().__init__(_socket_module.AF_UNIX, SOCK_STREAM, 0, fileno)
            self._timeout = _socket_module.getdefaulttimeout()
            handles.adopt(self, fileno, handles.shared_state(fileno))
            return
        bell, self._bell = _socket_module.socketpair()
        bell.setsockopt(_socket_module.SOL_SOCKET, _socket_module.SO_SNDBUF, 1)   # (the least)
        bell.setblocking(False)
        self._own, self._fd = bell, bell.fileno()   # the connection's own (handles.py)
        fd = os.dup(self._fd)                        # and this handle's
        super().__init__(_socket_module.AF_UNIX, SOCK_STREAM, 0, fd)
        self._bell.setblocking(False)
        self._id = self._rt.register(self)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._timeout: float | None = 0.0 if (type != -1 and type & _socket_module.SOCK_NONBLOCK) \
            else _socket_module.getdefaulttimeout()
        self._mode = self._rt.mode
        self._n: str | None = None      # the nComponent holding the skeleton
        self._sk = 0                    # the skeleton's id there
        self._opts: dict[tuple[int, int], int] = {}
        self._local: tuple[str, int] = ("0.0.0.0", 0)
        self._peer: tuple[str, int] | None = None
        self._listening = False
        self._accepts: deque[dict[str, Any]] = deque()
        self._path: Any = None     # a connection's data path (NicPath), once it has one
        self._eof = self._shut_rd = self._shut_wr = False
        self._error = 0            # a connection error not yet reported
        self._broken = False       # an error was reported: sends raise EPIPE, recvs see EOF
        self._peer_gone = False    # a FIT-shortcut peer closed: sends raise EPIPE
        self._dead = False         # closed: every call is EBADF
        self._connected: dict[str, Any] | None = None   # the answer to N_CONNECT
        self._attempt: float | None = None   # a shortcut connect under way: its `until`
        self._started = False      # a non-blocking connect began, its outcome not yet told
        self._pending: tuple[str, int, NicPath] | None = None   # ... its handshake goes on
        self._rung = False
        self._clogged = False      # fileno() is not writable now (_sync_writable)
        handles.first(self, fd)

    # ---- names ---------------------------------------------------------------------------
    family = property(lambda self: _socket_module.AddressFamily.AF_INET)
    type = property(lambda self: _socket_module.SocketKind.SOCK_STREAM)
    proto = property(lambda self: 0)

    def _to_rack(self, address: Any) -> tuple[str, int]:
        if not isinstance(address, tuple) or len(address) != 2:
            raise TypeError("AF_INET address must be a pair (host, port)")
        host, port = address
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise OverflowError("port must be 0-65535.")
        ip = "0.0.0.0" if host in ("", "0.0.0.0") else ipv4(host)
        return (self._rt.loopback if ip == _LOCALHOST else ip), port

    def _to_program(self, address: Any) -> tuple[str, int]:
        ip, port = address
        return (_LOCALHOST if ip == self._rt.loopback else ip), port

    def getsockname(self) -> tuple[str, int]:
        self._alive()
        return self._local

    def getpeername(self) -> tuple[str, int]:
        self._alive()
        if self._pending is not None:
            self._settle()
        if self._peer is None:
            raise err(errno.ENOTCONN)
        return self._peer

    def set_rack_mode(self, mode: str) -> None:
        """This socket's data path, "dma" or "ddio" (before connect or accept)."""
        if mode not in ("dma", "ddio"):
            raise ValueError(f"rack mode must be 'dma' or 'ddio', not {mode!r}")
        self._mode = mode

    # ---- timeouts ----------------------------------------------------------------------------
    def settimeout(self, value: float | None) -> None:
        self._timeout = timeout_value(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if operator.index(flag) else 0.0   # (an int, as CPython's)

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    timeout = property(gettimeout)

    def _deadline(self) -> float | None:
        return None if self._timeout is None else time.monotonic() + self._timeout

    def _wait_readable(self, deadline: float | None) -> None:
        """Until the bell rings; BlockingIOError / TimeoutError as the timeout says."""
        if handles.DROPPED:   # handles the collector took: counted before anyone waits
            handles.reap(self._rt)
        if self._timeout == 0.0:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        if self._path is not None:
            ok = self._path.wait_readable(deadline)
        else:   # a listener's accept queue, or nothing yet (recv on an unconnected socket)
            ok = self._rt.wait(self._readable, deadline, self._park_readable)
        if not ok:
            raise TimeoutError("timed out")

    def _readable(self) -> bool:
        return self._rung or self._dead

    def _park_readable(self, timeout: float | None) -> None:
        _poll(self._fd, timeout)

    def _park_writable(self, timeout: float | None) -> None:
        with self._cond:
            self._cond.wait_for(self._can_send, timeout)

    def _can_send(self) -> bool:
        if self._pending is not None:   # a non-blocking connect's handshake goes on
            return self._connect_ended()
        return bool(self._path.can_send() or self._error or self._shut_wr or self._broken
                    or self._peer_gone or self._dead)

    # ---- bind, listen, accept, connect -------------------------------------------------------
    def bind(self, address: Any) -> None:
        self._alive()
        ip, port = self._to_rack(address)
        if self._n is not None:
            raise err(errno.EINVAL)
        any_ip = ip == "0.0.0.0"
        if any_ip:
            ip, self._n = self._rt.nic()
        else:
            self._n = self._rt.owner(ip)   # EADDRNOTAVAIL if no rack NIC
        try:
            reply = self._call(Op.N_BIND, {
                "ip": ip, "port": port, "loopback": any_ip, "opts": self._opt_list(),
                "inbox": self._rt.inbox.address, "stub": self._id})
        except OSError:
            self._n = None
            raise
        self._sk = reply["sk"]
        self._local = ("0.0.0.0" if any_ip else self._to_program((ip, 0))[0], reply["port"])

    def listen(self, backlog: int = 128) -> None:
        self._alive()
        if self._peer is not None:
            raise err(errno.EINVAL)
        if self._n is None:
            self.bind(("0.0.0.0", 0))
        self._call(Op.N_LISTEN, {"sk": self._sk, "backlog": max(0, int(backlog))})
        self._listening = True

    def accept(self) -> tuple["BsdSocketStub", tuple[str, int]]:
        self._alive()
        if not self._listening:
            raise err(errno.EINVAL)
        deadline = self._deadline()
        while True:
            with self._lock:
                if self._accepts:
                    info = self._accepts.popleft()
                    if not self._accepts and not self._error:
                        self._hush()
                    break
                if self._dead:
                    raise err(errno.EBADF)
                if self._error == errno.ENETDOWN:   # its nComponent died
                    raise err(errno.ENETDOWN)
                if self._shut_rd or self._error:   # shut down, or broken: Linux says EINVAL
                    raise err(errno.EINVAL)
            self._wait_readable(deadline)
        conn = info.get("stub") or BsdSocketStub(AF_INET, SOCK_STREAM)   # a shortcut's is made
        if _socket_module.getdefaulttimeout() is None and self._timeout is not None:
            conn.setblocking(True)   # as the stdlib's accept() does
        conn._opts = {**self._opts, **conn._opts}   # as Linux, TCP_NODELAY... inherited
        if "stub" in info:
            return conn, conn._peer
        conn._mode, conn._n, conn._sk = self._mode, self._n, info["sk"]
        conn._local = conn._to_program(info["local"])
        conn._peer = conn._to_program(info["peer"])
        conn._path = path = NicPath(conn, conn._mode)
        path.n, path.sk = conn._n, conn._sk
        self._rt.send(self._n, Op.N_START, codec.encode(
            {"sk": conn._sk, "stub": conn._id, "buffers": path.buffers}))
        if LINGER in conn._opts:
            conn._send_linger(quiet=True)
        return conn, conn._peer

    # ---- receiving ---------------------------------------------------------------------------
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return self._recv(bufsize, flags, None)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        if nbytes > len(view):
            raise ValueError("buffer too small for requested bytes")
        return self._recv(nbytes or len(view), flags, view)

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        return self.recv(bufsize, flags), None   # a connected stream: no address, as Linux

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        return self.recv_into(buffer, nbytes, flags), None

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple:
        return self.recv(bufsize, flags), [], 0, None

    def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0,
                address: Any = None) -> int:
        if ancdata or address is not None:
            raise err(errno.EOPNOTSUPP)
        return self.send(b"".join(bytes(memoryview(b).cast("B")) for b in buffers), flags)

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        raise err(errno.EISCONN if self._peer is not None else errno.EOPNOTSUPP)

    def _recv(self, want: int, flags: int, view: memoryview | None) -> Any:
        """recv (view None: returns bytes) or recv_into (returns the count)."""
        if self._dead or self._gone:
            raise err(errno.EBADF)
        if flags & ~(_PEEK | _DONTWAIT | _WAITALL):
            raise err(errno.EOPNOTSUPP)
        if want == 0:
            return b"" if view is None else 0
        if self._timeout is None and not flags & (_PEEK | _DONTWAIT):
            if flags & _WAITALL:
                return self._recv_all(want, view, want)
            lowat = self._opts.get(RCVLOWAT)   # (sockopts.py)
            if lowat and lowat > 1:
                return self._recv_all(want, view, min(lowat, want))
        return self._recv_some(want, flags, view)

    def _recv_some(self, want: int, flags: int, view: memoryview | None) -> Any:
        """What is there, up to `want` (waiting, as the timeout says, for something)."""
        if self._pending is not None:   # a non-blocking connect not settled yet
            self._await_connect(self._timeout == 0.0 or bool(flags & _DONTWAIT))
        deadline = self._deadline()
        lock = self._lock
        while True:
            lock.acquire()   # (not `with`: a hot path, and `with` costs 0.25 us more here)
            try:
                got = self._take(want, view, peek=bool(flags & _PEEK))
            finally:
                lock.release()
            if got is not None:
                return got
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
        while got < target:
            try:
                part = self._recv_some(want - got, 0, None if view is None else view[got:])
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
        if self._error:   # reported once, as Linux does; then the socket is broken
            code, self._error, self._broken = self._error, 0, True
            raise err(code)
        if self._eof or self._shut_rd or self._broken or self._dead:
            return b"" if view is None else 0
        if self._peer is None:
            raise err(errno.ENOTCONN)
        return None

    def _drained(self) -> None:
        """The path has no more buffered bytes: fileno() stops being readable."""
        if not (self._eof or self._error or self._shut_rd):
            self._hush()

    # ---- sending -----------------------------------------------------------------------------
    def send(self, data: Any, flags: int = 0) -> int:
        return self._send_now(data if type(data) is bytes else bytes_view(data), flags)

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
                    if self._rt.threaded:   # a full window: fileno() is not writable
                        self._sync_writable()
            finally:
                lock.release()
            if path is not None and path.pump_due:   # a program that only sends
                path.pump()
            if sent == len(view) or (sent and self._timeout == 0.0):
                return sent
        if not sent:
            return self._send(view, flags)
        try:   # the window took part of it: a blocking send waits for room for the rest
            return sent + self._send(memoryview(view)[sent:], flags)
        except TimeoutError as exc:
            if type(exc) is not TimeoutError:   # FitTimeout: the rack failed, not the wait
                raise
            return sent

    def _send(self, view: bytes | memoryview, flags: int) -> int:
        if flags & ~(_DONTWAIT | _NOSIGNAL):
            raise err(errno.EOPNOTSUPP)
        view = memoryview(view)   # slices of what is left: no copies
        nonblocking = self._timeout == 0.0 or flags & _DONTWAIT
        if self._pending is not None:   # a non-blocking connect not settled yet
            self._await_connect(nonblocking)
        deadline = None   # computed if it must wait (this is the hot path)
        sent, total = 0, len(view)
        while True:
            with self._lock:
                if self._error or self._shut_wr or self._broken or self._dead or \
                        self._peer is None or self._peer_gone or self._gone:
                    self._check_sendable()
                if sent < total:
                    sent += self._path.put(view if not sent else view[sent:])
                    if self._rt.threaded:
                        self._sync_writable()
            if self._path.pump_due:   # a program that only sends
                self._path.pump()
            if sent == total or (sent and nonblocking):
                return sent
            if nonblocking:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            if deadline is None and self._timeout is not None:
                deadline = time.monotonic() + self._timeout
            if not self._path.wait_writable(deadline):
                if sent:
                    return sent
                raise TimeoutError("timed out")

    def _check_sendable(self) -> None:
        if self._dead or self._gone:
            raise err(errno.EBADF)
        if self._error:
            code, self._error, self._broken = self._error, 0, True
            raise err(code)
        if self._shut_wr or self._broken or self._peer_gone or self._peer is None:
            raise err(errno.EPIPE)   # (never connected, too: Linux's TCP says EPIPE)

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = data if type(data) is bytes else bytes_view(data)
        done = self._send_now(view, flags)   # a blocking send sends it all; else the rest
        while done < len(view):
            done += self._send(memoryview(view)[done:], flags)

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        return self._sendfile_use_send(file, offset, count)

    # ---- shutdown, close, options --------------------------------------------------------------
    def shutdown(self, how: int) -> None:
        self._alive()
        if operator.index(how) not in (0, 1, 2):
            raise err(errno.EINVAL)
        if self._peer is None and not self._listening:
            raise err(errno.ENOTCONN)
        with self._lock:
            if how in (_socket_module.SHUT_RD, _socket_module.SHUT_RDWR):
                self._shut_rd = True
                self._ring()
            if how in (_socket_module.SHUT_WR, _socket_module.SHUT_RDWR):
                self._shut_wr = True
                self._wake_senders()
            if self._path is not None and self._n is None:   # a shortcut: no skeleton
                self._path.shutdown(how)
                return
            if self._path is not None:
                self._path.announce_held()   # held sends come before the shutdown
        self._rt.call_raw(self._n, Op.N_SHUTDOWN, SK_ERR.pack(self._sk, how))

    def _real_close(self, _ss: Any = _std) -> None:
        last = handles.release(self, _std.fileno(self))
        if last is None:
            return   # closed already, or detached
        if last:   # else another handle is open: only this one's descriptor closes
            self._close_connection()
        super()._real_close()

    def _close_connection(self) -> None:
        """The connection's end, whatever handles are open (the last one closed, or the
        process exits: runtime.close)."""
        if self._rt.forked:   # a fork()ed child's copy: its descriptors, nothing more
            self._close_own()
            return
        with self._cond:
            if self._dead:
                return
            self._dead = True
            self._cond.notify_all()
            if self._path is not None and self._n is not None:
                self._path.announce_held()   # held sends come before the close
        if self._n is not None and self._sk:
            try:   # a call: every byte sent before it reaches the skeleton first
                self._rt.call_raw(self._n, Op.N_CLOSE, SK.pack(self._sk))
            except OSError:
                pass   # the nComponent is gone: nothing left to close
        self._rt.unregister(self._id)
        with self._lock:
            if self._path is not None:
                self._path.release()
            waiting = [info["stub"] for info in self._accepts if "stub" in info]
            self._accepts.clear()
        for conn in waiting:   # shortcut connections no accept() took: their peers see EOF
            conn.close()
        self._n, self._sk = None, 0
        self._close_own()

    def _close_own(self) -> None:
        """The connection's own descriptors: the bell pair (handles.py)."""
        with self._lock:
            if self._bell is not None:
                self._bell.close()
                self._bell = None
        self._own.close()

    def __del__(self) -> None:
        """A handle dropped without close(): its descriptor closes, as a CPython socket's
        does. Nothing here takes a lock (the collector may run inside code that holds
        the stub's): the connection counts the handle gone at its next handle change,
        and closes with the last handle (handles.py)."""
        try:
            if not self._gone and _std.fileno(self) >= 0:
                self._gone = True
                handles.dropped(self, _std.fileno(self))
        except Exception:   # (half made, or the interpreter is going away)
            pass
        _socket.socket.close(self)

    def detach(self) -> int:
        """This handle's descriptor, for socket(fileno=) to take back (handles.py);
        the handle is closed, the connection is not. (dup() is CPython's: a dup of
        fileno() made into a handle by __init__.)"""
        if not handles.detach(self, _std.fileno(self)):
            return -1
        return _std.detach(self)

    def _alive(self) -> None:
        if self._dead or self._gone:
            raise err(errno.EBADF)

    def _call(self, op: int, args: dict[str, Any], timeout: float | None = None
              ) -> dict[str, Any]:
        try:
            return self._rt.call(self._n, op, args, timeout)
        except OSError as exc:  # the errno Linux would give, with Linux's words
            raise err(exc.errno or errno.EIO) from None

    def _component_gone(self) -> None:
        """Its nComponent died (Runtime.check_components): a connection is reset, any
        other socket's NIC is down. Waiters wake and see it."""
        with self._lock:
            if self._dead or self._error:
                return
            self._error = errno.ECONNRESET if self._peer is not None else errno.ENETDOWN
            self._ring()
            self._wake_senders()

    # ---- pushes from the skeleton (the inbox reader), or a FIT shortcut's channel -------------
    def _pushed(self, op: int, payload: memoryview) -> None:
        lock = self._lock   # the Condition's own lock
        lock.acquire()      # (not `with`: the hot path, and `with` costs 0.25 us more here)
        try:
            if self._dead:
                return
            if op in _DATA_OPS:   # the data path's own messages: the hot case first
                if self._path is not None:
                    self._path.pushed(op, payload)
            elif op == Op.STUB_ACCEPT:
                self._accepts.append(codec.decode(payload[SK.size:])[0])
                self._ring()
            elif op == Op.STUB_CONNECTED:
                answer = codec.decode(payload[SK.size:])[0]
                if answer.get("until") == self._attempt:   # else a shortcut's answer
                    self._connected = answer                # that came too late
                    if self._pending is not None and "errno" in answer:
                        self._ring()   # a failed non-blocking connect: readable too
                    self._wake_senders()
            elif op == Op.STUB_SC_CONNECT:
                shortcuts.accept(self, codec.decode(payload[SK.size:])[0])
            elif op == Op.STUB_CLOSED:
                code = SK_ERR.unpack_from(payload)[1]
                if code > 0:
                    self._error = code
                else:   # 0: EOF; shortcuts.PEER_CLOSED: EOF, and the peer takes no more
                    self._eof = True
                    self._peer_gone = self._peer_gone or code == shortcuts.PEER_CLOSED
                self._ring()
                self._wake_senders()
        finally:
            lock.release()


def _poll(fd: int, timeout_s: float | None) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else timeout_s * 1000))


# the socket calls a trace records: method -> operation (`splitrack trace --ops`)
_OPERATIONS = {"__init__": "socket", "bind": "bind", "listen": "listen", "accept": "accept",
               "connect": "connect", "connect_ex": "connect", "send": "send",
               "sendall": "send", "sendmsg": "send", "recv": "recv", "recv_into": "recv",
               "recvfrom": "recv", "recvfrom_into": "recv", "recvmsg": "recv",
               "shutdown": "shutdown", "_real_close": "close", "setsockopt": "setsockopt",
               "getsockopt": "getsockopt"}
if tracing.TRACE:
    tracing.operations(BsdSocketStub, _OPERATIONS,
                       f"{os.environ.get('SPLITRACK_PCOMPONENT', 'p')}.{os.getpid()}")

__all__ = ["BsdSocketStub"]
