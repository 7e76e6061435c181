"""The Python binding of dDMA's copies (dma.h): a socket ring as its home mComponent's
arena holds it, for the nComponent's data plane (skelpath.h) to copy to and from.

Interface:
    DmaRing(arena, start, size, runs)   one of a process's socket rings, [start, start +
                                        size) of its virtual memory, mapped in `arena`
                                        (a writable buffer: the home's region) as `runs`,
                                        (ring offset, arena offset, length) in ring order
    ring.ring                           its C description (a `dm_ring *`), valid while
                                        this object lives
Runs that leave a byte of the ring uncovered, overlap, or reach past the arena are
OSError(EINVAL) when made (monitors/rack_memory.RingMap checked them already).
The arena stays mapped while a DmaRing over it lives.
"""

import errno
from typing import Any

from native.nring import ffi

__all__ = ["DmaRing"]


class DmaRing:
    def __init__(self, arena: Any, start: int, size: int, runs: list[tuple[int, int, int]]):
        self._arena = ffi.from_buffer(arena, require_writable=True)
        at = 0
        for ring_off, arena_off, n in runs:
            if ring_off != at or n <= 0 or arena_off < 0 or arena_off + n > len(self._arena):
                raise OSError(errno.EINVAL, f"a ring of {size} B mapped as {runs!r}")
            at += n
        if at != size or size <= 0:
            raise OSError(errno.EINVAL, f"a ring of {size} B mapped as {runs!r}")
        self._runs = ffi.new("dm_run[]", [{"at": a, "off": o, "len": n} for a, o, n in runs])
        self.ring = ffi.new("dm_ring *", {"arena": ffi.cast("char *", self._arena),
                                          "arena_size": len(self._arena), "start": start,
                                          "size": size, "runs": self._runs,
                                          "nruns": len(runs)})
