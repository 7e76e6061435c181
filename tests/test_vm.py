"""Virtual memory through the extCache and mComponents, against real racks.

The test process attaches itself as an emulated process of p0
(VirtualMemory.attach), exactly as a program started by `splitrack run` does.
"""

import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fit_rpc import FitTimeout, Op
from helpers import SPLITRACK, attached_vm, running_rack, small_spec, wait_until
from splitrack import Rack
from splitrack.guest.vm import VirtualMemory
from splitrack.params import GMM_RECHOOSE

LINE = 4096


def tiny_spec(storage, name="vm", **rack):
    """A rack whose extCaches hold 8 lines in 4 sets: evictions all the time."""
    spec = small_spec(storage, name=name, **rack)
    for p in spec["pcomponent"]:
        p.update(extcache=8 * LINE, ways=2)
    spec["mcomponent"] = [{"id": "m0", "memory": "8MiB"}, {"id": "m1", "memory": "8MiB"}]
    return spec


@pytest.fixture(scope="module")
def tiny_rack():
    with running_rack(tiny_spec) as rack:
        yield rack


@pytest.fixture
def vm(tiny_rack):
    with attached_vm(tiny_rack) as memory:
        yield memory


def mstats(rack, m="m0"):
    with rack.endpoint() as ep:
        return ep.call_args(m, Op.STATS)[0]


def delta(vm, before):
    return {k: v - before[k] for k, v in vm.counters().items()}


def test_write_read_across_lines_with_constant_evictions(vm):
    before = vm.counters()
    rng = random.Random(1)
    size = 64 * LINE  # 8x the cache
    addr = vm.alloc(size)
    model = bytearray(size)
    for _ in range(200):
        off = rng.randrange(size - 10_000)
        data = rng.randbytes(rng.randrange(1, 10_000))
        vm.write(addr + off, data)
        model[off:off + len(data)] = data
    assert vm.read(addr, size) == model
    c = delta(vm, before)
    assert c["evictions"] > 50 and c["writebacks"] > 0 and c["zerofills"] > 0


def test_threads_hitting_and_missing_at_once_keep_every_byte(vm):
    """Hits take no Python lock (the C copy locks the set); misses do. Four threads,
    each writing and reading back its own lines while the others evict them, and
    all of them reading one shared line that none writes."""
    size, threads = 16 * LINE, 4
    addr, shared = vm.alloc(threads * size), vm.alloc(LINE)
    vm.write(shared, b"\x7f" * LINE)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        rng, base = random.Random(i), addr + i * size
        try:
            for round_ in range(60):
                data = bytes([i * 16 + round_ % 16]) * rng.randrange(1, 3 * LINE)
                off = rng.randrange(size - len(data))
                vm.write(base + off, data)
                assert vm.read(base + off, len(data)) == data
                assert vm.read(shared, LINE) == b"\x7f" * LINE
        except BaseException as e:   # the main thread reports it
            errors.append(e)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert not any(t.is_alive() for t in pool)
    assert errors == []


def test_first_touch_is_zero_filled_without_mcomponent_traffic(tiny_rack, vm):
    addr = vm.alloc(4 * LINE)
    home = vm.regions()[0][2]
    before = mstats(tiny_rack, home)["memory"]["misses"]
    counts = vm.counters()
    assert vm.read(addr, 4 * LINE) == bytes(4 * LINE)
    assert delta(vm, counts)["zerofills"] == 4
    assert mstats(tiny_rack, home)["memory"]["misses"] == before
    assert vm.ep.counters.snapshot()["links"].get(home, {}).get("M_MISS") is None


def test_flush_then_invalidate_reads_back_from_the_mcomponent(tiny_rack, vm):
    addr = vm.alloc(3 * LINE)
    home = vm.regions()[0][2]
    counts = vm.counters()
    vm.write(addr + 100, b"persist me")
    assert vm.flush(addr, 3 * LINE) == 1
    assert vm.invalidate(addr, 3 * LINE) >= 1
    before = mstats(tiny_rack, home)["memory"]["misses"]
    assert vm.read(addr + 100, 10) == b"persist me"
    assert mstats(tiny_rack, home)["memory"]["misses"] == before + 1
    assert delta(vm, counts)["flushes"] == 1


def test_invalidate_discards_dirty_data(vm):
    addr = vm.alloc(LINE)
    vm.write(addr, b"old")
    vm.flush(addr, LINE)
    vm.write(addr, b"new")
    vm.invalidate(addr, LINE)
    assert vm.read(addr, 3) == b"old"


