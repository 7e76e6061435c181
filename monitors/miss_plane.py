"""The mMonitor's data plane, its Python side: M_MISS answered in C.

`MissPlane` holds the mMonitor's native.mplane.MemoryPlane (native/mplane.h):
the page tables' mirror (address_space.py's PageTable keeps it) over the
arena. On shm it is the inbox's wait (the transport's serve_natively):
`take` answers in C each M_MISS that is the common case and hands the rest
back, as the wait would, for the endpoint to serve (on zmq the endpoint
serves all, and the mirror is only kept).

Interface:
    planes = MissPlane(plane, counts, counters)
                                        counts: the mMonitor's (`misses`, `plane_misses`
                                        grow with the plane's); counters: the endpoint's
    planes.inbox(links) -> bool         the transport's inbox rings, as
                                        inbox_rings() lists them; False: too many
    planes.take(spin_s, timeout_s, msg) the inbox's wait (MemoryPlane.run)
    planes.take_counts(counters)        what it answered since, into counters (the
                                        endpoint's: a source of theirs) and `counts`

Invariants: a sender is served in C only once the endpoint vouched for its
link, and names only its own pid (an nComponent any: dDDIO fills any
process's lines), as m_miss checks; what the plane answered is counted as if
Python had, taken before the ring list changes (its counts go with it).
"""

from typing import Any

from fit_rpc import Op
from fit_rpc.counters import Counters
from fit_rpc.identity import kind_of, process_of
from native.mplane import ANY_PID, MAX_RINGS, NOBODY, MemoryPlane


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
        for i, peer in enumerate(self._peers):
            misses, bytes_in, bytes_out = self.plane.take_counts(i)
            if misses:
                counters.add("rx", peer, Op.M_MISS, misses, bytes_in)
                counters.add("tx", peer, Op.M_MISS, misses, bytes_out)
                self.counts["misses"] += misses
                self.counts["plane_misses"] += misses


def _may_name(peer: str) -> int:
    """The process whose pages a vouched-for sender may ask for in C: its own
    ("pN.PID"); any (an nComponent); or none (NOBODY: Python serves it)."""
    if kind_of(peer) == "n":
        return ANY_PID
    process = process_of(peer)
    return NOBODY if process is None else process[1]
