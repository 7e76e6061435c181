"""A datagram bsdSocketStub: `socket.socket(AF_INET, SOCK_DGRAM)` on the rack.

`DatagramStub` is a BsdSocketStub (stub.py) whose socket is UDP: the same
state, descriptor, options, timeouts, handles and close, and the same
ordinary path through a skeleton on an nComponent (nic_path.py: its rings in
the process's rack memory, DDIO or DMA), over which datagrams travel as
records (fit_rpc/netpath.py's DGRAM header, then the bytes), so a datagram
arrives whole and alone, never joined to the next nor split
(monitors/dgram_skeleton.py is the other end). What differs is the API:

- bind(): N_BIND of a datagram skeleton (its kernel UDP socket on the NIC, and
  on the rack loopback too for 0.0.0.0), which starts at once (N_START with
  the stub's buffers). sendto() and connect() on a socket not bound bind it
  first to 0.0.0.0 and a port the kernel picks, as Linux does.
- sendto(data, address), send(data) once connected: one datagram, whole or
  not at all: MAX_DATAGRAM bytes at most (EMSGSIZE), EDESTADDRREQ without an
  address on a socket not connected. It waits (as the timeout says) while the
  send ring has no room for all of it; non-blocking, BlockingIOError.
- recvfrom(n), recv(n), recv_into, recvfrom_into, recvmsg: the next datagram,
  cut to n bytes (the rest is gone, as Linux cuts it; recvmsg's flags say
  MSG_TRUNC), and who sent it (127.0.0.1 for the rack's loopback). MSG_PEEK
  leaves it; MSG_DONTWAIT does not wait.
- connect(address): a default peer (N_DGRAM_CONNECT; no handshake): send()
  goes there, and only its datagrams arrive; getpeername() says it.
- an error the nComponent's kernel socket met (a send's, an ICMP's on a
  connected socket: ECONNREFUSED) is raised by the next call, once (SO_ERROR
  takes it too); the socket goes on working.
- listen() and accept() are EOPNOTSUPP, as for UDP on Linux.
"""

import errno
import os
import socket as _socket_module
from typing import Any

from fit_rpc import Op, codec, tracing
from fit_rpc.netpath import DGRAM, MAX_DATAGRAM, SK_ERR
from splitrack.guest.listening import Listening
from splitrack.guest.nic_path import NicPath
from splitrack.guest.receiving import _IGNORED
from splitrack.guest.sockargs import bytes_view, err, scatter
from splitrack.guest.sockopts import SNDTIMEO
from splitrack.guest.stub import BsdSocketStub

_PEEK, _DONTWAIT, _TRUNC, _NOSIGNAL, _CONFIRM, _WAITALL = (int(f) for f in (
    _socket_module.MSG_PEEK, _socket_module.MSG_DONTWAIT, _socket_module.MSG_TRUNC,
    _socket_module.MSG_NOSIGNAL, _socket_module.MSG_CONFIRM, _socket_module.MSG_WAITALL))
_CONNECTED = ("0.0.0.0", 0)   # a record's destination: the connected peer


