"""The mComponent's data plane (native/mplane.h, monitors/memory_loop.py): M_MISS
answered in C from a mirror of the page tables.

- the mirror is the page table: any mix of sets and deletes reads back as a dict would;
- on shm, a write-back, a miss and a read-ahead of pages m0 holds are the plane's,
  with the bytes written back, counted as Python would count them (m0's misses and
  writebacks, its links' ops); on zmq the same are Python's, with the same bytes;
- FIT's ECHO, from a client or a rack process, is the plane's on shm once the link
  is vouched for (its first message is Python's), payloads of any size back intact,
  counted as Python would count them; on zmq Python's;
- what the plane must not answer stays Python's: a first touch (zeros), a page of a
  region that is gone (EFAULT): a region freed or a process released leaves the
  mirror (the pid may come again); a malformed request, with Python's errors;
  random ones, answered or refused, m0 serving on. A process naming another's
  pid is EPERM (tests/test_identities.py).
"""

import errno
import mmap
import os
import random
import struct

import pytest

from fit_rpc import Op
from fit_rpc.header import HEADER_SIZE
from fit_rpc.pages import FETCH, FETCH_MAX_LINES, MISS, VPAGE, WRITEBACK
from helpers import attached_vm, running_rack, small_spec
from monitors.address_space import AddressSpace, PageTable
from monitors.mmonitor import PLANE_OPS
from native.mplane import MemoryPlane

LINE = 4096


def test_the_mirror_reads_back_as_a_dict_after_any_sets_and_deletes():
    arena = mmap.mmap(-1, 64 * LINE)
    plane = MemoryPlane(arena, LINE, PLANE_OPS)
    try:
        rng = random.Random(7)
        ref: dict[tuple[int, int], int] = {}
        for _ in range(100_000):   # enough to grow the table several times, and shrink
            key = (rng.randrange(1, 5), rng.randrange(3000))
            if rng.random() < 0.55:
                ref[key] = rng.randrange(64)
                plane.set(*key, ref[key])
            else:
                ref.pop(key, None)
                plane.delete(*key)
        assert all(plane.get(pid, v) == ref.get((pid, v)) for pid in range(6)
                   for v in range(3000))
        with pytest.raises(OSError) as info:
            plane.set(1, 1, 64)   # past the arena's frames
        assert info.value.errno == errno.EINVAL
    finally:
        plane.close()
        arena.close()


@pytest.fixture(scope="module", params=["shm", "zmq"])
def rack(request):
    transport = request.param
    with running_rack(lambda s: small_spec(s, name=f"mp{transport}",
                                           transport=transport)) as rack:
        yield rack, transport


def memory(rack) -> dict:
    with rack.endpoint() as ep:
        stats = ep.call_args("m0", Op.STATS)[0]
    return {**stats["memory"], "links": stats["links"]}


