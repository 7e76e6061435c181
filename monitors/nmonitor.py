"""The nMonitor: the network component nN.

At setup it registers its NICs (IPv4 addresses) with GNM and maps its DRAM;
the data paths map the FIT regions they copy to and from (a pComponent's
extCache, an mComponent's arena: data_paths.py, rack_memory.py) when a socket
first needs them.
Then one loop (serve: plane_loop.py) waits on its FIT inbox and every kernel
socket its bsdSocketSkeletons own, with one epoll: the inbox through the endpoint's
readiness fd (arm, sleep, disarm: fit_rpc/transport.py), after spinning for
rack.poll_us like every FIT waiter. A stub's message and a kernel event are
handled by the same thread, in arrival order.

The data plane (native/skelpath.c) does the per-byte work of that loop in C,
and answers most N_CONNECTs (connector.py keeps it supplied):
for each connection in its plain state (Skeleton.plain), DDIO or DMA, it handles
the kernel socket's events, N_SEND (N_SEND_DMA) and N_CREDIT (read straight off the inbox's
FIT rings, on shm) and the pushes they cause, and hands everything else back
as events, where the Python code (plane_loop.py) goes on from where it stopped
(`refresh` says which connections are its; `_plane_events` takes what it
hands back). What it reads and writes is counted in the endpoint's counters
as if the Python code had.

This file is the nMonitor's state (setup), its STATS, its tick (with the load
report to GNM) and its close; its parts are mixins in files of their own, each
over the same state: the loop and the data plane's Python side are
plane_loop.py's, the handlers of the ops listed below skeleton_ops.py's
(N_CONNECT's is connector.py's), and a bsdSocketSkeleton's life (made,
started, its pushes, accepted or connected, closed) skeleton_lifecycle.py's.

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

import errno
import os
import select
import socket
import time
from typing import Any

from fit_rpc import Op
from fit_rpc.header import MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from monitors.connector import Connector
from monitors.core import Monitor
from monitors.plane_loop import PlaneLoop
from monitors.proxy import ALLOWED, Proxy
from monitors.rack_memory import RackMemory
from monitors.skeleton import Skeleton
from monitors.skeleton_lifecycle import SkeletonLifecycle
from monitors.skeleton_ops import SkeletonOps
from monitors.slices import allowed
from native import skelpath
from native.skelpath import MAX_PEERS

_PLANE_OPS = {"n_send": Op.N_SEND, "n_credit": Op.N_CREDIT, "n_connect": Op.N_CONNECT,
              "stub_data": Op.STUB_DATA, "stub_sent": Op.STUB_SENT,
              "n_send_dma": Op.N_SEND_DMA, "stub_data_dma": Op.STUB_DATA_DMA, "magic": MAGIC,
              "version": VERSION, "request": REQUEST, "reply": REPLY, "oneway": ONEWAY}


class NMonitor(PlaneLoop, SkeletonOps, SkeletonLifecycle, Monitor):
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
            self.plane.set_bell(self.rings.inbox_bell())
        self._ring_gen = -1                # the inbox rings the plane has (their generation)
        self._unvouched = False            # ... some not vouched for yet: look again
        self._peer_nos: dict[str, int] = {}   # the plane's numbers for peers (processes)
        self.peer_names: dict[int, str] = {}  # ... and back
        self._free_nos = list(range(MAX_PEERS - 1, -1, -1))
        self.ep.counters.sources.append(self._plane_counts)
        self.memory = RackMemory(self.ep, os.getcwd())   # monitors run in the run directory
        # a dead board: its programs' connections first, then its regions go
        self.ep.on_peer_gone.extend((self._board_gone, self._home_gone, self.memory.forget))
        self.ep.on_peer_gone.append(self._forget_peer)
        self.stale: set[int] = set()       # fds closed during this poll round: skip their events
        self.closing: list[socket.socket] = []   # ... whose kernel close waits for the answer
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

    def tick(self) -> None:
        now = time.monotonic()
        for skel in list(self.skels.values()):
            if skel.lingered(now):
                self.closed(skel)
            elif skel.gone and skel.closing_since is None:
                self._orphaned(skel)
            elif skel.connecting and now > skel.connect_deadline:
                self.connect_done(skel, errno.ETIMEDOUT)
        self.connector.refill()
        self._report_load()

    def close(self) -> None:
        for skel in list(self.skels.values()):
            self.closed(skel)
        self.connector.close()
        super().close()
        self.epoll.close()
        self.proxy.close()

    # ---- slices and load ----------------------------------------------------------------
    def may_use(self, who: str, component: str) -> bool:
        """Whether `who` may use `component` (the slices: monitors/slices.py)."""
        return allowed(self.slices, self.as_process(who), component)

    def slices_changed(self) -> None:
        self.connector.regrant()

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