class DatagramStub(BsdSocketStub):
    _kind = "dgram"
    _lanes = False   # (receiving.py: its records are read by its own _take)
    type = property(lambda self: _socket_module.SocketKind.SOCK_DGRAM)

    # ---- names ------------------------------------------------------------------------
    def bind(self, address: Any) -> None:
        Listening.bind(self, address)   # (N_BIND, "type": "dgram")
        path = NicPath(self, self._mode, packing=False)
        path.n, path.sk = self._n, self._sk
        self._path = path
        self._rt.send(self._n, Op.N_START, codec.encode(
            {"sk": self._sk, "stub": self._id, "buffers": path.buffers}))

    def _bound(self) -> None:
        if self._n is None:
            self.bind(("0.0.0.0", 0))

    def connect(self, address: Any) -> None:
        self._alive()
        ip, port = self._to_rack(address)
        self._bound()
        reply = self._call(Op.N_DGRAM_CONNECT, {"sk": self._sk, "dst": [ip, port]})
        self._peer = self._to_program((ip, port))
        self._local = self._to_program(tuple(reply["local"]))

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except OSError as exc:
            return exc.errno or errno.EIO
        return 0

    def listen(self, backlog: int = 0) -> None:
        self._alive()
        raise err(errno.EOPNOTSUPP)

    def accept(self) -> tuple[Any, Any]:
        self._alive()
        raise err(errno.EOPNOTSUPP)

    # ---- sending ------------------------------------------------------------------------
    def send(self, data: Any, flags: int = 0) -> int:
        if self._peer is None and not self._dead:
            raise err(errno.EDESTADDRREQ)
        return self._send_datagram(bytes_view(data), flags, _CONNECTED)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.send(data, flags)

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        flags, address = (0, flags_or_address) if address is None else \
            (flags_or_address, address)
        dst = self._to_rack(address)
        if dst[1] == 0:   # (no datagram goes to port 0: Linux's EINVAL)
            raise err(errno.EINVAL)
        return self._send_datagram(bytes_view(data), flags, dst)

    def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0,
                address: Any = None) -> int:
        if ancdata:
            raise err(errno.EOPNOTSUPP)
        data = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
        return self.send(data, flags) if address is None else self.sendto(data, flags, address)

    def _send_datagram(self, view: bytes | memoryview, flags: int,
                       dst: tuple[str, int]) -> int:
        self._alive()
        if flags & ~(_DONTWAIT | _NOSIGNAL | _CONFIRM):
            raise err(errno.EOPNOTSUPP)
        if len(view) > MAX_DATAGRAM:
            raise err(errno.EMSGSIZE)
        self._bound()
        if self._shut_wr:
            raise err(errno.EPIPE)
        record = DGRAM.pack(len(view), _socket_module.inet_aton(dst[0]), dst[1]) + bytes(view)
        nonblocking = self._timeout == 0.0 or flags & _DONTWAIT
        deadline, pumped = self._deadline(SNDTIMEO), False
        path = self._path
        while True:
            with self._lock:
                self._raise_error()
                if path.c.credit >= len(record):   # all of it, or none
                    self._put_whole(record)
                    if self._rt.exact:
                        self._sync_writable()
                    break
            if nonblocking:
                if pumped:
                    raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
                self._rt.pump()   # what the skeleton said: its STUB_SENT, an error
                pumped = True
                continue
            if not path.wait_writable(deadline):
                raise self._gave_up()
        if path.pump_due:   # a program that only sends still hears its skeleton
            path.pump()
        return len(view)

    def _put_whole(self, record: bytes) -> None:
        """(lock held, the credit checked) The record into the send ring, all of it: a
        record cut short would make the skeleton misread every one after it, so a
        fault that stops it halfway breaks the socket."""
        done = 0
        try:
            while done < len(record):
                got = self._path.put(record if not done else memoryview(record)[done:])
                if not got:
                    raise err(errno.EIO)
                done += got
        except BaseException:
            if done:
                self._broken = True
            raise

    # ---- receiving ----------------------------------------------------------------------
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        return self.recvfrom(bufsize, flags)[0]

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        data, _, address = self._recv_datagram(bufsize, flags)
        return data, address

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recvfrom_into")
        if nbytes > len(view):
            raise ValueError("nbytes is greater than the length of the buffer")
        data, size, address = self._recv_datagram(nbytes or len(view), flags)
        view[:len(data)] = data
        return (size if flags & _TRUNC else len(data)), address

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple:
        data, size, address = self._recv_datagram(bufsize, flags)
        return data, [], _TRUNC if size > len(data) else 0, address

    def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0) -> tuple:
        buffers = list(buffers)
        want = sum(memoryview(b).nbytes for b in buffers)
        data, size, address = self._recv_datagram(want, flags)
        return scatter(data, buffers), [], _TRUNC if size > len(data) else 0, address

    def _buffered(self) -> int:
        """(fionread: receiving.py) A datagram socket's: the next datagram's size, 0 if
        none waits (as Linux's UDP), or its skeleton is gone."""
        self._alive()
        with self._lock:
            path = self._path
            head = None if path is None or self._broken else \
                path.take(DGRAM.size, None, True)
            return 0 if head is None else DGRAM.unpack(head)[0]

    def _recv_datagram(self, want: int, flags: int) -> tuple[bytes, int, Any]:
        """The next datagram's first `want` bytes, its whole size and its sender,
        waiting as a stream's recv waits (receiving.py's loop, over _take below)."""
        self._alive()
        if flags & ~(_PEEK | _DONTWAIT | _TRUNC | _WAITALL | _IGNORED):   # (WAITALL: none
            raise err(errno.EOPNOTSUPP)                                    # for UDP either)
        return self._recv_some(want, flags & ~_WAITALL, None)

    def _take(self, want: int, view: Any, peek: bool) -> tuple[bytes, int, Any] | None:
        """(lock held) The next datagram, or the socket's error once; None: none yet."""
        self._raise_error()
        if self._dead or self._gone:
            raise err(errno.EBADF)
        path = self._path
        head = None if path is None else path.take(DGRAM.size, None, True)
        if head is None:
            return None
        n, ip, port = DGRAM.unpack(head)
        total = DGRAM.size + n
        record = path.take(total, None, peek)   # (delivered whole: all of it is there)
        try:
            while len(record) < total:   # a line's fault stopped it: the rest, or broken
                record += path.take(total - len(record), None, False)
        except BaseException:
            self._broken = True
            raise
        address = self._to_program((_socket_module.inet_ntoa(ip), port))
        return record[DGRAM.size:DGRAM.size + want], n, address

    def _raise_error(self) -> None:
        """(lock held) An error the nComponent reported, raised once: the socket goes
        on, unless its skeleton is gone (its nComponent died; then ENETDOWN)."""
        code = self._take_error()
        if code:
            raise err(code)
        if self._broken:
            raise err(errno.ENETDOWN)

    def _take_error(self) -> int:
        """(lock held) The pending error, cleared; fileno() stays readable only if a
        datagram waits."""
        code, self._error = self._error, 0
        if code and not self._rung_by_data():
            self._hush()
        return code

    def _rung_by_data(self) -> bool:
        return self._path is not None and self._path.c.rtail != self._path.c.rhead

    def shutdown(self, how: int) -> None:
        super().shutdown(how)
        with self._lock:   # SHUT_RD: what is queued is still read, and nothing is EOF
            if self._shut_rd and not (self._error or self._rung_by_data()):
                self._hush()

    def _drained(self) -> None:
        """No datagram is left: fileno() is not readable (unless an error waits)."""
        if not self._error:
            self._hush()

    def _component_gone(self) -> None:
        super()._component_gone()
        with self._lock:
            self._broken = True   # its skeleton is gone: ENETDOWN after the error

    def _can_send(self) -> bool:
        """Writable: the send ring has room for any datagram (or an error waits)."""
        return bool(self._path is None or self._path.c.credit >= DGRAM.size + MAX_DATAGRAM
                    or self._error or self._broken or self._dead)

    _writable = _can_send   # (fileno()'s POLLOUT: the same room)

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        if (level, optname) == (_socket_module.SOL_SOCKET, _socket_module.SO_ERROR) \
                and not buflen:
            self._alive()
            self._rt.pump()   # what the skeleton said so far
            with self._lock:
                return self._take_error()
        return super().getsockopt(level, optname, buflen)

    # ---- pushes -------------------------------------------------------------------------
    def _pushed(self, op: int, payload: memoryview) -> None:
        if op not in (Op.STUB_DGRAM_ERROR, Op.STUB_CLOSED):
            return super()._pushed(op, payload)
        with self._lock:   # STUB_CLOSED: the skeleton is gone (it failed, ENOBUFS...)
            if not self._dead:
                self._error = SK_ERR.unpack_from(payload)[1] or errno.ENETDOWN
                self._broken = self._broken or op == Op.STUB_CLOSED
                self._ring()
                self._wake_senders()


# its own socket calls, recorded as the stream stub's are in a traced process (stub.py)
_OPERATIONS = {"bind": "bind", "connect": "connect", "connect_ex": "connect",
               "send": "send", "sendall": "send", "sendto": "send", "sendmsg": "send",
               "recv": "recv", "recv_into": "recv", "recvfrom": "recv",
               "recvfrom_into": "recv", "recvmsg": "recv"}
if tracing.TRACE:
    tracing.operations(DatagramStub, _OPERATIONS,
                       f"{os.environ.get('SPLITRACK_PCOMPONENT', 'p')}.{os.getpid()}")

__all__ = ["DatagramStub"]
