"""The nMonitor: the network component nN.

At setup it registers its NICs (IPv4 addresses) with GNM and maps its DRAM;
the data paths map the FIT regions they copy to and from (a pComponent's
extCache, an mComponent's arena: data_paths.py) when a socket first needs them.
Then one loop (serve) waits on its FIT inbox and every kernel socket its
bsdSocketSkeletons own, with one epoll: the inbox through the endpoint's
readiness fd (arm, sleep, disarm: fit_rpc/transport.py), after spinning for
rack.poll_us like every FIT waiter. A stub's message and a kernel event are
handled by the same thread, in arrival order.

The data plane (native/skelpath.c) does the per-byte work of that loop in C,
and answers most N_CONNECTs (connector.py keeps it supplied):
for each DDIO connection in its plain state (Skeleton.plain) it handles the
kernel socket's events, N_SEND and N_CREDIT (read straight off the inbox's
FIT rings, on shm) and the pushes they cause, and hands everything else back
here as events, where the Python code below goes on from where it stopped
(`refresh` says which connections are its; `_plane_events` takes what it
hands back). What it reads and writes is counted in the endpoint's counters
as if this file had.

Ops (docs/protocol.md, 0x06xx), all from the stub that owns the skeleton:
    N_BIND      {ip, port, opts, loopback, inbox, stub[, type]} -> {sk, port}  (Proxy makes
                it; `inbox` must be the sender's own: EPERM otherwise; type "dgram": a
                UDP socket's, dgram_skeleton.py, which N_START starts as an accepted one)
    N_DGRAM_CONNECT {sk, dst} -> {local}   a datagram socket's default peer
    N_LISTEN    {sk, backlog}
    N_CONNECT   {sk | src+opts+inbox+stub, dst, timeout, buffers} -> {sk, local} when
                the kernel's handshake was done inside connect() (loopback), else
                {sk, pending}, and STUB_CONNECTED {sk, local} | {errno} once it is
                (connector.py: mostly answered by the data plane, skelconnect.h)
    N_START     one-way {sk, stub, buffers}: an accepted connection may start reading
    N_SEND / N_SEND_DMA / N_CREDIT   one-way, the data path (data_paths.py)
    N_SHUTDOWN  {sk, how};  N_CLOSE {sk}[, CLOSE_UNREAD: reset]
    N_SOCKOPT   {sk, level, opt[, value | linger | buflen]} -> {value} | {raw: hex}
    N_RELEASE   {pid}, from the process's pMonitor: it ended (the reply: its skeletons
                took what it sent out of its memory; then the pMonitor frees that)
    N_LOOKUP    {ip, port} -> {process, stub, inbox}: who listens there (the intra-rack
                shortcut, issue 5); ECONNREFUSED if nobody. Counted as a pipe or FIT
                shortcut by whether the asker is on the listener's pComponent
and it pushes to stubs STUB_DATA, STUB_DATA_DMA, STUB_ACCEPT, STUB_SENT,
STUB_CLOSED, STUB_CONNECTED, STUB_DGRAM_ERROR (0x07xx). Slices (monitors/slices.py): a process
makes sockets here (N_BIND, N_CONNECT) and asks who listens (N_LOOKUP) only
if it is of this nComponent's slice (both may be free), and its rings' home
must be an mComponent of its slice too: EPERM otherwise, EADDRNOTAVAIL for a
bind, counted as `slice`. A stub that cannot take a push within
STUB_PUSH_TIMEOUT_S (STUB_PUSH_PATIENT_S if its process is alive) is taken for
dead and its skeletons close, as they do on N_RELEASE. A request about another
process's skeleton is EPERM; about none, EBADF.

Traced (`splitrack trace`, fit_rpc/tracing.py): a skeleton keeps the context of
the last traced message about it (`skel.trace`), and what its kernel events
and its end cause is traced in it.
"""

import contextlib
import errno
import os
import select
import socket
import struct
import time
from typing import Any

import psutil

