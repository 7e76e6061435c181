"""The nComponent's connect(): N_CONNECT, in C where it can be, in Python where not.

A connect() on the rack is one call to the nComponent that owns the stub's
NIC (docs/network.md). Its common case is the data plane's
(native/skelconnect.h): a kernel socket made before it was needed connects,
and the reply goes straight back into the caller's FIT ring before any Python
runs. This file keeps the plane able to do that, and does the rest:

- pools: the addresses the plane keeps sockets ready for (each NIC of this
  nComponent, and the rack's loopback alias); the plane makes them (as the
  Proxy's `for_connect` does) and replaces each it takes; `refill` at each
  tick retries what it could not make;
- grants: the plane connects for a sender only with a grant from here, set
  once the sender's inbox was checked (its first N_CONNECT, in Python:
  `granted`) and set again whenever the slices change (`regrant`): a bit per
  mComponent the sender's slice lets it use as the home of its socket
  buffers, none if the sender may not use this nComponent at all; and the
  checked inbox, which its requests must name (another is Python's: EPERM);
- `made(i)`: the plane's CONNECTED event i -- a connection it made and
  answered -- gets its bsdSocketSkeleton, DRAM rings and data path, before
  the nMonitor reads any other message or kernel event;
- `n_connect`: every N_CONNECT the plane leaves (a bound socket's, options
  it may not set, an empty pool, a sender without a grant, a traced one),
  answered here with the same replies (fit_rpc/netpath.py CONNECT,
  CONNECTED).

Interface (nmonitor.py): Connector(net, sources, homes, allowed) with net an
`Owner`; n_connect(msg), made(i), dram_changed() where rings are taken or
freed, refill() at each tick, granted(peer, inbox), regrant(), forget(peer, no), pooled() (sockets
ready per source), close().
"""

import errno
import os
import socket
import time
from typing import Any, Protocol

from fit_rpc import Message
from fit_rpc.codec import need
from fit_rpc.netpath import MODES, pack_connected, unpack_connect
from monitors.skeleton import Skeleton
from native.skelpath import HOMES, NO_PEER, Plane
from splitrack.params import CONNECT_TIMEOUT_S


class Owner(Protocol):
    """What the connector needs of its nMonitor."""

    id: str
    log: Any
    plane: Plane
    proxy: Any
    counts: dict[str, int]
    skels: dict[int, Skeleton]

    def new(self, owner: str, socks: list[socket.socket], sk: int = 0) -> Skeleton: ...
    def start(self, skel: Skeleton, buffers: dict[str, Any]) -> None: ...
    def own(self, msg: Message, sk: int) -> Skeleton: ...
    def check_inbox(self, msg: Message, args: dict[str, Any]) -> str: ...
    def check_slice(self, who: str, err: int = errno.EPERM, component: str | None = None
                    ) -> None: ...
    def may_use(self, who: str, component: str) -> bool: ...
    def peer_no(self, peer: str) -> int: ...
    peer_names: dict[int, str]
    def watch(self, skel: Skeleton) -> None: ...
    def refresh(self, skel: Skeleton) -> None: ...
    def closed(self, skel: Skeleton) -> None: ...
    def fail_new(self, skel: Skeleton, err: int) -> None: ...


