"""The Python binding of a bsdSocketStub's rings through the nComponent (stubpath.h).

Interface:
    path, stage = new_path(xc, slot, pid, rbuf, tbuf, pack_max, pack_delay_s, pack_gap_s)
                            the C state of one connection (a cdata `sp_path *`, whose
                            fields splitrack/guest/nic_path.py reads and sets), over the
                            process's extCache xc (ExtCache) and its two rings, each
                            (start, size) of its virtual memory; empty, window open;
                            `stage` must live as long as `path`
    lib.sp_put / sp_hold / sp_unstage / sp_announced / sp_take / sp_now / sp_watch_*
                            the C functions themselves (called straight from
                            nic_path.py and sending.py: the hot path); their results:
    SENT, HELD, HOLDING, FULL, MISS, MISSED
The functions return codes, never raise: a miss (MISS, MISSED, a short take)
is not an error but a line to fault in (vm.fault) before the call is made
again for the rest.
"""

from typing import Any

from native import load

_c = load("_stubpath", "stub's ring path")
ffi, lib = _c.ffi, _c.lib

SENT, HELD, HOLDING, FULL, MISS, MISSED = lib.SP_SENT, lib.SP_HELD, lib.SP_HOLDING, \
    lib.SP_FULL, lib.SP_MISS, lib.SP_MISSED

__all__ = ["FULL", "HELD", "HOLDING", "MISS", "MISSED", "SENT", "ffi", "lib", "new_path"]


_raw = ffi.new_allocator(should_clear_after_alloc=False)   # the stage: only written bytes


def new_path(xc: Any, slot: int, pid: int, rbuf: tuple[int, int], tbuf: tuple[int, int],
             pack_max: int, pack_delay_s: float, pack_gap_s: float) -> tuple[Any, Any]:
    """A connection's state (both rings empty, the send window the whole send ring),
    and its stage (two lines), which the caller keeps as long as the state."""
    stage = _raw("char[]", 2 * xc.line_size)
    path = ffi.new("sp_path *")
    lib.sp_init(path, xc.base, slot, pid, xc.line_size, rbuf[0], rbuf[1], tbuf[0], tbuf[1],
                stage, pack_max, int(pack_delay_s * 1e9), int(pack_gap_s * 1e9))
    return path, stage
