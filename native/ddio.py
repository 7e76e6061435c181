"""The Python binding of dDDIO's copies (ddio.h): between the nComponent's DRAM rings
(nring.py) and a process's socket ring in its pComponent's extCache lines.

Interface:
    DdioRing(xc, pid, start, size)   one of process pid's socket rings, [start, start +
                                     size) of its virtual memory, at extCache xc (ExtCache)
    ring.store(rx, pos, n) -> int    rx's first min(n, rx.used) bytes into the ring's
                                     cached lines from stream offset pos; they leave rx
    ring.fetch(tx, pos, n) -> int    the ring's bytes from stream offset pos, out of its
                                     cached lines, into tx (at most tx.space); they join tx
Both are one native call for all the bytes of an event. They stop at the first
line that is not cached and return how many bytes they copied: the caller
brings that line in (monitors/data_paths.py) and goes on. A C error (the
segment refused the first copy) raises OSError here, as nring.py does.
"""

from native.extcache import ExtCache
from native.extcache import ffi as _xc_ffi
from native.nring import NRing, _check, ffi, lib

__all__ = ["DdioRing"]


class DdioRing:
    def __init__(self, xc: ExtCache, pid: int, start: int, size: int):
        if size <= 0:
            raise ValueError(f"no ring of {size} B")
        self._xc = xc   # the segment stays mapped while the ring is in use
        self._ring = ffi.new("dd_ring *", {
            "xc": ffi.cast("void *", int(_xc_ffi.cast("uintptr_t", xc.base))),
            "pid": pid, "start": start, "size": size})

    def store(self, rx: NRing, pos: int, n: int) -> int:
        return _check(lib.dd_store(rx._r, self._ring, pos, n), "dDDIO store")

    def fetch(self, tx: NRing, pos: int, n: int) -> int:
        return _check(lib.dd_fetch(tx._r, self._ring, pos, n), "dDDIO fetch")