from fit_rpc import Message, Op, codec, tracing
from fit_rpc.codec import need
from fit_rpc.counters import Counters
from fit_rpc.header import MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.identity import address_pid, kind_of, process_of
from fit_rpc.netpath import CLOSE_UNREAD, SK, SK_ERR, SK_N
from monitors.connector import Connector
from monitors.core import Monitor
from monitors.data_paths import Ddio, Dma, RackMemory
from monitors.dgram_skeleton import DgramSkeleton
from monitors.proxy import ALLOWED, Proxy
from monitors.skeleton import Skeleton
from monitors.slices import allowed
from native import skelpath
from native.fitring import spin_yield
from native.skelpath import (
    CONNECTED,
    EVENT,
    FAIL,
    FLUSH,
    MAX_FDS,
    MAX_PEERS,
    NO_PEER,
    PUSH,
    RECEIVED,
)
from splitrack.params import (
    MONITOR_IDLE_CHECK_S,
    SKELETON_RECV_CHUNK_BYTES,
    SOCKET_SENT_BYTES,
    STUB_PUSH_PATIENT_S,
    STUB_PUSH_TIMEOUT_S,
)

_RESET = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close() sends RST

_IN, _OUT, _ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR  # plain ints: hot path
_INBOX_BATCH = 64   # inbox messages per poll round (zmq), so kernel sockets are not starved
_PLANE_OPS = {"n_send": Op.N_SEND, "n_credit": Op.N_CREDIT, "n_connect": Op.N_CONNECT,
              "stub_data": Op.STUB_DATA, "stub_sent": Op.STUB_SENT, "magic": MAGIC,
              "version": VERSION, "request": REQUEST, "reply": REPLY, "oneway": ONEWAY}
# the data plane's counts (skelpath.take_counts) -> the endpoint's counters
_PLANE_COUNTS = (("rx", Op.N_SEND, "rx_send"), ("rx", Op.N_CREDIT, "rx_credit"),
                 ("tx", Op.STUB_DATA, "tx_data"), ("tx", Op.STUB_SENT, "tx_sent"),
                 ("rx", Op.N_CONNECT, "rx_connect"), ("tx", Op.N_CONNECT, "tx_connect"))


def _abortive(skel: Any, on: bool) -> None:
    """SO_LINGER on with 0 s, or off, on the skeleton's kernel sockets: its close resets
    the connection, or not (Skeleton.close). (Never lingering for a time: the kernel's
    close would block this loop.)"""
    skel.abortive = on
    for s in skel.socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", int(on), 0))


