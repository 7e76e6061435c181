"""Virtual memory through the extCache and mComponents, against real racks (its bad
input and failures: test_vm_errors.py; random operations against a model:
test_vm_model.py).

The test process attaches itself as an emulated process of p0
(VirtualMemory.attach), exactly as a program started by `splitrack run` does.
"""

import errno
import os
import random
import subprocess
import sys
import textwrap
import threading

import pytest

from fit_rpc import Op
from helpers import SPLITRACK, attached_vm, mstats, running_rack, small_spec, tiny_spec, wait_until
from splitrack import Rack
from splitrack.guest.vm import VirtualMemory
from splitrack.params import GMM_RECHOOSE

LINE = 4096


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
