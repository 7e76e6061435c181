"""The Python binding of the nComponent's data plane (skelpath.h).

Interface:
    plane = Plane(epoll_fd, ops)       over the nMonitor's epoll; ops: the op codes and
                                       FIT header constants it reads and writes
    plane.watch(fd, mask)              register / modify / unregister (mask 0) an fd in
                                       the epoll: every change goes through here
    plane.set_inbox(rings, peers, replies)
                                       the inbox's FIT rings (native.fitring.Ring), their
                                       senders' numbers (NO_PEER: not vouched for) and the
                                       rings back to them on the same links (replies)
    plane.grant(peer, homes, inbox)    the homes (bit i: the i-th of plane.homes()) peer
                                       may connect with here, in C (0: none), naming
                                       `inbox`, its checked inbox
    plane.homes(ids); plane.allow(level, opt)
                                       what N_CONNECT in C may name and set
    plane.source(ip); plane.fill(); plane.pool_count(ip); plane.close_pools()
                                       the sockets it connects from ip, made ahead
                                       (skelconnect.h): a pool, filled, counted, closed
    plane.next_sk(fd)                  a skeleton id for a socket at fd (kc_next_sk)
    plane.made(i)                      what a CONNECTED event describes (kc_made)
    plane.connect                      its counts (made, failed) and DRAM budget (dram)
    conn = plane.conn(fd, sk)          a connection's state (a cdata `kp_conn *` whose
                                       fields the skeleton and its path read and set)
    plane.add(conn) -> bool            fast-capable (False: its fd or sk cannot be)
    plane.drop(conn)                   before its rings or mappings go
    n = plane.run(spin_s, until_s)     work; then plane.events[0:n] are Python's, and
                                       plane.inbox says a message waits in the inbox
    plane.take_counts(peer) -> dict    peer's message counts since the last take
    plane.stats() -> dict              what it did so far (STATS)
    ring_ptr(ring)                     a fitring Ring's handle, as this module types it
Constants: EVENT, RECEIVED, FLUSH, FAIL, PUSH, CONNECTED (an event's kind), NO_PEER,
MAX_PEERS, POOL (sockets made ahead per source), HOMES (homes a grant can name).
"""

import os
import socket
from typing import Any

from native import fitring
from native.nring import ffi, lib

EVENT, RECEIVED, FLUSH, FAIL, PUSH, CONNECTED = (
    lib.KP_EVENT, lib.KP_RECEIVED, lib.KP_FLUSH, lib.KP_FAIL, lib.KP_PUSH, lib.KP_CONNECTED)
NO_PEER, MAX_PEERS, MAX_FDS = lib.KP_NO_PEER, lib.KP_MAX_PEERS, lib.KP_MAX_FDS
POOL, HOMES = lib.KC_POOL, lib.KC_HOMES
_EVENTS = lib.KP_MAX_EVENTS   # events one run hands back at most

__all__ = ["CONNECTED", "EVENT", "FAIL", "FLUSH", "HOMES", "MAX_FDS", "MAX_PEERS", "NO_PEER",
           "POOL", "PUSH", "Plane", "RECEIVED", "ring_ptr"]


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
        self._replies = ffi.new("fr_ring *[]", 1)
        self._counts = ffi.new("kp_peer *")
        self.connect = ffi.addressof(self.kp, "connect")   # kc_state *

    @property
    def inbox(self) -> bool:
        return bool(self.kp.inbox)

    def set_bell(self, word: Any) -> None:
        """The inbox's bell word (native.fitring's uint32_t *), where kp_run says on
        which CPU it waits (fitring.h: FR_BELL_CPU)."""
        self._bell_word = word   # (kept alive while the plane points at it)
        self.kp.bell = ffi.cast("uint32_t *", int(fitring.ffi.cast("uintptr_t", word)))

    def stats(self) -> dict[str, int]:
        """What it did so far: messages read off the inbox, kernel events of its
        connections, their events it handed back, and the N_CONNECTs it answered
        (connects: with a connection; connects_failed: with the kernel's errno;
        connects_held: either, with the CPU held from connect to reply, and
        connect_hold: "on", or "off: " and why -- skelconnect.h)."""
        kp, c = self.kp, self.kp.connect
        why = os.strerror(c.hold_error) if c.hold_error else "real-time already"
        return {"messages": kp.messages, "kernel_events": kp.kernel_events,
                "handed_back": kp.handed_back, "connects": c.made,
                "connects_failed": c.failed, "connects_held": c.held,
                "connect_hold": "on" if c.hold else f"off: {why}"}

    def watch(self, fd: int, mask: int) -> int:
        """0, or -errno (-EBADF: an fd past MAX_FDS, which the caller watches itself)."""
        return lib.kp_watch(self.kp, fd, mask)

    def set_inbox(self, rings: list[fitring.Ring], peers: list[int],
                  replies: list[fitring.Ring | None]) -> None:
        self._rings = ffi.new("fr_ring *[]", [ring_ptr(r) for r in rings] or [ffi.NULL])
        self._peers = ffi.new("uint32_t[]", peers or [NO_PEER])
        self._replies = ffi.new("fr_ring *[]", [ring_ptr(r) for r in replies] or [ffi.NULL])
        lib.kp_set_inbox(self.kp, self._rings, self._peers, self._replies, len(rings))

    # ---- N_CONNECT in C (skelconnect.h) ----------------------------------------------
    def grant(self, peer: int, homes: int, inbox: str = "") -> None:
        """homes: bit i, the i-th of homes(); inbox: the one its requests must name."""
        data = inbox.encode()
        lib.kp_grant(self.kp, peer, homes, lib.kc_inbox_hash(data, len(data)))

    def homes(self, ids: list[str]) -> None:
        for i, home in enumerate(ids[:HOMES]):
            lib.kc_home(self.connect, i, home.encode())

    def allow(self, level: int, opt: int) -> None:
        if lib.kc_allow(self.connect, level, opt):
            raise OSError(f"more than {lib.KC_ALLOWED} options for the data plane's connect")

    def source(self, ip: str) -> None:
        if lib.kc_source(self.connect, _addr(ip)):
            raise OSError(f"more than {lib.KC_SOURCES} source addresses for the plane's connect")

    def fill(self) -> int:
        """Every pool full again (a socket it could not make: its errno is in
        connect.error); the sockets made."""
        return lib.kc_fill(self.connect)

    def pool_count(self, ip: str) -> int:
        return lib.kc_pool_count(self.connect, _addr(ip))

    def close_pools(self) -> None:
        lib.kc_close(self.connect)

    def next_sk(self, fd: int) -> int:
        return lib.kc_next_sk(self.connect, fd)

    def made(self, i: int) -> Any:
        """The kc_made of the CONNECTED event at events[i] (valid until the next run)."""
        return self.kp.made[i]

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
            "tx_data", "tx_data_bytes", "tx_sent", "tx_sent_bytes",
            "rx_send_dma", "rx_send_dma_bytes", "tx_data_dma", "tx_data_dma_bytes",
            "rx_connect", "rx_connect_bytes", "tx_connect", "tx_connect_bytes",
            "connect_errors")}


def _addr(ip: str) -> int:
    """An IPv4 address as the u32 whose bytes it is (kc_pool.addr)."""
    return int.from_bytes(socket.inet_aton(ip), "little")
