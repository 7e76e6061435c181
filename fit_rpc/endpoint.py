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

This file is the endpoint's state and configuration (handlers, peers'
addresses: resolve, refresh), its readiness, regions, channels and close();
its parts are mixins in files of their own, each over the same state: the
calls (call, call_native, call_args, send, and the wait for replies)
calling.py's, the serving (serve, serve_forever, each arrival's dispatch to
its handler, and the reply; Message) serving.py's.
"""

import errno
import logging
from collections.abc import Callable
from typing import Any

from fit_rpc import codec
from fit_rpc import transport as transports
from fit_rpc.calling import Calling
from fit_rpc.channel import Channel
from fit_rpc.counters import Counters
from fit_rpc.errors import from_code
from fit_rpc.identity import kind_of
from fit_rpc.ops import Op
from fit_rpc.params import FIT_POLL_US
from fit_rpc.regions import Regions
from fit_rpc.serving import Handler, Message, Serving
from fit_rpc.transport import Transport

log = logging.getLogger("fit_rpc")
GLOBAL_ID = "global"

Vouch = Callable[[str, int | None], bool | None]


class Endpoint(Calling, Serving):
    """A FIT endpoint (this module's docstring); its calls are calling.py's, its
    serving serving.py's."""

    def __init__(self, local_id: str, bind: str | None = None, *,
                 directory: str | None = None, transport: Transport | None = None,
                 poll_us: int = FIT_POLL_US, keys: str | None = None):
        self.id = local_id
        self.transport = transport or transports.make(local_id, bind, _scheme(directory),
                                                      poll_us, keys)
        self.address = self.transport.address
        self.counters = Counters()
        self.counters.sources.append(lambda _: self._add_counts(self.transport.counted()))
        self.transport.add_counts = self._add_counts
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

    def _add_counts(self, rows: list[tuple[str, int, int, int, int, int]]) -> None:
        """What the transport counted itself (shm: in C; transport.py's counted()) into
        the counters: when they are reported (a Counters source), and a link's last
        counts as it closes."""
        add = self.counters.add
        for peer, op, tx_msgs, tx_bytes, rx_msgs, rx_bytes in rows:
            add("tx", peer, op, tx_msgs, tx_bytes)
            add("rx", peer, op, rx_msgs, rx_bytes)

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


def _echo(msg: Message) -> memoryview:
    return msg.payload


def _scheme(address: str | None) -> str | None:
    return address.split("://", 1)[0] if address else None