class NMonitor(Monitor):
    kind = "n"

    def __init__(self, cid: str, config: dict[str, Any], *args: Any):
        for tid in os.listdir("/proc/self/task") if config.get("cpus") else ():
            os.sched_setaffinity(int(tid), config["cpus"])   # ncomponent.cpus (split_cpus):
            # every thread there is; those started later inherit it
        super().__init__(cid, config, *args)

    def setup(self) -> None:
        self.proxy = Proxy(self.config["nics"], self.rack["loopback"], self.config["dram"])
        self.skels: dict[int, Skeleton] = {}
        self.by_fd: dict[int, Skeleton] = {}
        self.masks: dict[int, int] = {}    # what the epoll watches of fds the plane cannot
        self.epoll = select.epoll()
        self.plane = skelpath.Plane(self.epoll.fileno(), _PLANE_OPS)
        self.rings = self.ep.rings()       # shm: the plane reads the inbox itself (zmq: None)
        if self.rings is not None:
            self.rings.link_closed = self._link_closed
        self._ring_gen = -1                # the inbox rings the plane has (their generation)
        self._unvouched = False            # ... some not vouched for yet: look again
        self._peer_nos: dict[str, int] = {}   # the plane's numbers for peers (processes)
        self.peer_names: dict[int, str] = {}  # ... and back
        self._free_nos = list(range(MAX_PEERS - 1, -1, -1))
        self.ep.counters.sources.append(self._plane_counts)
        self.memory = RackMemory(self.ep, os.getcwd())   # monitors run in the run directory
        # a dead board: its programs' connections first, then its regions go
        self.ep.on_peer_gone.extend((self._board_gone, self.memory.forget))
        self.ep.on_peer_gone.append(self._forget_peer)
        self.gone: set[str] = set()        # stubs found dead; their skeletons close at tick
        self.stale: set[int] = set()       # fds closed during this poll round: skip their events
        self.connector = Connector(self, [*self.config["nics"], self.rack["loopback"]],
                                   self.memory.m_ids,
                                   {pair for pair in ALLOWED if pair[1] != socket.SO_ERROR})
        self._load: dict[str, Any] = {}
        self.counts = {"accepted": 0, "connected": 0, "closed": 0, "stubs_lost": 0,
                       "stub_push_waits": 0, "datagrams_in": 0, "datagrams_out": 0,
                       "shortcuts_pipe": 0, "shortcuts_fit": 0,
                       "ddio_extcache_bytes": 0, "ddio_mcomponent_bytes": 0}
        self._lines_bytes = 0   # what the plane's closed connections copied to or from lines
        for op, fn in ((Op.N_BIND, self.n_bind), (Op.N_LISTEN, self.n_listen),
                       (Op.N_CONNECT, self.connector.n_connect), (Op.N_START, self.n_start),
                       (Op.N_SEND, self.n_send), (Op.N_SEND_DMA, self.n_send),
                       (Op.N_CREDIT, self.n_credit), (Op.N_SHUTDOWN, self.n_shutdown),
                       (Op.N_CLOSE, self.n_close), (Op.N_SOCKOPT, self.n_sockopt),
                       (Op.N_RELEASE, self.n_release), (Op.N_LOOKUP, self.n_lookup),
                       (Op.N_DGRAM_CONNECT, self.n_dgram_connect)):
            self.ep.on(op, fn)

    def resources(self) -> dict[str, Any]:
        return {"nics": list(self.config["nics"])}

    def extra_stats(self) -> dict[str, Any]:
        live = list(self.skels.values())
        counts = dict(self.counts)
        counts["ddio_extcache_bytes"] += self._lines_bytes + sum(s.c.lines_bytes for s in live)
        return {"network": {
            **counts, "skeletons": len(live),
            "listeners": sum(s.listening for s in live),
            "bytes_in": sum(s.bytes_in for s in live), "bytes_out": sum(s.bytes_out for s in live),
            "dram_buffers_used": self.proxy.slots_used, "dram_buffers": self.proxy.slots_total,
            "connections_max": self.proxy.connections_max,
            "plane": {"connections": sum(1 for s in live if s.c.fast), **self.plane.stats()},
            "pooled": self.connector.pooled(),
            "by_mode": {m: sum(1 for s in live if s.path is not None and s.path.name == m)
                        for m in ("ddio", "dma")}}}

    # ---- the loop: FIT inbox and kernel sockets ------------------------------------------
    def serve(self) -> None:
        ep, plane, clock = self.ep, self.plane, time.monotonic
        bell = ep.fileno()
        self._mask(bell, _IN)
        spin = self.rack["poll_us"] / 1e6
        plane_reads_inbox = self.rings is not None   # else (zmq) the spin is this loop's
        next_tick = clock() + MONITOR_IDLE_CHECK_S
        idle_since: float | None = None
        while True:
            if plane_reads_inbox:
                self._sync_inbox()
            n = plane.run(spin if plane_reads_inbox else 0.0, int(next_tick * 1e9))
            if n:                                       # (time.monotonic: CLOCK_MONOTONIC)
                self._plane_events(n, bell)
            served = 0
            if plane.inbox or not plane_reads_inbox:   # one at a time while the plane reads
                batch = 1 if plane_reads_inbox else _INBOX_BATCH   # too: what follows may
                while served < batch and ep.serve(0):             # be its (N_CONNECT...)
                    served += 1
            now = clock()
            if now >= next_tick:
                if self._tick():
                    return
                next_tick = now + MONITOR_IDLE_CHECK_S
            if n or served or plane.inbox:
                idle_since = None
                continue
            if not plane_reads_inbox:   # spin while a message or a kernel event is likely
                idle_since = idle_since or now             # soon, and nobody else wants
                if now - idle_since < spin and spin_yield():   # the CPU
                    continue
            idle_since = None
            if ep.arm():   # idle after the spin: sleep on the inbox and the sockets
                self.epoll.poll(max(0.0, next_tick - now))   # (level-triggered: the
                ep.disarm()                                   # plane reads the events)

    def _plane_events(self, n: int, bell: int) -> None:
        """What the data plane handed back from one run: epoll events of what is not
        its, and the connections where the common case ended (skelpath.h)."""
        self.stale.clear()
        events = self.plane.events
        for i in range(n):
            ev = events[i]
            kind = ev.kind
            if kind == EVENT:
                fd = ev.fd
                if fd == bell:
                    self.ep.disarm()   # rung while we were awake: drain it, look again
                elif fd not in self.stale:
                    self._kernel_event(fd, ev.events)
                continue
            if kind == CONNECTED:
                self.connector.made(i)
                continue
            skel = self.skels.get(ev.sk)
            if skel is None or skel.dead:
                continue
            value, stored, op = ev.value, ev.stored, ev.op
            try:
                if kind == RECEIVED:
                    skel.received(value, stored)
                elif kind == FLUSH:
                    skel.flush()
                elif kind == FAIL:
                    skel._fail(value)
                elif kind == PUSH:
                    self.push(skel, op, SK_N.pack(skel.stub, value))
            except Exception:   # one broken skeleton must not stop the nComponent
                self.log.exception("skeleton %d of %s failed; closing it", skel.sk, skel.owner)
                skel._fail(errno.EIO)
                self.closed(skel)
            if not skel.dead:
                self.refresh(skel)   # the plane left it to this code: the plane's again, if plain

    def _sync_inbox(self) -> None:
        """The plane reads the inbox rings there are now (before it runs: a ring of a
        list it had may be gone)."""
        gen, rings = self.rings.inbox_rings(-1 if self._unvouched else self._ring_gen)
        if rings is None:
            return   # as they were
        self._ring_gen = gen
        self._unvouched = any(verdict is None for _, _, _, verdict in rings)   # not yet asked
        self.plane.set_inbox([ring for _, ring, _, _ in rings],
                             [self.peer_no(peer) if verdict else NO_PEER
                              for peer, _, _, verdict in rings],
                             [reply for _, _, reply, _ in rings])

    def refresh(self, skel: Skeleton) -> None:
        """Whether the data plane runs skel now (skeleton.Net): a plain DDIO connection
        (Skeleton.plain) of a stub not found dead, on a transport with rings."""
        c = skel.c
        fast = self.rings is not None and skel.in_plane and skel.plain() and \
            skel.owner not in self.gone
        if fast and not c.fast:
            c.owner = self.peer_no(skel.owner)
            c.stub = skel.stub
            c.recv_chunk, c.sent_batch = SKELETON_RECV_CHUNK_BYTES, SOCKET_SENT_BYTES
            c.push = skelpath.ring_ptr(self.rings.out_ring(skel.owner))
            fast = c.owner != NO_PEER
        c.fast = fast

    def peer_no(self, peer: str) -> int:
        """The plane's number for a peer (NO_PEER when all are taken)."""
        no = self._peer_nos.get(peer)
        if no is None:
            if not self._free_nos:
                return NO_PEER
            no = self._peer_nos[peer] = self._free_nos.pop()
            self.peer_names[no] = peer
        return no

    def _forget_peer(self, peer: str) -> None:
        """A peer's process ended (its last link closed): its counts were taken in (the
        endpoint folds them), and its number is free again, for nobody to speak for
        its connections."""
        no = self._peer_nos.pop(peer, None)
        if no is None:
            return
        del self.peer_names[no]
        self.connector.forget(peer, no)
        for skel in self.skels.values():
            if skel.owner == peer:
                skel.c.fast, skel.c.owner = False, NO_PEER
        self.plane.take_counts(no)
        self._free_nos.append(no)
        self._ring_gen = -1   # its rings are gone: the plane gets the list again

    def _link_closed(self, peer: str) -> None:
        """The ring to peer's inbox is about to go: the plane pushes there no more."""
        for skel in self.skels.values():
            if skel.owner == peer:
                skel.c.push = skelpath.ffi.NULL

    def _plane_counts(self, counters: Counters) -> None:
        """What the plane read and wrote, into the endpoint's counters."""
        for peer, no in self._peer_nos.items():
            got = self.plane.take_counts(no)
            for direction, op, key in _PLANE_COUNTS:
                counters.add(direction, peer, op, got[key], got[f"{key}_bytes"])
            if got["connect_errors"]:   # answered with an errno, as the endpoint counts it
                counters.error("service_error", got["connect_errors"])

    def _kernel_event(self, fd: int, ev: int) -> None:
        skel = self.by_fd.get(fd)
        if skel is None:
            return
        if skel.trace is not None:   # traced: what the event causes continues its trace
            with tracing.within(skel.trace):
                self._skeleton_event(skel, fd, ev)
        else:
            self._skeleton_event(skel, fd, ev)

    def _skeleton_event(self, skel: Skeleton, fd: int, ev: int) -> None:
        try:
            if ev & _IN or (ev & _ERR and skel.wants_read()):
                skel.readable(fd)
            if not skel.dead and ev & (_OUT | _ERR) and skel.wants_write():
                skel.writable()
        except Exception:   # one broken skeleton must not stop the nComponent
            self.log.exception("skeleton %d of %s failed; closing it", skel.sk, skel.owner)
            skel._fail(errno.EIO)
            self.closed(skel)
            return
        if not skel.dead and ev & ~(_IN | _OUT) and not (skel.wants_read() or skel.wants_write()):
            self._mask(fd, 0)   # hang-up nobody waits on: stop polling it (no busy loop)

    def tick(self) -> None:
        now = time.monotonic()
        for skel in list(self.skels.values()):
            if skel.lingered(now):
                self.closed(skel)
            elif skel.owner in self.gone and skel.closing_since is None:
                self._orphaned(skel)
            elif skel.connecting and now > skel.connect_deadline:
                self.connect_done(skel, errno.ETIMEDOUT)
        self.gone &= {skel.owner for skel in self.skels.values()}   # forget the finished
        self.connector.refill()
        self._report_load()

    def close(self) -> None:
        for skel in list(self.skels.values()):
            self.closed(skel)
        self.connector.close()
        super().close()
        self.epoll.close()
        self.proxy.close()

    # ---- what skeletons call (skeleton.Net) ---------------------------------------------
    def push(self, skel: Skeleton, op: int, payload: bytes) -> None:
        if skel.owner in self.gone:
            return
        try:
            self._send_to_stub(skel.owner, op, payload)
        except OSError as exc:
            self.log.info("stub %s is gone (%s); closing its sockets", skel.owner, exc)
            self._gone(skel.owner)
            self.counts["stubs_lost"] += 1
            return
        if skel.c.fast:   # the link may be new: the plane pushes on it from now on
            skel.c.push = skelpath.ring_ptr(self.rings.out_ring(skel.owner))

    def _send_to_stub(self, owner: str, op: int, payload: bytes) -> None:
        """A push, given STUB_PUSH_TIMEOUT_S; once more, given STUB_PUSH_PATIENT_S, if
        the stub's process is alive on this host (shm transport): a live program can
        be slow to take a new link -- one whose heap is paging (--memory rack) runs
        its Python a fault at a time -- and taking it for dead would leave it
        waiting on sockets that no longer exist."""
        try:
            self.ep.send(owner, op, payload, timeout=STUB_PUSH_TIMEOUT_S)
        except OSError:
            process = process_of(owner)
            if self.rack["transport"] != "shm" or process is None \
                    or not psutil.pid_exists(process[1]):
                raise
            self.counts["stub_push_waits"] += 1
            self.ep.send(owner, op, payload, timeout=STUB_PUSH_PATIENT_S)

    def _gone(self, owner: str) -> None:
        """A stub process found dead (or released): nothing more is pushed to it, and
        its skeletons close at the next tick."""
        self.gone.add(owner)
        for skel in self.skels.values():
            if skel.owner == owner:
                self.refresh(skel)

    def watch(self, skel: Skeleton) -> None:
        if skel.dead:
            return
        mask = (_IN if skel.wants_read() else 0) | (_OUT if skel.wants_write() else 0)
        for s in skel.watched():
            self._mask(s.fileno(), mask)

    def accepted(self, listener: Skeleton, conn: socket.socket) -> None:
        local = conn.getsockname()
        try:
            peer = conn.getpeername()
        except OSError:   # reset while it waited in the kernel's queue: as on Linux, the
            peer = ("0.0.0.0", 0)   # program accepts it, and its first recv says ECONNRESET
        skel = self.new(listener.owner, [conn])
        skel.parent = listener
        listener.waiting.add(skel.sk)
        self.counts["accepted"] += 1
        self.push(listener, Op.STUB_ACCEPT, SK.pack(listener.stub) + codec.encode(
            {"sk": skel.sk, "peer": list(peer), "local": list(local)}))

    def connect_done(self, skel: Skeleton, err: int) -> None:
        skel.connecting = False
        self.refresh(skel)
        if err:
            self._tell_connect(skel.owner, skel.stub, {"errno": err})
            self.closed(skel)
            return
        self.counts["connected"] += 1
        self._tell_connect(skel.owner, skel.stub,
                           {"sk": skel.sk, "local": list(skel.sock.getsockname())})
        self.watch(skel)

    def _tell_connect(self, owner: str, stub: int, answer: dict[str, Any]) -> None:
        if owner in self.gone:
            return
        try:
            self._send_to_stub(owner, Op.STUB_CONNECTED, SK.pack(stub) + codec.encode(answer))
        except OSError:
            self._gone(owner)

    def drop_socket(self, skel: Skeleton, sock: socket.socket) -> None:
        """One of a skeleton's kernel sockets closes (it keeps the others)."""
        self._close_socket(sock)
        skel.socks.remove(sock)

    def _close_socket(self, sock: socket.socket) -> None:
        self._mask(sock.fileno(), 0)
        self.by_fd.pop(sock.fileno(), None)
        self.stale.add(sock.fileno())   # (its events of this round are skipped)
        sock.close()

    def closed(self, skel: Skeleton) -> None:
        """The end of a skeleton: kernel sockets closed, rings back to DRAM."""
        if skel.dead:
            return
        skel.dead = True
        skel.c.fast = False
        self.plane.drop(skel.c)   # before its rings and mappings go
        self._lines_bytes += skel.c.lines_bytes
        if skel.connecting:
            skel.connecting = False
            self._tell_connect(skel.owner, skel.stub, {"errno": errno.ECONNABORTED})
        for s in skel.socks:
            self._close_socket(s)
        if skel.rx is not None:
            self.proxy.free(skel.rx, skel.tx)
            self.connector.dram_changed()
        if skel.path is not None:
            with tracing.within(skel.trace):
                skel.path.close()   # its rings' dDMA mappings are released
        del self.skels[skel.sk]
        if skel.parent is not None:
            skel.parent.waiting.discard(skel.sk)
            self.watch(skel.parent)
        for sk in list(skel.waiting):  # a listener's connections no stub accepted
            self.closed(self.skels[sk])
        self.counts["closed"] += 1

    # ---- ops: creating skeletons -----------------------------------------------------------
    def n_bind(self, msg: Message) -> bytes:
        args, _ = msg.args()
        self.check_slice(msg.src, errno.EADDRNOTAVAIL)   # a NIC of another slice: not ours
        self.check_inbox(msg, args)
        dgram = args.get("type", "stream") == "dgram"
        socks, port = self.proxy.bound(need(args, "ip", str), need(args, "port", int),
                                       args.get("opts", []), bool(args.get("loopback")),
                                       socket.SOCK_DGRAM if dgram else socket.SOCK_STREAM)
        skel = self.new(msg.src, socks, kind=DgramSkeleton if dgram else Skeleton)
        skel.stub = need(args, "stub", int)
        skel.inbox = need(args, "inbox", str)
        return codec.encode({"sk": skel.sk, "port": port})

    def n_dgram_connect(self, msg: Message) -> bytes:
        """A datagram socket's default peer (UDP connect(): no handshake)."""
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        if not isinstance(skel, DgramSkeleton):
            raise OSError(errno.EOPNOTSUPP, f"socket {skel.sk} is no datagram socket")
        ip, port = need(args, "dst", list)
        if type(ip) is not str or type(port) is not int:
            raise OSError(errno.EINVAL, "dst is [ip, port]")
        return codec.encode({"local": list(skel.connect_to(ip, port))})

    def n_listen(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        skel.backlog = max(1, min(need(args, "backlog", int), socket.SOMAXCONN))
        for s in skel.socks:
            s.listen(skel.backlog)
        skel.listening = True
        self.watch(skel)
        return codec.encode()

    def n_start(self, msg: Message) -> None:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        if skel.parent is not None:
            skel.parent.waiting.discard(skel.sk)
            self.watch(skel.parent)
        skel.stub = need(args, "stub", int)
        try:
            self.start(skel, need(args, "buffers", dict))
        except OSError as exc:
            self.fail_new(skel, exc.errno or errno.EIO)

    # ---- ops: the data path ----------------------------------------------------------------
    def n_send(self, msg: Message) -> None:
        """N_SEND (dDDIO) or N_SEND_DMA: the stub's next n bytes wait in its send ring."""
        sk, n = SK_N.unpack_from(msg.payload)
        skel = self.own(msg, sk)
        if skel.path is not None and skel.path.send_op == msg.op and not skel.broken:
            skel.path.load(skel, n)

    def n_credit(self, msg: Message) -> None:
        sk, n = SK_N.unpack_from(msg.payload)
        self.own(msg, sk).credit(n)

    def n_shutdown(self, msg: Message) -> bytes:
        sk, how = SK_ERR.unpack_from(msg.payload)
        self.own(msg, sk).shutdown(how)
        return b""

    def n_close(self, msg: Message) -> bytes:
        (sk,) = SK.unpack_from(msg.payload)
        skel = self.skels.get(sk)
        if skel is not None and skel.owner == msg.src:
            skel.trace = tracing.current.ctx or skel.trace
            if msg.payload[SK.size:] == CLOSE_UNREAD:   # bytes the program never read:
                _abortive(skel, True)                   # Linux's close resets
            skel.close()
        return b""

    def n_sockopt(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self.own(msg, need(args, "sk", int))
        level, opt = need(args, "level", int), need(args, "opt", int)
        if "linger" in args:   # SO_LINGER, on with 0 s: close resets (Skeleton.close)
            linger = need(args, "linger", list)
            if len(linger) != 2 or not all(type(v) is int for v in linger):
                raise OSError(errno.EINVAL, "linger is [l_onoff, l_linger]")
            _abortive(skel, linger[0] != 0 and linger[1] == 0)
            return codec.encode()
        if "value" in args:
            for s in skel.socks:
                self.proxy.apply(s, level, opt, need(args, "value", int))
            return codec.encode()
        buflen = args.get("buflen", 0)
        if type(buflen) is not int or not 0 <= buflen <= 1024:
            raise OSError(errno.EINVAL, "buflen is 0-1024")
        if buflen:   # a struct or a string (TCP_INFO, TCP_CONGESTION): its bytes, in hex
            return codec.encode({"raw": self.proxy.query(skel.sock, level, opt, buflen).hex()})
        return codec.encode({"value": self.proxy.query(skel.sock, level, opt)})

    def n_lookup(self, msg: Message) -> bytes:
        self.check_slice(msg.src)   # the stub takes the ordinary path, through its own NIC
        args, _ = msg.args()
        where = (need(args, "ip", str), need(args, "port", int))
        for skel in self.skels.values():
            if skel.listening and not skel.dead and skel.owner not in self.gone and any(
                    s.getsockname() == where for s in skel.socks):
                same = skel.owner.split(".")[0] == msg.src.split(".")[0]
                self.counts["shortcuts_pipe" if same else "shortcuts_fit"] += 1
                return codec.encode({"process": skel.owner, "stub": skel.stub,
                                     "inbox": skel.inbox})
        raise OSError(errno.ECONNREFUSED, f"nobody listens on {where[0]}:{where[1]}")

    def n_release(self, msg: Message) -> None:
        args, _ = msg.args()
        owner = f"{msg.src}.{need(args, 'pid', int)}"   # only its own pMonitor may
        self._gone(owner)   # no more pushes; tick() closes what is left
        for skel in [s for s in self.skels.values() if s.owner == owner]:
            self._orphaned(skel)

    def _board_gone(self, peer: str) -> None:
        """A pComponent died, and its processes with it; no N_RELEASE will come and
        their memory is gone: their connections are reset, as a failed host's are."""
        if kind_of(peer) != "p":
            return
        for skel in [s for s in self.skels.values() if s.owner.startswith(f"{peer}.")]:
            self._gone(skel.owner)
            for sock in skel.socks:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self.closed(skel)

    def _orphaned(self, skel: Skeleton) -> None:
        """The skeleton's process ended."""
        if skel.rx is None or skel.broken:
            self.closed(skel)
        else:
            skel.close()   # as the kernel does at exit: what was sent still leaves

    # ---- internals --------------------------------------------------------------------------
    def check_inbox(self, msg: Message, args: dict[str, Any]) -> str:
        """The stub's process's inbox, where pushes go: its own, or EPERM."""
        inbox = need(args, "inbox", str)
        if msg.pid is not None and address_pid(inbox) != msg.pid:
            self.ep.counters.error("forged")
            raise OSError(errno.EPERM, f"{inbox} is not the inbox of {msg.src}")
        self.ep.add_peer(msg.src, inbox)
        return inbox

    def new(self, owner: str, socks: list[socket.socket], sk: int = 0,
            kind: type[Skeleton] = Skeleton) -> Skeleton:
        """A skeleton over socks (sk: its id, chosen by next_sk before; kind: a stream's
        or a datagram socket's)."""
        fd = socks[0].fileno()
        sk = sk or self.next_sk(fd)
        skel = kind(self, sk, owner, socks, self.plane.conn(fd, sk))
        skel.in_plane = self.plane.add(skel.c)   # False: an fd past what it can hold
        self.skels[skel.sk] = skel
        for s in socks:
            self.by_fd[s.fileno()] = skel
        return skel

    def next_sk(self, fd: int) -> int:
        """A skeleton id for a socket at fd, in use by none: it names the fd in its
        low 16 bits, so that the data plane finds it from a message (skelpath.h). The
        plane's pooled sockets take theirs from the same counter, and hold their
        fds, so no id of theirs can be one of these."""
        for _ in range(0x10000):
            sk = self.plane.next_sk(fd)   # (shared with the plane's pooled sockets)
            if sk not in self.skels:
                return sk
        raise OSError(errno.ENFILE, f"no skeleton id free for descriptor {fd}")

    def fail_new(self, skel: Skeleton, err: int) -> None:
        """A connection that cannot start (e.g. ENOBUFS: nComponent DRAM is full): its
        stub hears the error, and it closes."""
        self.push(skel, Op.STUB_CLOSED, SK_ERR.pack(skel.stub, err))
        self.closed(skel)

    def may_use(self, who: str, component: str) -> bool:
        """Whether `who` may use `component` (the slices: monitors/slices.py)."""
        return allowed(self.slices, self.as_process(who), component)

    def slices_changed(self) -> None:
        self.connector.regrant()

    def start(self, skel: Skeleton, buffers: dict[str, Any]) -> None:
        mode = need(buffers, "mode", str)
        kinds = {"dma": Dma, "ddio": Ddio}
        if mode not in kinds:
            raise OSError(errno.EINVAL, f"no data path {mode!r} (dma, ddio)")
        home = need(buffers, "home", str)
        if home not in self.memory.m_ids:
            raise OSError(errno.EINVAL, f"{home!r} is no mComponent")
        self.check_slice(skel.owner, component=home)
        rbuf, tbuf = (tuple(need(buffers, k, list)) for k in ("rbuf", "tbuf"))
        for ring in (rbuf, tbuf):
            if len(ring) != 2 or not all(type(v) is int for v in ring) or ring[0] < 0 \
                    or ring[1] <= 0:
                raise OSError(errno.EINVAL, f"a ring is [start, size], not {list(ring)!r}")
        pcomponent, _, pid = skel.owner.partition(".")
        path = kinds[mode](self, skel.c, int(pid), pcomponent, home, rbuf, tbuf)
        rx, tx = self.proxy.rings()
        self.connector.dram_changed()
        skel.start(rx, tx, path, need(buffers, "window", int))

    def own(self, msg: Message, sk: int) -> Skeleton:
        skel = self.skels.get(sk)
        if skel is None:
            raise OSError(errno.EBADF, f"no socket {sk} on {self.id}")
        if skel.owner != msg.src:
            raise OSError(errno.EPERM, f"socket {sk} belongs to {skel.owner}, not {msg.src}")
        ctx = tracing.current.ctx
        if ctx is not None:   # traced: this message is the skeleton's context now
            skel.trace = ctx
            self.refresh(skel)   # (the data plane traces nothing: it is this file's now)
        return skel

    def _mask(self, fd: int, mask: int) -> None:
        """What the epoll watches of fd: through the plane (which watches with it), or
        here for an fd past what the plane can."""
        rc = self.plane.watch(fd, mask)
        if rc == 0:
            return
        if rc != -errno.EBADF or fd < MAX_FDS:
            raise OSError(-rc, os.strerror(-rc))
        if self.masks.get(fd, 0) == mask:
            return
        if mask and fd in self.masks:
            self.epoll.modify(fd, mask)
            self.masks[fd] = mask
        elif mask:
            self.epoll.register(fd, mask)
            self.masks[fd] = mask
        else:
            self.epoll.unregister(fd)
            del self.masks[fd]

    def _report_load(self) -> None:
        nics: dict[str, dict[str, int]] = {ip: {"sockets": 0, "bytes": 0}
                                           for ip in self.config["nics"]}
        for skel in self.skels.values():
            try:
                ip = skel.sock.getsockname()[0]
            except OSError:
                continue
            if ip in nics:
                nics[ip]["sockets"] += 1
                nics[ip]["bytes"] += skel.bytes_in + skel.bytes_out
        if nics != self._load and not self.stopping and self.report_load({"nics": nics}, 0.5):
            self._load = nics
