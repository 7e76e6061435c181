"""The Python binding of the C extCache (extcache.h): one segment, mapped.

Interface:
    ExtCache.segment_size(capacity, line_size, ways, victims=0)
                                                            bytes its segment needs
    ExtCache.create(mapping, capacity, line_size, ways, policy, victims=0)
                                                            the pMonitor, once, over the
                                                            region it owns (fit_rpc regions)
    ExtCache.open(mapping)                                  every process of the pComponent,
                                                            and dDDIO, over the region mapped
    xc.read_into(slot, pid, vaddr, buf) -> bytes copied before the first miss
    xc.write_from(slot, pid, vaddr, data) -> likewise     (any buffers, counted in bytes)
    need_writable(buf)                                      TypeError if buf is read-only
    xc.read_ptr / write_ptr(slot, pid, vaddr, ptr, n)       the same through a C pointer
    xc.miss_begin / miss_end / miss_abort, xc.clean, xc.clean_run, xc.invalidate, xc.drop_pid
    xc.victim_holds(pid, vpage), xc.victim_entries(pid=0), xc.victim_unclean()
                                                            the victim cache (victim.c)
    xc.victim_flush(write)                                  its DIRTY entries written home
                                                            (the pMonitor's flusher)
    xc.slot_acquire(pid) / slot_release(pid), xc.counters(pid=0)
    xc.close()
    xc.mapping                                              the segment's mapping
C return codes become exceptions here and nowhere else: a negative errno is a
broken invariant in the caller and raises OSError.
"""

import errno
import os
from typing import Any

from native import load

_c = load("_extcache", "C extCache")
ffi, lib = _c.ffi, _c.lib

POLICIES = {"lru": lib.XC_LRU, "fifo": lib.XC_FIFO}
COUNTERS = ("hits", "misses", "evictions", "writebacks", "zerofills", "fetches", "flushes",
            "victim_hits", "victim_stores", "victim_flushes")
FLUSHES = COUNTERS.index("flushes")
VICTIM_MAX = lib.XC_VICTIM_MAX
FLUSH_BATCH = 64   # victim entries the flusher takes at a time
FLUSH_WRITTEN, FLUSH_FAILED, FLUSH_GONE = (lib.XC_FLUSH_WRITTEN, lib.XC_FLUSH_FAILED,
                                           lib.XC_FLUSH_GONE)


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise OSError(-rc, f"extCache {what}: {os.strerror(-rc)}")
    return rc


def need_writable(buf: Any) -> None:
    """TypeError if `buf` cannot be written into, as socket.recv_into says it."""
    if type(buf) is not bytearray and memoryview(buf).readonly:
        raise TypeError(f"read_into() needs a writable buffer, not {type(buf).__name__}")


