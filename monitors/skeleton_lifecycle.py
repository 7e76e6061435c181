"""A bsdSocketSkeleton's life in the nMonitor: made, started, connected or accepted, closed.

`SkeletonLifecycle` is the part of the NMonitor (nmonitor.py) that makes and
ends skeletons and pushes to their stubs; its state is the nMonitor's
(`skels`, `by_fd`, `counts`). A skeleton is:
- made by new() over its kernel sockets (a Proxy's bind, a connect, an
  accept), its id from next_sk(): the fd in its low 16 bits (skelpath.h);
- started by start() once its stub's buffers are known: DRAM rings from the
  Proxy and its data path (Ddio or Dma, data_paths.py) to rings of the
  process's memory at an mComponent of its slice (EINVAL for buffers it cannot
  use). A connection that cannot start (fail_new) tells its stub and closes;
- driven by what it calls back (skeleton.Net: push, accepted, connect_done,
  drop_socket, closed; refresh and watch are plane_loop.py's);
- ended by closed(): kernel sockets closed (their events of this round
  skipped), rings back to DRAM, its data path closed, a connect that waited
  answered ECONNABORTED, a listener's connections no stub accepted closed too.
  A second closed() does nothing (skel.dead).

A stub that cannot take a push within STUB_PUSH_TIMEOUT_S (STUB_PUSH_PATIENT_S
if its process is alive) is taken for dead (_gone, as after N_RELEASE): its
skeletons are marked (`skel.gone`), nothing more is pushed to them, and at the
next tick they close as at a process's exit (_orphaned: what was sent still
leaves). The mark is the skeleton's, not the process id's: a process that
exec()ed keeps its pid and FIT id, and the new image's sockets are not the old
one's. A dead pComponent's processes' connections are reset (_board_gone).
"""

import contextlib
import errno
import socket
import struct
from typing import Any

import psutil

from fit_rpc import Op, codec, tracing
from fit_rpc.codec import need
from fit_rpc.identity import kind_of, process_of
from fit_rpc.netpath import SK, SK_ERR
from monitors.data_paths import Ddio, Dma
from monitors.skeleton import Skeleton
from native import skelpath
from splitrack.params import STUB_PUSH_PATIENT_S, STUB_PUSH_TIMEOUT_S

_RESET = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close() sends RST
_PATHS = {"dma": Dma, "ddio": Ddio}   # a buffers' mode -> its data path


class SkeletonLifecycle:
    """The NMonitor's skeletons: made, started, told, closed."""

    # ---- made and started --------------------------------------------------------------
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

    def start(self, skel: Skeleton, buffers: dict[str, Any]) -> None:
        """Checked first: a stub's buffers, as its request names them."""
        mode = need(buffers, "mode", str)
        if mode not in _PATHS:
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
        self.start_checked(skel, mode, home, rbuf, tbuf, need(buffers, "window", int))

    def start_checked(self, skel: Skeleton, mode: str, home: str, rbuf: tuple[int, int],
                      tbuf: tuple[int, int], window: int) -> None:
        """start() of buffers checked already: by start(), or by the data plane's connect,
        which takes a request only for a home its sender's grant names and rings the
        nMonitor would take (native/skelconnect.h)."""
        pcomponent, _, pid = skel.owner.partition(".")
        path = _PATHS[mode](self, skel.c, int(pid), pcomponent, home, rbuf, tbuf)
        rx, tx = self.proxy.rings()
        self.connector.dram_changed()
        skel.start(rx, tx, path, window)

    # ---- what skeletons call (skeleton.Net) ---------------------------------------------
    def push(self, skel: Skeleton, op: int, payload: bytes) -> None:
        if skel.gone:
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
        """A stub process found dead (or released): nothing more is pushed to the
        skeletons it has now, and they close at the next tick. Those it makes later
        are not touched: after an exec() the new image has the same pid, and so the
        same FIT id, and its sockets are its own."""
        for skel in self.skels.values():
            if skel.owner == owner:
                skel.gone = True
                self.refresh(skel)

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
            self._tell_connect(skel, {"errno": err})
            self.closed(skel)
            return
        self.counts["connected"] += 1
        self._tell_connect(skel, {"sk": skel.sk, "local": list(skel.sock.getsockname())})
        self.watch(skel)

    def _tell_connect(self, skel: Skeleton, answer: dict[str, Any]) -> None:
        if skel.gone:
            return
        try:
            self._send_to_stub(skel.owner, Op.STUB_CONNECTED,
                               SK.pack(skel.stub) + codec.encode(answer))
        except OSError:
            self._gone(skel.owner)

    def drop_socket(self, skel: Skeleton, sock: socket.socket) -> None:
        """One of a skeleton's kernel sockets closes (it keeps the others)."""
        self._close_socket(sock)
        skel.socks.remove(sock)

    def _close_socket(self, sock: socket.socket) -> None:
        """Watched no more now; closed by the loop once the message in hand is answered
        (plane_loop.py: close_sockets): a TCP close sends its FIN, and wakes its peer,
        on this thread, and a stub's close() need not wait for that."""
        self._mask(sock.fileno(), 0)
        self.by_fd.pop(sock.fileno(), None)
        self.stale.add(sock.fileno())   # (its events of this round are skipped)
        self.closing.append(sock)

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
            self._tell_connect(skel, {"errno": errno.ECONNABORTED})
        for s in skel.socks:
            self._close_socket(s)
        if skel.rx is not None:
            self.proxy.free(skel.rx, skel.tx)
            self.connector.dram_changed()
        if skel.path is not None and skel.trace is None:
            skel.path.close()   # its rings' dDMA mappings are released
        elif skel.path is not None:
            with tracing.within(skel.trace):
                skel.path.close()
        del self.skels[skel.sk]
        if skel.parent is not None:
            skel.parent.waiting.discard(skel.sk)
            self.watch(skel.parent)
        for sk in list(skel.waiting):  # a listener's connections no stub accepted
            self.closed(self.skels[sk])
        self.counts["closed"] += 1

    # ---- a process or its pComponent ended -------------------------------------------
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

    def _home_gone(self, peer: str) -> None:
        """An mComponent died: the dDMA mappings into its arena go before the arena
        does (RackMemory.forget), so the data plane copies there no more."""
        if kind_of(peer) != "m":
            return
        for skel in self.skels.values():
            home_gone = getattr(skel.path, "home_gone", None)
            if home_gone is not None:
                home_gone(peer)

    def _orphaned(self, skel: Skeleton) -> None:
        """The skeleton's process ended."""
        if skel.rx is None or skel.broken:
            self.closed(skel)
        else:
            skel.close()   # as the kernel does at exit: what was sent still leaves
