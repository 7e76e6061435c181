"""The nMonitor: the network component nN.

At setup it registers its NICs (IPv4 addresses) with GNM and maps its DRAM;
the data paths map the FIT regions they copy to and from (a pComponent's
extCache, an mComponent's arena: data_paths.py) when a socket first needs them.
Then one loop (serve) waits on its FIT inbox and every kernel socket its
bsdSocketSkeletons own, with one epoll: the inbox through the endpoint's
readiness fd (arm, sleep, disarm: fit_rpc/transport.py), after spinning for
rack.poll_us like every FIT waiter. A stub's message and a kernel event are
handled by the same thread, in arrival order.

Ops (docs/protocol.md, 0x06xx), all from the stub that owns the skeleton:
    N_BIND      {ip, port, opts, loopback, inbox, stub} -> {sk, port}  (Proxy makes it;
                `inbox` must be the sender's own: EPERM otherwise)
    N_LISTEN    {sk, backlog}
    N_CONNECT   {sk | src+opts+inbox+stub, dst, timeout, buffers} -> {sk, local} when
                the kernel's handshake was done inside connect() (loopback), else
                {sk, pending}, and STUB_CONNECTED {sk, local} | {errno} once it is
    N_START     one-way {sk, stub, buffers}: an accepted connection may start reading
    N_SEND / N_SEND_DMA / N_CREDIT   one-way, the data path (data_paths.py)
    N_SHUTDOWN  {sk, how};  N_CLOSE {sk};  N_SOCKOPT {sk, level, opt[, value]} -> {value}
    N_RELEASE   {pid}, from the process's pMonitor: it ended (the reply: its skeletons
                took what it sent out of its memory; then the pMonitor frees that)
    N_LOOKUP    {ip, port} -> {process, stub, inbox}: who listens there (the intra-rack
                shortcut, issue 5); ECONNREFUSED if nobody. Counted as a pipe or FIT
                shortcut by whether the asker is on the listener's pComponent
and it pushes to stubs STUB_DATA, STUB_DATA_DMA, STUB_ACCEPT, STUB_SENT,
STUB_CLOSED, STUB_CONNECTED (0x07xx). Slices (monitors/slices.py): a process
makes sockets here (N_BIND, N_CONNECT) and asks who listens (N_LOOKUP) only
if it is of this nComponent's slice (both may be free), and its rings' home
must be an mComponent of its slice too: EPERM otherwise, EADDRNOTAVAIL for a
bind, counted as `slice`. A stub that cannot take a push within
STUB_PUSH_TIMEOUT_S is taken for dead and its skeletons close, as they do on
N_RELEASE. A request about another process's skeleton is EPERM; about none, EBADF.

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

from fit_rpc import Message, Op, codec, tracing
from fit_rpc.codec import need
from fit_rpc.identity import address_pid, kind_of
from fit_rpc.netpath import SK, SK_ERR, SK_N
from monitors.core import Monitor
from monitors.data_paths import Ddio, Dma, RackMemory
from monitors.proxy import Proxy
from monitors.skeleton import Skeleton
from native.fitring import spin_yield
from splitrack.params import CONNECT_TIMEOUT_S, MONITOR_IDLE_CHECK_S, STUB_PUSH_TIMEOUT_S

_RESET = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close() sends RST

_IN, _OUT, _ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR  # plain ints: hot path
_INBOX_BATCH = 64   # inbox messages per poll round, so kernel sockets are not starved


class NMonitor(Monitor):
    kind = "n"

    def setup(self) -> None:
        self.proxy = Proxy(self.config["nics"], self.rack["loopback"], self.config["dram"])
        self.skels: dict[int, Skeleton] = {}
        self.by_fd: dict[int, Skeleton] = {}
        self.masks: dict[int, int] = {}
        self.epoll = select.epoll()
        self.memory = RackMemory(self.ep, os.getcwd())   # monitors run in the run directory
        # a dead board: its programs' connections first, then its regions go
        self.ep.on_peer_gone.extend((self._board_gone, self.memory.forget))
        self.gone: set[str] = set()        # stubs found dead; their skeletons close at tick
        self.stale: set[int] = set()       # fds closed during this poll round: skip their events
        self._next_sk = 0
        self._load: dict[str, Any] = {}
        self.counts = {"accepted": 0, "connected": 0, "closed": 0, "stubs_lost": 0,
                       "shortcuts_pipe": 0, "shortcuts_fit": 0,
                       "ddio_extcache_bytes": 0, "ddio_mcomponent_bytes": 0}
        for op, fn in ((Op.N_BIND, self.n_bind), (Op.N_LISTEN, self.n_listen),
                       (Op.N_CONNECT, self.n_connect), (Op.N_START, self.n_start),
                       (Op.N_SEND, self.n_send), (Op.N_SEND_DMA, self.n_send),
                       (Op.N_CREDIT, self.n_credit), (Op.N_SHUTDOWN, self.n_shutdown),
                       (Op.N_CLOSE, self.n_close), (Op.N_SOCKOPT, self.n_sockopt),
                       (Op.N_RELEASE, self.n_release), (Op.N_LOOKUP, self.n_lookup)):
            self.ep.on(op, fn)

    def resources(self) -> dict[str, Any]:
        return {"nics": list(self.config["nics"])}

    def extra_stats(self) -> dict[str, Any]:
        live = list(self.skels.values())
        return {"network": {
            **self.counts, "skeletons": len(live),
            "listeners": sum(s.listening for s in live),
            "bytes_in": sum(s.bytes_in for s in live), "bytes_out": sum(s.bytes_out for s in live),
            "dram_buffers_used": self.proxy.slots_used, "dram_buffers": self.proxy.slots_total,
            "connections_max": self.proxy.connections_max,
            "by_mode": {m: sum(1 for s in live if s.path is not None and s.path.name == m)
                        for m in ("ddio", "dma")}}}

    # ---- the loop: FIT inbox and kernel sockets ------------------------------------------
    def serve(self) -> None:
        ep, clock, yield_cpu = self.ep, time.monotonic, spin_yield
        bell = ep.fileno()
        self.epoll.register(bell, _IN)
        poll, spin = self.epoll.poll, self.rack["poll_us"] / 1e6
        next_tick = clock() + MONITOR_IDLE_CHECK_S
        idle_since: float | None = None
        while True:
            served = 0
            while served < _INBOX_BATCH and ep.serve(0):
                served += 1
            busy = served > 0 or self._kernel_events(poll(0), bell)
            now = clock()
            if now >= next_tick:
                if self._tick():
                    return
                next_tick = now + MONITOR_IDLE_CHECK_S
            if busy:
                idle_since = None
                continue
            if idle_since is None:
                idle_since = now
            if now - idle_since < spin and yield_cpu():   # a message or a kernel event is likely
                continue                                   # soon, and nobody else wants the CPU
            if ep.arm():   # nothing waits in the inbox: sleep on both
                events = poll(max(0.0, next_tick - now))
                ep.disarm()
                self._kernel_events(events, bell)
            idle_since = None

    def _kernel_events(self, events: list[tuple[int, int]], bell: int) -> bool:
        """Handle one poll round's events; whether there was any (the bell's too)."""
        self.stale.clear()
        for fd, ev in events:
            if fd == bell:
                self.ep.disarm()   # rung while we were awake: drain it, look again
            elif fd not in self.stale:
                self._kernel_event(fd, ev)
        return bool(events)

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
        self._report_load()

    def close(self) -> None:
        for skel in list(self.skels.values()):
            self.closed(skel)
        super().close()
        self.epoll.close()
        self.proxy.close()

    # ---- what skeletons call (skeleton.Net) ---------------------------------------------
    def push(self, skel: Skeleton, op: int, payload: bytes) -> None:
        if skel.owner in self.gone:
            return
        try:
            self.ep.send(skel.owner, op, payload, timeout=STUB_PUSH_TIMEOUT_S)
        except OSError as exc:
            self.log.info("stub %s is gone (%s); closing its sockets", skel.owner, exc)
            self.gone.add(skel.owner)
            self.counts["stubs_lost"] += 1

    def watch(self, skel: Skeleton) -> None:
        if skel.dead:
            return
        mask = (_IN if skel.wants_read() else 0) | (_OUT if skel.wants_write() else 0)
        for s in skel.socks if skel.listening else skel.socks[:1]:
            self._mask(s.fileno(), mask)

    def accepted(self, listener: Skeleton, conn: socket.socket) -> None:
        local = conn.getsockname()
        try:
            peer = conn.getpeername()
        except OSError:   # reset while it waited in the kernel's queue: as on Linux, the
            peer = ("0.0.0.0", 0)   # program accepts it, and its first recv says ECONNRESET
        skel = self._new(listener.owner, [conn])
        skel.parent = listener
        listener.waiting.add(skel.sk)
        self.counts["accepted"] += 1
        self.push(listener, Op.STUB_ACCEPT, SK.pack(listener.stub) + codec.encode(
            {"sk": skel.sk, "peer": list(peer), "local": list(local)}))

    def connect_done(self, skel: Skeleton, err: int) -> None:
        skel.connecting = False
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
            self.ep.send(owner, Op.STUB_CONNECTED, SK.pack(stub) + codec.encode(answer),
                         timeout=STUB_PUSH_TIMEOUT_S)
        except OSError:
            self.gone.add(owner)

    def closed(self, skel: Skeleton) -> None:
        """The end of a skeleton: kernel sockets closed, rings back to DRAM."""
        if skel.dead:
            return
        skel.dead = True
        if skel.connecting:
            skel.connecting = False
            self._tell_connect(skel.owner, skel.stub, {"errno": errno.ECONNABORTED})
        for s in skel.socks:
            self._mask(s.fileno(), 0)
            self.by_fd.pop(s.fileno(), None)
            self.stale.add(s.fileno())
            s.close()
        if skel.rx is not None:
            self.proxy.free(skel.rx, skel.tx)
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
        self._inbox(msg, args)
        socks, port = self.proxy.bound(need(args, "ip", str), need(args, "port", int),
                                       args.get("opts", []), bool(args.get("loopback")))
        skel = self._new(msg.src, socks)
        skel.stub = need(args, "stub", int)
        skel.inbox = need(args, "inbox", str)
        return codec.encode({"sk": skel.sk, "port": port})

    def n_listen(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self._own(msg, need(args, "sk", int))
        skel.backlog = max(1, min(need(args, "backlog", int), socket.SOMAXCONN))
        for s in skel.socks:
            s.listen(skel.backlog)
        skel.listening = True
        self.watch(skel)
        return codec.encode()

    def n_connect(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self._connect(msg, args, need(args, "stub", int))
        if skel.connecting:
            return codec.encode({"sk": skel.sk, "pending": True})
        return codec.encode({"sk": skel.sk, "local": list(skel.sock.getsockname())})

    def _connect(self, msg: Message, args: dict[str, Any], stub: int) -> Skeleton:
        ip, port = need(args, "dst", list)
        self.check_slice(msg.src)
        self._inbox(msg, args)
        if "sk" in args:
            skel = self._own(msg, need(args, "sk", int))
            if skel.listening or skel.rx is not None:
                raise OSError(errno.EISCONN if skel.rx is not None else errno.EINVAL,
                              "socket already connected or listening")
        else:
            skel = self._new(msg.src, [self.proxy.for_connect(need(args, "src", str),
                                                              args.get("opts", []))])
        skel.stub = stub
        try:
            self._start(skel, need(args, "buffers", dict))
            err = skel.sock.connect_ex((ip, port))
        except OSError:
            self.closed(skel)
            raise
        if err in (errno.EINPROGRESS, errno.EAGAIN):
            err = _handshake(skel.sock)
        if err is None:   # the handshake goes on: writable once it is done (connect_done)
            skel.connecting = True
            timeout = args.get("timeout")
            skel.connect_deadline = time.monotonic() + (
                CONNECT_TIMEOUT_S if timeout is None else float(timeout))
            self.watch(skel)
        elif err:
            self.closed(skel)
            raise OSError(err, os.strerror(err))
        else:
            self.counts["connected"] += 1
            self.watch(skel)
        return skel

    def n_start(self, msg: Message) -> None:
        args, _ = msg.args()
        skel = self._own(msg, need(args, "sk", int))
        if skel.parent is not None:
            skel.parent.waiting.discard(skel.sk)
            self.watch(skel.parent)
        skel.stub = need(args, "stub", int)
        try:
            self._start(skel, need(args, "buffers", dict))
        except OSError as exc:   # e.g. ENOBUFS: nComponent DRAM is full
            self.push(skel, Op.STUB_CLOSED, SK_ERR.pack(skel.stub, exc.errno or errno.EIO))
            self.closed(skel)

    # ---- ops: the data path ----------------------------------------------------------------
    def n_send(self, msg: Message) -> None:
        """N_SEND (dDDIO) or N_SEND_DMA: the stub's next n bytes wait in its send ring."""
        sk, n = SK_N.unpack_from(msg.payload)
        skel = self._own(msg, sk)
        if skel.path is not None and skel.path.send_op == msg.op and not skel.broken:
            skel.path.load(skel, n)

    def n_credit(self, msg: Message) -> None:
        sk, n = SK_N.unpack_from(msg.payload)
        self._own(msg, sk).credit(n)

    def n_shutdown(self, msg: Message) -> bytes:
        sk, how = SK_ERR.unpack_from(msg.payload)
        self._own(msg, sk).shutdown(how)
        return b""

    def n_close(self, msg: Message) -> bytes:
        (sk,) = SK.unpack_from(msg.payload)
        skel = self.skels.get(sk)
        if skel is not None and skel.owner == msg.src:
            skel.trace = tracing.current.ctx or skel.trace
            skel.close()
        return b""

    def n_sockopt(self, msg: Message) -> bytes:
        args, _ = msg.args()
        skel = self._own(msg, need(args, "sk", int))
        level, opt = need(args, "level", int), need(args, "opt", int)
        if "value" in args:
            for s in skel.socks:
                self.proxy.apply(s, level, opt, need(args, "value", int))
            return codec.encode()
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
        self.gone.add(owner)   # no more pushes; tick() closes what is left
        for skel in [s for s in self.skels.values() if s.owner == owner]:
            self._orphaned(skel)

    def _board_gone(self, peer: str) -> None:
        """A pComponent died, and its processes with it; no N_RELEASE will come and
        their memory is gone: their connections are reset, as a failed host's are."""
        if kind_of(peer) != "p":
            return
        for skel in [s for s in self.skels.values() if s.owner.startswith(f"{peer}.")]:
            self.gone.add(skel.owner)
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
    def _inbox(self, msg: Message, args: dict[str, Any]) -> str:
        """The stub's process's inbox, where pushes go: its own, or EPERM."""
        inbox = need(args, "inbox", str)
        if msg.pid is not None and address_pid(inbox) != msg.pid:
            self.ep.counters.error("forged")
            raise OSError(errno.EPERM, f"{inbox} is not the inbox of {msg.src}")
        self.ep.add_peer(msg.src, inbox)
        return inbox

    def _new(self, owner: str, socks: list[socket.socket]) -> Skeleton:
        self._next_sk = self._next_sk % 0xFFFFFFFF + 1
        skel = Skeleton(self, self._next_sk, owner, socks)
        self.skels[skel.sk] = skel
        for s in socks:
            self.by_fd[s.fileno()] = skel
        return skel

    def _start(self, skel: Skeleton, buffers: dict[str, Any]) -> None:
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
        path = kinds[mode](self, int(pid), pcomponent, home, rbuf, tbuf)
        rx, tx = self.proxy.rings()
        skel.start(rx, tx, path, need(buffers, "window", int))

    def _own(self, msg: Message, sk: int) -> Skeleton:
        skel = self.skels.get(sk)
        if skel is None:
            raise OSError(errno.EBADF, f"no socket {sk} on {self.id}")
        if skel.owner != msg.src:
            raise OSError(errno.EPERM, f"socket {sk} belongs to {skel.owner}, not {msg.src}")
        ctx = tracing.current.ctx
        if ctx is not None:   # traced: this message is the skeleton's context now
            skel.trace = ctx
        return skel

    def _mask(self, fd: int, mask: int) -> None:
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

