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
brings that line in (monitors/data_paths.py) and goes on. A ring that is not
one (a negative start, no bytes, past 2**64) is OSError(EINVAL) when made; a
copy after its extCache was closed (its pComponent ended) is OSError(EBADF).
"""

import errno

from native.extcache import ExtCache
from native.nring import NRing, _check, ffi, lib

__all__ = ["DdioRing"]


class DdioRing:
    def __init__(self, xc: ExtCache, pid: int, start: int, size: int):
        if not (type(start) is int and type(size) is int and start >= 0 and size > 0
                and start + size <= 1 << 64):
            raise OSError(errno.EINVAL, f"no ring of {size!r} B at {start!r}")
        self._xc = xc
        # The segment's own buffer export: it stays mapped while this ring lives,
        # even if the extCache is closed meanwhile (then copies say EBADF).
        self._segment = ffi.from_buffer(xc.mapping, require_writable=True)
        self._ring = ffi.new("dd_ring *", {"xc": ffi.cast("void *", self._segment),
                                           "pid": pid, "start": start, "size": size})

    @property
    def ring(self) -> object:
        """The C description of the ring (a `dd_ring`, by value: the data plane copies it)."""
        return self._ring[0]

    def store(self, rx: NRing, pos: int, n: int) -> int:
        if self._xc.base is None:
            raise OSError(errno.EBADF, "dDDIO store: the extCache is closed")
        return _check(lib.dd_store(rx._r, self._ring, pos, n), "dDDIO store")

    def fetch(self, tx: NRing, pos: int, n: int) -> int:
        if self._xc.base is None:
            raise OSError(errno.EBADF, "dDDIO fetch: the extCache is closed")
        return _check(lib.dd_fetch(tx._r, self._ring, pos, n), "dDDIO fetch")
