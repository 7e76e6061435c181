"""A Python program's whole memory in the rack (`splitrack run --memory rack`).

install() runs first thing in the program (the drop-in sitecustomize, before
its own first line): from then on every block CPython's raw domain hands out and
every arena of its object allocator (so every object the program makes, and
every buffer) lies in the rack heap, whose pages are rack pages -- homed at the
mComponent GMM picks, cached in the pComponent's extCache, faulted in by the
pager thread (native/rackmem.h says how). Where the native interposer is
preloaded (every program `splitrack run` starts) its malloc family and
anonymous mmap() take rack pages from then on too (native/preload_memory.c):
what C extensions allocate (numpy's arrays) in a Python program, and in a
native program, which the interposer runs install() for before main(),
everything. Blocks made before install() stay where they are.

What the program sees of it:
- `splitrack stats` / `top`: its extCache misses, zero-fills, evictions and
  write-backs (the process's counters, as for splitrack.guest.vm);
- stats(): the pager's own counts (faults, write faults, resident pages...);
- MemoryError when its home has no room left for the heap to grow;
- os.fork() and os.forkpty() are refused (EOPNOTSUPP), and so is fork() in C:
  a child would not have the heap (MADV_DONTFORK: the pages that are not
  resident would read as zeros); subprocess's vfork+exec works;
- a fault the pager cannot serve ends the program with exit status 71 and one
  line saying why.
It needs userfaultfd with kernel faults (root, or vm.unprivileged_userfaultfd=1)
and the shm transport; otherwise install() says why and the program is refused
(exit status 127), so `--memory host` is the way to run it.
"""

import ctypes
import errno
import os
import random
from typing import Any

from fit_rpc import GLOBAL_ID, Endpoint, Op
from fit_rpc.params import FIT_CALL_TIMEOUT_S, FIT_POLL_US
from fit_rpc.shm_transport import ShmTransport
from native import load
from native.extcache import lib as xc_lib
from native.fitring import ffi as ring_ffi
from splitrack.guest import preloaded
from splitrack.guest import vm as guest_vm
from splitrack.params import RACK_HEAP_CHUNK_BYTES, RACK_HEAP_RESERVE_BYTES

_lib = load("_rackmem", "rack memory (native/rackmem.h)")
ffi, lib = _lib.ffi, _lib.lib

_pager: Endpoint | None = None     # the pager's FIT endpoint: lives as long as the process


class RackMemoryUnavailable(OSError):
    pass


def _address(ptr: Any) -> Any:
    return ffi.cast("void *", int(ring_ffi.cast("uintptr_t", ptr)))


