"""The mMonitor: the memory component mN.

Holds every process's address space placed here (its regions and a page table,
address_space.py) and a physical arena of `memory` bytes reserved at start.
Serves (docs/protocol.md, 0x04xx):
- M_ALLOC / M_FREE    a region of a process (one vm.alloc); the bytes are reserved at alloc
                      (ENOMEM if the arena cannot hold them), so a write-back
                      never runs out of frames;
- M_MISS              one line back to the pComponent; a page never written
                      back reads as zeros without taking a frame; a dirty
                      victim may ride along (LegoOS piggyback);
- M_FETCH             several consecutive lines (a miss that reads ahead);
- M_WRITEBACK         lines into frames, a frame allocated on first write-back;
- M_RELEASE           everything of a process (it ended; sent by its pMonitor);
- M_DMA_MAP / M_DMA_DONE
                      dDMA (the DMA socket path): where a byte range of a
                      process's memory lies in the arena, which is a FIT region
                      only nComponents may map (fit_rpc/regions.py); they then
                      copy to or from it themselves, as an RDMA READ or WRITE
                      would. The frames stay pinned (not reused, even if freed
                      meanwhile) until M_DMA_DONE; DMA_LEASE_S at most, or, for a
                      held mapping (a socket's ring, mapped once as an RDMA NIC
                      registers memory), until the process is released.
On shm the common cases of M_MISS, M_FETCH and M_WRITEBACK (pages held), and
FIT's ECHO, are answered in C by the data plane that is the inbox's wait (miss_plane.py,
native/mplane.h), from a mirror of the page tables; the handlers here serve
the rest, with the same rules.
A process places memory here only if it is of this mComponent's slice (both
may be free; monitors/slices.py): M_ALLOC is EPERM otherwise, counted as
`slice`; every other op of a process reaches only what it allocated.
A process reaches only its own pages: the request's pid must be the sender's
(endpoint id "pN.PID", its pid vouched for by the kernel and its pComponent),
and an address outside its regions is EFAULT. An nComponent's M_MISS may name
any process (dDDIO fetches a receive-ring line it writes only part of). A dirty
victim of another process of the same pComponent is accepted (the extCache is
shared), and so is one its pMonitor writes from the extCache's victim cache
(its flusher, sending as pN: a component id the kernel vouched for), and one an
nComponent evicted while writing received bytes into the extCache (dDDIO); one
whose process or region is gone is dropped and counted.
"""

import errno
import functools
import itertools
import random
import time
from typing import Any

import numpy as np

from fit_rpc import Message, Op, codec
from fit_rpc.codec import need
from fit_rpc.errors import MalformedMessage
from fit_rpc.header import REQUEST
from fit_rpc.identity import kind_of
from fit_rpc.netpath import DMA_HOLD, DMA_LEASE, DMA_MAP, DMA_WRITE, PIECE, SK
from fit_rpc.pages import FETCH, FETCH_MAX_LINES, MISS, WRITEBACK, unpack_writeback
from monitors.address_space import AddressSpace, PageTable
from monitors.core import Monitor
from monitors.miss_plane import MissPlane
from native.mplane import LAYOUTS, MemoryPlane

# what the data plane answers (native/mplane.h; its layouts are pages.py's)
PLANE_OPS = {"miss": Op.M_MISS, "fetch": Op.M_FETCH, "writeback": Op.M_WRITEBACK,
             "echo": Op.ECHO, "request": REQUEST, "fetch_max": FETCH_MAX_LINES}
assert {"miss": MISS.size, "fetch": FETCH.size, "writeback": WRITEBACK.size} == LAYOUTS
DMA_MAX_BYTES = 1 << 20   # one M_DMA_MAP covers at most this much
DMA_LEASE_S = 5.0         # pinned frames are freed at the latest this long after M_DMA_MAP


