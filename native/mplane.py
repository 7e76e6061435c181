"""The Python binding of the mComponent's data plane (mplane.h).

Interface:
    plane = MemoryPlane(arena, line, ops, bell)
                                       over the arena's whole frames of `line` bytes
                                       (a writable buffer, kept alive here); ops: the op
                                       codes it answers and more (mplane.h's mp_ops:
                                       miss, fetch, writeback, echo, request,
                                       fetch_max);
                                       bell: the endpoint's (native.fitring.Bell; None:
                                       no rings, run() is not used, the table still is)
    plane.set(pid, vpage, frame); plane.delete(pid, vpage)
    plane.get(pid, vpage) -> frame | None
                                       the page table (monitors/address_space.py's
                                       PageTable mirrors every change here)
    plane.set_inbox(rings, replies, who)
                                       the inbox's rings (native.fitring.Ring), the rings
                                       back on their links, what each sender may name
                                       (a pid, ANY_PID, NO_PID or NOBODY); the counts of the list
                                       before are dropped: take them first
    i = plane.run(spin_s, timeout_s, msg)
                                       WaitSet.take() over the inbox rings (its ring's
                                       index, msg describing the message; -1: none, or
                                       woken; TIMEOUT), all it could answer in C answered
    plane.take_counts(i) -> dict       ring i's counts since the last take (mp_counts:
                                       {"miss": (msgs, bytes_in, bytes_out), "fetch",
                                       "writeback", "echo"; "fetched", "written", "victims"})
    plane.close()                      the table's memory, and the arena let go (the
                                       plane is unusable after)
Constants: ANY_PID, NO_PID, NOBODY, MAX_RINGS; LAYOUTS (the request layouts' sizes in C,
which fit_rpc/pages.py's must be).
"""

import errno
from typing import Any

from native.ring import Ring, ffi, lib
from native.waitset import TIMEOUT

ANY_PID, NO_PID, NOBODY, MAX_RINGS = lib.MP_ANY_PID, lib.MP_NO_PID, lib.MP_NOBODY, \
    lib.MP_MAX_RINGS
LAYOUTS = {"miss": lib.MP_MISS_BYTES, "fetch": lib.MP_FETCH_BYTES,
           "writeback": lib.MP_WRITEBACK_BYTES}
_OPS = ("miss", "fetch", "writeback", "echo")


class MemoryPlane:
    def __init__(self, arena: Any, line: int, ops: dict[str, int], bell: Any = None):
        self._arena = ffi.from_buffer(arena, require_writable=True)
        self.mp = ffi.new("mp_plane *")
        self._ops = ffi.new("mp_ops *", ops)
        rc = lib.mp_init(self.mp, self._arena, len(self._arena) // line, line, self._ops,
                         ffi.NULL if bell is None else bell.word,
                         -1 if bell is None else bell.efd)
        if rc < 0:
            raise OSError(-rc, "the mComponent's page table")
        self._counts = ffi.new("mp_counts *")
        self._lists: tuple[Any, ...] = ()   # set_inbox's arrays, alive while the plane has them

    def set(self, pid: int, vpage: int, frame: int) -> None:
        rc = lib.mp_set(self.mp, pid, vpage, frame)
        if rc < 0:
            raise OSError(-rc, f"page {vpage:#x} of {pid} -> frame {frame}")

    def delete(self, pid: int, vpage: int) -> None:
        lib.mp_del(self.mp, pid, vpage)

    def get(self, pid: int, vpage: int) -> int | None:
        frame = lib.mp_get(self.mp, pid, vpage)
        return None if frame < 0 else frame

    def set_inbox(self, rings: list[Ring], replies: list[Ring | None], who: list[int]) -> None:
        n = min(len(rings), MAX_RINGS)
        self._lists = (ffi.new("fr_ring *[]", [r.r for r in rings[:n]] or 1),
                       ffi.new("fr_ring *[]", [ffi.NULL if r is None else r.r
                                               for r in replies[:n]] or 1),
                       ffi.new("int64_t[]", who[:n] or 1))
        lib.mp_set_inbox(self.mp, *self._lists, n)

    def run(self, spin_s: float, timeout_s: float | None, msg: Any) -> int:
        """WaitSet.take() (waitset.py) over the inbox rings, into msg (an `fs_msg *`),
        answering in C all it can first (mplane.h: mp_run)."""
        i = lib.mp_run(self.mp, int(spin_s * 1e9), -1 if timeout_s is None else   # (ns_of
                       int(timeout_s * 1e9) if timeout_s > 0 else 0, msg)          # in line)
        if i >= 0:
            return i
        return TIMEOUT if i == -errno.ETIMEDOUT else -1

    def take_counts(self, i: int) -> dict[str, Any]:
        c = self._counts
        lib.mp_take_counts(self.mp, i, c)
        got: dict[str, Any] = {op: (getattr(c, op).msgs, getattr(c, op).bytes_in,
                                    getattr(c, op).bytes_out) for op in _OPS}
        got.update(fetched=c.fetched, written=c.written, victims=c.victims)
        return got

    def close(self) -> None:
        lib.mp_free(self.mp)
        self.mp.nrings = 0
        ffi.release(self._arena)
