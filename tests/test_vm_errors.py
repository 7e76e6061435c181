"""Virtual memory's bad input and failures, against a real rack: an address outside the
regions (EFAULT), bad sizes (EINVAL), no memory left (ENOMEM), a read-only buffer, a
miss the home refuses or cannot answer (the extCache set is left unlocked), pages
of another process (refused), and memory freed back to the mComponents.

The test process attaches itself as an emulated process of p0
(VirtualMemory.attach), exactly as a program started by `splitrack run` does.
"""

import errno
import os
import signal
import threading

import pytest

from fit_rpc import FitTimeout, Op
from helpers import mstats

LINE = 4096


def _set_is_free(vm, addr):
    """Whether another thread can take the extCache set of addr's line (a look
    that finds it absent locks the set too); False if it waits for 10 s."""
    probe = threading.Thread(target=vm.xc.read_into, args=(vm.slot, vm.pid, addr,
                                                           bytearray(1)), daemon=True)
    probe.start()
    probe.join(10)
    return not probe.is_alive()


def test_a_miss_the_home_refuses_raises_and_leaves_the_set_unlocked(tiny_rack, vm):
    addr = vm.alloc(LINE)
    vm.write(addr, b"x")
    vm.flush(addr, LINE)
    vm.invalidate(addr, LINE)
    vm.ep.call_args(vm.home_of(addr), Op.M_FREE, {"pid": vm.pid, "start": addr})
    with pytest.raises(OSError) as info:          # the home forgot the region, the VM not
        vm.read(addr, 1)
    assert info.value.errno == errno.EFAULT
    assert _set_is_free(vm, addr)
    with pytest.raises(OSError):                   # (gone at the home already)
        vm.free(addr)


def test_a_miss_to_a_stopped_home_times_out_and_leaves_the_set_unlocked(tiny_rack, vm):
    addr = vm.alloc(LINE)
    vm.write(addr, b"x")
    vm.flush(addr, LINE)
    vm.invalidate(addr, LINE)
    home = vm.home_of(addr)
    miss, pid = vm._line_miss, tiny_rack.components[home]["pid"]
    miss.begin(addr // LINE, vm.m_ids.index(home))
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(FitTimeout):
            vm.ep.call_native(home, Op.M_MISS, miss, timeout=0.3, serve=False)
        assert miss.locked()                        # the request out, no reply: Python's
        vm.xc.miss_abort(vm.pid, addr // LINE)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert _set_is_free(vm, addr)
    assert vm.read(addr, 1) == b"x"                 # (the late reply is stale, and skipped)


def test_address_outside_the_regions_is_efault(vm):
    addr = vm.alloc(2 * LINE)
    for bad in (addr + 2 * LINE, addr - 1, 12345, -4096):
        with pytest.raises(OSError) as info:
            vm.read(bad, 1)
        assert info.value.errno == errno.EFAULT
    with pytest.raises(OSError) as info:
        vm.write(addr + 2 * LINE - 1, b"xy")  # straddles the end
    assert info.value.errno == errno.EFAULT
    vm.free(addr)
    with pytest.raises(OSError) as info:
        vm.read(addr, 1)
    assert info.value.errno == errno.EFAULT
    with pytest.raises(OSError) as info:
        vm.free(addr)
    assert info.value.errno == errno.EFAULT


def test_mcomponent_refuses_pages_of_another_process(tiny_rack, vm):
    addr = vm.alloc(LINE)
    vm.write(addr, b"secret")
    vm.flush(addr, LINE)
    home = vm.regions()[0][2]
    from fit_rpc.pages import MISS

    with tiny_rack.endpoint() as intruder:  # not p0.<pid>: may not act for vm.pid
        with pytest.raises(PermissionError):
            intruder.call(home, Op.M_MISS, MISS.pack(vm.pid, addr // LINE, 0, 0))


def test_bad_sizes_are_einval(vm):
    for size in (0, -1, 1.5, "4096"):
        with pytest.raises(OSError) as info:
            vm.alloc(size)
        assert info.value.errno == errno.EINVAL


def test_buffers_of_any_item_size_and_no_read_into_a_read_only_one(vm):
    import array
    addr = vm.alloc(2 * LINE)
    vm.write(addr + LINE - 4, array.array("i", [1, 2, 3]))   # across a line's end
    out = array.array("i", [0, 0, 0])
    vm.read_into(addr + LINE - 4, out)
    assert out.tolist() == [1, 2, 3]
    for ro in (b"\0" * 8, memoryview(bytearray(8)).toreadonly()):
        with pytest.raises(TypeError):
            vm.read_into(addr, ro)
    assert ro == bytes(8)


def test_no_memory_left_is_enomem(vm):
    with pytest.raises(OSError) as info:
        vm.alloc(64 << 20)  # more than m0 + m1 hold
    assert info.value.errno == errno.ENOMEM
    vm.alloc(6 << 20)
    vm.alloc(6 << 20)  # one on each mComponent: 2 MiB left on each
    with pytest.raises(OSError) as info:
        vm.alloc(6 << 20)
    assert info.value.errno == errno.ENOMEM
    assert sorted(home for _, _, home in vm.regions()) == ["m0", "m1"]
    with pytest.raises(OSError) as info:  # the mComponent itself refuses, too
        vm.ep.call_args("m0", Op.M_ALLOC, {"pid": vm.pid, "start": 1 << 50, "length": 4 << 20})
    assert info.value.errno == errno.ENOMEM


def test_freeing_returns_the_memory(tiny_rack, vm):
    before = {m: mstats(tiny_rack, m)["memory"]["reserved"] for m in ("m0", "m1")}
    a = vm.alloc(1 << 20)
    vm.write(a, b"x" * 3 * LINE)
    vm.flush(a, 3 * LINE)
    vm.free(a)
    after = {m: mstats(tiny_rack, m)["memory"] for m in ("m0", "m1")}
    assert {m: after[m]["reserved"] for m in after} == before
