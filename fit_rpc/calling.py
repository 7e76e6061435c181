"""Calling: an endpoint's requests and one-way messages, and the wait for replies.

`Calling` is the part of Endpoint (endpoint.py) that sends; its state is the
endpoint's (transport, counters, _seq, _awaiting, _early, _addresses).
Interface:
    call(peer, op, payload, timeout, serve, room, meanwhile) -> memoryview
    call_native(peer, op, step, timeout, serve)   a call made by a C step
    call_args(peer, op, args, data, timeout)      call() in the "args" layout
    send(peer, op, payload, timeout)              one-way
A call goes one of two ways: in the common case (not nested, untraced, no
room) its request is sent and its reply read in one step of the transport's
(shm: native/fitserve.h); else the header is packed here and
the frame sent (_transmit). Either way a reply not read at once is awaited
by _await_reply, which serves the inbox meanwhile (serving.py's _dispatch)
unless serve=False.
Invariants: a call's seq is in _awaiting from before its request is sent
until it returns; a reply a nested call meets for an outer one is kept in
_early for it; a reply nobody awaits is dropped and counted `stale_reply`.
A call that timed out resets its link (transport.forget), so nothing stale
is delivered. A send to an address that is now another process's
(PeerMoved) asks for the address again once (refresh(), endpoint.py).
"""

import time
from collections.abc import Callable
from typing import Any

from fit_rpc import codec, header, tracing
from fit_rpc.errors import FitTimeout, MalformedMessage, MessageTooLarge, PeerMoved, from_code
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.ops import op_name
from fit_rpc.params import FIT_CALL_TIMEOUT_S, FIT_MAX_PAYLOAD_BYTES
from fit_rpc.transport import STEP_DONE, STEP_SENT, STEP_STOPPED, STEP_UNSENT, Frame

_unpack_header = header.HEADER.unpack_from
_pack_header = header.HEADER.pack
_pack_header_into = header.HEADER.pack_into
_parse = header.parse_traced
_current = tracing.current   # .ctx: the trace context messages are sent in (None: untraced)

_SENT = object()   # _first_back: the request is out, its reply not read yet


class Calling:
    """Endpoint's calls and sends, and the wait for replies."""

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
            if not (room or nested) and _current.ctx is None and \
                    len(payload) <= FIT_MAX_PAYLOAD_BYTES:   # the common case, at once
                got = self.transport.call(peer, op, seq, payload, timeout, serve, meanwhile)
                if type(got) is memoryview:   # the reply's payload: the transport read its
                    return got                # header, and counted the call
                if got is not False:   # sent; True: nothing back yet, else the first frame back
                    self.counters.tx(peer, op, len(payload) + HEADER_SIZE)
                    if got is not True:
                        got = self._first_back(peer, seq, got)
                        if got is not _SENT:
                            return got
                    sent = True
            if not sent:
                self._transmit(peer, REQUEST, op, seq, payload, timeout, room, serve)
                if meanwhile is not None:
                    meanwhile()
            return self._await_reply(peer, op, seq, deadline, serve)
        finally:
            awaiting.discard(seq)

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
        step.sizes() the request's and the reply's payload bytes (the first counted
        here for a call not done; a done one the step counted).
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
        if got == STEP_DONE:   # (counted by the step, where the transport finds it)
            return True
        self.counters.tx(peer, op, step.sizes()[0] + HEADER_SIZE)
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
        if _current.ctx is None and len(payload) <= FIT_MAX_PAYLOAD_BYTES and \
                self.transport.post(peer, op, payload, timeout):
            return   # the common case: header written and message counted by the transport
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


def _seq_of(frame: Frame) -> int:
    """The seq of a reply, or -1 if it has no header (then it is nobody's)."""
    return _unpack_header(frame)[5] if len(frame) >= HEADER_SIZE else -1