def test_pages_held_are_the_planes_on_shm_with_the_bytes_written(rack):
    rack, transport = rack
    on_shm = transport == "shm"
    with attached_vm(rack) as vm:
        n = 32
        addr = vm.alloc(n * LINE)
        vm.write(addr, os.urandom(n * LINE))
        before = memory(rack)
        assert vm.flush(addr, n * LINE) == n   # first write-backs: Python takes the frames
        after = memory(rack)
        assert after["writebacks"] - before["writebacks"] == n
        assert after["plane_writebacks"] == before["plane_writebacks"]

        data = os.urandom(n * LINE)   # the pages held now: the plane's
        vm.write(addr, data)
        assert vm.flush(addr, n * LINE) == n
        vm.invalidate(addr, n * LINE)
        got = b"".join(vm.read(addr + page * LINE, LINE) for page in range(n))   # (a line
        assert got == data   # at a time: M_MISS each, not one M_FETCH for all)
        vm.invalidate(addr, n * LINE)
        assert vm.read(addr, n * LINE) == data   # read ahead: M_FETCH
        final = memory(rack)
        assert final["writebacks"] - after["writebacks"] == n
        assert final["plane_writebacks"] - after["plane_writebacks"] == (n if on_shm else 0)
        assert final["misses"] - after["misses"] == 2 * n
        assert final["plane_misses"] - after["plane_misses"] == (2 * n if on_shm else 0)
        me = vm.ep.id
        for op, least in (("M_MISS", n), ("M_WRITEBACK", 2), ("M_FETCH", 1)):
            was = before["links"].get(me, {}).get(op, {})
            now = final["links"][me][op]   # counted as if Python had served them
            assert now["rx_msgs"] - was.get("rx_msgs", 0) >= least
            assert now["tx_msgs"] - was.get("tx_msgs", 0) == \
                now["rx_msgs"] - was.get("rx_msgs", 0)

        vm.free(addr)   # its pages leave the mirror with the region: EFAULT, Python's
        for page in range(n):
            with pytest.raises(OSError) as info:
                vm.ep.call("m0", Op.M_MISS, MISS.pack(vm.pid, addr // LINE + page, 0, 0))
            assert info.value.errno == errno.EFAULT
        assert memory(rack)["plane_misses"] == final["plane_misses"]


def test_echo_is_the_planes_once_the_link_is_vouched_for(rack):
    rack, transport = rack
    rng = random.Random(5)
    payloads = [b"", b"x", rng.randbytes(4096), rng.randbytes(300_000)] * 3
    with rack.endpoint() as client, attached_vm(rack) as vm:
        for ep in (client, vm.ep):
            before = memory(rack)
            for payload in payloads:
                assert bytes(ep.call("m0", Op.ECHO, payload)) == payload
            after = memory(rack)
            answered = after["plane_echoes"] - before["plane_echoes"]
            if transport == "shm":   # all but the link's first (Python vouches for it)
                assert len(payloads) - 1 <= answered <= len(payloads)
            else:
                assert answered == 0
            was = before["links"].get(ep.id, {}).get("ECHO", {})
            now = after["links"][ep.id]["ECHO"]   # counted as if Python had answered
            carried = sum(len(p) for p in payloads) + len(payloads) * HEADER_SIZE
            for way in ("rx", "tx"):
                assert now[f"{way}_msgs"] - was.get(f"{way}_msgs", 0) == len(payloads)
                assert now[f"{way}_bytes"] - was.get(f"{way}_bytes", 0) == carried


def test_a_first_touch_is_zeros_from_python(rack):
    rack, _ = rack
    with attached_vm(rack) as vm:
        addr = vm.alloc(4 * LINE)
        before = memory(rack)
        got = vm.ep.call("m0", Op.M_MISS, MISS.pack(vm.pid, addr // LINE, 0, 0))
        assert bytes(got) == bytes(LINE)
        after = memory(rack)
        assert after["zero_misses"] == before["zero_misses"] + 1
        assert after["plane_misses"] == before["plane_misses"]


def test_a_region_freed_or_a_process_released_leaves_the_mirror():
    arena = mmap.mmap(-1, 64 * LINE)
    plane = MemoryPlane(arena, LINE, PLANE_OPS)
    try:
        space = AddressSpace("p0", LINE, PageTable(1234, plane))
        space.add_region(0, 8 * LINE)
        space.add_region(8 * LINE, 8 * LINE)
        for vpage in range(16):
            space.pages[vpage] = vpage
        assert space.remove_region(0) == list(range(8))
        assert [plane.get(1234, v) for v in range(16)] == [None] * 8 + list(range(8, 16))
        space.pages.clear()   # M_RELEASE: the pid may come again, with other pages
        assert [plane.get(1234, v) for v in range(16)] == [None] * 16
    finally:
        plane.close()
        arena.close()


def test_malformed_page_messages_get_their_errors_and_m0_serves_on(rack):
    """What the plane leaves to Python because it is not well-formed gets Python's
    errors (EBADMSG, EINVAL), on a link the plane reads; the next good miss is served."""
    rack, _ = rack
    with attached_vm(rack) as vm:
        addr = vm.alloc(2 * LINE)
        vm.write(addr, b"\x77" * 2 * LINE)
        vm.flush(addr, 2 * LINE)   # (the link vouched for, the pages held)
        pid, vpage = vm.pid, addr // LINE
        bad = {
            "short miss": (Op.M_MISS, MISS.pack(pid, vpage, 0, 0)[:10], errno.EBADMSG),
            "victim of 100 bytes": (Op.M_MISS, MISS.pack(pid, vpage, pid, vpage + 1) +
                                    bytes(100), errno.EBADMSG),
            "short fetch": (Op.M_FETCH, FETCH.pack(pid, vpage, 1)[:15], errno.EBADMSG),
            "fetch of 0 lines": (Op.M_FETCH, FETCH.pack(pid, vpage, 0), errno.EINVAL),
            "fetch past the limit": (Op.M_FETCH, FETCH.pack(pid, vpage, FETCH_MAX_LINES + 1),
                                     errno.EINVAL),
            "write-back one line short": (Op.M_WRITEBACK, WRITEBACK.pack(pid, 2) +
                                          bytes(LINE) + VPAGE.pack(vpage) * 2, errno.EBADMSG),
            "write-back of a huge count": (Op.M_WRITEBACK, WRITEBACK.pack(pid, 1 << 30) +
                                           bytes(LINE) + VPAGE.pack(vpage), errno.EBADMSG),
        }
        for name, (op, payload, want) in bad.items():
            with pytest.raises(OSError) as info:
                vm.ep.call("m0", op, payload)
            assert info.value.errno == want, name
        vm.invalidate(addr, 2 * LINE)
        assert vm.read(addr, 2 * LINE) == b"\x77" * 2 * LINE


def test_random_page_messages_never_stop_m0(rack):
    """Requests of the three ops with random payloads (half of them naming the
    sender's own pid and a page m0 holds, so that the plane's parsers see them): each
    is answered or refused, and m0 then serves a good miss with the right bytes."""
    rack, _ = rack
    rng = random.Random(11)
    with attached_vm(rack) as vm:
        addr = vm.alloc(4 * LINE)
        vm.write(addr, b"\x33" * 4 * LINE)
        vm.flush(addr, 4 * LINE)
        keep = vm.alloc(LINE)   # what the random write-backs must not reach
        vm.write(keep, b"\x44" * LINE)
        vm.flush(keep, LINE)
        head = struct.Struct("<IQ")   # pid, vpage: how MISS and FETCH begin
        for _ in range(300):
            op = rng.choice((Op.M_MISS, Op.M_FETCH, Op.M_WRITEBACK))
            payload = bytearray(rng.randbytes(rng.choice((0, 8, 15, 16, 24, 40, 4120, 8208,
                                                          rng.randrange(9000)))))
            if rng.random() < 0.5 and len(payload) >= head.size:
                head.pack_into(payload, 0, vm.pid, addr // LINE + rng.randrange(4))
            try:
                vm.ep.call("m0", op, bytes(payload))
            except OSError:
                pass
        vm.invalidate(keep, LINE)
        assert vm.read(keep, LINE) == b"\x44" * LINE
        with rack.endpoint() as ep:
            assert ep.call_args("m0", Op.HEALTH)[0]["state"] == "ok"
