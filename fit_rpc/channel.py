"""A FIT channel: one-way messages in order from one object to one object.

The FIT shortcut's two stubs talk over one (splitrack/guest/shortcuts.py). It carries
FIT messages (header, counters) beside the endpoints' inboxes, with no routing
id, no dispatch and no handler: its reader takes each message itself.

Interface:
    ch = ep.channel(peer, linger_s, sender)   the receiving end beside ep's inbox
    ch.address                                where the peer's end connects
    ch.connect(peer_address)                  join the peer's end (shm: nothing to
                                              do if the peer joined us first)
    ch.send(op, payload, timeout_s, head=b"") one message, head + payload
    ch.sender(op, timeout_s, head=b"") -> send(payload)   send() bound to the rest,
                                              for a sender of many (shm: one native
                                              call a message, the common case)
    ch.recv(timeout_s) -> (op, payload) | None   the payload is the caller's to keep
    ch.reader(op, skip) -> read(view, timeout_s)   recv bound once, for a reader of
                                              many: a message of op copied to view
                                              past its `skip` head bytes where it fits
                                              (the count; shm only: one native call a
                                              message), else what recv() gives
    ch.lane() -> end | None                   for a reader of many that reads in C
                                              itself: the shm end, whose `caller` (None
                                              until attached) fs_recv_into takes, as
                                              reader()'s read does; None elsewhere
    ch.landed(k) -> (op, payload) | None      what read() says when fs_recv_into on
                                              the lane's caller copied nothing (k <= 0)
    ch.fileno(), ch.arm(), ch.disarm()        readiness, as an endpoint's (transport.py)
    ch.pending()                              whether a message waits (recv(0) would get it)
    ch.close()
send() from one thread at a time and recv() from one thread at a time (maybe
another); close() when neither runs. What was sent before close() still
reaches the peer (shm: it is in the ring; zmq: for `linger_s`). A malformed
frame is counted and skipped. Messages are counted in the endpoints' counters
(counters.py), by the shm transport in C (native/fitserve.h: fs_counts, taken
when the counters are reported: a Python call per message cost a FIT
shortcut's round trip ~0.6 us). Traced as an endpoint's one-way messages are
(fit_rpc/tracing.py): sent in a trace context, a message carries it; a traced
one is recorded when it arrives (its reader goes on in its own context).
"""

from collections.abc import Callable
from typing import Any

from fit_rpc import header, tracing
from fit_rpc.errors import FitError, MessageTooLarge
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, VERSION
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES

_pack_header = header.HEADER.pack
_current = tracing.current


class Channel:
    def __init__(self, receiver: Any, sender: Any, peer: str, linger_s: float):
        self.peer = peer
        self._id = receiver.id   # (its sender's is the same: one process, one id)
        self._link = receiver.transport.channel(peer, linger_s, sender.transport)
        self._rx_counters, self._tx_counters = receiver.counters, sender.counters
        self.address: str = self._link.address
        self.fileno, self.arm, self.disarm = self._link.fileno, self._link.arm, self._link.disarm
        self.pending = self._link.pending
        self._post = getattr(self._link, "post", None)   # (shm's ends have it: transport.py)
        self._sources: list[list] = []   # a link that posts counts itself (transport.py):
        if self._post is not None:       # its counts join the rest when they are reported
            self._sources.append(self._tx_counters.sources)
            if self._rx_counters is not self._tx_counters:
                self._sources.append(self._rx_counters.sources)
        for sources in self._sources:
            sources.append(self._collect)

    def _collect(self, _counters: Any = None) -> None:
        """What the link counted itself (its posts, what it read plain) into the
        endpoints' counters (a Counters source: counters.py)."""
        for op, tx_msgs, tx_bytes, rx_msgs, rx_bytes in self._link.counted():
            self._tx_counters.add("tx", self.peer, op, tx_msgs, tx_bytes)
            self._rx_counters.add("rx", self.peer, op, rx_msgs, rx_bytes)

    def connect(self, address: str) -> None:
        self._link.connect(address)

    def send(self, op: int, payload: Any, timeout_s: float, head: bytes = b"") -> None:
        """One message, `head` + `payload`; PeerUnreachable if the peer's end takes
        nothing within timeout_s."""
        n = len(head) + len(payload)
        if n > FIT_MAX_PAYLOAD_BYTES:
            raise MessageTooLarge(f"payload of {n} bytes exceeds {FIT_MAX_PAYLOAD_BYTES}")
        ctx = _current.ctx
        if ctx is None and self._post is not None:   # header and count by the transport
            self._post(op, payload, timeout_s, head)
            return
        trace = event = 0
        if ctx is not None:
            trace = ctx.trace
            event = tracing.sent(ctx, self._id, self.peer, ONEWAY, op, n + HEADER_SIZE)
        self._link.send(payload, timeout_s,
                        _pack_header(MAGIC, VERSION, ONEWAY, op, 0, 0, n, trace, event) + head)
        self._tx_counters.tx(self.peer, op, n + HEADER_SIZE)

    def sender(self, op: int, timeout_s: float, head: bytes = b"") -> Callable[[Any], None]:
        """send(op, payload, timeout_s, head) as a callable of the payload alone, bound
        once: the link's own where it has one (shm: ShmChannel.poster), else send()."""
        def general(payload: Any) -> None:
            self.send(op, payload, timeout_s, head)
        poster = getattr(self._link, "poster", None)
        return general if poster is None else poster(op, head, general)

    def recv(self, timeout_s: float) -> tuple[int, memoryview] | None:
        """(op, payload) of the next message, waiting up to timeout_s (0: only what is
        there); None if none came. The payload is the caller's to keep."""
        frame = self._link.recv(timeout_s)
        if frame is None:
            return None
        if type(frame) is tuple:   # (op, payload): the transport read the header, and
            return frame           # counted it
        return self._parsed(frame)

    def reader(self, op: int, skip: int) -> Callable[[Any, float], Any]:
        """recv bound once, for a reader of many, as read(view, timeout_s): what
        recv() gives -- or, where the link reads into buffers (shm:
        ShmChannel.reader), the count copied into `view` if the message is a plain
        one of `op` whose payload after its first `skip` bytes fits (view None:
        never copied)."""
        reader = getattr(self._link, "reader", None)
        if reader is not None:
            return reader(op, skip, self._parsed, self.recv)
        recv = self.recv
        return lambda view, timeout_s: recv(timeout_s)

    def lane(self) -> Any:
        """The link's end, for a reader of many that calls fs_recv_into on its `caller`
        itself (shm; a frame fewer than reader()'s closure); None: reader() only."""
        return self._link if hasattr(self._link, "landed") else None

    def landed(self, k: int) -> tuple[int, memoryview] | None:
        """What that fs_recv_into read when it copied nothing (k <= 0), as read() says."""
        return self._link.landed(k, self._parsed, self.recv)

    def _parsed(self, frame: bytes) -> tuple[int, memoryview] | None:
        """A frame the transport did not read: (op, payload), counted (and its trace
        recorded); None if it is malformed (counted so)."""
        try:
            _, op, _, _, trace, event, payload = header.parse_traced(frame)
        except FitError:
            self._rx_counters.error("malformed")
            return None
        self._rx_counters.rx(self.peer, op, len(frame))
        if trace:
            tracing.arrived(self._id, self.peer, trace, event)
        return op, payload

    def close(self) -> None:
        self._link.close()
        if self._sources:   # its last counts, then none
            self._collect()
            for sources in self._sources:
                sources.remove(self._collect)
            self._sources = []
