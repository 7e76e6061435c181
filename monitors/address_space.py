"""One process's address space at an mComponent: its regions and page table.

Interface:
    space = AddressSpace(pcomponent="p0", line, pages=None)
                                              # pages: its page table (a PageTable; {}: none
                                              # mirrored, for a space nobody serves from C)
    space.add_region(start, length)           # EEXIST if it overlaps another
    space.remove_region(start) -> [frames]    # the frames it held, to be freed
    space.check(vpage)                        # EFAULT unless inside a region
    space.check_all(vpages)                   # ... each of them
    space.pages: {vpage: frame}               # filled on first write-back
    PageTable(pid, plane)                     # a process's {vpage: frame}, every change
                                              # mirrored into the mComponent's data plane
Pure data: the arena and the ops are in mmonitor.py, the M_MISS that the data
plane answers from the mirror in native/mplane.h.
"""

import bisect
import errno
from collections.abc import Iterable
from typing import Any


class PageTable(dict):
    """One process's {vpage: frame}, every change mirrored into the mComponent's
    data plane (native/mplane.py's MemoryPlane), which answers M_MISS from the
    mirror. A dict for reading; changed only by [vpage] = frame, pop() and clear()
    (a dict's other ways of changing are not mirrored, and not used)."""

    __slots__ = ("pid", "plane")

    def __init__(self, pid: int, plane: Any):
        super().__init__()
        self.pid, self.plane = pid, plane

    def __setitem__(self, vpage: int, frame: int) -> None:
        self.plane.set(self.pid, vpage, frame)
        super().__setitem__(vpage, frame)

    def pop(self, vpage: int, *default: Any) -> Any:
        frame = super().pop(vpage, *default)
        self.plane.delete(self.pid, vpage)
        return frame

    def clear(self) -> None:
        for vpage in self:
            self.plane.delete(self.pid, vpage)
        super().clear()


class AddressSpace:
    def __init__(self, pcomponent: str, line: int, pages: dict[int, int] | None = None):
        self.pcomponent = pcomponent
        self.line = line
        self.starts: list[int] = []            # sorted region starts (bytes)
        self.ends: dict[int, int] = {}         # start -> end (exclusive)
        self.pages = {} if pages is None else pages   # vpage -> frame index

    @property
    def reserved(self) -> int:
        return sum(end - start for start, end in self.ends.items())

    def add_region(self, start: int, length: int) -> None:
        if start < 0 or length <= 0 or start % self.line or length % self.line:
            raise OSError(errno.EINVAL, "regions are whole, aligned lines")
        i = bisect.bisect_right(self.starts, start)
        if (i > 0 and self.ends[self.starts[i - 1]] > start) or \
                (i < len(self.starts) and self.starts[i] < start + length):
            raise OSError(errno.EEXIST, f"region at {start:#x} overlaps another")
        self.starts.insert(i, start)
        self.ends[start] = start + length

    def remove_region(self, start: int) -> list[int]:
        end = self.ends.pop(start, None)
        if end is None:
            raise OSError(errno.EFAULT, f"no region starts at {start:#x}")
        self.starts.remove(start)
        first, last = start // self.line, end // self.line
        # walk whichever is smaller: the region's pages or the pages the process has
        candidates = range(first, last) if last - first <= len(self.pages) else list(self.pages)
        return [self.pages.pop(p) for p in candidates if first <= p < last and p in self.pages]

    def check(self, vpage: int) -> None:
        addr = vpage * self.line
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or self.ends[self.starts[i]] <= addr:
            raise OSError(errno.EFAULT, f"address {addr:#x} is outside the process's regions")

    def check_all(self, vpages: Iterable[int]) -> None:
        """check() of each page: one look-up a region, not one a page (a write-back
        names runs of pages, 64 of them for a socket's 256 KiB)."""
        lo = hi = 0   # the pages of the region the last look-up found
        for vpage in vpages:
            if not lo <= vpage < hi:
                self.check(vpage)
                start = self.starts[bisect.bisect_right(self.starts, vpage * self.line) - 1]
                lo, hi = start // self.line, self.ends[start] // self.line
