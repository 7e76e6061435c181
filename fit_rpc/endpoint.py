"""A FIT endpoint: one process's requests, replies and handlers.

Interface:
    ep = Endpoint("p0", bind="shm:///run/p0.fit", directory="shm:///run/global.fit#41")
    ep.on(Op.HEALTH, handler)          # handler(msg: Message) -> payload | None
    ep.call("m0", Op.ECHO, b"x")       # request/reply -> memoryview (raises on error)
    ep.send("m0", Op.LOAD_REPORT, p)   # one-way
    ep.serve(timeout_s) / ep.serve_forever()
    ep.fileno(), ep.arm(), ep.disarm(), ep.pending()
                                       # readiness, for a loop that also waits on other
                                       # fds (transport.py says how)
    ep.rings()                         # shm: the rings, for a native data plane (or None)
    ep.vouch = fn                      # fn(peer, pid) -> True | False | None (not yet:
                                       # ask again next message), on a link's first message
    ep.region(name, size, grant)       # memory peers may map (regions.py)
    ep.map_region(peer, name)          # a peer's region, mapped here
    ch = ep.channel("p1.42", linger_s) # a Channel (channel.py): one-way, object to object
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
- A handler's `msg.payload` is a view into the transport's frame, in place
  (shm: in the ring); it is valid while the handler runs. Copy what must stay.
- Tracing (fit_rpc/tracing.py, `splitrack trace`): a message sent while
  `tracing.current.ctx` is set carries its trace id and a number of its own
  in the header, and is recorded; a traced message that arrives (a reply
  too) is recorded, and its handler, its reply and whatever is sent
  meanwhile run in its context. Off, that is one read per message sent and
  one compare per message received.
- Identity: `msg.src` is the sender's id, `msg.pid` its pid as the kernel
  vouched for it (None on zmq). Before the first message of each link is
  handled, `vouch(src, pid)` must agree (monitors/identity.py); a link it
  refuses gets EPERM for every request and the counter `forged`.
- Peer ids are resolved to addresses once, by asking `global` (RESOLVE); the
  answer is cached until the peer's process ends. A cached address that no
  longer reaches its peer (a restarted monitor: same path, another pid) is
  asked again once: of global, or for global itself of `find_directory` (set by
  the rack's layers: the run directory's record). A timed-out link is reset, so
  nothing stale is delivered.
"""

import errno
import logging
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from fit_rpc import codec, header, tracing
from fit_rpc import transport as transports
from fit_rpc.channel import Channel
from fit_rpc.counters import Counters
from fit_rpc.errors import (
    FitError,
    FitTimeout,
    MalformedMessage,
    MessageTooLarge,
    PeerMoved,
    UnknownOp,
    from_code,
)
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.identity import kind_of
from fit_rpc.ops import Op, op_name
from fit_rpc.regions import Regions
from fit_rpc.transport import (
    STEP_DONE,
    STEP_SENT,
    STEP_STOPPED,
    STEP_UNSENT,
    Arrival,
    Frame,
    Transport,
)
from splitrack.params import FIT_CALL_TIMEOUT_S, FIT_MAX_PAYLOAD_BYTES, FIT_POLL_US

log = logging.getLogger("fit_rpc")
_unpack_header = header.HEADER.unpack_from
_pack_header = header.HEADER.pack
_pack_header_into = header.HEADER.pack_into
_parse = header.parse_traced
_current = tracing.current   # .ctx: the trace context messages are sent in (None: untraced)

_message = tuple.__new__   # Message's fields in order, made in C
_SENT = object()   # _call_at_once: the request is out, its reply not read yet
GLOBAL_ID = "global"


class Message(NamedTuple):
    """An inbound request or one-way message, as a handler sees it. (Made with
    tuple.__new__, in C, by the serve loop: a served message's time is mostly
    Python's, and a class's __init__ is a good part of it.)"""

    src: str          # sender's id (checked against pid: identity.py)
    pid: int | None   # sender's pid, kernel-vouched (None: zmq, unknown)
    op: int
    seq: int
    kind: int         # header.REQUEST or header.ONEWAY
    payload: memoryview   # view into the received frame; valid during the handler
    route: Any        # the transport's way back to the sender

    def args(self) -> tuple[dict[str, Any], memoryview]:
        """The payload in the "args" layout (codec.py)."""
        return codec.decode(self.payload)


Handler = Callable[[Message], Frame | None]
Vouch = Callable[[str, int | None], bool | None]


