"""A FIT endpoint: one process's requests, replies and handlers.

Interface:
    ep = Endpoint("p0", bind="ipc:///run/p0.sock", directory="ipc:///run/global.sock")
    ep.on(Op.HEALTH, handler)          # handler(msg: Message) -> payload | None
    ep.call("m0", Op.ECHO, b"x")       # request/reply -> memoryview (raises on error)
    ep.send("m0", Op.LOAD_REPORT, p)   # one-way
    ep.serve(timeout_s) / ep.serve_forever()
    ep.pollable                        # the inbox, for a zmq.Poller beside kernel fds
    ch = ep.channel("p1.42", linger_s) # a Channel: one-way messages between two objects
    ep.counters.snapshot(); ep.close()

Invariants:
- Invocations go both ways: any endpoint with an inbox serves requests, and
  while it waits for a reply it keeps serving them, so two endpoints calling
  each other at once cannot deadlock (a handler may itself call); unless the
  caller says serve=False, for a peer that never calls it.
- Replies are matched by `seq` (FIT's slot index). A reply for an outer call
  that arrives while an inner call waits is kept for the outer call; a reply
  nobody awaits (its caller timed out) is dropped and counted `stale_reply`.
- A malformed, oversized or unknown message gets an error reply (if it was a
  request) and a counter, never an exception out of serve().
- Peer ids are resolved to addresses once, by asking `global` (RESOLVE); the
  answer is cached. A timed-out link is reset, so nothing stale is delivered.
- A Channel carries the same messages (header, counters) beside the inbox,
  from one object to one object: no routing id, no dispatch, no handler.
"""

import errno
import logging
import time
from collections.abc import Callable
from typing import Any

from fit_rpc import codec, header
from fit_rpc.counters import Counters
from fit_rpc.errors import (
    FitError,
    FitTimeout,
    MalformedMessage,
    MessageTooLarge,
    UnknownOp,
    from_code,
)
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.ops import Op, op_name
from fit_rpc.transport import Arrival, Frame, Transport
from splitrack.params import FIT_CALL_TIMEOUT_S, FIT_MAX_PAYLOAD_BYTES

log = logging.getLogger("fit_rpc")
_unpack_header = header.HEADER.unpack_from
_pack_header = header.HEADER.pack
_pack_header_into = header.HEADER.pack_into

GLOBAL_ID = "global"


class Message:
    """An inbound request or one-way message, as a handler sees it."""

    __slots__ = ("src", "op", "seq", "kind", "payload")

    def __init__(self, src: str, op: int, seq: int, kind: int, payload: memoryview):
        self.src = src          # sender's component id
        self.op = op
        self.seq = seq
        self.kind = kind        # header.REQUEST or header.ONEWAY
        self.payload = payload  # view into the received frame; valid during the handler

    def args(self) -> tuple[dict[str, Any], memoryview]:
        """The payload in the "args" layout (codec.py)."""
        return codec.decode(self.payload)


Handler = Callable[[Message], Frame | None]


def make_transport(local_id: str, bind: str | None, scheme: str | None = None) -> Transport:
    """The transport for an address scheme; ipc:// and tcp:// are ZeroMQ."""
    scheme = scheme or (bind.split("://", 1)[0] if bind else "ipc")
    if scheme in ("ipc", "tcp"):
        from fit_rpc.zmq_transport import ZmqTransport

        return ZmqTransport(local_id, bind)
    raise ValueError(f"no FIT transport for scheme {scheme!r} (have: ipc, tcp)")


