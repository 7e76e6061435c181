"""The bsdSocketStub: a process's half of a rack socket (the paper's Section III).

`BsdSocketStub` is what `socket.socket(AF_INET, SOCK_STREAM)` makes inside a
program run with `splitrack run` (rsocket.py installs it). It behaves as a
Linux TCP socket, but its bytes go through the rack: bind/connect ask GNM for
the nComponent that owns the address and that nComponent's Proxy for a
bsdSocketSkeleton, which holds the real kernel socket; from then on stub and
skeleton talk directly (runtime.py carries the messages).

This file is the socket API and the connection's state (addresses, timeouts,
EOF, errors, the accept queue); its parts are mixins in files of their own,
each over the same state: connect() is connecting.py's, bind, listen and
accept listening.py's, the shortcuts' connect and accept shortcuts.py's,
recv receiving.py's, send sending.py's, the socket options sockopts.py's,
shutdown, close and detach closing.py's, fileno()'s readiness bell.py's, and
what the API takes and says (errors, addresses, timeouts) sockargs.py's. A
connected stub's bytes take a path object:
`NicPath` (nic_path.py: through the skeleton, DMA or DDIO; the mode is the
rack's, or SPLITRACK_MODE from `splitrack run --mode`, or per socket
`set_rack_mode()`), or, to a listener of the rack, a shortcut (shortcuts.py):
`PipePath` (same pComponent: pipe_path.py) or `FitPath` (fit_path.py). Every
path implements datapath.py's `DataPath`, runs with the stub's lock held, and
speaks to the stub through its face only (face.py: `_face`, a door of its own,
so that nothing of it is on the socket's namespace a program sees).

fileno() is a real descriptor (one end of a socketpair) that is readable
exactly while data, EOF, an error or a connection waits, and writable exactly
while a send would not block (a full window is not writable), so select,
selectors and asyncio work. Errors are OSError with Linux's
errno; timeouts are TimeoutError("timed out"); would-block is BlockingIOError.
dup, socket.fromfd, socket(fileno=) and detach make more handles of one
connection (handles.py). Not supported (EOPNOTSUPP): ancillary data, MSG_OOB.
`socket(AF_INET, SOCK_DGRAM)` makes a DatagramStub (datagram.py): UDP through
the rack. AF_INET6 is refused (EAFNOSUPPORT); any other network socket (raw,
netlink) stays the host's, with a line on stderr that says so. A fork()ed
child uses its inherited rack sockets through its parent (forked.py); those it
makes are its own (its own runtime: runtime.py).

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
from splitrack.guest import forked, handles, preloaded
from splitrack.guest.bell import Bell
from splitrack.guest.closing import Closing
from splitrack.guest.connecting import Connecting
from splitrack.guest.face import StubFace
from splitrack.guest.fit_path import PEER_CLOSED
from splitrack.guest.listening import Listening
from splitrack.guest.nic_path import NicPath
from splitrack.guest.receiving import Receiving
from splitrack.guest.runtime import runtime
from splitrack.guest.sending import Sending
from splitrack.guest.shortcuts import Shortcuts
from splitrack.guest.sockargs import err, ipv4, timeout_value, warn_host_socket
from splitrack.guest.sockopts import RCVTIMEO, Options

_std = _socket_module.socket          # the stdlib class, whatever is installed later
_socketpair = _socket.socketpair
AF_INET, SOCK_STREAM = _socket_module.AF_INET, _socket_module.SOCK_STREAM
SOCK_DGRAM = _socket_module.SOCK_DGRAM
_TYPE_FLAGS = _socket_module.SOCK_NONBLOCK | _socket_module.SOCK_CLOEXEC
_LOCALHOST = "127.0.0.1"
_DATA_OPS = frozenset(int(op) for op in (Op.STUB_DATA, Op.STUB_DATA_DMA, Op.STUB_SENT,
                                          Op.STUB_SC_DATA, Op.STUB_SC_CREDIT))


class _Meta(type):
    """isinstance(s, socket.socket) stays true for the stdlib sockets (AF_UNIX...)
    that `socket.socket(...)` still makes once the stub is installed."""

    def __instancecheck__(cls, obj: object) -> bool:
        if cls is BsdSocketStub:
            return isinstance(obj, _std)
        return type.__instancecheck__(cls, obj)   # a subclass is itself


class BsdSocketStub(Connecting, Listening, Shortcuts, Receiving, Sending, Options, Closing,
                    Bell, _std, metaclass=_Meta):
    # A handle's own: its timeout and whether it is closed; the rest (`__dict__`) is
    # the connection's, shared by every handle of it (handles.py: dup, fromfd)
    __slots__ = ("__dict__", "_timeout", "_gone")
    _kind = "stream"   # N_BIND's type (datagram.py's is "dgram")

    def __new__(cls, family: int = -1, type: int = -1, proto: int = -1,
                fileno: int | None = None) -> Any:
        if fileno is not None:
            state = handles.shared_state(fileno)
            if state is not None:   # one more descriptor of a rack socket, of its kind
                dgram = state["_face"]._s._kind == "dgram"
                return _std.__new__(_datagram(cls) if dgram else cls)
        family = AF_INET if family == -1 else family
        kind = SOCK_STREAM if type == -1 else type
        if fileno is None and family == _socket_module.AF_INET6:
            raise err(errno.EAFNOSUPPORT)   # the rack's NICs are IPv4: never the host's
        if fileno is None and family == AF_INET and kind & ~_TYPE_FLAGS == SOCK_DGRAM:
            return _std.__new__(_datagram(cls))   # UDP: datagram.py
        if fileno is not None or family != AF_INET or kind & ~_TYPE_FLAGS != SOCK_STREAM:
            if fileno is None:
                warn_host_socket(family, kind & ~_TYPE_FLAGS)
            return _std(family, type, proto, fileno)   # not TCP/IPv4: the kernel's own
        return _std.__new__(cls)

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1,
                 fileno: int | None = None):
        self._rt = runtime()   # (in a fork()ed child: its own, not its parent's)
        if fileno is not None:   # (a rack socket's, or __new__ made a kernel socket)
            state = handles.shared_state(fileno)
            if state is not None and state["_rt"].forked:   # one a fork()ed child inherited:
                dgram = state["_face"]._s._kind == "dgram"    # its calls are its parent's
                forked.handle_over(self, fileno, state, dgram)
                return
            super().__init__(_socket_module.AF_UNIX, SOCK_STREAM, 0, fileno)
            self._timeout = _socket_module.getdefaulttimeout()
            handles.adopt(self, fileno, state)
            return
        bell, self._bell = _socketpair()   # (the C one: socket.py's would wrap each end in
        #                                    socket.socket, which is this class by now)
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
        self._started = False      # a connect returned before its outcome (non-blocking,
        #                            EINTR, SO_SNDTIMEO), which is not yet told
        self._pending: tuple[str, int, NicPath] | None = None   # ... its handshake goes on
        self._rung = False
        self._clogged = False      # fileno() is not writable now (_sync_writable)
        self._face = StubFace(self)   # the door its data paths and its runtime use (face.py)
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

    def _enqueue_accept(self, info: dict[str, Any]) -> None:
        """A connection for accept(): {"stub": the accepted stub} (a shortcut's), or
        the skeleton's STUB_ACCEPT {sk, peer, local}."""
        self._accepts.append(info)
        self._ring()

    def _accepted(self) -> "BsdSocketStub":
        """A stub for a connection accept() takes: this class's, whatever the program
        subclassed (the stdlib's accept() makes its own class too)."""
        return BsdSocketStub(AF_INET, SOCK_STREAM)

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

    def _deadline(self, wait: tuple[int, int] | None = RCVTIMEO) -> float | None:
        """When a wait gives up: the timeout's, or a blocking socket's SO_RCVTIMEO (or
        `wait` SO_SNDTIMEO; None: neither) (sockopts.py); None: never."""
        timeout = self._timeout
        if timeout is None:
            timeout = self._opts.get(wait)
            if timeout is None:
                return None
            preloaded.any_handler_ends(False)   # (a native program's call: Linux restarts
        return time.monotonic() + timeout       # no wait that has a time)

    def _gave_up(self) -> OSError:
        """What a wait past its deadline raises: TimeoutError for a timeout, EAGAIN for
        SO_RCVTIMEO or SO_SNDTIMEO (as the kernel's blocking socket)."""
        if self._timeout is None:
            return BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return TimeoutError("timed out")

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
            raise self._gave_up()

    def _readable(self) -> bool:
        return self._rung or self._dead

    def _park_readable(self, timeout: float | None) -> None:
        _poll(self._fd, timeout)

    def _park_writable(self, timeout: float | None) -> None:
        with self._cond:
            self._cond.wait_for(self._can_send, timeout)

    def _can_send(self) -> bool:
        return self._send_ready(False)

    def _writable(self) -> bool:
        """fileno()'s POLLOUT (bell.py): as _can_send(), but a stream's window must
        have a third of it free (its path's roomy()), as Linux's TCP says POLLOUT
        (sk_stream_min_wspace): a sender that poll() wakes writes much, not a sliver."""
        return self._send_ready(True)

    def _send_ready(self, roomy: bool) -> bool:
        if self._pending is not None:   # a non-blocking connect's handshake goes on
            return self._connect_ended()
        path = self._path
        return bool((path.roomy() if roomy else path.can_send()) or self._error
                    or self._shut_wr or self._broken or self._peer_gone or self._dead)

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
                self._enqueue_accept(codec.decode(payload[SK.size:])[0])
            elif op == Op.STUB_CONNECTED:
                answer = codec.decode(payload[SK.size:])[0]
                if answer.get("until") == self._attempt:   # else a shortcut's answer
                    self._connected = answer                # that came too late
                    if self._pending is not None and "errno" in answer:
                        self._ring()   # a failed non-blocking connect: readable too
                    self._wake_senders()
            elif op == Op.STUB_SC_CONNECT:
                self._shortcut_accept(codec.decode(payload[SK.size:])[0])
            elif op == Op.STUB_CLOSED:
                code = SK_ERR.unpack_from(payload)[1]
                if code > 0:
                    self._error = code
                else:   # 0: EOF; PEER_CLOSED: EOF, and the peer takes no more
                    self._eof = True
                    self._peer_gone = self._peer_gone or code == PEER_CLOSED
                self._ring()
                self._wake_senders()
        finally:
            lock.release()


_datagram_classes: dict[type, type] = {}


def _datagram(cls: type) -> type:
    """The class of a UDP socket made as `cls(AF_INET, SOCK_DGRAM)`: DatagramStub, or
    for a program's subclass of the socket class, that subclass over DatagramStub."""
    from splitrack.guest.datagram import DatagramStub  # (it imports this file)

    if issubclass(cls, DatagramStub):
        return cls
    if cls is BsdSocketStub:
        return DatagramStub
    made = _datagram_classes.get(cls)
    if made is None:
        made = _datagram_classes[cls] = type(cls.__name__, (cls, DatagramStub),
                                             {"__module__": cls.__module__})
    return made


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