class Connector:
    def __init__(self, net: Owner, sources: list[str], homes: list[str], allowed: set):
        self.net, self.plane = net, net.plane
        self.sources = sources             # the addresses it keeps pools for
        self.homes = homes[:HOMES]         # grant bit i: homes[i]
        self.grants: dict[str, tuple[int, str]] = {}   # peer -> (its number, its inbox)
        self.plane.homes(self.homes)
        for level, opt in sorted(allowed):
            self.plane.allow(level, opt)
        for ip in sources:
            self.plane.source(ip)
        self.dram_changed()

    # ---- the plane's part -------------------------------------------------------------
    def dram_changed(self) -> None:
        """nComponent DRAM was taken or freed (NMonitor.start, closed): what the plane
        may still give connections (it counts down from there as it makes them)."""
        self.plane.connect.dram = self.net.proxy.connections_free

    def pooled(self) -> dict[str, int]:
        """Sockets ready, per source address."""
        return {ip: self.plane.pool_count(ip) for ip in self.sources}

    def made(self, i: int) -> None:
        """The plane connected and answered (its CONNECTED event i): the skeleton."""
        m = self.plane.made(i)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, m.fd)   # (named: not
        #                                                           asked of the kernel)
        owner = self.net.peer_names.get(m.peer)
        if owner is None:   # its process ended since (a push found its ring gone)
            sock.close()
            return
        skel = self.net.new(owner, [sock], m.sk)
        skel.stub = m.stub
        try:   # (checked by the plane: skelconnect.h)
            self.net.start_checked(skel, MODES[m.mode], self.homes[m.home],
                                   (m.rbuf, m.rbuf_size), (m.tbuf, m.tbuf_size), m.window)
        except Exception as exc:   # answered connected already: the socket breaks at once
            if not isinstance(exc, OSError):
                self.net.log.exception("skeleton %d of %s did not start", skel.sk, owner)
            self.net.fail_new(skel, getattr(exc, "errno", None) or errno.EIO)
            return
        if m.pending:
            self._pending(skel, None if m.timeout < 0 else m.timeout)
        else:   # (start() watched it already)
            self.net.counts["connected"] += 1

    # ---- grants ---------------------------------------------------------------------------
    def granted(self, peer: str, inbox: str) -> None:
        """peer's inbox is checked (Python's path): the plane may connect for it."""
        no = self.net.peer_no(peer)
        if no == NO_PEER:   # every number taken: Python's path serves it
            return
        self.grants[peer] = (no, inbox)
        self.plane.grant(no, self._homes_of(peer), inbox)

    def regrant(self) -> None:
        for peer, (no, inbox) in self.grants.items():
            self.plane.grant(no, self._homes_of(peer), inbox)

    def forget(self, peer: str, no: int) -> None:
        """peer's process ended: its number may serve another peer, without its grant."""
        self.grants.pop(peer, None)
        self.plane.grant(no, 0)

    def _homes_of(self, peer: str) -> int:
        if not self.net.may_use(peer, self.net.id):
            return 0
        return sum(1 << i for i, m in enumerate(self.homes) if self.net.may_use(peer, m))

    # ---- Python's path ----------------------------------------------------------------------
    def n_connect(self, msg: Message) -> bytes:
        args = unpack_connect(msg.payload)
        skel = self._connect(msg, args)
        return pack_connected(skel.sk, skel.sock.getsockname(), pending=skel.connecting)

    def _connect(self, msg: Message, args: dict[str, Any]) -> Skeleton:
        net = self.net
        ip, port = args["dst"]
        net.check_slice(msg.src)
        self.granted(msg.src, net.check_inbox(msg, args))
        if "sk" in args:
            skel = net.own(msg, args["sk"])
            if skel.listening or skel.rx is not None:
                raise OSError(errno.EISCONN if skel.rx is not None else errno.EINVAL,
                              "socket already connected or listening")
        else:
            skel = net.new(msg.src, [net.proxy.for_connect(need(args, "src", str),
                                                           args["opts"])])
        skel.stub = args["stub"]
        try:
            net.start(skel, args["buffers"])
            err = skel.sock.connect_ex((ip, port))
        except OSError:
            net.closed(skel)
            raise
        if err in (errno.EINPROGRESS, errno.EAGAIN):
            err = _handshake(skel.sock)
        if err is None:   # the handshake goes on: writable once it is done (connect_done)
            self._pending(skel, args["timeout"])
        elif err:
            net.closed(skel)
            raise OSError(err, os.strerror(err))
        else:
            net.counts["connected"] += 1
            net.watch(skel)
        return skel

    def _pending(self, skel: Skeleton, timeout: float | None) -> None:
        skel.connecting = True
        self.net.refresh(skel)
        skel.connect_deadline = time.monotonic() + (
            CONNECT_TIMEOUT_S if timeout is None else timeout)
        self.net.watch(skel)

    def refill(self) -> None:
        """Pools a socket could not be made for (out of descriptors) filled again: at
        each tick (the plane replaces each socket it takes as soon as it answered)."""
        self.plane.fill()

    def close(self) -> None:
        self.plane.close_pools()


def _handshake(sock: socket.socket) -> int | None:
    """After a non-blocking connect: 0 connected, an errno failed, None not done yet.
    On loopback the kernel has run the whole handshake before connect() returns."""
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        return err
    try:
        sock.getpeername()
    except OSError:   # ENOTCONN: the SYN is still out
        return None
    return 0
