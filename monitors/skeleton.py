"""A bsdSocketSkeleton: the nComponent's half of one socket (the paper's Section III).

It owns the real kernel TCP socket on a NIC and two rings of nComponent DRAM
(native/nring.c): `rx` between the kernel and the stub, `tx` between the stub
and the kernel. Its nMonitor (nmonitor.py) feeds it kernel readiness and the
stub's messages; it answers with pushes to the stub (0x07xx). It touches no
FIT socket itself: every message goes out through `self.net` (the nMonitor),
and the bytes' way to or from the process (dDMA or dDDIO) is `self.path`
(data_paths.py).

Flow control, both ways bounded:
- receive: the stub grants a window (its receive buffer's free bytes); the
  skeleton reads from the kernel only while the window is open, so a slow
  reader leaves the bytes in the kernel and TCP pushes back on the sender;
- send: the stub announces bytes it wrote into its send ring (at most the
  ring's size unconfirmed); the skeleton pulls them into tx as far as tx has
  room (`path.pull`), hands tx to the kernel, pulls again as the kernel takes
  bytes, and confirms (STUB_SENT) what it pulled in batches of
  SOCKET_SENT_BYTES. A slow peer leaves the bytes in the stub's ring.

Traced (`splitrack trace`, fit_rpc/tracing.py): `trace` is the context of
the last traced message about the skeleton (the one that made it, at first);
its kernel sends and receives are recorded in it, and bytes that arrive start
a recv of their own (the paper's Fig. 5: recv step 1, send step 5).

States: a listener (accepts; its connections wait for N_START), a connection,
or closing (N_CLOSE: no more reading; tx drains to the kernel, then the kernel
socket closes; SKELETON_LINGER_S at most).
"""

import errno
import socket
import time
from typing import Any, Protocol

from fit_rpc import tracing
from native.nring import NRing
from splitrack.params import SKELETON_LINGER_S, SKELETON_RECV_CHUNK_BYTES, SOCKET_SENT_BYTES


class Net(Protocol):
    """What a skeleton needs from its nMonitor."""

    id: str   # the nComponent's FIT id (a trace's events name it)
    counts: dict[str, int]   # its STATS counters

    def push(self, skel: "Skeleton", op: int, payload: bytes) -> None: ...
    def watch(self, skel: "Skeleton") -> None: ...
    def refresh(self, skel: "Skeleton") -> None: ...   # its state changed: fast or not
    def accepted(self, listener: "Skeleton", conn: socket.socket) -> None: ...
    def closed(self, skel: "Skeleton") -> None: ...
    def connect_done(self, skel: "Skeleton", err: int) -> None: ...
    def drop_socket(self, skel: "Skeleton", sock: socket.socket) -> None: ...


