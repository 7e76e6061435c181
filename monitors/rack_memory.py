"""What rack memory an nMonitor maps, as an RDMA NIC would: the FIT regions of
other components (fit_rpc/regions.py), and a socket's ring registered in one.

`RackMemory`: the regions an nMonitor maps, each once -- pComponents'
extCaches (for dDDIO) and mComponents' arenas (for dDMA) -- and forgets when
their component's process ends.

`RingMap`: one of a process's socket rings mapped in its home's arena once
(M_DMA_MAP with DMA_WRITE | DMA_HOLD: every page gets a frame, pinned until
release(), M_DMA_DONE), as an RDMA NIC registers memory: copy() then needs no
message, and its runs go to the data plane as they are (`native`: a
native/dma.h ring).

The data paths that use them: data_paths.py.
"""

import bisect
import contextlib
import errno
import json
import os
from typing import Any

from fit_rpc import Op
from fit_rpc.netpath import DMA_HOLD, DMA_LEASE, DMA_MAP, DMA_WRITE, PIECE, SK
from native.dma import DmaRing
from native.extcache import ExtCache


class RingMap:
    """One ring of a process's memory, mapped in its home's arena once (M_DMA_MAP,
    DMA_WRITE | DMA_HOLD: every page gets a frame, pinned until release()), as an
    RDMA NIC registers memory: then copy() needs no message."""

    def __init__(self, ep: Any, arena: memoryview, home: str, pid: int,
                 ring: tuple[int, int]):
        self.ep, self.arena, self.home = ep, arena, home
        self.start, size = ring
        reply = ep.call(home, Op.M_DMA_MAP, DMA_MAP.pack(pid, self.start, size,
                                                         DMA_WRITE | DMA_HOLD), serve=False)
        self.lease, count = DMA_LEASE.unpack_from(reply)
        self.runs: list[tuple[int, int, int]] = []   # (ring offset, arena offset, length)
        at = 0
        for i in range(count):
            off, n = PIECE.unpack_from(reply, DMA_LEASE.size + i * PIECE.size)
            if off < 0 or off + n > len(arena):
                self.release()
                raise OSError(errno.EPROTO, f"{home} mapped a ring outside its arena")
            self.runs.append((at, off, n))
            at += n
        if at != size:
            self.release()
            raise OSError(errno.EPROTO, f"{home} mapped {at} of a ring's {size} bytes")
        self._starts = [r[0] for r in self.runs]
        self.native = DmaRing(arena, self.start, size, self.runs)   # the data plane's

    def copy(self, addr: int, buf: memoryview, write: bool) -> None:
        arena, at, done = self.arena, addr - self.start, 0
        i = bisect.bisect_right(self._starts, at) - 1
        while done < len(buf):
            ring_off, arena_off, n = self.runs[i]
            lo = arena_off + at + done - ring_off
            k = min(len(buf) - done, n - (at + done - ring_off))
            if write:
                arena[lo:lo + k] = buf[done:done + k]
            else:
                buf[done:done + k] = arena[lo:lo + k]
            done += k
            i += 1

    def release(self) -> None:
        try:
            self.ep.send(self.home, Op.M_DMA_DONE, SK.pack(self.lease))
        except OSError:
            pass   # the mComponent is gone: nothing left pinned


class RackMemory:
    """The regions an nMonitor maps, each once: pComponents' extCaches (dDDIO) and
    mComponents' arenas (dDMA), and the mComponent ids in the order extCache tags
    name homes by."""

    def __init__(self, ep: Any, run_dir: str):
        self.ep = ep
        with open(os.path.join(run_dir, "spec.json")) as f:
            spec = json.load(f)
        self.m_ids = [c["id"] for c in spec["components"] if c["kind"] == "m"]
        self._extcaches: dict[str, ExtCache] = {}
        self._arenas: dict[str, memoryview] = {}

    def extcache(self, pcomponent: str) -> ExtCache:
        xc = self._extcaches.get(pcomponent)
        if xc is None:
            xc = self._extcaches[pcomponent] = ExtCache.open(
                self.ep.map_region(pcomponent, "extcache"))
        return xc

    def arena(self, home: str) -> memoryview:
        view = self._arenas.get(home)
        if view is None:
            view = self._arenas[home] = memoryview(self.ep.map_region(home, "arena"))
        return view

    def forget(self, component: str) -> None:
        """A component's process ended: its regions are unmapped (their memory goes
        with the last mapping), and a restarted one's are mapped anew."""
        xc = self._extcaches.pop(component, None)
        if xc is not None:
            xc.close()
        view = self._arenas.pop(component, None)
        if view is not None:
            mm = view.obj
            view.release()
            with contextlib.suppress(BufferError):   # a slice still alive: unmapped at exit
                mm.close()
