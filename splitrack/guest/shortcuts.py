"""The intra-rack shortcuts (the paper's Section III): rack TCP that skips the nComponent.

When a stub connects to an address of the rack (a NIC, or the rack loopback),
it asks the nComponent that owns the address who listens there (N_LOOKUP). If
a stub of the rack does:
- same pComponent: a **pipe** between the two processes -- a Unix-domain
  stream pair, a pipe in both directions (BSD built its pipes this way), made
  through a rendezvous path in the run directory and unlinked at once:
  `PipePath`. The kernel holds the bytes and does the flow control; the
  socket's fileno() becomes the pair's end, so select sees it both ways.
- different pComponents: a **FIT** channel of the two stubs' own
  (Endpoint.channel, beside the processes' inboxes): STUB_SC_DATA,
  STUB_SC_CREDIT and STUB_CLOSED in order, windows as on the ordinary path:
  `FitPath`. Its reader is a thread waiting on the socket (as a pipe's; the
  process's inbox is looked at between slices), or, once the process is
  threaded, the inbox thread (Runtime.watch).
The connector sends STUB_SC_CONNECT to the listener's process; the listener's
stub makes the accepted stub at once (its accept queue holds it, as a
kernel's backlog holds a handshaken connection) and answers STUB_CONNECTED.
No answer before the connector's deadline (the listener's process is not
reading its inbox), nobody listening, or `shortcuts = false` (`splitrack run
--no-shortcuts`): the ordinary path, which gives ECONNREFUSED as Linux would.
The listener takes a request only in the first half of the connector's wait,
and its answer names the request (`until`), so an answer that still comes
late is dropped, never taken for the ordinary connect's.
Neither program can tell, but by speed: addresses are those a real connection
would show (the connector's port is an ephemeral one of its own).

Ends: close or SHUT_WR is EOF for the peer. On the pipe the kernel says the
rest (EPIPE, ECONNRESET, EOF when a process dies). A FIT peer that closed
makes later sends EPIPE; one that dies is found by its PID within
PEER_CHECK_S (a waiting stub, or the inbox thread) and is
ECONNRESET. Path methods run with the stub's lock held, but for the waits.
"""

import _socket
import errno
import os
import select
import socket
import threading
import time
from collections import deque
from typing import Any

import psutil

from fit_rpc import Op, codec
from fit_rpc.netpath import SK, SK_ERR, SK_N
from native.fitring import spin_yield
from splitrack.guest import handles
from splitrack.params import (
    PEER_CHECK_S,
    SHORTCUT_CONNECT_WAIT_S,
    SHORTCUT_FIT_WINDOW_BYTES,
    SHORTCUT_PIPE_BYTES,
    SKELETON_LINGER_S,
    SOCKET_BUFFER_BYTES,
    SOCKET_CREDIT_BYTES,
    STUB_FOLLOWER_SLICE_S,
    STUB_PUSH_TIMEOUT_S,
)
from splitrack.rundir import identify

_std = _socket.socket  # the kernel's socket type (C), whatever socket.socket is made later
PEER_CLOSED = -1       # STUB_CLOSED's value when a FIT peer closed (not only SHUT_WR)
_SC_DATA, _SC_CREDIT = int(Op.STUB_SC_DATA), int(Op.STUB_SC_CREDIT)   # plain ints: faster
# Credit goes back once this much was read: the same share of the window as on the
# ordinary path. (A credit that comes ahead of an answer costs its reader a wake-up.)
_FIT_CREDIT_BYTES = SHORTCUT_FIT_WINDOW_BYTES * SOCKET_CREDIT_BYTES // SOCKET_BUFFER_BYTES


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
    wait = SHORTCUT_CONNECT_WAIT_S if not stub._timeout else \
        min(stub._timeout, SHORTCUT_CONNECT_WAIT_S)   # (non-blocking: the listener's answer
    #                                                   is waited for, then EINPROGRESS)
    # The listener drops a request older than `until`, and the connector waits twice
    # as long: an answer to a request the listener took has time to come, so no
    # listener keeps a connection its connector gave up on (its program would accept
    # one whose peer is already gone).
    args = {"kind": "pipe" if same else "fit", "peer": list(local), "local": [ip, port],
            "process": rt.id, "stub": stub._id, "inbox": rt.inbox.address,
            "until": time.time() + wait / 2}
    rendezvous = _rendezvous(rt, stub._id) if same else None
    if rendezvous:
        args["path"] = rendezvous.getsockname()
    else:   # the listener's first bytes may come before the answer is read
        try:
            stub._path = FitPath(stub, listener["process"])
        except OSError:
            return False   # no channel (no room for one): the ordinary path
        args["channel"] = stub._path.channel.address
    rt.add_peer(listener["process"], listener["inbox"])
    stub._connected = None
    stub._attempt = args["until"]   # the answer names it; a late one is dropped
    try:
        rt.send(listener["process"], Op.STUB_SC_CONNECT,
                SK.pack(listener["stub"]) + codec.encode(args))
        rt.wait(lambda: stub._connected is not None, time.monotonic() + wait,
                stub._park_connect)
        answer = stub._connected or {"errno": errno.ETIMEDOUT}
        if "errno" in answer:
            with stub._lock:
                if stub._path is not None:
                    stub._path.release()
                stub._path = None
            return False   # the listener went away or did not answer: the ordinary path
        if rendezvous:
            rendezvous.settimeout(wait)
            fd, _ = rendezvous._accept()   # queued before the listener answered
            stub._path = PipePath(stub, fd)
        else:
            stub._path.connected(answer["sk"], answer["channel"])
    finally:
        stub._attempt = None
        if rendezvous:
            os.unlink(rendezvous.getsockname())
            rendezvous.close()
    stub._local = stub._to_program(local)
    stub._peer = stub._to_program((ip, port))
    return True