class Skeleton:
    def __init__(self, net: Net, sk: int, owner: str, socks: list[socket.socket], conn: Any):
        self.net = net
        self.sk = sk
        self.c = conn                   # the data plane's state (native/skelpath.h): the
        #                                 window, counts and stream offsets live there
        self.in_plane = False           # the plane can run it (its fd fits: NMonitor.new)
        self.owner = owner              # the stub's process endpoint id, "pN.PID"
        self.stub = 0                   # the stub's id in its process (pushes name it)
        self.inbox = ""                 # the stub's process's FIT inbox (a listener's: lookups)
        self.socks = socks              # one; two for 0.0.0.0 (NIC and rack loopback)
        for s in socks:
            s.setblocking(False)
        self.listening = False
        self.backlog = 0
        self.waiting: set[int] = set()  # a listener's connections not yet accepted by the stub
        self.parent: Skeleton | None = None
        self.rx: NRing | None = None
        self.tx: NRing | None = None
        self.path: Any = None           # data_paths.Ddio or data_paths.Dma, set at start()
        self.eof = False                # nothing more will be read from the kernel
        self.shut_wr = False            # SHUT_WR asked: once tx is drained
        self.closing_since: float | None = None
        self.connecting = False         # N_CONNECT waits for the kernel's handshake
        self.connect_deadline = 0.0
        self.dead = False               # closed and its rings freed
        self.broken = False             # the connection failed: what the stub sends is dropped
        self.gone = False               # its stub is gone (its process ended, exec()ed, or took
        #                                 no push): nothing is pushed; it closes as at an exit
        self.abortive = False           # SO_LINGER on with 0 s: close resets (NMonitor.n_sockopt)
        self.trace = tracing.current.ctx   # traced: the last traced message's context

    @property
    def sock(self) -> socket.socket:
        return self.socks[0]

    def watched(self) -> list[socket.socket]:
        """The kernel sockets whose readiness its nMonitor polls."""
        return self.socks if self.listening else self.socks[:1]

    # ---- the state the data plane shares (kp_conn) --------------------------------------
    window = property(lambda self: self.c.window,          # bytes the stub can still take
                      lambda self, v: setattr(self.c, "window", v))
    unconfirmed = property(lambda self: self.c.unconfirmed,   # pulled from the stub's ring,
                           lambda self, v: setattr(self.c, "unconfirmed", v))   # not confirmed
    bytes_in = property(lambda self: self.c.bytes_in,
                        lambda self, v: setattr(self.c, "bytes_in", v))
    bytes_out = property(lambda self: self.c.bytes_out,
                         lambda self, v: setattr(self.c, "bytes_out", v))

    def plain(self) -> bool:
        """Whether the data plane may run it (NMonitor.refresh): a connection in its
        plain state, not traced -- every other state is this file's."""
        return (self.path is not None and self.trace is None
                and not (self.listening or self.connecting or self.eof or self.broken
                         or self.shut_wr or self.dead or self.path.parked)
                and self.closing_since is None)

    # ---- what the nMonitor polls for ---------------------------------------------------
    def wants_read(self) -> bool:
        if self.listening:
            return len(self.waiting) < self.backlog
        return (self.rx is not None and self.window > 0 and not self.eof
                and self.closing_since is None and not self.connecting)

    def wants_write(self) -> bool:
        return self.connecting or (self.tx is not None and self.tx.used > 0)

    def busy(self) -> bool:
        """Bytes the stub sent that are not in tx yet (not pulled, or being pulled)."""
        return self.path is not None and self.path.busy()

    # ---- start: the stub's buffer is known ---------------------------------------------
    def start(self, rx: NRing, tx: NRing, path: Any, window: int) -> None:
        self.rx, self.tx, self.path, self.window = rx, tx, path, window
        self.c.rx, self.c.tx = rx._r, tx._r
        self.net.refresh(self)
        self.net.watch(self)

    # ---- kernel readiness -------------------------------------------------------------
    def readable(self, fd: int) -> None:
        if self.listening:
            for s in self.socks:
                if s.fileno() == fd:
                    self._accept(s)
            return
        if self.rx is None or not self.wants_read():
            return   # an event from before a state change in this poll round
        try:
            n = self.rx.recv(self.sock.fileno(), min(self.window, SKELETON_RECV_CHUNK_BYTES))
        except BlockingIOError:
            return
        except OSError as exc:
            n = -(exc.errno or errno.EIO)
        self.received(n)

    def received(self, n: int, stored: int = 0) -> None:
        """What a kernel recv into rx returned: n bytes (of which the data plane already
        put `stored` into the stub's lines: KP_RECEIVED), 0 at EOF, or -errno."""
        if n < 0:
            self._fail(-n)
            return
        if n == 0:
            self.eof = True
            self.net.refresh(self)
            self.net.watch(self)
            self.path.closed(self, 0)
            return
        self.window -= n
        self.bytes_in += n
        if self.trace is None:
            self.path.deliver(self, n, stored)
        else:   # traced: the bytes' arrival is a recv of its own
            with tracing.within(tracing.event(tracing.root(self.trace, "recv"), self.net.id,
                                              "net", self.net.id, "KERNEL_RECV", n, "kernel")):
                self.path.deliver(self, n, stored)
        if self.window == 0:
            self.net.watch(self)

    def writable(self) -> None:
        if self.connecting:
            self.net.connect_done(self, self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
            return
        self.flush()

    def flush(self) -> None:
        """Hand tx to the kernel, refilling it from the stub's send ring; confirm what
        was pulled, in batches."""
        tx = self.tx
        if tx is None:
            return
        was = tx.used
        while True:
            self.unconfirmed += self.path.pull(self)
            if self.dead or self.broken:
                return
            used = tx.used
            try:
                sent = tx.send(self.sock.fileno()) if used else 0
            except OSError as exc:
                tx.reset()
                self._fail(exc.errno or errno.EIO)
                return
            self.bytes_out += sent
            if sent and self.trace is not None:
                tracing.event(self.trace, self.net.id, self.net.id, "net", "KERNEL_SEND", sent,
                              "kernel")
            if sent < used or not sent or not self.path.busy():
                break   # the kernel is full, or nothing more waits
        if self.unconfirmed >= SOCKET_SENT_BYTES:  # the stub blocks only at a full ring
            self.path.confirm(self, self.unconfirmed)
            self.unconfirmed = 0
        if tx.used == 0:
            self._drained()
        if (tx.used > 0) != (was > 0):
            self.net.watch(self)

    def _drained(self) -> None:
        if self.busy():
            return   # bytes the stub sent before SHUT_WR or close go first
        if self.shut_wr:
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self.shut_wr = False
        if self.closing_since is not None:
            self.net.closed(self)

    # ---- the stub's requests ----------------------------------------------------------
    def credit(self, n: int) -> None:
        was_closed = not self.wants_read()
        self.window += n
        if was_closed and self.wants_read():
            self.net.watch(self)

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_RD, socket.SHUT_RDWR):
            self.eof = True
            self.net.refresh(self)
            self.net.watch(self)
        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            self.shut_wr = True
            self.net.refresh(self)
            if self.tx is None or self.tx.used == 0:
                self._drained()

    def close(self) -> None:
        """N_CLOSE (or N_RELEASE): stop reading, take every byte out of the stub's send
        ring (which goes away now), drain them to the kernel, then close the socket."""
        self.closing_since = time.monotonic()
        self.net.refresh(self)
        if self.abortive:   # SO_LINGER 0 s: what is not sent is dropped; the kernel resets
            self.net.closed(self)
            return
        if self.path is not None and not self.broken:
            self.unconfirmed += self.path.pull(self, everything=True)
        if (self.tx is None or self.tx.used == 0) and not self.busy():
            self.net.closed(self)
        else:
            self.net.watch(self)

    def lingered(self, now: float) -> bool:
        return self.closing_since is not None and now - self.closing_since > SKELETON_LINGER_S

    # ---- internals -----------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while len(self.waiting) < self.backlog:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: leave it in the kernel's backlog
                self.net.log.warning("accept on skeleton %d: %s", self.sk, exc)
                return
            self.net.accepted(self, conn)
        self.net.watch(self)

    def _fail(self, err: int) -> None:
        """The connection broke (ECONNRESET, EPIPE...): tell the stub, read no more."""
        if self.broken:
            return
        self.eof = self.broken = True
        self.net.refresh(self)
        self.net.watch(self)
        if self.path is not None:
            self.path.closed(self, err)
        if self.closing_since is not None:
            self.net.closed(self)