def test_dirty_victim_for_the_same_mcomponent_rides_in_the_miss(tiny_rack, vm):
    """LegoOS piggyback: evicting a dirty line on a miss to the same home costs
    one message, not two."""
    addr = vm.alloc(64 * LINE)
    home = vm.regions()[0][2]
    for p in range(64):               # every page touched and written back once
        vm.write(addr + p * LINE, bytes([p]) * 8)
    vm.flush(addr, 64 * LINE)
    vm.invalidate(addr, 64 * LINE)
    links = vm.ep.counters.snapshot()["links"][home]
    wb_before = links["M_WRITEBACK"]["tx_msgs"]
    miss_before = links.get("M_MISS", {}).get("tx_msgs", 0)
    counts = vm.counters()
    for p in range(64):               # dirty every line we bring in
        vm.write(addr + p * LINE + 8, b"d")
    links = vm.ep.counters.snapshot()["links"][home]
    assert links["M_MISS"]["tx_msgs"] - miss_before == 64
    assert links["M_WRITEBACK"]["tx_msgs"] == wb_before  # victims went piggyback
    assert delta(vm, counts)["writebacks"] >= 56         # 64 misses, 8 lines of room
    for p in range(64):
        assert vm.read(addr + p * LINE, 9) == bytes([p]) * 8 + b"d"


