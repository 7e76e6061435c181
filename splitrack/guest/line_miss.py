"""An extCache line's miss in one native call (native/xcmiss.h), for the VM.

    miss = LineMiss(xc, slot, pid)
    miss.begin(vpage, home)                     before each miss
    got = endpoint.call_native(m_id, Op.M_MISS, miss)
    miss.locked()                               whether the set is still locked:
                                                the caller finishes (miss_end) or
                                                aborts (miss_abort) the transaction
    miss.check()                                OSError if it failed (xcmiss.h)
    miss.request(), miss.victim(), miss.victim_line()
                                                what the caller sends and writes
                                                back itself when the native call
                                                did not (STEP_STOPPED, STEP_UNSENT)
    miss.prepare()                              the transaction begun and the request
                                                written, with no call (a link that is
                                                not native, zmq)

A LineMiss is a step of fit_rpc's Endpoint.call_native: called with the
link's fs_caller and ring, it makes the whole miss in C, and says in
fit_rpc.transport's STEP_ codes how far it got; `rc` keeps xcmiss.h's own
code. Made from Python step by step, a read miss took 13 us where its M_MISS
alone takes 7 (docs/evaluation.md).
"""

import os
from typing import Any

from fit_rpc import Op
from fit_rpc.transport import STEP_DONE, STEP_READ, STEP_SENT, STEP_STOPPED, STEP_UNSENT
from native.extcache import ExtCache
from native.extcache import ffi as xc_ffi
from native.fitring import ffi, lib

_STEP = {lib.XM_DONE: STEP_DONE, lib.XM_CACHED: STEP_STOPPED, lib.XM_VICTIM: STEP_STOPPED,
         lib.XM_FAILED: STEP_STOPPED, lib.XM_UNSENT: STEP_UNSENT, lib.XM_SENT: STEP_SENT,
         lib.XM_READ: STEP_READ}
_UNLOCKED = (None, lib.XM_DONE, lib.XM_CACHED, lib.XM_FAILED)   # (None: not begun)
DONE = lib.XM_DONE   # LineMiss.rc of a miss made and its line installed: nothing left to do


class LineMiss:
    def __init__(self, xc: ExtCache, slot: int, pid: int):
        self._request = bytearray(lib.XM_HEAD + xc.line_size)
        self._m = m = ffi.new("xm_miss_t *")
        m.xc = ffi.cast("void *", int(xc_ffi.cast("uintptr_t", xc.base)))
        m.slot, m.pid, m.line, m.op = slot, pid, xc.line_size, Op.M_MISS
        self._req = m.req = ffi.from_buffer(self._request)   # (kept alive with m)
        self.vpage = self.home = 0
        self.rc: int | None = None

    def begin(self, vpage: int, home: int) -> None:
        self.vpage, self.home, self.rc = vpage, home, None

    def __call__(self, caller: Any, tx: Any, seq: int, timeout_ns: int) -> int:
        rc = self.rc = lib.xm_miss(self._m, self.vpage, self.home, caller, tx, seq, timeout_ns)
        return rc if rc < 0 else _STEP[rc]

    def prepare(self) -> None:
        self.rc = lib.xm_miss(self._m, self.vpage, self.home, ffi.NULL, ffi.NULL, 0, 0)

    def sizes(self) -> tuple[int, int]:
        return self._m.len, self._m.line

    def locked(self) -> bool:
        """Whether the set is locked: the transaction is the caller's to finish."""
        return self.rc not in _UNLOCKED

    def check(self) -> None:
        """OSError if beginning the transaction or installing the line failed."""
        if self.rc == lib.XM_FAILED:
            err = -self._m.err
            raise OSError(err, f"extCache miss of page {self.vpage:#x}: {os.strerror(err)}")

    def request(self) -> memoryview:
        return memoryview(self._request)[:self._m.len]

    def victim(self) -> tuple[int, int, int] | None:
        """The dirty victim to write back first (pid, home, vpage), if it is another
        home's (XM_VICTIM)."""
        m = self._m
        return (m.vpid, m.vhome, m.vvpage) if self.rc == lib.XM_VICTIM else None

    def victim_line(self) -> memoryview:
        return memoryview(self._request)[lib.XM_HEAD:]


__all__ = ["DONE", "LineMiss"]
