"""Serving: an endpoint's inbox, its handlers and their replies.

`Serving` is the part of Endpoint (endpoint.py) that handles what arrives;
its state is the endpoint's (transport, counters, _handlers, vouch).
Interface:
    serve(timeout) -> bool         one inbound message handled, waiting up to
                                   `timeout` s (None: forever)
    serve_pushed(op, word, timeout) -> int   serve() for a reader waiting for one
                                   kind of push: a plain ONEWAY op whose payload is
                                   (word, value), from a sender vouched for, is
                                   released with no handler run: value; anything
                                   else served as serve() does: 0; nothing: -1
    serve_forever(tick, every_s)   until tick() returns True
    Message, Handler               what a handler sees, and what it is:
                                   handler(msg) -> payload | None
Each arrival is dispatched (_dispatch; also from a call's wait, calling.py):
its header parsed (or already read by the transport: plain and untraced),
counted, vouched for (a link's first message: vouch(src, pid), once), its
handler run, and a request's result answered: in one step with the request's
release where the transport can (shm: native/fitserve.h), else as a
reply (_reply), the request then released by transport.done().
Invariants: every arrival is released exactly once (answered, or done()).
A malformed, oversized or unknown message, a refused vouch, a handler's
OSError or its bug becomes a counter and, for a request, an error reply
(errno and text), never an exception out of serve(). A traced arrival's
handler, reply and what it sends run in its trace context, restored after.
"""

import errno
import logging
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from fit_rpc import codec, header, tracing
from fit_rpc.errors import FitError, MalformedMessage, MessageTooLarge, UnknownOp, from_code
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.ops import op_name
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from fit_rpc.transport import Arrival, Frame

log = logging.getLogger("fit_rpc")
_unpack_header = header.HEADER.unpack_from
_pack_header = header.HEADER.pack
_parse = header.parse_traced
_current = tracing.current   # .ctx: the trace context messages are sent in (None: untraced)

_message = tuple.__new__   # Message's fields in order, made in C


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


class Serving:
    """Endpoint's serving: serve, serve_forever, and each arrival's dispatch."""

    def serve(self, timeout: float | None) -> bool:
        """Handle one inbound message, waiting up to `timeout` s (None: forever).
        Returns whether there was one."""
        arrival = self.transport.recv_inbound(timeout)
        if arrival is None:
            return False
        self._dispatch(arrival)
        return True

    def serve_pushed(self, op: int, word: int, timeout: float | None) -> int:
        """serve() for a reader that waits for one kind of message (a stub's blocking
        recv, its STUB_DATA: splitrack/guest/nic_path.py). If the next inbound one is a
        plain ONEWAY `op` of two uint32 words whose first is `word`, from a sender
        vouched for (as _dispatch checks), it is released and counted, no handler run,
        and its second word returned; any other message is served as serve() serves it:
        0; -1: none came within `timeout`. (The handler's layers were half of a DDIO
        round trip's Python: docs/evaluation.md.)"""
        arrival = self.transport.recv_inbound(timeout)
        if arrival is None:
            return -1
        head, link = arrival.head, arrival.link
        if head is not None and head[1] == op and head[0] == ONEWAY and (
                link is None or self.vouch is None or link.verdict):
            frame = arrival.frames[0]
            if len(frame) == HEADER_SIZE + _PUSHED.size:
                got, value = _PUSHED.unpack_from(frame, HEADER_SIZE)
                if got == word:
                    self.transport.done(arrival)
                    return value
        self._dispatch(arrival)
        return 0

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
        """Serve one arrival and release it exactly once: answered and released in one
        step where the transport can (a request whose header it read, answered outside
        any trace), else replied to by _reply() and released by transport.done(). (One
        function, not three: a served message's time is mostly Python calls.)"""
        src, route, frames, head = arrival.peer, arrival.route, arrival.frames, arrival.head
        op = seq = 0
        kind = REQUEST
        outer: Any = _UNTRACED
        answered = False
        try:
            if head is not None:   # read by the transport: well-formed, untraced (and
                kind, op, seq = head   # counted by it, once it is released: transport.py)
                payload = frames[0][HEADER_SIZE:]
            elif len(frames) != 1:
                raise MalformedMessage(f"message of {len(frames)} frames")
            else:
                kind, op, _, seq, trace, event, payload = _parse(frames[0])
                self.counters.rx(src, op, len(frames[0]))
                if trace:   # handled, answered and followed up in its trace's context
                    outer, _current.ctx = _current.ctx, tracing.arrived(self.id, src, trace,
                                                                        event)
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
                if result is None:
                    result = b""
                if head is not None and _current.ctx is None and \
                        len(result) <= FIT_MAX_PAYLOAD_BYTES and \
                        self.transport.answer(arrival, op, seq, result):
                    answered = True   # (the transport released and counted the request,
                    #                    and counted its reply)
                else:
                    self._reply(route, src, op, seq, result)
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
            if not answered:
                self.transport.done(arrival)

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


_UNTRACED = object()   # _dispatch: no trace context to restore
_PUSHED = struct.Struct("<II")   # serve_pushed's payload: two words


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
