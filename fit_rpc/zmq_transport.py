"""FIT over ZeroMQ: a ROUTER inbox, one DEALER per peer. ipc on one host, tcp across.

The comparison transport (`transport = "zmq"`): the rack's default is shm
(shm_transport.py). Its ids are the routing ids senders choose, and nothing
vouches for them (Arrival.pid is None); its regions are memfds that a peer on
the same host opens by /proc path, so a rack on zmq is one host, one trust domain.

- The inbox is a ROUTER bound at `ipc://PATH` or `tcp://HOST:PORT` (port `*` or
  0 picks a free one; `address` then holds the real one). A sender is known by
  its DEALER's routing id, which is its component id.
- Each peer gets a DEALER with IMMEDIATE set: frames queue only on a live
  connection, so a send to a peer that is down fails within the timeout
  (PeerUnreachable) instead of queueing forever. Replies come back on it.
- Everything is single-threaded and synchronous, with blocking receives and no
  poller on the hot path: an asyncio loop costs 50-100 µs per round trip here
  and a zmq Poller ~2 µs per wait (measured on a 2-core VM). A caller waits
  for its reply in slices of FIT_REPLY_SLICE_MS so that its endpoint can serve
  requests that arrive meanwhile.
- Bounded: ZeroMQ's high-water marks (FIT_HWM_MSGS messages) bound every queue,
  and the protocols on top bound bytes in flight (the socket path's windows);
  the marks are high because a window of tiny segments is many messages, and a
  full queue must never block a sender that waits for nothing. A peer sending a frame
  over FIT_HARD_LIMIT_BYTES is disconnected by ZeroMQ (frames between the FIT
  limit and that are answered EMSGSIZE by the endpoint).
- Channels (`channel()`, beside the contract of transport.py): a direct link
  between two objects of two endpoints, frames in order, no routing id. A PULL
  bound beside the inbox (ipc: the inbox's path and a number; tcp: its host, a
  free port) takes what the peer sends; a PUSH (made in `sender`'s context: its
  I/O thread) connected to the peer's PULL sends, so one thread may send while
  another receives. What was sent before close() still leaves for `linger_s`.
- tcp endpoints are authenticated (CURVE): `splitrack up` writes a rack key
  pair to RUN_DIR/curve.key (0600, `new_keys`); every socket of a transport
  given that file (`keys`, or $SPLITRACK_CURVE) is a CURVE server (the inbox,
  a channel's receiving end) or client (a DEALER, a channel's sending end) with
  it, and a ZAP handler admits only clients that hold the rack's key. A process
  without the file cannot complete a handshake: it gets nothing.
"""

import errno
import json
import mmap
import os
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from fit_rpc.errors import PeerUnreachable
from fit_rpc.params import (
    FIT_HARD_LIMIT_BYTES,
    FIT_HWM_MSGS,
    FIT_LINGER_MS,
    FIT_RECONNECT_IVL_MS,
    FIT_REPLY_SLICE_MS,
)
from fit_rpc.transport import CURVE_ENV, Arrival, Frame, Transport

_NOBLOCK = zmq.NOBLOCK
_RCVMORE = zmq.RCVMORE
_SNDMORE = zmq.SNDMORE
_SLICE_S = FIT_REPLY_SLICE_MS / 1000


def new_keys(path: str) -> None:
    """A rack key pair (Z85), written 0600 to `path`, which must not exist."""
    public, secret = zmq.curve_keypair()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"public": public.decode(), "secret": secret.decode()}, f)


def _load_keys(path: str | None) -> tuple[bytes, bytes] | None:
    if not path:
        return None
    try:
        with open(path) as f:
            keys = json.load(f)
        return keys["public"].encode(), keys["secret"].encode()
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise OSError(getattr(exc, "errno", None) or errno.EINVAL,
                      f"cannot read the rack's CURVE keys at {path}: {exc}") from None


class _RackKeyOnly:
    """The ZAP check: a client is admitted if its CURVE key is the rack's."""

    def __init__(self, public: bytes):
        self.public = public   # Z85, as the callback is given the client's

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public