class ExtCache:
    def __init__(self, mm: Any):
        self.mapping = mm   # the segment's mapping (dDDIO's copies take it too: ddio.py)
        self._keep = ffi.from_buffer(mm)
        self.base = ffi.cast("void *", self._keep)
        self.line_size = lib.xc_line_size(self.base)
        self.ways = lib.xc_ways(self.base)
        self.nsets = lib.xc_nsets(self.base)
        self.victims = lib.xc_victims(self.base)   # victim-cache entries (0: none)
        self.victim = ffi.new("xc_victim_t *")
        self.victim_buf = bytearray(self.line_size)
        self._victim_cbuf = ffi.from_buffer(self.victim_buf)
        self._home = ffi.new("uint32_t *")
        self._run_pages = ffi.new("uint64_t[]", 0)
        self._next = ffi.new("uint64_t *")
        self._other = ffi.new("uint32_t *")
        self._flush_buf: bytearray | None = None   # victim_flush's, made at its first use

    @staticmethod
    def segment_size(capacity: int, line_size: int, ways: int, victims: int = 0) -> int:
        size = lib.xc_segment_size(capacity, line_size, ways, victims)
        if size == 0:
            raise ValueError(f"no extCache of {capacity} B in {ways}-way sets of {line_size} B "
                             f"with {victims} victim entries (0..{VICTIM_MAX})")
        return size

    @classmethod
    def create(cls, mm: Any, capacity: int, line_size: int, ways: int,
               policy: str = "lru", victims: int = 0) -> "ExtCache":
        _check(lib.xc_format(ffi.from_buffer(mm), len(mm), capacity, line_size, ways,
                             POLICIES[policy], victims), "format")
        return cls(mm)

    @classmethod
    def open(cls, mm: Any) -> "ExtCache":
        rc = lib.xc_check(ffi.from_buffer(mm), len(mm))
        if rc == -errno.EPROTONOSUPPORT:
            raise OSError(errno.EPROTONOSUPPORT, "the pComponent's extCache was laid out by "
                          "another version of splitrack: restart the rack (splitrack down, "
                          "then up) so that its monitors and its programs run the same one")
        _check(rc, "segment")
        return cls(mm)

    # ---- hits ------------------------------------------------------------------
    def read_into(self, slot: int, pid: int, vaddr: int, buf: Any) -> int:
        """Cached bytes from vaddr into buf, up to the first missing line; how many.
        buf is any writable buffer, counted in bytes (TypeError if read-only)."""
        need_writable(buf)
        dst = ffi.from_buffer(buf)
        return lib.xc_read(self.base, slot, pid, vaddr, dst, len(dst))

    def write_from(self, slot: int, pid: int, vaddr: int, data: Any) -> int:
        src = ffi.from_buffer(data)
        return lib.xc_write(self.base, slot, pid, vaddr, src, len(src))

    def read_ptr(self, slot: int, pid: int, vaddr: int, dst: Any, n: int) -> int:
        """read_into through `dst`, a C pointer to n bytes (ffi.from_buffer's, made
        once by a caller that copies into one buffer line by line)."""
        return lib.xc_read(self.base, slot, pid, vaddr, dst, n)

    def write_ptr(self, slot: int, pid: int, vaddr: int, src: Any, n: int) -> int:
        return lib.xc_write(self.base, slot, pid, vaddr, src, n)

    # ---- the miss transaction ------------------------------------------------------
    def miss_begin(self, slot: int, pid: int, vpage: int) -> tuple[int, int, int] | None:
        """Lock the set; None if the line is there after all or came from the victim
        cache (nothing locked), else the dirty victim (pid, home, vpage) whose bytes
        are in victim_buf, or (0, 0, 0) if there is none to write back."""
        if _check(lib.xc_miss_begin(self.base, slot, pid, vpage, self.victim,
                                    self._victim_cbuf, ffi.NULL, ffi.NULL), "miss"):
            return None
        v = self.victim
        return v.pid, v.home, v.vpage

    def miss_end(self, slot: int, pid: int, vpage: int, home: int, data: Any = None) -> None:
        cdata = ffi.NULL if data is None else ffi.from_buffer(data)
        _check(lib.xc_miss_end(self.base, slot, pid, vpage, home, cdata, 0), "install")

    def miss_abort(self, pid: int, vpage: int) -> None:
        lib.xc_miss_abort(self.base, pid, vpage)

    # ---- flush, invalidate, exit ------------------------------------------------------
    def clean(self, pid: int, vpage: int, out: Any) -> int | None:
        """Copy a dirty line to `out` and mark it clean: its home, or None if clean/absent."""
        if _check(lib.xc_clean(self.base, pid, vpage, ffi.from_buffer(out), self._home),
                  "clean"):
            return self._home[0]
        return None

    def clean_run(self, pid: int, vpage: int, npages: int, home: int, out: Any
                  ) -> tuple[list[int], int, int]:
        """Clean the dirty lines of a page run homed at `home` into out (as many
        lines as it holds): (their pages, the page to go on from, the home of the
        dirty line it stopped at -- `home` if it did not)."""
        cap = len(out) // self.line_size
        if len(self._run_pages) < cap:
            self._run_pages = ffi.new("uint64_t[]", cap)
        k = _check(lib.xc_clean_run(self.base, pid, vpage, npages, home, ffi.from_buffer(out),
                                    cap, self._run_pages, self._next, self._other), "clean")
        return list(ffi.unpack(self._run_pages, k)), self._next[0], self._other[0]

    def invalidate(self, pid: int, vpage: int, npages: int) -> int:
        return _check(lib.xc_invalidate(self.base, pid, vpage, npages), "invalidate")

    def drop_pid(self, pid: int) -> int:
        return _check(lib.xc_drop_pid(self.base, pid), "drop")

    # ---- the victim cache -------------------------------------------------------------
    def victim_holds(self, pid: int, vpage: int) -> bool:
        """Whether a victim entry holds the page (its home's copy may be older)."""
        return bool(self.victims) and lib.xc_victim_holds(self.base, pid, vpage) == 1

    def victim_entries(self, pid: int = 0) -> int:
        return lib.xc_victim_entries(self.base, pid)

    def victim_unclean(self) -> int:
        return lib.xc_victim_unclean(self.base)

    def victim_flush(self, write: Any) -> int:
        """Write the DIRTY victim entries home: write(home, pid, vpages, lines) for
        each (home, pid) of them (lines: one view per page) returns FLUSH_WRITTEN,
        FLUSH_FAILED (DIRTY again: tried later; also if it raises) or FLUSH_GONE
        (its process or region is gone: dropped). Returns how many were taken."""
        if not self.victims:
            return 0
        if self._flush_buf is None:
            self._flush_buf = bytearray(FLUSH_BATCH * self.line_size)
            self._flush_who = ffi.new("xc_victim_t[]", FLUSH_BATCH)
            self._flush_gens = ffi.new("uint64_t[]", FLUSH_BATCH)
        k = _check(lib.xc_victim_flush_begin(self.base, FLUSH_BATCH,
                                             ffi.from_buffer(self._flush_buf),
                                             self._flush_who, self._flush_gens), "flush")
        groups: dict[tuple[int, int], list[int]] = {}
        for i in range(k):
            groups.setdefault((self._flush_who[i].home, self._flush_who[i].pid), []).append(i)
        view, line = memoryview(self._flush_buf), self.line_size
        for (home, pid), idx in groups.items():
            how = FLUSH_FAILED
            try:
                how = write(home, pid, [self._flush_who[i].vpage for i in idx],
                            [view[i * line:(i + 1) * line] for i in idx])
            finally:   # (an exception too leaves no entry FLUSHING)
                for i in idx:
                    lib.xc_victim_flush_end(self.base, pid, self._flush_who[i].vpage,
                                            self._flush_gens[i], how)
        return k

    def set_of(self, pid: int, vpage: int) -> int:
        return lib.xc_set_of(self.base, pid, vpage)

    # ---- counters -------------------------------------------------------------------
    def slot_acquire(self, pid: int) -> int:
        return _check(lib.xc_slot_acquire(self.base, pid), "no free counter slot")

    def slot_release(self, pid: int) -> bool:
        return lib.xc_slot_release(self.base, pid) == 0

    def count(self, slot: int, which: int, n: int = 1) -> None:
        lib.xc_count(self.base, slot, which, n)

    def counters(self, pid: int = 0) -> dict[str, int]:
        out = ffi.new("xc_counters_t *")
        if lib.xc_counters(self.base, pid, out) < 0:
            return {}
        return {name: getattr(out, name) for name in COUNTERS}

    def close(self) -> None:
        self._keep = self.base = None
        try:
            self.mapping.close()
        except BufferError:  # a view is still alive somewhere; the mapping goes at exit
            pass