class Endpoint:
    def __init__(self, local_id: str, bind: str | None = None, *,
                 directory: str | None = None, transport: Transport | None = None):
        self.id = local_id
        self.transport = transport or make_transport(local_id, bind, _scheme(directory))
        self.address = self.transport.address
        self.pollable = getattr(self.transport, "pollable", None)
        self.counters = Counters()
        self._addresses: dict[str, str] = {GLOBAL_ID: directory} if directory else {}
        self._handlers: dict[int, Handler] = {Op.ECHO: _echo}
        self._seq = 0
        self._awaiting: set[int] = set()
        self._early: dict[int, list] = {}
        self._at_close: list[Callable[[], None]] = []

    # ---- configuration -------------------------------------------------------
    def on(self, op: int, handler: Handler) -> None:
        self._handlers[op] = handler

    def add_peer(self, peer: str, address: str) -> None:
        self._addresses[peer] = address

    def resolve(self, peer: str, timeout: float | None = None) -> str:
        address = self._addresses.get(peer)
        if address is None:
            if GLOBAL_ID not in self._addresses or peer == GLOBAL_ID:
                raise from_code(errno.ENXIO, f"unknown destination {peer!r} (no directory)")
            args, _ = codec.decode(self.call(GLOBAL_ID, Op.RESOLVE, codec.encode({"id": peer}),
                                             timeout))
            address = self._addresses[peer] = codec.need(args, "address", str)
        return address

    # ---- calling -------------------------------------------------------------
    def call(self, peer: str, op: int, payload: Frame = b"",
             timeout: float | None = None, serve: bool = True, room: bool = False
             ) -> memoryview:
        """Send a request to `peer` and return the reply payload.

        Raises FitTimeout (no reply in time), PeerUnreachable (no connection),
        UnknownDestination (no such id), MessageTooLarge (nothing sent), or the
        OSError the peer answered with. serve=False: the inbox waits meanwhile
        (no handler runs nested in this call; only for a peer that never calls
        back, or the two could deadlock until the timeout). room=True: the payload
        is a writable buffer whose first HEADER_SIZE bytes are room for the FIT
        header, written there in place (a large payload is not copied); the
        buffer may be read until the reply comes (if the call fails, drop it).
        """
        if timeout is None:
            timeout = FIT_CALL_TIMEOUT_S
        deadline = time.monotonic() + timeout  # sending, too, counts against the timeout
        self._seq = seq = (self._seq % 0xFFFFFFFF) + 1
        self._transmit(peer, REQUEST, op, seq, payload, timeout, room)
        awaiting = self._awaiting
        awaiting.add(seq)
        try:
            return self._await_reply(peer, op, seq, deadline, serve)
        finally:
            awaiting.discard(seq)

    def call_args(self, peer: str, op: int, args: dict[str, Any] | None = None,
                  data: Frame = b"", timeout: float | None = None
                  ) -> tuple[dict[str, Any], memoryview]:
        """call() with the "args" payload layout on both sides."""
        return codec.decode(self.call(peer, op, codec.encode(args, data), timeout))

    def send(self, peer: str, op: int, payload: Frame = b"", timeout: float | None = None) -> None:
        """One-way: no reply. Raises only if nothing could be queued."""
        timeout = FIT_CALL_TIMEOUT_S if timeout is None else timeout
        self._transmit(peer, ONEWAY, op, 0, payload, timeout)

    def _transmit(self, peer: str, kind: int, op: int, seq: int, payload: Frame,
                  timeout: float, room: bool = False) -> None:
        n = len(payload) - HEADER_SIZE if room else len(payload)
        if n > FIT_MAX_PAYLOAD_BYTES:
            raise MessageTooLarge(f"payload of {n} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
        address = self._addresses.get(peer) or self.resolve(peer, timeout)
        if room:
            _pack_header_into(payload, 0, MAGIC, VERSION, kind, op, 0, seq, n)
            frame = payload
        else:
            frame = _pack_header(MAGIC, VERSION, kind, op, 0, seq, n) + payload
        self.transport.send(peer, address, frame, timeout)
        self.counters.tx(peer, op, n + HEADER_SIZE)

    def _await_reply(self, peer: str, op: int, seq: int, deadline: float,
                     serve: bool) -> memoryview:
        transport = self.transport
        while True:
            early = self._early.pop(seq, None)
            if early is not None:
                return self._take_reply(peer, early)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                transport.forget(peer)
                raise FitTimeout(f"no reply from {peer} to {op_name(op)} within the timeout")
            frames = transport.recv_reply(peer, remaining)
            if frames is None:  # nothing this slice: serve what waits in our inbox
                while serve and (arrival := transport.recv_inbound(0)) is not None:
                    self._dispatch(arrival)
                continue
            rseq = _seq_of(frames)
            if rseq == seq:
                return self._take_reply(peer, frames)
            if rseq in self._awaiting:  # an outer call's reply, met by a nested call
                self._early[rseq] = frames
            else:
                self.counters.error("stale_reply")

    def _take_reply(self, peer: str, frames: list) -> memoryview:
        frame = frames[0]
        kind, op, err, _, payload = header.parse(frame)
        self.counters.rx(peer, op, len(frame))
        if kind != REPLY:
            raise MalformedMessage(f"expected a reply from {peer}, got kind {kind}")
        if err:
            raise from_code(err, f"{peer}: {bytes(payload).decode(errors='replace')}")
        return payload

    # ---- serving -------------------------------------------------------------
    def serve(self, timeout: float | None) -> bool:
        """Handle one inbound message, waiting up to `timeout` s (None: forever).
        Returns whether there was one."""
        arrival = self.transport.recv_inbound(timeout)
        if arrival is None:
            return False
        self._dispatch(arrival)
        return True

    def serve_forever(self, tick: Callable[[], bool] = lambda: False,
                      every_s: float = 0.1) -> None:
        """Serve until tick() returns True. tick runs every `every_s` seconds,
        whether the inbox is idle or busy (a signal handler that only sets a
        flag is thus seen even if pyzmq swallowed its exception)."""
        recv, dispatch, clock = self.transport.recv_inbound, self._dispatch, time.monotonic
        next_tick = clock() + every_s
        while True:
            arrival = recv(every_s)
            if arrival is not None:
                dispatch(arrival)
                if clock() < next_tick:
                    continue
            if tick():
                return
            next_tick = clock() + every_s

    def _dispatch(self, arrival: Arrival) -> None:
        src, route, frames = arrival.peer, arrival.route, arrival.frames
        op = seq = 0
        kind = REQUEST
        try:
            if len(frames) != 1:
                raise MalformedMessage(f"message of {len(frames)} frames")
            kind, op, _, seq, payload = header.parse(frames[0])
            self.counters.rx(src, op, len(frames[0]))
            if kind == REPLY:
                raise MalformedMessage("a reply sent to an inbox")
            handler = self._handlers.get(op)
            if handler is None:
                raise from_code(errno.ENOSYS, f"no op {op_name(op)} here")
            result = handler(Message(src, op, seq, kind, payload))
            if kind == REQUEST:
                self._reply(route, src, op, seq, b"" if result is None else result)
        except FitError as exc:
            if not seq:
                kind, op, seq = _salvage(frames)
            counter = _ERROR_COUNTERS.get(type(exc), "service_error")
            self._fail(route, src, kind, op, seq, exc, counter)
        except OSError as exc:
            self._fail(route, src, kind, op, seq, exc, "service_error")
        except Exception as exc:  # a bug in a handler: log it, answer EIO, keep serving
            log.exception("%s: handler for %s failed", self.id, op_name(op))
            self._fail(route, src, kind, op, seq, OSError(errno.EIO, f"internal error: {exc!r}"),
                       "handler_error")

    def _fail(self, route: bytes | None, src: str, kind: int, op: int, seq: int,
              exc: OSError, counter: str) -> None:
        self.counters.error(counter)
        if kind == REQUEST and route is not None:
            text = (exc.strerror or str(exc)).encode()[:1024]
            self._reply(route, src, op, seq, text, exc.errno or errno.EIO)

    def _reply(self, route: bytes, src: str, op: int, seq: int, payload: Frame,
               err: int = 0) -> None:
        if len(payload) > FIT_MAX_PAYLOAD_BYTES:
            err, payload = errno.EMSGSIZE, b"reply exceeds the FIT payload limit"
        frame = _pack_header(MAGIC, VERSION, REPLY, op, err, seq, len(payload)) + payload
        self.transport.reply(route, frame)
        self.counters.tx(src, op, len(frame))

    def channel(self, peer: str, linger_s: float, sender: "Endpoint | None" = None
                ) -> "Channel":
        """A new Channel to an object of `peer`. It receives beside this endpoint's
        inbox and sends from `sender`'s transport (default: this one's)."""
        return Channel(self, sender or self, peer, linger_s)

    def at_close(self, fn: Callable[[], None]) -> None:
        """Run fn() first thing in close() (e.g. a last one-way message)."""
        self._at_close.append(fn)

    def close(self) -> None:
        while self._at_close:
            try:
                self._at_close.pop()()
            except OSError as exc:  # a farewell that cannot be delivered is not an error
                log.debug("%s: at close: %s", self.id, exc)
        self.transport.close()

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Channel:
    """One end of a FIT channel between two objects (a FIT shortcut's stubs): one-way
    messages in order. The ends swap `address`es and connect() to each other's.
    send() from one thread at a time and recv() from one thread at a time (maybe
    another); close() when neither runs. What was sent before close() still leaves
    for `linger_s`. A malformed frame is counted and skipped."""

    def __init__(self, receiver: Endpoint, sender: Endpoint, peer: str, linger_s: float):
        self.peer = peer
        self._link = receiver.transport.channel(   # type: ignore[attr-defined]
            linger_s, sender.transport)
        self._rx_counters, self._tx_counters = receiver.counters, sender.counters
        self.address: str = self._link.address
        self.pollable = self._link.pollable   # for a zmq.Poller: readable when a message waits

    def connect(self, address: str) -> None:
        self._link.connect(address)

    def send(self, op: int, payload: Frame, timeout_s: float, head: bytes = b"") -> None:
        """One message, `head` + `payload` (one copy); PeerUnreachable if the peer's end
        takes no connection within timeout_s."""
        n = len(head) + len(payload)
        if n > FIT_MAX_PAYLOAD_BYTES:
            raise MessageTooLarge(f"payload of {n} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
        self._link.send(_pack_header(MAGIC, VERSION, ONEWAY, op, 0, 0, n) + head + payload,
                        timeout_s)
        self._tx_counters.tx(self.peer, op, n + HEADER_SIZE)

    def recv(self, timeout_s: float) -> tuple[int, memoryview] | None:
        """(op, payload) of the next message, waiting up to timeout_s (0: only what is
        there); None if none came. The payload is the caller's to keep."""
        frame = self._link.recv(timeout_s)
        if frame is None:
            return None
        try:
            _, op, _, _, payload = header.parse(frame)
        except FitError:
            self._rx_counters.error("malformed")
            return None
        self._rx_counters.rx(self.peer, op, len(frame))
        return op, payload

    def close(self) -> None:
        self._link.close()


def _echo(msg: Message) -> memoryview:
    return msg.payload


def _scheme(address: str | None) -> str | None:
    return address.split("://", 1)[0] if address else None


def _seq_of(frames: list) -> int:
    """The seq of a reply, or -1 if it has no header (then it is nobody's)."""
    frame = frames[0]
    return _unpack_header(frame)[5] if len(frame) >= HEADER_SIZE else -1


def _salvage(frames: list) -> tuple[int, int, int]:
    """(kind, op, seq) of a message that failed to parse, as far as its header is readable,
    so that even a malformed request's sender gets its error reply matched."""
    frame = frames[0] if len(frames) == 1 else b""
    if len(frame) >= HEADER_SIZE:
        _, _, kind, op, _, seq, _ = _unpack_header(frame)
        if kind in (REQUEST, ONEWAY):
            return kind, op, seq
    return REQUEST, 0, 0


_ERROR_COUNTERS = {MalformedMessage: "malformed", MessageTooLarge: "too_large",
                   UnknownOp: "unknown_op"}