class MMonitor(Monitor):
    kind = "m"

    def setup(self) -> None:
        self.line = self.rack["line"]
        self.memory = self.config["memory"]
        # the physical memory, reserved now: a region only nComponents may map (dDMA)
        self.arena = self.ep.region("arena", self.memory, lambda peer, pid: kind_of(peer) == "n")
        self.view = memoryview(self.arena)
        whole = self.memory // self.line   # frames (the arena's tail past the last is unused)
        self.frames = np.frombuffer(self.arena, np.uint8, whole * self.line).reshape(
            whole, self.line)
        # the data plane: M_MISS (and more) answered in C from the page tables' mirror
        self.counts = {"misses": 0, "plane_misses": 0, "zero_misses": 0, "writebacks": 0,
                       "plane_writebacks": 0, "plane_echoes": 0, "victims": 0,
                       "victims_dropped": 0,
                       "frames_used": 0, "dma_read_bytes": 0, "dma_write_bytes": 0,
                       "dma_leases_expired": 0}
        rings = self.ep.rings()   # shm: the plane is the inbox's wait (zmq: None)
        self.plane = MemoryPlane(self.arena, self.line, PLANE_OPS,
                                 None if rings is None else rings.bell)
        self.planes = MissPlane(self.plane, self.counts, self.ep.counters)
        self.ep.counters.sources.append(self.planes.take_counts)
        if rings is not None:
            rings.serve_natively(self.planes)
        self.pins: dict[int, int] = {}                # frame -> leases holding it
        self.leases: dict[int, tuple[int, float | None, list[int]]] = {}   # lease -> (pid,
        #                                             expiry or None: held, frames)
        self.unpinned: set[int] = set()               # freed while pinned: freed at unpin
        # from a random start: a restarted mComponent must not take an old M_DMA_DONE
        # (from an nComponent's mapping of its dead predecessor) for a lease of its own
        self._lease_ids = itertools.count(random.randrange(1, 1 << 30))
        self.next_frame = 0
        self.free_frames: list[int] = []
        self.spaces: dict[int, AddressSpace] = {}
        self.zero = bytes(self.line)
        self._reported_misses = 0   # the misses GMM last heard of
        self.ep.on(Op.M_ALLOC, self.m_alloc)
        self.ep.on(Op.M_FREE, self.m_free)
        self.ep.on(Op.M_MISS, self.m_miss)
        self.ep.on(Op.M_FETCH, self.m_fetch)
        self.ep.on(Op.M_WRITEBACK, self.m_writeback)
        self.ep.on(Op.M_RELEASE, self.m_release)
        self.ep.on(Op.M_DMA_MAP, self.m_dma_map)
        self.ep.on(Op.M_DMA_DONE, self.m_dma_done)

    def resources(self) -> dict[str, Any]:
        return {"memory": self.config["memory"]}

    def extra_stats(self) -> dict[str, Any]:
        self.planes.take_counts(self.ep.counters)
        return {"memory": {**self.counts, "processes": len(self.spaces),
                           "reserved": self._reserved(), "arena": self.memory}}

    def tick(self) -> None:
        self.planes.take_counts(self.ep.counters)   # (the misses the data plane answered)
        if self.counts["misses"] != self._reported_misses:   # (GMM's fewest-misses policy)
            self._report_load()
        now = time.monotonic()
        for lease, (_, expiry, _) in list(self.leases.items()):
            if expiry is not None and now > expiry:   # its nComponent never said it was done
                self.counts["dma_leases_expired"] += 1
                self._unpin(lease)

    def close(self) -> None:
        if hasattr(self, "plane"):   # (setup may have failed before; the arena's users
            self.plane.close()       # let go of it before the endpoint unmaps it)
        if hasattr(self, "view"):
            self.view.release()
            self.frames = None
        super().close()

    # ---- ops ----------------------------------------------------------------------
    def m_alloc(self, msg: Message) -> bytes:
        args, _ = msg.args()
        pid = self._own_pid(msg, need(args, "pid", int))
        self.check_slice(msg.src)
        start, length = need(args, "start", int), need(args, "length", int)
        if self._reserved() + length > self.memory:
            self._report_load()  # GMM reserved these bytes when it chose us: set it right
            raise OSError(errno.ENOMEM, f"{self.id} has {self.memory - self._reserved()} of "
                          f"{self.memory} bytes free; asked for {length}")
        space = self.spaces.get(pid) or AddressSpace(_pcomponent(msg.src), self.line,
                                                     PageTable(pid, self.plane))
        space.add_region(start, length)
        self.spaces[pid] = space
        self._report_load()
        return codec.encode()

    def m_free(self, msg: Message) -> bytes:
        args, _ = msg.args()
        pid = self._own_pid(msg, need(args, "pid", int))
        space = self._space(pid)
        self._free_frames(space.remove_region(need(args, "start", int)))
        self._report_load()
        return codec.encode()

    def m_miss(self, msg: Message) -> memoryview | bytes:
        if len(msg.payload) < MISS.size:
            raise MalformedMessage("M_MISS shorter than its header")
        pid, vpage, vpid, vvpage = MISS.unpack_from(msg.payload)
        if pid != _pid(msg.src) and kind_of(msg.src) != "n":   # dDDIO fills rx lines too
            raise OSError(errno.EPERM, f"{msg.src} may not act for process {pid}")
        if vpid:
            victim = msg.payload[MISS.size:]
            if len(victim) != self.line:
                raise MalformedMessage(f"piggybacked victim of {len(victim)} bytes")
            self._store_victim(msg, vpid, vvpage, victim)
        space = self._space(pid)
        frame = space.pages.get(vpage)
        if frame is None:   # (a page held is in a region: a region takes its pages when it goes)
            space.check(vpage)
        self.counts["misses"] += 1
        if frame is None:
            self.counts["zero_misses"] += 1
            return self.zero
        return self.view[frame * self.line:(frame + 1) * self.line]

    def m_fetch(self, msg: Message) -> bytearray:
        if len(msg.payload) != FETCH.size:
            raise MalformedMessage(f"M_FETCH of {len(msg.payload)} bytes")
        pid, vpage, n = FETCH.unpack_from(msg.payload)
        self._own_pid(msg, pid)
        if not 0 < n <= FETCH_MAX_LINES:
            raise OSError(errno.EINVAL, f"M_FETCH of {n} lines (1..{FETCH_MAX_LINES})")
        space = self._space(pid)
        space.check_all(range(vpage, vpage + n))
        out = bytearray(n * self.line)   # zeros: pages never written back
        for j in range(n):
            frame = space.pages.get(vpage + j)
            if frame is not None:
                out[j * self.line:(j + 1) * self.line] = \
                    self.view[frame * self.line:(frame + 1) * self.line]
        self.counts["misses"] += n
        return out

    def m_writeback(self, msg: Message) -> bytes:
        pid, vpages, lines = unpack_writeback(msg.payload, self.line)
        if pid != _pid(msg.src):   # another process's dirty victim, evicted by this one
            for i, vpage in enumerate(vpages):
                self._store_victim(msg, pid, vpage, lines[i * self.line:(i + 1) * self.line])
            return b""
        space = self._space(pid)
        space.check_all(vpages)
        pages, take = space.pages, self._take_frame
        frames = [pages.get(v) for v in vpages]
        for i, frame in enumerate(frames):
            if frame is None:   # a page's first write-back takes its frame
                frames[i] = pages[vpages[i]] = take()
        # every line into its frame at once: one scatter, not a copy per line in Python
        self.frames[frames] = np.frombuffer(lines, np.uint8).reshape(len(frames), self.line)
        self.counts["writebacks"] += len(frames)
        return b""

    def m_release(self, msg: Message) -> bytes:
        args, _ = msg.args()
        pid = need(args, "pid", int)
        space = self.spaces.get(pid)
        if space is not None:
            if msg.src != space.pcomponent:
                raise OSError(errno.EPERM, f"{msg.src} may not release a process of "
                              f"{space.pcomponent}")
            self._free_frames(list(space.pages.values()))
            space.pages.clear()   # (the data plane's mirror too: the pid may come again)
            for lease in [k for k, (p, _, _) in self.leases.items() if p == pid]:
                self._unpin(lease)   # its sockets are closed: no dDMA copies into them now
            del self.spaces[pid]
            self.log.info("released process %d (%s)", pid, space.pcomponent)
            self._report_load()
        return codec.encode()

    def m_dma_map(self, msg: Message) -> bytes:
        """Where [addr, addr+n) of a process lies in the arena: DMA_LEASE, then PIECEs
        (contiguous frames merged). DMA_WRITE: frames are taken (zeroed) for pages
        that have none. The frames stay pinned until M_DMA_DONE of the lease (or
        DMA_LEASE_S; DMA_HOLD: until the process is released)."""
        if kind_of(msg.src) != "n":
            raise OSError(errno.EPERM, f"{msg.src} is no nComponent: only dDMA engines may")
        if len(msg.payload) != DMA_MAP.size:
            raise MalformedMessage(f"M_DMA_MAP of {len(msg.payload)} bytes")
        pid, addr, n, flags = DMA_MAP.unpack_from(msg.payload)
        write = flags & DMA_WRITE
        if not 0 < n <= DMA_MAX_BYTES:
            raise OSError(errno.EINVAL, f"dDMA of {n} bytes: 1 to {DMA_MAX_BYTES} at a time")
        space = self._space(pid)
        pieces: list[list[int]] = []
        frames = []
        for vpage, lo, hi, _ in self._pieces(space, addr, n):
            frame = space.pages.get(vpage)
            if frame is None and write:
                frame = space.pages[vpage] = self._take_frame()
                self.view[frame * self.line:(frame + 1) * self.line] = self.zero
            at = -1 if frame is None else frame * self.line + lo
            if frame is not None:
                frames.append(frame)
            last = pieces[-1] if pieces else None
            if last is not None and at >= 0 and last[0] >= 0 and last[0] + last[1] == at:
                last[1] += hi - lo
            elif last is not None and at < 0 and last[0] < 0:
                last[1] += hi - lo
            else:
                pieces.append([at, hi - lo])
        lease = next(self._lease_ids)
        expiry = None if flags & DMA_HOLD else time.monotonic() + DMA_LEASE_S
        self.leases[lease] = (pid, expiry, frames)
        for frame in frames:
            self.pins[frame] = self.pins.get(frame, 0) + 1
        self.counts["dma_write_bytes" if write else "dma_read_bytes"] += n
        return DMA_LEASE.pack(lease, len(pieces)) + b"".join(PIECE.pack(*p) for p in pieces)

    def m_dma_done(self, msg: Message) -> None:
        if kind_of(msg.src) != "n" or len(msg.payload) != SK.size:
            raise OSError(errno.EPERM, "not a dDMA engine's M_DMA_DONE")
        self._unpin(SK.unpack_from(msg.payload)[0])

    def _unpin(self, lease: int) -> None:
        _, _, frames = self.leases.pop(lease, (0, None, []))
        for frame in frames:
            left = self.pins[frame] - 1
            if left:
                self.pins[frame] = left
                continue
            del self.pins[frame]
            if frame in self.unpinned:
                self.unpinned.discard(frame)
                self.free_frames.append(frame)

    def _pieces(self, space: AddressSpace, addr: int, n: int) -> list[tuple[int, int, int, int]]:
        """[addr, addr+n) cut at page boundaries: (vpage, from, to, offset in the range);
        EFAULT (before anything moves) if any page is outside the process's regions."""
        out, at = [], 0
        while at < n:
            vpage, lo = divmod(addr + at, self.line)
            hi = min(self.line, lo + n - at)
            space.check(vpage)
            out.append((vpage, lo, hi, at))
            at += hi - lo
        return out

    # ---- internals ------------------------------------------------------------------
    def _store(self, space: AddressSpace, vpage: int, data: memoryview) -> None:
        frame = space.pages.get(vpage)
        if frame is None:
            frame = space.pages[vpage] = self._take_frame()
        self.view[frame * self.line:(frame + 1) * self.line] = data
        self.counts["writebacks"] += 1

    def _store_victim(self, msg: Message, vpid: int, vvpage: int, data: memoryview) -> None:
        space = self.spaces.get(vpid)
        if space is None or (space.pcomponent != _pcomponent(msg.src)
                             and kind_of(msg.src) != "n"):   # dDDIO evicts for any process
            self.counts["victims_dropped"] += 1  # its process ended; nobody will read it
            return
        try:
            space.check(vvpage)
        except OSError:
            self.counts["victims_dropped"] += 1  # its region was freed meanwhile
            return
        self._store(space, vvpage, data)
        self.counts["victims"] += 1

    def _take_frame(self) -> int:
        if self.free_frames:
            frame = self.free_frames.pop()
        elif (self.next_frame + 1) * self.line <= self.memory:
            frame = self.next_frame
            self.next_frame += 1
        else:  # cannot happen while reservations hold; kept as a loud guard
            raise OSError(errno.ENOMEM, f"{self.id}: arena exhausted")
        self.counts["frames_used"] += 1
        return frame

    def _free_frames(self, frames: list[int]) -> None:
        """Frames back to the free list; a pinned one once its dDMA is done (an
        nComponent may be copying into it: it must not become another's)."""
        for frame in frames:
            if frame in self.pins:
                self.unpinned.add(frame)
            else:
                self.free_frames.append(frame)
        self.counts["frames_used"] -= len(frames)

    def _space(self, pid: int) -> AddressSpace:
        space = self.spaces.get(pid)
        if space is None:
            raise OSError(errno.EFAULT, f"process {pid} has no memory on {self.id}")
        return space

    def _own_pid(self, msg: Message, pid: int) -> int:
        if pid != _pid(msg.src):  # _pid is cached: this is on every miss
            raise OSError(errno.EPERM, f"{msg.src} may not act for process {pid}")
        return pid

    def _reserved(self) -> int:
        return sum(space.reserved for space in self.spaces.values())

    def _report_load(self) -> None:
        """Its reserved bytes and the misses it has served, to GMM (registry.py)."""
        misses = self.counts["misses"]
        if self.report_load({"used": self._reserved(), "misses": misses}):
            self._reported_misses = misses


def _pcomponent(src: str) -> str:
    """An emulated process's endpoint id is "pN.PID"; its pComponent is pN."""
    return src.split(".", 1)[0]


@functools.lru_cache(maxsize=4096)
def _pid(src: str) -> int:
    head, _, tail = src.partition(".")
    return int(tail) if head.startswith("p") and tail.isdigit() else -1