class ZmqTransport(Transport):
    def __init__(self, local_id: str, bind: str | None, keys: str | None = None):
        self._id = local_id.encode()
        self._keys = _load_keys(keys or os.environ.get(CURVE_ENV))   # (before a context)
        self._ctx = zmq.Context(io_threads=1)
        self._auth: ThreadAuthenticator | None = None
        self._dealers: dict[str, zmq.Socket] = {}
        self._inbox: zmq.Socket | None = None
        self._inbox_timeout_ms = -1
        self._peer_names: dict[bytes, str] = {}
        self._channels = 0
        self.address = None
        if bind is not None:
            self._bind(bind)

    def _secure(self, sock: zmq.Socket, server: bool) -> None:
        """CURVE on `sock`, if this rack's endpoints are authenticated."""
        if self._keys is None:
            return
        public, secret = self._keys
        sock.curve_secretkey, sock.curve_publickey = secret, public
        if not server:
            sock.curve_serverkey = public
            return
        sock.curve_server = True
        if self._auth is None:   # one ZAP handler per context, for all its servers
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve_callback("*", _RackKeyOnly(public))

    def _bind(self, address: str) -> None:
        inbox = self._ctx.socket(zmq.ROUTER)
        self._secure(inbox, server=True)
        inbox.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted peer takes over its id
        inbox.setsockopt(zmq.MAXMSGSIZE, FIT_HARD_LIMIT_BYTES)
        inbox.setsockopt(zmq.LINGER, FIT_LINGER_MS)
        inbox.setsockopt(zmq.RCVHWM, FIT_HWM_MSGS)
        inbox.setsockopt(zmq.SNDHWM, FIT_HWM_MSGS)
        try:
            inbox.bind(address.replace(":0", ":*") if address.startswith("tcp://") else address)
        except zmq.ZMQError as exc:
            inbox.close()
            self.close()   # (the ZAP thread's sockets too, or term() waits for ever)
            raise OSError(exc.errno, f"cannot bind FIT inbox at {address}: {exc}") from None
        self._inbox = inbox
        self.address = inbox.getsockopt_string(zmq.LAST_ENDPOINT)

    # ---- readiness: ZMQ_FD is edge-triggered; ZMQ_EVENTS says what waits -------------
    def fileno(self) -> int:
        assert self._inbox is not None, "readiness needs an inbox"
        return self._inbox.getsockopt(zmq.FD)

    def arm(self) -> bool:
        return not self.pending()

    def pending(self) -> bool:
        return self._inbox is not None and bool(self._inbox.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def disarm(self) -> None:
        self.pending()   # reading ZMQ_EVENTS is what re-arms ZMQ_FD

    def _dealer(self, peer: str, address: str) -> zmq.Socket:
        sock = self._dealers.get(peer)
        if sock is None:
            sock = self._ctx.socket(zmq.DEALER)
            self._secure(sock, server=False)
            sock.setsockopt(zmq.ROUTING_ID, self._id)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.setsockopt(zmq.LINGER, FIT_LINGER_MS)
            sock.setsockopt(zmq.RECONNECT_IVL, FIT_RECONNECT_IVL_MS)
            sock.setsockopt(zmq.MAXMSGSIZE, FIT_HARD_LIMIT_BYTES)
            sock.setsockopt(zmq.RCVTIMEO, FIT_REPLY_SLICE_MS)
            sock.setsockopt(zmq.SNDHWM, FIT_HWM_MSGS)
            sock.setsockopt(zmq.RCVHWM, FIT_HWM_MSGS)
            sock.connect(address)
            self._dealers[peer] = sock
        return sock

    def send(self, peer: str, address: str, frame: Frame, timeout_s: float,
             head: bytes = b"") -> None:
        if head:
            frame = head + frame
        sock = self._dealers.get(peer) or self._dealer(peer, address)
        try:
            sock.send(frame, _NOBLOCK)
            return
        except zmq.Again:
            pass
        # No live connection yet (first use) or any more (peer down): wait for one.
        if sock.poll(max(0, int(timeout_s * 1000)), zmq.POLLOUT):
            try:
                sock.send(frame, _NOBLOCK)
                return
            except zmq.Again:
                pass
        raise PeerUnreachable(f"no connection to {peer} at {address} within {timeout_s:g} s")

    def reply(self, route: bytes, frame: Frame, head: bytes = b"") -> None:
        assert self._inbox is not None
        try:  # two plain sends: send_multipart's Python loop costs ~1 us here
            self._inbox.send(route, _NOBLOCK | _SNDMORE)
            self._inbox.send(head + frame if head else frame, _NOBLOCK)
        except zmq.Again:
            pass  # the sender is gone or not reading: its reply is dropped, we keep serving

    def recv_inbound(self, timeout_s: float | None) -> Arrival | None:
        inbox = self._inbox
        if inbox is None:
            return None
        ms = -1 if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
        if ms != self._inbox_timeout_ms:
            inbox.setsockopt(zmq.RCVTIMEO, ms)
            self._inbox_timeout_ms = ms
        try:
            route = inbox.recv()
        except zmq.Again:
            return None
        frames = [inbox.recv()]  # a ROUTER always delivers the sender's id, then its frames
        while inbox.getsockopt(_RCVMORE):
            frames.append(inbox.recv())  # kept, so that the endpoint can call it malformed
        peer = self._peer_names.get(route)
        if peer is None:
            peer = self._peer_names[route] = route.decode(errors="replace")
            if len(self._peer_names) > 4096:  # bounded: a long-lived inbox sees many clients
                self._peer_names.clear()
        return Arrival(peer, route, frames, None, None)

    def done(self, arrival: Arrival) -> None:
        pass   # its frames are its own

    def recv_reply(self, peer: str, timeout_s: float, serve: bool) -> Frame | None:
        # Replies come from FIT endpoints, which send one frame; should a peer send
        # more, the extra frames arrive as replies of their own and fail their
        # header check, so no RCVMORE probe (~1 us) is paid on this hot path.
        sock = self._dealers.get(peer)
        if sock is None:
            return None
        short = timeout_s < _SLICE_S
        if short:
            sock.setsockopt(zmq.RCVTIMEO, max(1, int(timeout_s * 1000 + 0.999)))
        try:
            return sock.recv()
        except zmq.Again:
            return None
        finally:
            if short:
                sock.setsockopt(zmq.RCVTIMEO, FIT_REPLY_SLICE_MS)

    def channel(self, peer: str, linger_s: float, sender: Any = None) -> "ZmqChannel":
        """A new channel: its receiving end bound beside the inbox (OSError if it cannot
        be), its sending end made in `sender` (default: this transport)."""
        assert self.address is not None, "channels need an inbox"
        self._channels += 1
        if self.address.startswith("ipc://"):
            where = f"{self.address}.{self._channels}"
        else:   # tcp://HOST:PORT
            where = self.address.rsplit(":", 1)[0] + ":*"
        return ZmqChannel(self, where, linger_s, sender or self)

    # ---- regions: memfds, opened by a peer of this host through /proc -----------------------
    def new_region(self, name: str, size: int) -> tuple[mmap.mmap, int]:
        fd = os.memfd_create(f"fit-region {name}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            return mmap.mmap(fd, size), fd
        except OSError:
            os.close(fd)
            raise

    def grant_region(self, route: Any, handle: int) -> dict[str, Any]:
        return {"path": f"/proc/{os.getpid()}/fd/{handle}"}

    def map_region(self, peer: str, answer: dict[str, Any], size: int) -> mmap.mmap:
        fd = os.open(answer["path"], os.O_RDWR | os.O_CLOEXEC)
        try:
            return mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def forget(self, peer: str) -> None:
        sock = self._dealers.pop(peer, None)
        if sock is not None:
            sock.close(0)

    def close(self) -> None:
        if self._ctx.closed:
            return
        for peer in list(self._dealers):
            self.forget(peer)
        if self._inbox is not None:
            self._inbox.close(0)
            self._inbox = None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        self._ctx.term()


class ZmqChannel:
    """One end of a channel (ZmqTransport.channel): `address` is where the peer's
    end connects; connect() this end to the peer's. send() from one thread at a time,
    recv() from one thread at a time (maybe another); close() when neither runs."""

    def __init__(self, rx_side: ZmqTransport, bind: str, linger_s: float,
                 tx_side: ZmqTransport):
        self._tx_side = tx_side
        self._linger_ms = int(linger_s * 1000)
        self._tx: zmq.Socket | None = None
        self._rx_timeout_ms = -1
        rx = self._socket(rx_side, zmq.PULL, {
            zmq.LINGER: FIT_LINGER_MS, zmq.RCVHWM: FIT_HWM_MSGS,
            zmq.MAXMSGSIZE: FIT_HARD_LIMIT_BYTES}, bind=bind)
        self._rx = rx
        self.address = rx.getsockopt_string(zmq.LAST_ENDPOINT)

    def connect(self, address: str) -> None:
        self._tx = self._socket(self._tx_side, zmq.PUSH, {
            zmq.IMMEDIATE: 1,   # as a DEALER's: a send to a vanished peer fails
            zmq.LINGER: self._linger_ms, zmq.RECONNECT_IVL: FIT_RECONNECT_IVL_MS,
            zmq.SNDHWM: FIT_HWM_MSGS}, connect=address)

    @staticmethod
    def _socket(side: ZmqTransport, kind: int, options: dict[int, int],
                bind: str | None = None, connect: str | None = None) -> zmq.Socket:
        """A socket of `side`'s context, bound or connected, with its CURVE; OSError if
        there is none to be had (EMFILE...)."""
        sock = None
        try:
            sock = side._ctx.socket(kind)
            side._secure(sock, server=bind is not None)
            for option, value in options.items():
                sock.setsockopt(option, value)
            if bind is not None:
                sock.bind(bind)
            else:
                sock.connect(connect)
            return sock
        except zmq.ZMQError as exc:
            if sock is not None:
                sock.close(0)
            raise OSError(exc.errno, f"no FIT channel at {bind or connect}: {exc}") from None

    def fileno(self) -> int:
        return self._rx.getsockopt(zmq.FD)

    def arm(self) -> bool:
        return not self._rx.getsockopt(zmq.EVENTS) & zmq.POLLIN

    def disarm(self) -> None:
        pass

    def pending(self) -> bool:
        return bool(self._rx.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def send(self, frame: Frame, timeout_s: float, head: bytes = b"") -> None:
        """Queue one frame for the peer; PeerUnreachable if no connection within timeout_s."""
        if head:
            frame = head + frame
        tx = self._tx
        assert tx is not None, "send on a channel not connected"
        try:
            tx.send(frame, _NOBLOCK)
            return
        except zmq.Again:
            pass
        if tx.poll(max(0, int(timeout_s * 1000)), zmq.POLLOUT):   # not connected yet, or gone
            try:
                tx.send(frame, _NOBLOCK)
                return
            except zmq.Again:
                pass
        raise PeerUnreachable(f"no channel to {tx.getsockopt_string(zmq.LAST_ENDPOINT)} "
                              f"within {timeout_s:g} s")

    def recv(self, timeout_s: float) -> bytes | None:
        """The next frame, waiting up to timeout_s (0: only what is there); None: none.
        (The parts of a multi-part message come as frames of their own.)"""
        rx = self._rx
        try:
            if timeout_s <= 0:
                return rx.recv(_NOBLOCK)
            ms = max(1, int(timeout_s * 1000 + 0.999))
            if ms != self._rx_timeout_ms:
                rx.setsockopt(zmq.RCVTIMEO, ms)
                self._rx_timeout_ms = ms
            return rx.recv()
        except zmq.Again:
            return None

    def close(self) -> None:
        self._rx.close(0)
        if self._tx is not None:
            self._tx.close()   # its LINGER: what was sent still leaves
