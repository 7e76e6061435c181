"""The intra-rack shortcuts (the paper, section 5): rack TCP that skips the nComponent.

When a stub connects to an address of the rack (a NIC, or the rack loopback),
it asks GNM-located nComponent's Proxy who listens there (N_LOOKUP). If a
stub of the rack does:
- same pComponent: a **pipe** pair between the two processes (two FIFOs in the
  run directory, opened by both and unlinked at once): `PipePath`. The kernel
  pipe is the buffer and the flow control; fileno() is the pipe's read end.
- different pComponents: a direct **FIT** channel between the two stubs
  (STUB_SC_DATA, STUB_SC_CREDIT, STUB_CLOSED between their inboxes), windows
  as on the ordinary path: `FitPath`.
The connector sends STUB_SC_CONNECT to the listener's process; the listener's
stub makes the accepted stub at once (its accept queue holds it, as a
kernel's backlog holds a handshaken connection) and answers STUB_CONNECTED.
Neither program can tell, but by speed: addresses are those a real
connection would show (the connector's port is an ephemeral one of its own).
Nobody listening, or `shortcuts = false` (`splitrack run --no-shortcuts`):
the ordinary path, which gives ECONNREFUSED as Linux would.

A pipe peer that dies is EOF (as Linux gives when the kernel closes a dead
process's socket); a FIT peer that dies is found by its PID within
SHORTCUT_PEER_CHECK_S and is ECONNRESET. Path methods run with the stub's lock.
"""

import errno
import fcntl
import os
import select
import socket
import time
from collections import deque
from typing import Any

import psutil

from fit_rpc import Op, codec
from fit_rpc.netpath import SK, SK_ERR, SK_N
from splitrack.params import (
    SHORTCUT_FIT_WINDOW_BYTES,
    SHORTCUT_PEER_CHECK_S,
    SHORTCUT_PIPE_BYTES,
    SOCKET_CREDIT_BYTES,
)
from splitrack.rundir import identify


# ---- the connector's side -------------------------------------------------------------------
def try_connect(stub: Any, ip: str, port: int) -> bool:
    """Connect `stub` to ip:port by a shortcut; False if the ordinary path must do it."""
    rt = stub._rt
    if not rt.shortcuts or stub._n is not None or not rt.is_rack_ip(ip):
        return False
    try:
        listener = rt.call(rt.owner(ip), Op.N_LOOKUP, {"ip": ip, "port": port})
    except OSError:
        return False   # nobody listens: the kernel will say so on the ordinary path
    same = listener["process"].split(".")[0] == rt.pcomponent
    src = rt.loopback if ip == rt.loopback else rt.nic()[0]
    local = (src, rt.ephemeral_port())
    args = {"kind": "pipe" if same else "fit", "peer": list(local), "local": [ip, port],
            "process": rt.id, "stub": stub._id, "inbox": rt.inbox.address}
    fifos = _make_fifos(rt, stub._id) if same else None
    if fifos:
        args["fifos"] = list(fifos[:2])
    rt.add_peer(listener["process"], listener["inbox"])
    stub._connected = None
    try:
        rt.send(listener["process"], Op.STUB_SC_CONNECT,
                SK.pack(listener["stub"]) + codec.encode(args))
        ok = rt.wait(lambda: stub._connected is not None, time.monotonic() + 10.0,
                     stub._park_connect)
        answer = stub._connected or {"errno": errno.ETIMEDOUT}
        if not ok or "errno" in answer:
            return False   # the listener went away meanwhile: try the ordinary path
        if fifos:
            stub._path = PipePath(stub, fifos[2], fifos[3])
            os.close(fifos[4])   # the listener holds the read end now
            _unlink(fifos)
            fifos = None
        else:
            stub._path = FitPath(stub, listener["process"], answer["sk"])
    finally:
        if fifos:
            for fd in fifos[2:]:
                os.close(fd)
            _unlink(fifos)
    stub._local = stub._to_program(local)
    stub._peer = stub._to_program((ip, port))
    return True


