"""The mMonitor's data plane, its Python side: M_MISS, M_FETCH, M_WRITEBACK
and ECHO answered in C.

`MissPlane` holds the mMonitor's native.mplane.MemoryPlane (native/mplane.h):
the page tables' mirror (address_space.py's PageTable keeps it) over the
arena. On shm it is the inbox's wait (the transport's serve_natively):
`take` answers in C each of those requests that is the common case and hands
the rest back, as the wait would, for the endpoint to serve (on zmq the
endpoint serves all, and the mirror is only kept).

Interface:
    planes = MissPlane(plane, counts, counters)
                                        counts: the mMonitor's (`misses`, `writebacks`,
                                        `victims` grow with the plane's, and `plane_misses`,
                                        `plane_writebacks`, `plane_echoes` say how many
                                        were its);
                                        counters: the endpoint's
    planes.inbox(links) -> bool         the transport's inbox rings, as
                                        inbox_rings() lists them; False: too many
    planes.take(spin_s, timeout_s, msg) the inbox's wait (MemoryPlane.run)
    planes.take_counts(counters)        what it answered since, into counters (the
                                        endpoint's: a source of theirs) and `counts`

Invariants: a sender is served in C only once the endpoint vouched for its
link, and names only its own pid (an nComponent's M_MISS any: dDDIO fills
any process's lines; a component or a client names none: its ECHO only),
as the handlers check; what the plane answered is counted as if
Python had, taken before the ring list changes (its counts go with it).
"""

from typing import Any

from fit_rpc import Op
from fit_rpc.counters import Counters
from fit_rpc.identity import kind_of, process_of
from native.mplane import ANY_PID, MAX_RINGS, NO_PID, NOBODY, MemoryPlane


class MissPlane:
    def __init__(self, plane: MemoryPlane, counts: dict[str, int], counters: Counters):
        self.plane, self.counts, self.counters = plane, counts, counters
        self.take = plane.run   # (the transport calls it for every wait: no layer between)
        self._peers: list[str] = []   # the senders of the rings the plane reads, in order

    def inbox(self, links: list[tuple[str, Any, Any, bool | None]]) -> bool:
        self.take_counts(self.counters)   # (the counts go with the list)
        if len(links) > MAX_RINGS:
            self._peers = []
            self.plane.set_inbox([], [], [])
            return False
        self._peers = [peer for peer, _, _, _ in links]
        self.plane.set_inbox([rx for _, rx, _, _ in links], [tx for _, _, tx, _ in links],
                             [_may_name(peer) if verdict else NOBODY
                              for peer, _, _, verdict in links])
        return True

    def take_counts(self, counters: Counters) -> None:
        counts = self.counts
        for i, peer in enumerate(self._peers):
            got = self.plane.take_counts(i)
            for op, key in _OPS:
                msgs, bytes_in, bytes_out = got[key]
                if msgs:
                    counters.add("rx", peer, op, msgs, bytes_in)
                    counters.add("tx", peer, op, msgs, bytes_out)
            misses = got["miss"][0] + got["fetched"]
            counts["misses"] += misses
            counts["plane_misses"] += misses
            counts["writebacks"] += got["written"]
            counts["plane_writebacks"] += got["written"]
            counts["victims"] += got["victims"]
            counts["plane_echoes"] += got["echo"][0]


_OPS = ((Op.M_MISS, "miss"), (Op.M_FETCH, "fetch"), (Op.M_WRITEBACK, "writeback"),
        (Op.ECHO, "echo"))


def _may_name(peer: str) -> int:
    """The process whose pages a vouched-for sender may ask for in C: its own
    ("pN.PID"); any (an nComponent); or none (NO_PID: a component or a client,
    whose ECHO alone is answered in C)."""
    if kind_of(peer) == "n":
        return ANY_PID
    process = process_of(peer)
    return NO_PID if process is None else process[1]
