"""Virtual memory for a program on the rack (the split kernel's memory path).

A program run with `splitrack run` keeps data in rack memory like this:

    from splitrack.guest import vm
    addr = vm.alloc(1 << 20)          # a region; GMM picks its home mComponent
    vm.write(addr, b"hello")
    vm.read(addr, 5)                  # -> bytearray(b"hello")
    vm.flush(addr, 5)                 # dirty lines -> the home mComponent
    vm.invalidate(addr, 5)            # drop cached lines (dirty data is discarded)
    vm.free(addr)

Each alloc is one region: whole lines, placed whole at one home mComponent
that GMM picks (GMM_PLACE), its bytes reserved there (M_ALLOC). Not LegoOS's
vRegions, fixed 1 GiB slices of the address space each owned by one
mComponent, which an allocation lies in or spans (docs/memory.md).

Every byte goes through the pComponent's extCache (native/extcache.c), shared
by all processes of the pComponent:
- hit: served by C from the shared segment, no message;
- first touch of a page: zero-filled in the extCache, no message (LegoOS
  p-local zero-fill);
- miss: one M_MISS to the home mComponent; a dirty victim bound for the same
  mComponent rides in that message (piggyback), otherwise it is written back
  first with M_WRITEBACK; the set stays locked meanwhile (extcache.h). Over
  shm, all of it is one native call (line_miss.py), Python only for what that
  call hands back. When the access goes on into more lines that are not
  cached but were written back before, one M_FETCH brings them all
  (read-ahead), then they are installed one by one. This miss path is
  faulting.py's (`Faulting`, a mixin of VirtualMemory over its state).
An address outside the process's regions is OSError(EFAULT); no rack memory
left is OSError(ENOMEM). The process is known to its pMonitor (P_ATTACH),
which frees everything it held when it exits or crashes.

Outside `splitrack run`, `VirtualMemory.attach(rack, "p0")` makes the calling
process an emulated process of p0 (tests and benchmarks do this). One thread
of a process uses it at a time: every public method holds `vm.lock` (an
RLock), which the bsdSocketStubs of the process share for its FIT endpoint.
"""

import bisect
import errno
import os
import threading
from typing import Any

from fit_rpc import GLOBAL_ID, Endpoint, Op
from fit_rpc.pages import FETCH_MAX_LINES, WritebackMessage
from fit_rpc.params import FIT_POLL_US
from native.extcache import FLUSHES, ExtCache, ffi, need_writable
from splitrack.guest.faulting import Faulting
from splitrack.guest.line_miss import LineMiss
from splitrack.rundir import RunDir

_IMAGE = os.urandom(8).hex()   # this program image's: one that exec() replaced had another
_WRITEBACK_BATCH = 256   # lines per M_WRITEBACK message (1 MiB at 4 KiB lines)


