"""The extCache's victim cache (spec `victim`, native/victim.c) on a real rack:
misses served from it, its flusher in the pMonitor, flushes and drops that see
its entries, a process's exit, and a rack heap paging through it.

p0's extCache here is 8 lines in 4 sets of 2 ways with 8 victim entries: a
third page of a set evicts one. The test process attaches itself to p0
(VirtualMemory.attach) as a program of `splitrack run` does; what m0 holds is
read past the extCache with the process's own M_MISS.
"""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fit_rpc import Op
from fit_rpc.pages import MISS
from helpers import SPLITRACK, attached_vm, running_rack, small_spec, wait_until

LINE = 4096


def _spec(storage):
    spec = small_spec(storage, name="victim")
    spec["pcomponent"][0].update(extcache=8 * LINE, ways=2, victim=8)
    spec["pcomponent"][1].update(extcache="512KiB", ways=8, victim=8)   # a rack heap's
    spec["mcomponent"] = [{"id": "m0", "memory": "128MiB"}]
    return spec


@pytest.fixture(scope="module")
def rack():
    with running_rack(_spec) as r:
        yield r


@pytest.fixture
def vm(rack):
    with attached_vm(rack) as memory:
        yield memory


def conflicting(vm, n):
    """The addresses of n pages of a new region that share one extCache set."""
    addr = vm.alloc(vm.xc.nsets * n * LINE)
    first = addr // LINE
    target = vm.xc.set_of(vm.pid, first)
    pages = [p for p in range(first, first + vm.xc.nsets * n)
             if vm.xc.set_of(vm.pid, p) == target]
    assert len(pages) == n
    return [p * LINE for p in pages]