def test_a_sequential_read_fetches_ahead_in_one_message():
    """Lines written back before and not cached come in one M_FETCH, not one M_MISS
    each; the read-ahead is at most a quarter of the extCache (here 1024 lines)."""
    def spec(storage):
        return small_spec(storage, name="ahead")

    with running_rack(spec) as rack:
        vm = VirtualMemory.attach(rack, "p0")
        try:
            addr = vm.alloc(100 * LINE)
            home = vm.regions()[0][2]
            data = random.Random(3).randbytes(100 * LINE)
            vm.write(addr, data)
            vm.flush(addr, 100 * LINE)
            vm.invalidate(addr, 100 * LINE)
            vm.write(addr + 70 * LINE, b"cached and dirty")   # stays: newer than m0's
            links = vm.ep.counters.snapshot()["links"][home]
            fetches = links.get("M_FETCH", {}).get("tx_msgs", 0)
            misses = links.get("M_MISS", {}).get("tx_msgs", 0)
            got = vm.read(addr, 100 * LINE)
            assert got[70 * LINE:70 * LINE + 16] == b"cached and dirty"
            assert got[:70 * LINE] == data[:70 * LINE]
            assert got[70 * LINE + 16:] == data[70 * LINE + 16:]
            links = vm.ep.counters.snapshot()["links"][home]
            # lines 0-63 (the first fetch, 64 at most), 64-69 (stops at the cached
            # line 70); the line 70 write above was one miss of its own
            assert links["M_FETCH"]["tx_msgs"] - fetches == 3   # then 71-99
            assert links["M_MISS"]["tx_msgs"] - misses == 0
            from fit_rpc.pages import FETCH

            with rack.endpoint() as intruder, pytest.raises(PermissionError):
                intruder.call(home, Op.M_FETCH, FETCH.pack(vm.pid, addr // LINE, 2))
            for n in (0, 65):
                with pytest.raises(OSError) as info:
                    vm.ep.call(home, Op.M_FETCH, FETCH.pack(vm.pid, addr // LINE, n))
                assert info.value.errno == errno.EINVAL
        finally:
            vm.close()


def test_read_ahead_in_a_tiny_extcache_still_progresses(vm):
    addr = vm.alloc(64 * LINE)   # 8 lines of extCache: each fetch is at most 2 lines
    data = random.Random(4).randbytes(64 * LINE)
    vm.write(addr, data)
    vm.flush(addr, 64 * LINE)
    vm.invalidate(addr, 64 * LINE)
    assert vm.read(addr, 64 * LINE) == data


def test_two_mcomponents_hold_regions(tiny_rack, vm):
    a = vm.alloc(1 << 20)
    b = vm.alloc(1 << 20)
    homes = [home for _, _, home in vm.regions()]
    assert sorted(homes) == ["m0", "m1"]  # GMM spreads by load
    vm.write(a, b"on " + homes[0].encode())
    vm.write(b, b"on " + homes[1].encode())
    vm.flush(a, 8)
    vm.flush(b, 8)
    vm.invalidate(a, 8)
    vm.invalidate(b, 8)
    assert vm.read(a, 5) == b"on " + homes[0].encode()
    assert vm.read(b, 5) == b"on " + homes[1].encode()
    for m in ("m0", "m1"):
        assert mstats(tiny_rack, m)["memory"]["misses"] >= 1


def test_one_flush_over_two_homes_writes_each_line_back_to_its_own(tiny_rack, vm):
    a = vm.alloc(4 * LINE)
    b = vm.alloc(4 * LINE)
    homes = [home for _, _, home in vm.regions()]
    assert sorted(homes) == ["m0", "m1"]
    tail, head = a + 3 * LINE, b   # a's last line, b's first (a guard page between)
    data = {addr: bytes([i + 1]) * LINE for i, addr in enumerate((tail, head))}
    for addr, chunk in data.items():   # two lines: in a 2-way extCache neither evicts
        vm.write(addr, chunk)          # the other
    before = {m: mstats(tiny_rack, m)["memory"]["writebacks"] for m in ("m0", "m1")}
    assert vm.flush(tail, head + LINE - tail) == 2
    after = {m: mstats(tiny_rack, m)["memory"]["writebacks"] for m in ("m0", "m1")}
    assert all(after[m] > before[m] for m in ("m0", "m1"))
    vm.invalidate(a, 4 * LINE)
    vm.invalidate(b, 4 * LINE)
    for addr, chunk in data.items():
        assert vm.read(addr, len(chunk)) == chunk


def test_a_dirty_victim_of_another_home_is_written_back_before_the_miss(tiny_rack, vm):
    """The native miss (native/xcmiss.h) hands a victim bound elsewhere back to
    Python, which writes it back to its own home, then asks for the line."""
    _victims_of_another_home(vm)


def test_misses_over_zmq_are_made_in_python(tmp_path):
    """No native link: the miss is begun in C and sent by Endpoint.call."""
    with running_rack(lambda s: tiny_spec(s, name="vmzmq", transport="zmq")) as rack, \
            attached_vm(rack) as vm:
        _victims_of_another_home(vm)


def _victims_of_another_home(vm):
    n = vm.xc.nsets * vm.xc.ways                  # the lines the extCache holds
    a, b = vm.alloc(n * LINE), vm.alloc(n * LINE)
    home_a, home_b = vm.home_of(a), vm.home_of(b)
    assert home_a != home_b                        # GMM spreads by load
    for p in range(n):                             # a's lines at their home, not cached
        vm.write(a + p * LINE, bytes([p + 1]) * 8)
    vm.flush(a, n * LINE)
    vm.invalidate(a, n * LINE)
    for p in range(n):                             # b's lines dirty, filling the extCache
        vm.write(b + p * LINE, b"B" * 8)
    def sent(home, op):
        return vm.ep.counters.snapshot()["links"][home].get(op, {}).get("tx_msgs", 0)
    wb_before, miss_before = sent(home_b, "M_WRITEBACK"), sent(home_a, "M_MISS")
    for p in range(n):                             # misses to a's home evict b's lines
        assert vm.read(a + p * LINE, 8) == bytes([p + 1]) * 8
    assert sent(home_a, "M_MISS") - miss_before == n
    assert sent(home_b, "M_WRITEBACK") > wb_before   # (none of them piggyback to a's home)
    for p in range(n):
        assert vm.read(b + p * LINE, 8) == b"B" * 8


def test_the_native_miss_asks_in_fit_rpcs_miss_layout():
    from fit_rpc.pages import MISS
    from native.fitring import lib
    assert lib.XM_HEAD == MISS.size


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


def _has_regions(machine):
    return bool(machine.regions)


class MemoryModel(RuleBasedStateMachine):
    """Random allocs, writes, reads, flushes, invalidates and frees against a
    plain bytearray per region; the tiny extCache evicts all the time."""

    rack: Rack = None  # set by the test

    @initialize(pages=st.integers(1, 12))
    def attach(self, pages):
        self.vm = VirtualMemory.attach(self.rack, "p0")
        self.regions: dict[int, bytearray] = {}
        self.alloc(pages)

    @precondition(lambda self: len(self.regions) < 4)
    @rule(pages=st.integers(1, 12))
    def alloc(self, pages):
        self.regions[self.vm.alloc(pages * LINE)] = bytearray(pages * LINE)

    @precondition(_has_regions)
    @rule(data=st.data())
    def write(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        off = data.draw(st.integers(0, len(model) - 1))
        length = data.draw(st.integers(1, min(len(model) - off, 9000)))
        blob = random.Random(data.draw(st.integers(0, 2**32))).randbytes(length)
        self.vm.write(addr + off, blob)
        model[off:off + len(blob)] = blob

    @precondition(_has_regions)
    @rule(data=st.data())
    def read(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        off = data.draw(st.integers(0, len(model) - 1))
        n = data.draw(st.integers(1, len(model) - off))
        assert self.vm.read(addr + off, n) == model[off:off + n]

    @precondition(_has_regions)
    @rule(data=st.data())
    def flush_and_invalidate(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        self.vm.flush(addr, len(model))
        self.vm.invalidate(addr, len(model))

    @precondition(_has_regions)
    @rule(data=st.data())
    def free(self, data):
        addr = data.draw(st.sampled_from(sorted(self.regions)))
        self.vm.free(addr)
        del self.regions[addr]

    @invariant()
    def everything_reads_back(self):
        for addr, model in getattr(self, "regions", {}).items():
            assert self.vm.read(addr, len(model)) == model

    def teardown(self):
        for addr in list(getattr(self, "regions", {})):
            self.vm.free(addr)
        if hasattr(self, "vm"):
            self.vm.close()


def test_random_operations_against_a_bytearray_model(tiny_rack):
    MemoryModel.rack = tiny_rack
    run = MemoryModel.TestCase
    run.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                            derandomize=True, database=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()


def test_gmm_fewest_misses_keeps_its_choice_four_requests_then_picks_again(tmp_path):
    """rack.gmm_policy = "fewest-misses" (LegoOS's GMM): a region's home is the
    mComponent that has served the fewest misses, by what the mMonitors report, and a
    choice serves GMM_RECHOOSE requests before GMM chooses again."""
    with Rack(tiny_spec(str(tmp_path / "s0"), name="gmm", gmm_policy="fewest-misses")) as rack:
        memory = VirtualMemory.attach(rack, "p0")
        try:
            first = memory.alloc(16 * LINE)   # both served none: the lowest id, m0
            for page in range(16):            # misses that m0 serves
                memory.write(first + page * LINE, b"x")
            memory.flush(first, 16 * LINE)
            memory.invalidate(first, 16 * LINE)
            for page in range(16):
                assert memory.read(first + page * LINE, 1) == b"x"

            def reported() -> bool:
                with rack.endpoint() as ep:
                    listing = ep.call_args("global", Op.LIST)[0]["components"]
                return any(c["id"] == "m0" and c["load"].get("misses", 0) >= 16
                           for c in listing)
            wait_until(reported, 10.0)
            regions = [memory.alloc(LINE) for _ in range(8)]
            homes = {start: home for start, _, home in memory.regions()}
            assert homes[first] == "m0"
            assert [homes[r] for r in regions] == ["m0"] * (GMM_RECHOOSE - 1) + ["m1"] * 5
            with rack.endpoint() as ep:
                assert ep.call_args("global", Op.STATS)[0]["gmm_policy"] == "fewest-misses"
        finally:
            memory.close()


def test_an_exec_ed_image_gets_addresses_of_its_own(tiny_rack):
    """exec() keeps the pid, and the old image's regions and dirty lines stay at the
    homes and in the extCache until the process ends: the new image's regions (and
    socket buffers), at either home, start zeroed and read what it wrote."""
    image = ("from splitrack.guest import vm\n"
             "got = []\n"
             "for _ in range(4):\n"
             "    a = vm.alloc(8192)\n"
             "    got.append(bytes(vm.read(a, 6)) + bytes(vm.read(a + 4096, 2)))\n"
             "    vm.write(a, b'new')\n"
             "    got.append(bytes(vm.read(a, 3)))\n"
             "print(got)\n")
    code = textwrap.dedent(f"""
        import os, sys
        from splitrack.guest import vm
        for _ in range(3):   # (least-used GMM: m0, m1, m0; the new image's first on m1)
            vm.write(vm.alloc(8192), b"old" * 2000)
        os.execv(sys.executable, [sys.executable, "-c", {image!r}])
        """)
    proc = subprocess.run([SPLITRACK, "run", "--name", "vm", "--on", "p0", "--",
                           sys.executable, "-c", code], cwd="/tmp", capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, SPLITRACK_RUN_ROOT=tiny_rack.run.root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == repr([bytes(8), b"new"] * 4) + "\n"