class VirtualMemory(Faulting):
    def __init__(self, pcomponent: str, global_address: str, pid: int | None = None,
                 poll_us: int = FIT_POLL_US, keys: str | None = None,
                 run_dir: str | None = None):
        self.pid = pid or os.getpid()
        self.lock = threading.RLock()   # one thread in the extCache path and the endpoint
        self.pcomponent = pcomponent
        self.ep = Endpoint(f"{pcomponent}.{self.pid}", None, directory=global_address,
                           poll_us=poll_us, keys=keys)
        if run_dir is not None:   # where a restarted global is found
            self.ep.find_directory = RunDir.at(run_dir).global_address
        info, _ = self.ep.call_args(pcomponent, Op.P_ATTACH, {"pid": self.pid, "image": _IMAGE})
        self.xc = ExtCache.open(self.ep.map_region(pcomponent, info["extcache"]))
        self.line = info["line"]
        self.m_ids: list[str] = info["m_ids"]
        self.slot = self.xc.slot_acquire(self.pid)
        self._line_miss = LineMiss(self.xc, self.slot, self.pid)   # _miss's native call
        self._starts: list[int] = []                  # sorted region starts
        self._writebacks: dict[int, WritebackMessage] = {}   # per home, reused by flushes
        self._last_home = 0                            # where the last flush's lines went
        self._regions: dict[int, tuple[int, int]] = {}  # start -> (end, home index)
        self._touched: set[int] = set()               # pages ever installed
        self._probe = bytearray(1)                    # _fault: is a line cached?
        self._ahead = max(1, min(FETCH_MAX_LINES, self.xc.nsets * self.xc.ways // 4))
        # fill(vpage, home, line or None, fetch): in a process whose heap is rack memory,
        # the whole miss transaction in C (splitrack/guest/rackmem.py says why)
        self.fill: Any = None
        # virtual addresses are never reused, even by a second attach of the process or
        # by an image it exec()s (the same pid): each attach gets its own 1 TiB
        self._next = info["space"] << 40

    @classmethod
    def attach(cls, rack: Any, pcomponent: str) -> "VirtualMemory":
        return cls(pcomponent, rack.components[GLOBAL_ID]["address"], poll_us=rack.poll_us,
                   keys=rack.curve_keys(), run_dir=rack.run.path)

    @classmethod
    def from_env(cls) -> "VirtualMemory":
        try:
            return cls(os.environ["SPLITRACK_PCOMPONENT"], os.environ["SPLITRACK_GLOBAL"],
                       poll_us=int(os.environ.get("SPLITRACK_POLL_US", FIT_POLL_US)),
                       run_dir=os.environ.get("SPLITRACK_RUN_DIR"))
        except KeyError:
            raise RuntimeError("not running on a rack: start this program with "
                               "`splitrack run -- ...`") from None

    # ---- regions --------------------------------------------------------------------
    def alloc(self, size: int) -> int:
        """A new region of at least `size` bytes; returns its virtual address."""
        with self.lock:
            return self._alloc(size)

    def _alloc(self, size: int) -> int:
        if not isinstance(size, int) or size <= 0:
            raise OSError(errno.EINVAL, f"cannot allocate {size!r} bytes")
        length = -(-size // self.line) * self.line
        home, _ = self.ep.call_args(GLOBAL_ID, Op.GMM_PLACE, {"size": length})
        start = self._next
        self.ep.call_args(home["id"], Op.M_ALLOC,
                          {"pid": self.pid, "start": start, "length": length})
        self._next += length + self.line  # a guard page between regions
        bisect.insort(self._starts, start)
        self._regions[start] = (start + length, self.m_ids.index(home["id"]))
        return start

    def free(self, addr: int) -> None:
        """Free the region that starts at `addr`; its cached lines are dropped."""
        with self.lock:
            self._free(addr)

    def _free(self, addr: int) -> None:
        if addr not in self._regions:
            raise OSError(errno.EFAULT, f"no region starts at {addr:#x}")
        end, home = self._regions.pop(addr)
        self._starts.remove(addr)
        self.xc.invalidate(self.pid, addr // self.line, (end - addr) // self.line)
        self.ep.call_args(self.m_ids[home], Op.M_FREE, {"pid": self.pid, "start": addr})

    def regions(self) -> list[tuple[int, int, str]]:
        """(start, length, home mComponent) of every region."""
        return [(s, self._regions[s][0] - s, self.m_ids[self._regions[s][1]])
                for s in self._starts]

    # ---- bytes -----------------------------------------------------------------------
    def read(self, addr: int, n: int) -> bytearray:
        out = bytearray(n)
        self.read_into(addr, out)
        return out

    def read_into(self, addr: int, buf: Any) -> None:
        need_writable(buf)
        self._access(addr, buf, self.xc.read_ptr)

    def write(self, addr: int, data: Any) -> None:
        self._access(addr, data, self.xc.write_ptr)

    def _access(self, addr: int, buf: Any, copy: Any) -> None:
        """Copy through the extCache (C) line by line, faulting lines in as needed
        (buf's bytes through one C pointer: each copy goes on at ptr + done).
        The hits take no lock here: the C copy locks each line's set, as it must for
        the other processes of the pComponent, which share the extCache. Only a
        fault takes the lock (one thread in the miss path and the endpoint)."""
        if addr < 0:
            raise OSError(errno.EFAULT, f"address {addr:#x} is outside this process's regions")
        ptr = ffi.from_buffer(buf)
        n = len(ptr)
        done = copy(self.slot, self.pid, addr, ptr, n)
        if done < n:
            with self.lock:
                while done < n:
                    self._fault(addr + done, n - done)
                    done += copy(self.slot, self.pid, addr + done, ptr + done, n - done)

    def fault(self, addr: int, n: int = 1) -> None:
        """Bring the line holding `addr` into the extCache, as an access of the n bytes
        from it would (a zero-fill, or a miss to its home that may read ahead): for a
        caller that copies through the extCache's hit path itself (nic_path.py)."""
        with self.lock:
            self._fault(addr, n)

    def flush(self, addr: int, n: int) -> int:
        """Write the dirty lines of [addr, addr+n) back to their home; returns how many."""
        with self.lock:
            return self._flush(addr, n)

    def _flush(self, addr: int, n: int) -> int:
        """The dirty lines are cleaned straight into the M_WRITEBACK of their home, a
        run of them at a time (C: xc_clean_run); a run stops at a line of another
        home, whose message then takes the next run."""
        msgs = self._writebacks
        for msg in msgs.values():
            msg.vpages.clear()   # what a failed flush left
        vpage, end = addr // self.line, -(-(addr + n) // self.line)
        home, flushed = self._last_home, 0
        try:
            while vpage < end:
                msg = msgs.get(home) or msgs.setdefault(
                    home, WritebackMessage(self.line, _WRITEBACK_BATCH))
                pages, vpage, other = self.xc.clean_run(self.pid, vpage, end - vpage, home,
                                                        msg.room())
                flushed += len(pages)
                if msg.add(pages):
                    self._send_writeback(home, msg)
                home = other
            for h, msg in list(msgs.items()):
                if msg.vpages:
                    self._send_writeback(h, msg)
        finally:
            self._last_home = home
            self.xc.count(self.slot, FLUSHES, flushed)
        return flushed

    def _send_writeback(self, home: int, msg: WritebackMessage) -> None:
        try:
            self.ep.call(self.m_ids[home], Op.M_WRITEBACK, msg.take(self.pid), room=True)
        except BaseException:
            del self._writebacks[home]   # the transport may still read it: a new one next
            raise

    def invalidate(self, addr: int, n: int) -> int:
        """Drop the cached lines of [addr, addr+n) without writing them back."""
        first = addr // self.line
        with self.lock:
            return self.xc.invalidate(self.pid, first, -(-(addr + n) // self.line) - first)

    def written_elsewhere(self, addr: int, n: int, cached: bool = False) -> None:
        """[addr, addr+n) was written by someone else: at its home (an nComponent's
        dDMA), so the cached lines are dropped and the next read misses to the home;
        or, cached=True, into the extCache lines themselves (dDDIO), which stay. Either
        way a line that leaves the extCache later is fetched back, not zero-filled."""
        first, end = addr // self.line, -(-(addr + n) // self.line)
        with self.lock:
            if not cached:
                self.xc.invalidate(self.pid, first, end - first)
            self._touched.update(range(first, end))

    def home_of(self, addr: int) -> str:
        """The mComponent that holds the region starting at `addr`."""
        return self.m_ids[self._regions[addr][1]]

    def counters(self) -> dict[str, int]:
        return self.xc.counters(self.pid)

    def close(self) -> None:
        self.xc.close()
        self.ep.close()

    def __enter__(self) -> "VirtualMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the module-level API of an emulated process ----------------------------------------
_vm: VirtualMemory | None = None


def _this() -> VirtualMemory:
    global _vm
    if _forked:
        raise OSError(errno.EOPNOTSUPP, "splitrack: rack memory does not cross fork() yet: "
                                        "a child of a rack program cannot use splitrack.guest.vm")
    if _vm is None:
        _vm = VirtualMemory.from_env()
    return _vm


def own() -> VirtualMemory:
    """The VirtualMemory this process's socket runtime keeps its buffers in: the
    module's (_this), or in a fork()ed child of a process that had one, a new one of
    the child's own -- its sockets are its own, while its parent's addresses stay
    refused to it (_this)."""
    global _child_vm
    if not _forked:
        return _this()
    if _child_vm is None:
        _child_vm = VirtualMemory.from_env()
    return _child_vm


def _after_fork_in_child() -> None:
    """A fork()ed child's VirtualMemory would be its parent's (its pid, its links, its
    pages at the mComponent): the child uses none (own() makes it one of its own)."""
    global _forked, _child_vm
    _forked, _child_vm = _forked or _vm is not None, None


_forked = False
_child_vm: VirtualMemory | None = None
os.register_at_fork(after_in_child=_after_fork_in_child)


def alloc(size: int) -> int:
    return _this().alloc(size)


def free(addr: int) -> None:
    _this().free(addr)


def read(addr: int, n: int) -> bytearray:
    return _this().read(addr, n)


def read_into(addr: int, buf: Any) -> None:
    _this().read_into(addr, buf)


def write(addr: int, data: Any) -> None:
    _this().write(addr, data)


def flush(addr: int, n: int) -> int:
    return _this().flush(addr, n)


def invalidate(addr: int, n: int) -> int:
    return _this().invalidate(addr, n)


def counters() -> dict[str, int]:
    return _this().counters()


__all__ = ["VirtualMemory", "alloc", "free", "read", "read_into", "write", "flush",
           "invalidate", "counters"]