def _make_fifos(rt: Any, sid: int) -> tuple:
    """(to-listener path, to-connector path, our read end of the second, our write end
    of the first, a placeholder reader of the first). The placeholder lets the write
    end open before the listener's reader does (a FIFO refuses a lone non-blocking
    writer), and the writer is there before the listener reads (a FIFO with no writer
    reads as EOF); it closes once the listener has opened its end."""
    base = os.path.join(rt.run_dir, f"{rt.id}.{sid}")
    paths = (base + ".c2s", base + ".s2c")
    for path in paths:
        if os.path.exists(path):
            os.unlink(path)
        os.mkfifo(path, 0o600)
    placeholder = _open(paths[0], os.O_RDWR)
    return paths[0], paths[1], _open(paths[1], os.O_RDONLY), _open(paths[0], os.O_WRONLY), \
        placeholder


def _unlink(fifos: tuple | None) -> None:
    for path in (fifos or ())[:2]:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _open(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    _grow(fd)
    return fd


def _grow(fd: int) -> None:
    """A pipe as roomy as a loopback TCP connection's buffers, as far as the system
    lets (fs.pipe-max-size); a 64 KiB pipe would deadlock an echo of 1 MiB."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, SHORTCUT_PIPE_BYTES)
    except OSError:
        pass


# ---- the listener's side ---------------------------------------------------------------------
def accept(listener: Any, args: dict[str, Any]) -> None:
    """STUB_SC_CONNECT for a listening stub (its lock held): make the accepted stub,
    queue it, answer the connector."""
    rt = listener._rt
    rt.add_peer(args["process"], args["inbox"])
    answer: dict[str, Any]
    try:
        if not listener._listening or listener._dead:
            raise OSError(errno.ECONNREFUSED, "not listening")
        conn = listener.__class__(socket.AF_INET, socket.SOCK_STREAM)
        if args["kind"] == "pipe":
            c2s, s2c = args["fifos"]
            conn._path = PipePath(conn, _open(c2s, os.O_RDONLY), _open(s2c, os.O_WRONLY))
        else:
            conn._path = FitPath(conn, args["process"], args["stub"])
        conn._local = conn._to_program(args["local"])
        conn._peer = conn._to_program(args["peer"])
        conn._mode = args["kind"]
        listener._accepts.append({"stub": conn})
        listener._ring()
        answer = {"sk": conn._id, "local": args["local"]}
    except OSError as exc:
        answer = {"errno": exc.errno or errno.ECONNREFUSED}
    rt.send(args["process"], Op.STUB_CONNECTED, SK.pack(args["stub"]) + codec.encode(answer))


# ---- the paths -----------------------------------------------------------------------------------
class PipePath:
    """Same pComponent: a pipe each way. The stub's fileno() becomes the read end."""

    name = "pipe"

    def __init__(self, stub: Any, rfd: int, wfd: int):
        self.stub = stub
        os.dup2(rfd, stub._fd)   # fileno() is now readable exactly when the pipe is
        os.close(rfd)
        os.set_blocking(stub._fd, False)
        self.rfd, self.wfd = stub._fd, wfd
        self.peeked = b""
        self.readable = select.poll()   # kept: a poll object per wait costs ~1 us
        self.readable.register(self.rfd, select.POLLIN)
        self.writable = select.poll()
        self.writable.register(wfd, select.POLLOUT)

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        data = self.peeked[:want]
        if data:
            if not peek:
                self.peeked = self.peeked[len(data):]
        else:
            try:
                data = os.read(self.rfd, want)
            except BlockingIOError:
                return None
            if not data:
                self.stub._eof = True   # the peer closed its end (or its process ended)
                return None
            if peek:
                self.peeked = data
        if view is None:
            return data
        view[:len(data)] = data
        return len(data)

    def put(self, chunk: memoryview) -> int:
        if self.wfd < 0:
            raise OSError(errno.EPIPE, os.strerror(errno.EPIPE))
        try:
            return os.write(self.wfd, chunk)
        except BlockingIOError:
            return 0

    def can_send(self) -> bool:
        return self.wfd < 0 or bool(self.writable.poll(0))

    def pushed(self, op: int, payload: memoryview) -> None:
        pass   # a pipe carries its own bytes; nothing comes through the inbox

    def wait_readable(self, deadline: float | None) -> bool:
        return bool(self.readable.poll(_ms(deadline))) or self.stub._readable()

    def wait_writable(self, deadline: float | None) -> bool:
        return self.wfd < 0 or bool(self.writable.poll(_ms(deadline)))

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and self.wfd >= 0:
            self.writable.unregister(self.wfd)
            os.close(self.wfd)   # the peer reads EOF
            self.wfd = -1

    def release(self) -> None:
        self.shutdown(socket.SHUT_WR)   # the read end is the socket's own fd


class FitPath:
    """Different pComponents: FIT messages straight between the two stubs."""

    name = "fit"

    def __init__(self, stub: Any, peer: str, peer_stub: int):
        self.stub, self.rt = stub, stub._rt
        self.peer, self.peer_stub = peer, peer_stub
        self.head = SK.pack(peer_stub)   # every STUB_SC_DATA starts with it
        pid = int(peer.split(".")[1])
        try:
            self.peer_created = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            self.peer_created = 0.0
        self.peer_pid = pid
        self.rx: deque[bytes] = deque()   # received chunks, in order
        self.rx_bytes = 0
        self.unacked = 0
        self.credit = SHORTCUT_FIT_WINDOW_BYTES
        self.closed_sent = False
        self.checked = time.monotonic()

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        if not self.rx:
            return None
        data = self.rx[0]
        if len(data) > want:
            data = data[:want]
            if not peek:
                self.rx[0] = self.rx[0][want:]
        elif not peek:
            self.rx.popleft()
        k = len(data)
        if not peek:
            self.rx_bytes -= k
            self.unacked += k
            if self.unacked >= SOCKET_CREDIT_BYTES:
                self.rt.send(self.peer, Op.STUB_SC_CREDIT, SK_N.pack(self.peer_stub, self.unacked))
                self.unacked = 0
            if not self.rx:
                self.stub._drained()
        if view is None:
            return data
        view[:k] = data
        return k

    def pushed(self, op: int, payload: memoryview) -> None:
        if op == Op.STUB_SC_DATA:
            data = bytes(payload[SK.size:])
            if data:
                self.rx.append(data)
                self.rx_bytes += len(data)
                self.stub._ring()
        elif op == Op.STUB_SC_CREDIT:
            self.credit += SK_N.unpack_from(payload)[1]
            self.stub._cond.notify_all()

    def put(self, chunk: memoryview) -> int:
        n = min(self.credit, len(chunk), SHORTCUT_FIT_WINDOW_BYTES // 2)   # < the FIT limit
        if n:
            self.rt.send(self.peer, Op.STUB_SC_DATA,
                         self.head + (chunk if n == len(chunk) else chunk[:n]))
            self.credit -= n
        return n

    def can_send(self) -> bool:
        return self.credit > 0

    def wait_readable(self, deadline: float | None) -> bool:
        return self.rt.wait(self._readable, deadline, self._park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        return self.rt.wait(self._writable, deadline, self._park_writable)

    def _readable(self) -> bool:
        return self.stub._rung or self._peer_died()

    def _writable(self) -> bool:
        return self.stub._can_send() or self._peer_died()

    def _park_readable(self, timeout: float | None) -> None:   # in slices: see _peer_died
        self.stub._park_readable(_slice(timeout))

    def _park_writable(self, timeout: float | None) -> None:
        self.stub._park_writable(_slice(timeout))

    def _peer_died(self) -> bool:
        """Checked at most every SHORTCUT_PEER_CHECK_S: a dead peer process is a reset."""
        now = time.monotonic()
        if now - self.checked < SHORTCUT_PEER_CHECK_S:
            return False
        self.checked = now
        if identify(self.peer_pid, self.peer_created) is not None:
            return False
        with self.stub._cond:
            if not self.stub._eof:
                self.stub._error = self.stub._error or errno.ECONNRESET
            self.stub._ring()
        self.closed_sent = True   # nobody to tell
        return True

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.closed_sent:
            self.closed_sent = True
            self.rt.send(self.peer, Op.STUB_CLOSED, SK_ERR.pack(self.peer_stub, 0))

    def release(self) -> None:
        try:
            self.shutdown(socket.SHUT_WR)
        except OSError:
            pass   # the peer's process is gone


def _slice(timeout: float | None) -> float:
    return SHORTCUT_PEER_CHECK_S if timeout is None else min(timeout, SHORTCUT_PEER_CHECK_S)


def _ms(deadline: float | None) -> float | None:
    """A poll() timeout in ms for a monotonic deadline (None: forever)."""
    return None if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