def install() -> None:
    """Move the program's memory into the rack; RackMemoryUnavailable says why not."""
    global _pager
    if _pager is not None:
        return
    mem = guest_vm.own()
    pid, pcomponent = mem.pid, mem.pcomponent
    pager = Endpoint(f"{pcomponent}.{pid}", None, directory=os.environ["SPLITRACK_GLOBAL"],
                     poll_us=int(os.environ.get("SPLITRACK_POLL_US", FIT_POLL_US)))
    if not isinstance(pager.transport, ShmTransport):
        pager.close()
        raise RackMemoryUnavailable(errno.EOPNOTSUPP, "rack memory needs the shm transport "
                                    "(rack.transport = \"shm\")")
    if len(mem.m_ids) > lib.RM_MAX_HOMES:
        pager.close()
        raise RackMemoryUnavailable(errno.EOPNOTSUPP, f"rack memory serves at most "
                                    f"{lib.RM_MAX_HOMES} mComponents")
    home, _ = pager.call_args(GLOBAL_ID, Op.GMM_PLACE, {"size": RACK_HEAP_CHUNK_BYTES})
    cfg = ffi.new("rm_config *")
    cfg.xc = _address(mem.xc.base)
    cfg.slot, cfg.pid = mem.slot, pid
    cfg.home, cfg.nhomes = mem.m_ids.index(home["id"]), len(mem.m_ids)
    for i, mid in enumerate(mem.m_ids):   # a link to each: dirty victims go to their homes
        pager.call(mid, Op.ECHO, b"")
        link = pager.transport.out[mid]
        cfg.tx[i], cfg.rx[i] = _address(link.tx.r), _address(link.rx.r)
        cfg.hup[i] = link.sock.fileno()
    cfg.bell = ffi.cast("uint32_t *", _address(pager.transport.bell.word))
    cfg.efd = pager.transport.bell.efd
    cfg.spin_ns = int(pager.transport.spin_s * 1e9)
    cfg.timeout_ns = int(FIT_CALL_TIMEOUT_S * 1e9)
    cfg.reserve, cfg.chunk = RACK_HEAP_RESERVE_BYTES, RACK_HEAP_CHUNK_BYTES
    why = ffi.new("char[]", 512)
    slots = list(range((xc_lib.XC_HEAP_HI - xc_lib.XC_HEAP_LO) >> 40))   # 1 TiB each
    random.shuffle(slots)
    for slot in slots:   # one the home has no region in: an image before exec() used some
        cfg.base = xc_lib.XC_HEAP_LO + (slot << 40)
        rc = lib.rm_start(cfg, why, len(why))
        if rc != -errno.EEXIST:
            break
    if rc < 0:
        pager.close()
        raise RackMemoryUnavailable(-rc, ffi.string(why).decode())
    _pager = pager
    for keep in (pager, mem):   # never freed, not even as the interpreter ends: the pager
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep))   # serves faults until exit
    mem.fill = _fill
    lib.rm_install_python()
    _heap_to_preload()
    os.fork = os.forkpty = _no_fork


# native/preload_memory.c's table, in its order (then the heap's base and size)
HEAP_TABLE = ("rm_malloc", "rm_calloc", "rm_realloc", "rm_free", "rm_memalign",
              "rm_usable_size", "rm_map", "rm_unmap", "rm_release", "rm_protect",
              "rm_in_pager")


def _heap_to_preload() -> None:
    """From now on the program's malloc family and anonymous mmap()s are the rack
    heap's too, where the native interposer is preloaded (native/preload_memory.c):
    a native program's whole memory, and in Python what C code mallocs."""
    heap_on = preloaded.call("sr_heap_on")
    if heap_on is None:
        if preloaded.call("sr_interpose") is not None:   # the interposer, without its malloc
            raise RackMemoryUnavailable(errno.ENOSYS, "the interposer's malloc "
                                        "(native._preload_memory) is not preloaded")
        return   # (python started without splitrack run's preload)
    table = [int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in HEAP_TABLE]
    table += [lib.rm_base(), lib.rm_reserve()]
    rc = heap_on((ctypes.c_void_p * len(table))(*table), len(table))
    if rc < 0:
        raise RackMemoryUnavailable(-rc, "the interposer's malloc refused the rack heap")


def _fill(vpage: int, home: int, line: Any, fetch: bool) -> None:
    """VirtualMemory's line misses, once the heap is the rack's: in C, with no Python
    between locking a set and unlocking it -- Python touches heap pages, whose faults
    may need that very set (native/rackmem.h: rm_xc_fill)."""
    rc = lib.rm_xc_fill(vpage, home, ffi.NULL if line is None else ffi.from_buffer(line),
                        fetch)
    if rc < 0:
        raise OSError(-rc, f"extCache miss of page {vpage:#x}: {os.strerror(-rc)}")


def _no_fork() -> Any:
    raise OSError(errno.EOPNOTSUPP, "splitrack: fork() of a program with --memory rack: its "
                                    "child would not have its pages; use subprocess, or run "
                                    "it with --memory host")


def stats() -> dict[str, int]:
    """The pager's counts: faults, zero_fills, misses, write_faults, evictions,
    writebacks, resident (pages), reserved (bytes at the home), in_use, released."""
    s = ffi.new("rm_stats *")
    lib.rm_get_stats(s)
    return {name: getattr(s, name) for name in dir(s)}


def installed() -> bool:
    return _pager is not None
