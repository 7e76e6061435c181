"""The Python binding of the nComponent's data plane (skelpath.h).

Interface:
    plane = Plane(epoll_fd, ops)       over the nMonitor's epoll; ops: the op codes and
                                       FIT header constants it reads and writes
    plane.watch(fd, mask)              register / modify / unregister (mask 0) an fd in
                                       the epoll: every change goes through here
    plane.set_inbox(rings, peers)      the inbox's FIT rings (native.fitring.Ring) and
                                       their senders' numbers (NO_PEER: not vouched for)
    conn = plane.conn(fd, sk)          a connection's state (a cdata `kp_conn *` whose
                                       fields the skeleton and its path read and set)
    plane.add(conn) -> bool            fast-capable (False: its fd or sk cannot be)
    plane.drop(conn)                   before its rings or mappings go
    n = plane.run(spin_s, until_s)     work; then plane.events[0:n] are Python's, and
                                       plane.inbox says a message waits in the inbox
    plane.take_counts(peer) -> dict    peer's message counts since the last take
    plane.stats() -> dict              what it did so far (STATS)
    ring_ptr(ring)                     a fitring Ring's handle, as this module types it
Constants: EVENT, RECEIVED, FLUSH, FAIL, PUSH (an event's kind), NO_PEER, MAX_PEERS.
"""

from typing import Any

from native import fitring
from native.nring import ffi, lib

EVENT, RECEIVED, FLUSH, FAIL, PUSH = (lib.KP_EVENT, lib.KP_RECEIVED, lib.KP_FLUSH, lib.KP_FAIL,
                                      lib.KP_PUSH)
NO_PEER, MAX_PEERS, MAX_FDS = lib.KP_NO_PEER, lib.KP_MAX_PEERS, lib.KP_MAX_FDS
_EVENTS = 64   # events one run hands back at most

__all__ = ["EVENT", "FAIL", "FLUSH", "MAX_FDS", "MAX_PEERS", "NO_PEER", "PUSH", "Plane",
           "RECEIVED", "ring_ptr"]


def ring_ptr(ring: fitring.Ring | None) -> Any:
    """A FIT ring's C handle typed for this module (fitring's own module has the same
    struct under another FFI); NULL for None."""
    if ring is None:
        return ffi.NULL
    return ffi.cast("fr_ring *", int(fitring.ffi.cast("uintptr_t", ring.r)))


class Plane:
    def __init__(self, epoll_fd: int, ops: dict[str, int]):
        self.kp = ffi.new("kp_plane *")
        self._ops = ffi.new("kp_ops *", ops)
        lib.kp_init(self.kp, epoll_fd, self._ops)
        self.events = ffi.new("kp_event[]", _EVENTS)
        self._rings = ffi.new("fr_ring *[]", 1)
        self._peers = ffi.new("uint32_t[]", 1)
        self._counts = ffi.new("kp_peer *")

    @property
    def inbox(self) -> bool:
        return bool(self.kp.inbox)

    def stats(self) -> dict[str, int]:
        """What it did so far: messages read off the inbox, kernel events of its
        connections, and their events it handed back."""
        kp = self.kp
        return {"messages": kp.messages, "kernel_events": kp.kernel_events,
                "handed_back": kp.handed_back}

    def watch(self, fd: int, mask: int) -> int:
        """0, or -errno (-EBADF: an fd past MAX_FDS, which the caller watches itself)."""
        return lib.kp_watch(self.kp, fd, mask)

    def set_inbox(self, rings: list[fitring.Ring], peers: list[int]) -> None:
        self._rings = ffi.new("fr_ring *[]", [ring_ptr(r) for r in rings] or [ffi.NULL])
        self._peers = ffi.new("uint32_t[]", peers or [NO_PEER])
        lib.kp_set_inbox(self.kp, self._rings, self._peers, len(rings))

    def conn(self, fd: int, sk: int) -> Any:
        """A connection's state at fd, not fast, its rings (rx, tx) set when it starts."""
        return ffi.new("kp_conn *", {"fd": fd, "sk": sk, "owner": NO_PEER})

    def add(self, conn: Any) -> bool:
        return lib.kp_add(self.kp, conn) == 0

    def drop(self, conn: Any) -> None:
        lib.kp_drop(self.kp, conn)

    def run(self, spin_s: float, until_ns: int) -> int:
        return lib.kp_run(self.kp, int(spin_s * 1e9), until_ns, self.events, _EVENTS)

    def take_counts(self, peer: int) -> dict[str, int]:
        lib.kp_take_counts(self.kp, peer, self._counts)
        c = self._counts
        return {name: getattr(c, name) for name in (
            "rx_send", "rx_send_bytes", "rx_credit", "rx_credit_bytes",
            "tx_data", "tx_data_bytes", "tx_sent", "tx_sent_bytes")}