def pattern(i):
    return hashlib.sha256(str(i).encode()).digest() * (LINE // 32)


def at_home(vm, addr):
    """The page's bytes at m0, read past the extCache."""
    return bytes(vm.ep.call("m0", Op.M_MISS, MISS.pack(vm.pid, addr // LINE, 0, 0)))


def in_victim_cache(vm, addr):
    return vm.xc.victim_holds(vm.pid, addr // LINE)


def p0_stats(rack):
    with rack.endpoint() as ep:
        return ep.call_args("p0", Op.STATS)[0]["extcache"]


@contextlib.contextmanager
def flusher_stopped(rack):
    """p0's pMonitor stopped (SIGSTOP): its flusher writes nothing meanwhile; the
    process's hits, misses and flushes need only m0."""
    pid = rack.components["p0"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def run(rack, on, code, *args):
    return subprocess.run([SPLITRACK, "run", "--name", "victim", "--on", on, *args, "--",
                           sys.executable, "-c", textwrap.dedent(code)],
                          env=dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root), cwd="/tmp",
                          capture_output=True, text=True, timeout=300)


def test_a_miss_of_an_evicted_page_is_served_from_the_victim_cache(rack, vm):
    addrs = conflicting(vm, 3)
    for i, a in enumerate(addrs):
        vm.write(a, pattern(i))
    assert in_victim_cache(vm, addrs[0])        # the third page's miss evicted it
    before = vm.counters()
    m0_misses = rack_m0_misses(rack)
    for i, a in enumerate(addrs):
        assert vm.read(a, LINE) == pattern(i)
    after = vm.counters()
    assert after["victim_hits"] - before["victim_hits"] >= 1
    assert after["fetches"] == before["fetches"] and after["writebacks"] == before["writebacks"]
    assert rack_m0_misses(rack) == m0_misses   # no message: served in the pComponent


def rack_m0_misses(rack):
    with rack.endpoint() as ep:
        return ep.call_args("m0", Op.STATS)[0]["memory"]["misses"]


def test_a_read_ahead_never_fetches_a_page_the_victim_cache_holds(rack, vm):
    """Its home's copy may be older (or a flush of it on its way): such a page is
    not fetched ahead, but served from the victim cache."""
    addr = vm.alloc(12 * LINE)            # 3 pages a set: pages 0-3 are evicted
    for i in range(12):
        vm.write(addr + i * LINE, pattern(i))
    assert all(in_victim_cache(vm, addr + i * LINE) for i in range(4))
    m0_misses = rack_m0_misses(rack)
    assert vm.read(addr, 2 * LINE) == pattern(0) + pattern(1)   # (would read ahead 2)
    assert rack_m0_misses(rack) == m0_misses


def test_more_pages_than_entries_read_back_right_after_the_flusher_wrote_them(rack, vm):
    addrs = conflicting(vm, 40)
    flushed, before = p0_stats(rack)["total"]["victim_flushes"], vm.counters()
    for i, a in enumerate(addrs[:8]):   # 6 dirty victims: all into the victim cache
        vm.write(a, pattern(i))
    after = vm.counters()
    assert after["writebacks"] == before["writebacks"]
    assert after["victim_stores"] - before["victim_stores"] == 6
    # the pMonitor's flusher writes them home, on the process's behalf
    wait_until(lambda: all(at_home(vm, a) == pattern(i) for i, a in enumerate(addrs[:6])))
    assert p0_stats(rack)["total"]["victim_flushes"] - flushed >= 6
    for i, a in enumerate(addrs[8:], 8):   # the clean entries are replaced, dropped
        vm.write(a, pattern(i))
    sums = [hashlib.sha256(vm.read(a, LINE)).digest() for a in addrs]
    assert sums == [hashlib.sha256(pattern(i)).digest() for i in range(40)]
    assert not any(in_victim_cache(vm, a) for a in addrs[:6])   # they came from m0


def test_a_flush_writes_a_dirty_victim_entry_home_and_invalidate_drops_it(rack, vm):
    addrs = conflicting(vm, 3)
    with flusher_stopped(rack):
        for i, a in enumerate(addrs):
            vm.write(a, pattern(i))
        assert in_victim_cache(vm, addrs[0]) and at_home(vm, addrs[0]) == bytes(LINE)
        assert vm.flush(addrs[0], LINE) == 1     # as the DMA path does before dDMA reads m0
        assert at_home(vm, addrs[0]) == pattern(0)
        assert vm.flush(addrs[0], LINE) == 0     # clean now, still cached
        assert in_victim_cache(vm, addrs[0])
        vm.write(addrs[1], b"dropped")           # (a victim hit: dirty in its way again)
        vm.invalidate(addrs[0], 2 * LINE)        # no longer there: a read goes to m0
        assert not in_victim_cache(vm, addrs[0])
        assert vm.read(addrs[0], LINE) == pattern(0)


def test_a_process_that_exits_leaves_no_victim_entries(rack, vm):
    proc = run(rack, "p0", """
        import os
        from splitrack.guest import vm
        addr = vm.alloc(64 * 4096)
        for i in range(64):
            vm.write(addr + i * 4096, bytes([i]) * 4096)
        print(os.getpid(), vm.own().xc.victim_entries(os.getpid()))
        """)
    assert proc.returncode == 0, proc.stderr
    pid, entries = map(int, proc.stdout.split())
    assert entries > 0

    def released():   # (its pMonitor stops tracking it first, then drops its lines)
        with rack.endpoint() as ep:
            gone = pid not in ep.call_args("p0", Op.P_PROCESSES)[0]["processes"]
        return gone and vm.xc.victim_entries(pid) == 0

    wait_until(released)


@pytest.mark.skipif(os.geteuid() != 0 and open(
    "/proc/sys/vm/unprivileged_userfaultfd").read().strip() != "1",
    reason="userfaultfd for kernel faults needs root or vm.unprivileged_userfaultfd=1")
def test_a_rack_heap_pages_through_the_victim_cache(rack):
    """A Python program whose heap is rack memory (--memory rack), on p1's 512 KiB
    extCache (16 sets of 8 ways; its pager pins 6 of a set at most): 4 MB of
    checked blocks, read twice; then 7 pages of one set read round and round,
    each miss evicting the page the next one but six wants -- from the victim
    cache. Before the round the program waits for p1's flusher to have written
    the victim entries home: an entry DIRTY or being flushed takes no victim (it
    goes home instead), and the blocks leave all 8 dirty. Without the wait 5
    runs in 30 got no victim hits at all (the rest 786-2,097): the round (about
    20 ms) ran with all 8 entries DIRTY or FLUSHING, as the flusher, due every
    VICTIM_FLUSH_S, ran 25-50 ms apart while the misses kept both CPUs busy, and
    one of its M_WRITEBACKs took 34-40 ms."""
    proc = run(rack, "p1", """
        import hashlib, json, time
        from splitrack.guest import rackmem, vm
        assert rackmem.installed()
        blobs = [hashlib.sha256(str(i).encode()).digest() * 128 for i in range(1000)]
        for _ in range(2):
            assert all(b == hashlib.sha256(str(i).encode()).digest() * 128
                       for i, b in enumerate(blobs))
        step = 16 * 4096                        # pages a set apart
        buf = bytearray(7 * step)
        for j in range(7):
            buf[j * step] = j + 1
        xc, deadline = vm.own().xc, time.monotonic() + 30
        while xc.victim_unclean() and time.monotonic() < deadline:
            time.sleep(0.005)
        unclean, before = xc.victim_unclean(), vm.counters()["victim_hits"]
        total = sum(buf[j * step] for _ in range(300) for j in range(7))
        assert total == 300 * 28, total
        print(json.dumps({**vm.counters(), "unclean": unclean,
                          "round_hits": vm.counters()["victim_hits"] - before}))
        """, "--memory", "rack")
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    # of the 2,100 reads, 2,099 or 2,100 were victim hits in each of 40 runs; none
    # without the cache
    assert counts["round_hits"] >= 2000, counts