class Endpoint:
    def __init__(self, local_id: str, bind: str | None = None, *,
                 directory: str | None = None, transport: Transport | None = None,
                 poll_us: int = FIT_POLL_US, keys: str | None = None):
        self.id = local_id
        self.transport = transport or transports.make(local_id, bind, _scheme(directory),
                                                      poll_us, keys)
        self.address = self.transport.address
        self.counters = Counters()
        self.transport.count = self.counters.error
        self.transport.peer_gone = self._peer_gone
        self.vouch: Vouch | None = None
        self.on_peer_gone: list[Callable[[str], None]] = []
        self.regions = Regions(self)
        self._addresses: dict[str, str] = {GLOBAL_ID: directory} if directory else {}
        # where global is now, if it was restarted (the rack's run directory says)
        self.find_directory: Callable[[], str | None] | None = None
        self._handlers: dict[int, Handler] = {Op.ECHO: _echo, Op.REGION_MAP: self.regions.serve}
        self._seq = 0
        self._awaiting: set[int] = set()
        self._early: dict[int, bytes] = {}
        self._at_close: list[Callable[[], None]] = []

    # ---- configuration -------------------------------------------------------
    def on(self, op: int, handler: Handler) -> None:
        self._handlers[op] = handler

    def wrap_handlers(self, wrap: Callable[[int, Handler], Handler]) -> None:
        """Every handler installed so far becomes wrap(op, handler) (a monitor's
        DEBUG log of each request it serves)."""
        self._handlers = {op: wrap(op, h) for op, h in self._handlers.items()}

    def add_peer(self, peer: str, address: str) -> None:
        self._addresses[peer] = address

    def address_of_global(self) -> str:
        """The directory's address (whose scheme names the rack's transport)."""
        return self._addresses.get(GLOBAL_ID, "")

    def resolve(self, peer: str, timeout: float | None = None, serve: bool = False) -> str:
        """`peer`'s address, asked of the directory the first time (serve: as call())."""
        address = self._addresses.get(peer)
        if address is None:
            if GLOBAL_ID not in self._addresses or peer == GLOBAL_ID:
                raise from_code(errno.ENXIO, f"unknown destination {peer!r} (no directory)")
            args, _ = codec.decode(self.call(GLOBAL_ID, Op.RESOLVE, codec.encode({"id": peer}),
                                             timeout, serve))
            address = self._addresses[peer] = codec.need(args, "address", str)
        return address

    def refresh(self, peer: str, timeout: float | None = None, serve: bool = False
                ) -> str | None:
        """`peer`'s address asked again (it may have been restarted): of global, or
        for global itself of find_directory; None if nobody can say."""
        if peer == GLOBAL_ID:
            fresh = self.find_directory() if self.find_directory is not None else None
            if fresh:
                self._addresses[GLOBAL_ID] = fresh
            return fresh
        if GLOBAL_ID not in self._addresses:
            return None
        self._addresses.pop(peer, None)
        return self.resolve(peer, timeout, serve)

    # ---- readiness (transport.py) --------------------------------------------
    def fileno(self) -> int:
        return self.transport.fileno()

    def arm(self) -> bool:
        return self.transport.arm()

    def disarm(self) -> None:
        self.transport.disarm()

    def pending(self) -> bool:
        return self.transport.pending()

    def rings(self) -> Any:
        """The transport itself if it has rings a native data plane may read and write
        (shm: inbox_rings(), out_ring(peer), link_closed; transport.py), else None."""
        return self.transport if hasattr(self.transport, "inbox_rings") else None

    # ---- calling -------------------------------------------------------------
    def call(self, peer: str, op: int, payload: Frame = b"",
             timeout: float | None = None, serve: bool = True, room: bool = False,
             meanwhile: Callable[[], None] | None = None) -> memoryview:
        """Send a request to `peer` and return the reply payload.

        Raises FitTimeout (no reply in time), PeerUnreachable (no connection, or
        the peer's process ended), UnknownDestination (no such id),
        MessageTooLarge (nothing sent), or the OSError the peer answered with.
        serve=False: the inbox waits meanwhile (no handler runs nested in this
        call, nor in the directory look-up it may make first; only for a peer
        that never calls back, or the two could deadlock until the timeout; for
        a caller holding what a handler may take, such as an extCache set).
        send() serves nothing either. room=True: the payload is a writable buffer whose
        first HEADER_SIZE bytes are room for the FIT header, written there in
        place (a large payload is not copied); the buffer may be read until the
        reply comes (if the call fails, drop it). meanwhile(): run once the request
        is out, before the wait: the caller's work that need not come before the
        peer's overlaps it (never run if the request could not be sent).
        """
        if timeout is None:
            timeout = FIT_CALL_TIMEOUT_S
        deadline = time.monotonic() + timeout  # sending, too, counts against the timeout
        self._seq = seq = (self._seq % 0xFFFFFFFF) + 1
        awaiting = self._awaiting
        nested = bool(awaiting)   # (a handler's call, or a signal handler's, inside one)
        awaiting.add(seq)         # before sending: a call nested in this one knows of it
        try:
            sent = False
            if not (room or nested) and _current.ctx is None:   # the common case, at once
                got = self._call_at_once(peer, op, seq, payload, timeout, serve, meanwhile)
                if got is not None and got is not _SENT:
                    return got
                sent = got is _SENT
            if not sent:
                self._transmit(peer, REQUEST, op, seq, payload, timeout, room, serve)
                if meanwhile is not None:
                    meanwhile()
            return self._await_reply(peer, op, seq, deadline, serve)
        finally:
            awaiting.discard(seq)

    def _call_at_once(self, peer: str, op: int, seq: int, payload: Frame, timeout: float,
                      serve: bool, meanwhile: Callable[[], None] | None
                      ) -> memoryview | object | None:
        """The request sent and its reply read in one step of the transport's, on a
        link that is up (shm: native/fitserve.h): the reply's payload; _SENT: the
        request is out, its reply is the general loop's to wait for; None: nothing
        was sent. Not for a nested or a traced call (call() says when)."""
        n = len(payload)
        if n > FIT_MAX_PAYLOAD_BYTES:
            return None   # (_transmit says so)
        got = self.transport.call(peer, op, seq, payload, timeout, serve, meanwhile)
        if got is False:
            return None
        if type(got) is memoryview:   # the reply's payload: the transport read its header
            self.counters.call(peer, op, n + HEADER_SIZE, len(got) + HEADER_SIZE)
            return got
        self.counters.tx(peer, op, n + HEADER_SIZE)
        if got is True:
            return _SENT
        return self._first_back(peer, seq, got)

    def _first_back(self, peer: str, seq: int, frame: bytes) -> memoryview | object:
        """The first frame back on the link after the request seq: its reply's payload
        (or the peer's error, raised), or _SENT if it is another call's."""
        rseq = _seq_of(frame)
        if rseq != seq:   # not this call's: an outer one's (a signal handler's call nested
            if rseq in self._awaiting:   # in it), or what its caller gave up on
                self._early[rseq] = frame
            else:
                self.counters.error("stale_reply")
            return _SENT
        return self._take_reply(peer, frame)

    def call_native(self, peer: str, op: int, step: Any, timeout: float | None = None,
                    serve: bool = True) -> memoryview | bool:
        """call() for a caller whose request and reply both live in C: the request made,
        waited for and its plain reply taken by one native call (`step`, on the link's
        rings: transport.py's call_native; splitrack/guest/line_miss.py's LineMiss is one).
        step(caller, tx, seq, timeout_ns) returns a STEP_ code (transport.py), and
        step.sizes() the request's and the reply's payload bytes, for the counters.
        Returns True: the step took the reply; False: nothing was sent (no native link,
        a nested or traced call, no room, or the step stopped): the caller goes on its
        own way; else the reply's payload, the call having gone on as call() makes it
        (its errors raised as call() raises them)."""
        if self._awaiting or _current.ctx is not None:
            return False
        if timeout is None:
            timeout = FIT_CALL_TIMEOUT_S
        deadline = time.monotonic() + timeout
        self._seq = seq = (self._seq % 0xFFFFFFFF) + 1
        got = self.transport.call_native(peer, seq, step, timeout, serve)
        if got is None or got == STEP_UNSENT or got == STEP_STOPPED:
            return False
        out, back = step.sizes()
        if got == STEP_DONE:
            self.counters.call(peer, op, out + HEADER_SIZE, back + HEADER_SIZE)
            return True
        self.counters.tx(peer, op, out + HEADER_SIZE)
        self._awaiting.add(seq)
        try:
            if got != STEP_SENT:   # STEP_READ: the frame that came back
                reply = self._first_back(peer, seq, got)
                if reply is not _SENT:
                    return reply
            return self._await_reply(peer, op, seq, deadline, serve)
        finally:
            self._awaiting.discard(seq)

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
                  timeout: float, room: bool = False, serve: bool = False) -> None:
        n = len(payload) - HEADER_SIZE if room else len(payload)
        if n > FIT_MAX_PAYLOAD_BYTES:
            raise MessageTooLarge(f"payload of {n} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
        ctx = _current.ctx
        trace = event = 0
        if ctx is not None:
            trace, event = ctx.trace, tracing.sent(ctx, self.id, peer, kind, op, n + HEADER_SIZE)
        if room:
            _pack_header_into(payload, 0, MAGIC, VERSION, kind, op, 0, seq, n, trace, event)
            head = b""
        else:
            head = _pack_header(MAGIC, VERSION, kind, op, 0, seq, n, trace, event)
        address = self._addresses.get(peer)
        try:
            self.transport.send(peer, address or self.resolve(peer, timeout, serve), payload,
                                timeout, head)
        except PeerMoved:
            # The address known from before is a dead process's: a monitor that was
            # restarted serves at the same path with another pid. Ask again once.
            fresh = self.refresh(peer, timeout, serve) if address is not None else None
            if fresh is None or fresh == address:
                raise
            self.transport.send(peer, fresh, payload, timeout, head)
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
            frame = transport.recv_reply(peer, remaining, serve)
            if frame is None:  # nothing yet, or a request waits: serve our inbox
                while serve and (arrival := transport.recv_inbound(0)) is not None:
                    self._dispatch(arrival)
                continue
            rseq = _seq_of(frame)
            if rseq == seq:
                return self._take_reply(peer, frame)
            if rseq in self._awaiting:  # an outer call's reply, met by a nested call
                self._early[rseq] = frame
            else:
                self.counters.error("stale_reply")

    def _take_reply(self, peer: str, frame: Frame) -> memoryview:
        kind, op, err, _, trace, event, payload = _parse(frame)
        self.counters.rx(peer, op, len(frame))
        if trace:
            tracing.arrived(self.id, peer, trace, event)
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
        flag is thus seen even if a wait swallowed its exception)."""
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
        answered = False
        try:
            answered = self._handle(arrival)
        finally:
            if not answered:   # (an answer at once released the request too)
                self.transport.done(arrival)

    def _handle(self, arrival: Arrival) -> bool:
        """Serve one arrival; True if transport.answer() replied and released it."""
        src, route, frames, head = arrival.peer, arrival.route, arrival.frames, arrival.head
        op = seq = 0
        kind = REQUEST
        outer: Any = _UNTRACED
        try:
            if head is not None:   # read by the transport: well-formed, untraced
                kind, op, seq = head
                payload = frames[0][HEADER_SIZE:]
            elif len(frames) != 1:
                raise MalformedMessage(f"message of {len(frames)} frames")
            else:
                kind, op, _, seq, trace, event, payload = _parse(frames[0])
                if trace:   # handled, answered and followed up in its trace's context
                    outer, _current.ctx = _current.ctx, tracing.arrived(self.id, src, trace,
                                                                        event)
            self.counters.rx(src, op, len(frames[0]))
            if kind == REPLY:
                raise MalformedMessage("a reply sent to an inbox")
            link = arrival.link
            if link is not None and self.vouch is not None and not link.verdict:
                verdict = link.verdict
                if verdict is None:   # the link's first message: its owner decides, once
                    verdict = self.vouch(src, arrival.pid)
                    link.verdict = verdict
                if verdict is False:
                    self.counters.error("forged")
                    raise PermissionError(errno.EPERM, f"{src} (pid {arrival.pid}) is not "
                                          "who it claims to be")
            handler = self._handlers.get(op)
            if handler is None:
                raise from_code(errno.ENOSYS, f"no op {op_name(op)} here")
            result = handler(_message(Message, (src, arrival.pid, op, seq, kind, payload, route)))
            if kind == REQUEST:
                return self._answer(arrival, src, op, seq, b"" if result is None else result)
        except FitError as exc:
            if not seq:
                kind, op, seq = _salvage(frames)
            counter = _ERROR_COUNTERS.get(type(exc), "service_error")
            self._fail(route, src, kind, op, seq, exc, counter)
        except OSError as exc:
            self._fail(route, src, kind, op, seq, exc, "service_error")
        except struct.error as exc:   # a fixed-layout payload (a socket op's) too short
            self._fail(route, src, kind, op, seq,
                       MalformedMessage(f"{op_name(op)} payload: {exc}"), "malformed")
        except Exception as exc:  # a bug in a handler: log it, answer EIO, keep serving
            log.exception("%s: handler for %s failed", self.id, op_name(op))
            self._fail(route, src, kind, op, seq, OSError(errno.EIO, f"internal error: {exc!r}"),
                       "handler_error")
        finally:
            if outer is not _UNTRACED:
                _current.ctx = outer
        return False

    def _answer(self, arrival: Arrival, src: str, op: int, seq: int, payload: Frame) -> bool:
        """A handler's result to its request: written and the request released in one
        step where the transport can (a request whose header it read, answered outside
        any trace: True), else by _reply() (and the request released by done())."""
        if arrival.head is not None and _current.ctx is None and \
                len(payload) <= FIT_MAX_PAYLOAD_BYTES and \
                self.transport.answer(arrival, op, seq, payload):
            self.counters.tx(src, op, len(payload) + HEADER_SIZE)
            return True
        self._reply(arrival.route, src, op, seq, payload)
        return False

    def _fail(self, route: Any, src: str, kind: int, op: int, seq: int,
              exc: OSError, counter: str) -> None:
        self.counters.error(counter)
        if kind == REQUEST and route is not None:
            text = (exc.strerror or str(exc)).encode()[:1024]
            self._reply(route, src, op, seq, text, exc.errno or errno.EIO)

    def _reply(self, route: Any, src: str, op: int, seq: int, payload: Frame,
               err: int = 0) -> None:
        if len(payload) > FIT_MAX_PAYLOAD_BYTES:
            err, payload = errno.EMSGSIZE, b"reply exceeds the FIT payload limit"
        ctx = _current.ctx
        trace = event = 0
        if ctx is not None:
            trace = ctx.trace
            event = tracing.sent(ctx, self.id, src, REPLY, op, len(payload) + HEADER_SIZE)
        self.transport.reply(route, payload, _pack_header(MAGIC, VERSION, REPLY, op, err, seq,
                                                          len(payload), trace, event))
        self.counters.tx(src, op, len(payload) + HEADER_SIZE)

    # ---- regions, channels, the end ----------------------------------------------
    def region(self, name: str, size: int, grant: Vouch) -> Any:
        """Memory of ours that peers for whom grant(peer, pid) holds may map."""
        return self.regions.create(name, size, grant)

    def map_region(self, peer: str, name: str, timeout: float | None = None) -> Any:
        """`peer`'s region `name`, mapped here (PermissionError if not granted)."""
        return self.regions.map(peer, name, timeout)

    def channel(self, peer: str, linger_s: float, sender: "Endpoint | None" = None
                ) -> Channel:
        """A new Channel to an object of `peer`. It receives beside this endpoint's
        inbox and sends from `sender`'s transport (default: this one's)."""
        return Channel(self, sender or self, peer, linger_s)

    def _peer_gone(self, peer: str) -> None:
        """A peer's process ended: what we kept about it goes (a process's or client's
        counters are folded into one line per pComponent, or for all clients; a
        component's stay, it may be restarted), and on_peer_gone hears of it."""
        kind = kind_of(peer)
        if kind in ("unknown", "global"):
            return   # (global's address is the directory's: kept, it is all we have)
        self._addresses.pop(peer, None)
        if kind in ("process", "client"):
            self.counters.fold(peer, peer.split(".", 1)[0] + ".*")
        for fn in self.on_peer_gone:
            fn(peer)

    def at_close(self, fn: Callable[[], None]) -> None:
        """Run fn() first thing in close() (e.g. a last one-way message)."""
        self._at_close.append(fn)

    def close(self) -> None:
        while self._at_close:
            try:
                self._at_close.pop()()
            except OSError as exc:  # a farewell that cannot be delivered is not an error
                log.debug("%s: at close: %s", self.id, exc)
        self.regions.close()
        self.transport.close()

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_UNTRACED = object()   # _handle: no trace context to restore


def _echo(msg: Message) -> memoryview:
    return msg.payload


def _scheme(address: str | None) -> str | None:
    return address.split("://", 1)[0] if address else None


def _seq_of(frame: Frame) -> int:
    """The seq of a reply, or -1 if it has no header (then it is nobody's)."""
    return _unpack_header(frame)[5] if len(frame) >= HEADER_SIZE else -1


def _salvage(frames: list) -> tuple[int, int, int]:
    """(kind, op, seq) of a message that failed to parse, as far as its header is readable,
    so that even a malformed request's sender gets its error reply matched."""
    frame = frames[0] if len(frames) == 1 else b""
    if len(frame) >= HEADER_SIZE:
        _, _, kind, op, _, seq, _, _, _ = _unpack_header(frame)
        if kind in (REQUEST, ONEWAY):
            return kind, op, seq
    return REQUEST, 0, 0


_ERROR_COUNTERS = {MalformedMessage: "malformed", MessageTooLarge: "too_large",
                   UnknownOp: "unknown_op"}