def _rendezvous(rt: Any, sid: int) -> socket.socket:
    """A listening Unix socket the listener's process connects to, once."""
    path = os.path.join(rt.run_dir, f"{rt.id}.{sid}.pipe")
    if os.path.exists(path):
        os.unlink(path)
    sock = _std(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(path)
        sock.listen(1)
    except OSError:
        sock.close()
        raise
    return sock


# ---- the listener's side ---------------------------------------------------------------------
def accept(listener: Any, args: dict[str, Any]) -> None:
    """STUB_SC_CONNECT for a listening stub (its lock held): make the accepted stub,
    queue it, answer the connector."""
    rt = listener._rt
    if time.time() > args["until"]:
        return   # the connector gave up and took the ordinary path: no ghost connection
    rt.add_peer(args["process"], args["inbox"])
    answer: dict[str, Any]
    conn = None
    try:
        if not listener._listening or listener._dead or listener._shut_rd:
            raise OSError(errno.ECONNREFUSED, "not listening")
        conn = listener.__class__(socket.AF_INET, socket.SOCK_STREAM)
        if args["kind"] == "pipe":
            sock = _std(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.connect(args["path"])
            except OSError:
                sock.close()
                raise
            conn._path = PipePath(conn, sock.detach())
        else:
            conn._path = FitPath(conn, args["process"], args["stub"], args["channel"])
        conn._local = conn._to_program(args["local"])
        conn._peer = conn._to_program(args["peer"])
        conn._mode = args["kind"]
        listener._accepts.append({"stub": conn})
        listener._ring()
        answer = {"sk": conn._id, "local": args["local"]}
        if args["kind"] == "fit":
            answer["channel"] = conn._path.channel.address
    except OSError as exc:
        if conn is not None:
            conn.close()
        answer = {"errno": exc.errno or errno.ECONNREFUSED}
    refuse(rt, args, answer)


def refuse(rt: Any, request: dict[str, Any], answer: dict[str, Any] | None = None) -> None:
    """Answer a connector's STUB_SC_CONNECT `request` (ECONNREFUSED unless `answer`
    says otherwise), naming its attempt (`until`): an answer that comes after the
    connector gave up is not taken for the answer to its next connect."""
    answer = {**(answer or {"errno": errno.ECONNREFUSED}), "until": request.get("until")}
    try:
        rt.send(request["process"], Op.STUB_CONNECTED,
                SK.pack(request["stub"]) + codec.encode(answer), timeout=0.5)
    except OSError:
        pass   # the connector is gone


# ---- the paths -----------------------------------------------------------------------------------
class PipePath:
    """Same pComponent: a Unix-domain stream pair. The stub's fileno() becomes its end."""

    name = "pipe"
    pump_due = False   # (a NicPath's: its sender reads the inbox; the kernel tells this one)

    def __init__(self, stub: Any, fd: int):
        self.stub = stub
        for own in handles.live_fds(stub):   # fileno() is now the pipe's end (the stub's
            os.dup2(fd, own, inheritable=False)   # own and every handle's)
        os.close(fd)
        handles.rekey(stub)
        os.set_blocking(stub._fd, False)
        stub._bell.close()   # the pipe itself says when it is readable
        stub._bell = None
        self.sock = stub._own   # the stub's own socket object: now the pipe's end
        _roomy(self.sock)
        self.fd = stub._fd
        self.readable = select.poll()   # kept: a poll object per wait costs ~1 us
        self.readable.register(self.fd, select.POLLIN)
        self.writable = select.poll()
        self.writable.register(self.fd, select.POLLOUT)

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        flags = socket.MSG_DONTWAIT | (socket.MSG_PEEK if peek else 0)
        try:   # the stub's own socket object holds the fd: the kernel's recv on it
            data = self.sock.recv(want, flags) if view is None else None
            n = len(data) if view is None else self.sock.recv_into(view, want, flags)
        except BlockingIOError:
            return None
        if n == 0:
            self.stub._eof = True   # the peer shut down or closed (or its process ended)
            return None
        return data if view is None else n

    def put(self, chunk: memoryview) -> int:
        try:
            return self.sock.send(chunk, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return 0

    def can_send(self) -> bool:
        return bool(self.writable.poll(0))

    def pushed(self, op: int, payload: memoryview) -> None:
        pass   # a pipe carries its own bytes; nothing comes through the inbox

    def wait_readable(self, deadline: float | None) -> bool:
        return self._wait(self.readable, deadline, self.stub._rt.spin_s) or \
            self.stub._readable()

    def wait_writable(self, deadline: float | None) -> bool:
        return self._wait(self.writable, deadline, 0.0)   # the reader needs the CPU

    def _wait(self, poller: Any, deadline: float | None, spin_s: float) -> bool:
        """poll() the pipe, after spinning on it for spin_s (rack.poll_us, as a FIT
        waiter does: a sleep and a wake-up across cores cost more than a round trip);
        inline, the process's inbox is looked at between slices (a listener of this
        process may have a shortcut connection waiting)."""
        spin_until = time.monotonic() + spin_s
        while time.monotonic() < spin_until:
            if poller.poll(0):
                return True
            if not spin_yield():
                break   # another task wants this CPU: sleep
        while True:
            if poller.poll(_ms(deadline, PEER_CHECK_S)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.stub._rt.pump()

    def shutdown(self, how: int) -> None:
        try:
            self.sock.shutdown(how)   # SHUT_WR: the peer reads EOF
        except OSError:
            pass   # the peer is gone already

    def release(self) -> None:
        pass   # the pipe's end is the socket's own fd; closing the socket closes it


class FitPath:
    """Different pComponents: a FIT channel between the two stubs.

    `reading` is held by whoever reads the channel: a waiting thread for a slice,
    or the inbox thread for as long as it watches it; whoever holds it once the
    path is released closes the channel (`let_go`)."""

    name = "fit"
    pump_due = False   # (a NicPath's: its sender reads the inbox)

    def __init__(self, stub: Any, peer: str, peer_stub: int = 0, channel: str | None = None):
        self.stub, self.rt = stub, stub._rt
        self.peer = peer
        pid = int(peer.split(".")[1])
        try:
            self.peer_created = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            self.peer_created = 0.0
        self.peer_pid = pid
        # what the stub sent before close() still leaves, as a closed skeleton's does
        self.channel = self.rt.channel(peer, SKELETON_LINGER_S)
        self.reading = threading.Lock()
        self.released = False
        self.rx: deque[memoryview] = deque()   # received chunks, in order
        self.unacked = 0
        self.credit = SHORTCUT_FIT_WINDOW_BYTES
        self.closed_sent = False
        self.checked = time.monotonic()
        self.peer_stub, self.head = 0, b""
        if channel is not None:
            try:
                self.connected(peer_stub, channel)
            except OSError:
                self.channel.close()
                raise
        self.rt.watch(self)

    def connected(self, peer_stub: int, channel: str) -> None:
        """The peer stub's id and channel (the connector learns them from the answer)."""
        self.channel.connect(channel)
        self.peer_stub = peer_stub
        self.head = SK.pack(peer_stub)   # every STUB_SC_DATA starts with it

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        rx = self.rx
        if not rx:
            return None
        data = rx[0]
        if len(data) > want:
            data = data[:want]
            if not peek:
                rx[0] = rx[0][want:]
        elif not peek:
            rx.popleft()
        k = len(data)
        if not peek:
            self.unacked += k
            if self.unacked >= _FIT_CREDIT_BYTES:
                self._tell(_SC_CREDIT, SK_N.pack(self.peer_stub, self.unacked))
                self.unacked = 0
            if not rx:
                self.stub._drained()
        if view is None:
            return bytes(data)
        view[:k] = data
        return k

    def pushed(self, op: int, payload: memoryview) -> None:
        if op == _SC_CREDIT:   # (data is delivered by _deliver)
            self.credit += SK_N.unpack_from(payload)[1]
            self.stub._wake_senders()

    def put(self, chunk: memoryview) -> int:
        n = min(self.credit, len(chunk), SHORTCUT_FIT_WINDOW_BYTES // 2)   # < the FIT limit
        if n:
            try:
                self.channel.send(_SC_DATA, chunk if n == len(chunk) else chunk[:n],
                                  STUB_PUSH_TIMEOUT_S, self.head)
            except OSError:   # the peer's end takes nothing: it is gone
                raise OSError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)) from None
            self.credit -= n
        return n

    def _tell(self, op: int, payload: bytes) -> bool:
        """One message to the peer stub; False if its end takes none (it is gone)."""
        try:
            self.channel.send(op, payload, STUB_PUSH_TIMEOUT_S)
            return True
        except OSError:
            return False

    def can_send(self) -> bool:
        return self.credit > 0

    # ---- waiting: the waiter reads the channel, unless another thread does ----------------
    def wait_readable(self, deadline: float | None) -> bool:
        return self._wait(self._readable, deadline, self.stub._park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        return self._wait(self.stub._can_send, deadline, self.stub._park_writable)

    def _readable(self) -> bool:
        return self.stub._rung

    def _wait(self, ready: Any, deadline: float | None, park: Any) -> bool:
        """Until ready() (True) or the deadline (False)."""
        while not ready():
            if self.released:
                return True   # closed meanwhile: the caller finds out
            if deadline is None:
                most = PEER_CHECK_S
            else:
                most = min(deadline - time.monotonic(), PEER_CHECK_S)
                if most <= 0:
                    return False
            if not self.reading.acquire(blocking=False):
                # the inbox thread reads it (and rings the stub), or another waiter does
                park(most if self.rt.threaded else min(most, STUB_FOLLOWER_SLICE_S))
                self.check_peer()
                continue
            try:
                if not ready():
                    self._read(most)
            finally:
                self.let_go()
        return True

    def _read(self, timeout: float) -> None:
        got = self.channel.recv(timeout)
        if got is not None:
            self._deliver(*got)
        else:   # a slice went by: the process's inbox's turn; is the peer alive?
            self.rt.pump()
            self.check_peer()

    def _deliver(self, op: int, payload: memoryview) -> None:
        """A message from the channel, by its reader (the stub's lock not held)."""
        if op != _SC_DATA:
            self.stub._pushed(op, payload)   # credit, STUB_CLOSED
            return
        stub = self.stub
        with stub._lock:
            if not stub._dead and len(payload) > SK.size:
                self.rx.append(payload[SK.size:])   # a channel's payloads are ours to keep
                stub._ring()

    def drain(self) -> bool:
        """The inbox thread's, holding `reading`: every message waiting on the channel;
        whether there was any."""
        got_any = False
        while (got := self.channel.recv(0)) is not None:
            self._deliver(*got)
            got_any = True
        return got_any

    def let_go(self) -> None:
        """Release `reading` -- and close the channel, if the path was released
        meanwhile (whoever then takes `reading` closes it; nobody gives it back)."""
        self.reading.release()
        if self.released and self.reading.acquire(blocking=False):
            self.channel.close()

    def check_peer(self) -> bool:
        """Checked at most every PEER_CHECK_S: a dead peer process is a reset."""
        now = time.monotonic()
        if now - self.checked < PEER_CHECK_S:
            return False
        self.checked = now
        if identify(self.peer_pid, self.peer_created) is not None:
            return False
        with self.stub._cond:
            if not self.stub._eof:
                self.stub._error = self.stub._error or errno.ECONNRESET
            self.stub._ring()
            self.stub._wake_senders()
        self.closed_sent = True   # nobody to tell
        return True

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.closed_sent:
            self.closed_sent = True
            self._tell(Op.STUB_CLOSED, SK_ERR.pack(self.peer_stub, 0))

    def release(self) -> None:
        if self.peer_stub:   # the peer's later sends fail (EPIPE), as to a closed TCP socket
            self._tell(Op.STUB_CLOSED, SK_ERR.pack(self.peer_stub, PEER_CLOSED))
        self.released = True
        self.rt.unwatch(self)
        if self.reading.acquire(blocking=False):
            self.channel.close()   # nobody reads it; else its reader closes it (let_go)


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


def _ms(deadline: float | None, most_s: float) -> float:
    """A poll() timeout in ms: until a monotonic deadline (None: none), at most most_s."""
    left = most_s if deadline is None else min(most_s, deadline - time.monotonic())
    return max(0.0, left * 1000)
