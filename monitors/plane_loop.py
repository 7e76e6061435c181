"""The nMonitor's loop: its FIT inbox and its skeletons' kernel sockets, with the data plane.

`PlaneLoop` is the part of the NMonitor (nmonitor.py) that waits and
dispatches; its state is the nMonitor's (setup: `plane`, `epoll`, `rings`,
`masks`, the peer numbers). serve() is the nComponent's one thread. Each
round it runs the data plane (native/skelpath.c), which on shm reads the
inbox's FIT rings itself, spinning for rack.poll_us, and does a plain DDIO
connection's kernel events, N_SEND and N_CREDIT in C; then it serves the
inbox messages the plane left, one at a time (on zmq the plane reads no
inbox: up to _INBOX_BATCH a round, and the spin is this loop's); takes what
the plane handed back (`_plane_events`: kernel events of what is not its, and
connections whose common case ended, which the Python code goes on with);
and ticks every MONITOR_IDLE_CHECK_S. Idle, it sleeps in the epoll on the
inbox's readiness fd and the kernel sockets (arm, sleep, disarm:
fit_rpc/transport.py).

Interface: serve(); for skeletons (skeleton.Net) refresh(skel), whether the
plane runs it now, and watch(skel), what the epoll watches of its kernel
sockets; peer_no(peer), the plane's number for a process (connector.py too).

Invariants: the plane runs a connection only while it is plain
(Skeleton.plain), its fd within the plane's reach (`in_plane`), its stub not
found dead, on a transport with rings; it gets the inbox's ring list anew
before it runs whenever that list changed (a ring of the old one may be
gone); an fd closed during a round (`stale`) gets none of that round's
events; a skeleton that raises is closed (EIO), never the loop; what the
plane read and wrote is counted in the endpoint's counters as if Python had
(`_plane_counts`).
"""

import errno
import os
import select
import time

from fit_rpc import Op, tracing
from fit_rpc.counters import Counters
from fit_rpc.netpath import SK_N
from monitors.skeleton import Skeleton
from native import skelpath
from native.fitring import spin_yield
from native.skelpath import (
    CONNECTED,
    EVENT,
    FAIL,
    FLUSH,
    MAX_FDS,
    NO_PEER,
    PUSH,
    RECEIVED,
)
from splitrack.params import (
    MONITOR_IDLE_CHECK_S,
    SKELETON_RECV_CHUNK_BYTES,
    SOCKET_SENT_BYTES,
)

_IN, _OUT, _ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR  # plain ints: hot path
_INBOX_BATCH = 64   # inbox messages per poll round (zmq), so kernel sockets are not starved
# the data plane's counts (skelpath.take_counts) -> the endpoint's counters
_PLANE_COUNTS = (("rx", Op.N_SEND, "rx_send"), ("rx", Op.N_CREDIT, "rx_credit"),
                 ("tx", Op.STUB_DATA, "tx_data"), ("tx", Op.STUB_SENT, "tx_sent"),
                 ("rx", Op.N_SEND_DMA, "rx_send_dma"), ("tx", Op.STUB_DATA_DMA, "tx_data_dma"),
                 ("rx", Op.N_CONNECT, "rx_connect"), ("tx", Op.N_CONNECT, "tx_connect"))


class PlaneLoop:
    """The NMonitor's serve loop, its data plane's Python side, and its epoll."""

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
            if self.closing:
                self.close_sockets()
            now = clock()
            if now >= next_tick:
                if self._tick():
                    self.close_sockets()
                    return
                next_tick = now + MONITOR_IDLE_CHECK_S
            if n or served or plane.inbox:
                idle_since = None
                continue
            if not plane_reads_inbox:   # spin while a message or a kernel event is likely
                idle_since = idle_since or now             # soon, and nobody else wants
                if now - idle_since < spin and spin_yield(now - idle_since):   # the CPU
                    continue
            idle_since = None
            if ep.arm():   # idle after the spin: sleep on the inbox and the sockets
                self.epoll.poll(max(0.0, next_tick - now))   # (level-triggered: the
                ep.disarm()                                   # plane reads the events)

    def close_sockets(self) -> None:
        """The kernel sockets skeletons let go of (skeleton_lifecycle.py: _close_socket),
        closed now that what asked for it is answered."""
        socks, self.closing = self.closing, []
        for sock in socks:
            sock.close()

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
        """Whether the data plane runs skel now (skeleton.Net): a plain connection
        (Skeleton.plain) of a stub not found dead, on a transport with rings."""
        c = skel.c
        fast = self.rings is not None and skel.in_plane and skel.plain() and \
            not skel.gone
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

    # ---- what the epoll watches ------------------------------------------------------
    def watch(self, skel: Skeleton) -> None:
        if skel.dead:
            return
        mask = (_IN if skel.wants_read() else 0) | (_OUT if skel.wants_write() else 0)
        for s in skel.watched():
            self._mask(s.fileno(), mask)

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
