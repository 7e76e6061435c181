"""The C extCache through its binding, on a private segment (no rack needed):
geometry, hits, the miss transaction, LRU vs FIFO, dirty victims, counters, pinned
lines (the victim cache: test_extcache_victims.py; on a rack: tests/test_victim.py)."""

import array
import errno
import mmap
import os
import struct

import pytest

from native.extcache import ExtCache
from xcsegments import LINE, PID, install, reopen, same_set_pages


def test_geometry(new_xc):
    xc = new_xc(lines=64, ways=4)
    assert (xc.line_size, xc.ways, xc.nsets) == (LINE, 4, 16)


def test_bad_geometry_is_refused():
    with pytest.raises(ValueError):
        ExtCache.segment_size(LINE, 3000, 2)


def test_a_segment_of_another_layout_version_is_refused_saying_so(new_xc):
    xc = new_xc()
    mm = mmap.mmap(xc.fd, os.fstat(xc.fd).st_size)
    version = struct.unpack_from("<I", mm, 4)[0]   # (the header's magic, then version)
    struct.pack_into("<I", mm, 4, version + 1)
    try:
        with pytest.raises(OSError, match="another version of splitrack") as info:
            ExtCache.open(mm)
        assert info.value.errno == errno.EPROTONOSUPPORT
    finally:
        struct.pack_into("<I", mm, 4, version)
    struct.pack_into("<I", mm, 0, 0)   # no magic: not a segment at all
    with pytest.raises(OSError) as info:
        ExtCache.open(mm)
    assert info.value.errno == errno.EINVAL


def test_other_processes_open_the_same_segment(new_xc):
    xc = new_xc()
    other = reopen(xc)
    slot = xc.slot_acquire(PID)
    install(xc, slot, 5, 7)
    buf = bytearray(LINE)
    assert other.read_into(-1, PID, 5 * LINE, buf) == LINE and buf == bytes([7]) * LINE
    other.close()


def test_miss_then_hit_and_ranges_stop_at_the_first_miss(new_xc):
    xc = new_xc()
    slot = xc.slot_acquire(PID)
    buf = bytearray(3 * LINE)
    assert xc.read_into(slot, PID, 0, buf) == 0
    install(xc, slot, 0, 1)
    install(xc, slot, 2, 3)
    assert xc.read_into(slot, PID, 100, buf) == LINE - 100  # page 1 missing
    assert xc.write_from(slot, PID, 10, b"ab") == 2
    small = bytearray(4)
    xc.read_into(slot, PID, 9, small)
    assert small == b"\x01ab\x01"
    c = xc.counters(PID)
    assert c["misses"] == 2 and c["hits"] >= 3 and c["fetches"] == 2


def test_copies_count_bytes_and_refuse_a_read_only_destination(new_xc):
    xc = new_xc()
    slot = xc.slot_acquire(PID)
    install(xc, slot, 0, 1)
    words = array.array("I", [0] * 4)   # 4 items, 16 bytes: all 16 are copied
    assert xc.read_into(slot, PID, 0, words) == 16 and words.tobytes() == b"\x01" * 16
    assert xc.write_from(slot, PID, 0, array.array("I", [0x02020202] * 2)) == 8
    with pytest.raises(TypeError):
        xc.read_into(slot, PID, 0, b"\0" * 4)
    with pytest.raises(TypeError):
        xc.read_into(slot, PID, 0, memoryview(bytearray(4)).toreadonly())
    small = bytearray(10)
    assert xc.read_into(slot, PID, 0, small) == 10 and small == b"\x02" * 8 + b"\x01" * 2


def test_lru_evicts_the_least_recently_used(new_xc):
    xc = new_xc(lines=8, ways=2, policy="lru")
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.read_into(slot, PID, a * LINE, bytearray(1))  # a is now more recent than b
    install(xc, slot, c, 3)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 1
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 0


def test_fifo_evicts_the_oldest_install(new_xc):
    xc = new_xc(lines=8, ways=2, policy="fifo")
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.read_into(slot, PID, a * LINE, bytearray(1))  # does not matter for FIFO
    install(xc, slot, c, 3)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 0
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 1


def test_dirty_victim_is_handed_out_for_write_back(new_xc):
    xc = new_xc(lines=8, ways=2)
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.write_from(slot, PID, a * LINE, b"dirty")
    xc.read_into(slot, PID, b * LINE, bytearray(1))  # b more recent: a is the victim
    victim = xc.miss_begin(slot, PID, c)
    assert victim == (PID, 0, a)
    assert bytes(xc.victim_buf[:5]) == b"dirty"
    xc.miss_end(slot, PID, c, 0, None)  # zero-fill
    counts = xc.counters(PID)
    assert (counts["evictions"], counts["writebacks"], counts["zerofills"]) == (1, 1, 1)


def test_aborted_miss_changes_nothing(new_xc):
    xc = new_xc(lines=8, ways=2)
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    assert xc.miss_begin(slot, PID, c) == (0, 0, 0)
    xc.miss_abort(PID, c)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 1
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 1


def test_clean_invalidate_and_drop_pid(new_xc):
    xc = new_xc(lines=16, ways=4)
    slot = xc.slot_acquire(PID)
    for p in range(4):
        install(xc, slot, p, p)
    xc.write_from(slot, PID, LINE, b"x")
    out = bytearray(LINE)
    assert xc.clean(PID, 1, out) == 0 and out[0:1] == b"x"
    assert xc.clean(PID, 1, out) is None  # clean now
    assert xc.invalidate(PID, 0, 2) == 2
    install(xc, slot, 9, 9, pid=PID + 1)
    assert xc.drop_pid(PID) == 2
    assert xc.read_into(-1, PID + 1, 9 * LINE, bytearray(1)) == 1


def test_counter_slots_fold_into_totals(new_xc):
    xc = new_xc()
    slot = xc.slot_acquire(PID)
    install(xc, slot, 0, 0)
    assert xc.slot_release(PID)
    assert xc.counters(PID) == {}
    assert xc.counters()["fetches"] == 1


def test_a_process_killed_holding_a_set_lock_does_not_wedge_the_others(new_xc):
    xc = new_xc(lines=8, ways=2)
    pid = os.fork()
    if pid == 0:  # the child takes the set lock (miss in flight) and dies with it
        child = reopen(xc)
        child.miss_begin(-1, 77, 0)
        os._exit(0)
    os.waitpid(pid, 0)
    slot = xc.slot_acquire(PID)
    install(xc, slot, 0, 5, pid=77)  # the same set: would hang without robust locks
    assert xc.read_into(slot, 77, 0, bytearray(1)) == 1


def test_pinned_lines_are_evicted_only_by_their_own_pager(new_xc):
    """A rack heap's lines (native/pager.c): pinned while a page maps them; another
    process's miss never takes one; their pager unmaps the page through its unpin
    callback (a dirty page's bytes go into the line); it takes no unpinned way once
    all but a quarter of the set is pinned, and without a line of its own to evict
    there it gets EBUSY."""
    from native._extcache import ffi, lib

    xc = new_xc(lines=8, ways=8)   # one set of 8 ways: pagers pin at most 6
    base = ffi.from_buffer(xc.mapping)
    unpinned = []

    @ffi.callback("int(void *, uint64_t, void *)")
    def unpin(ctx, vpage, line):
        unpinned.append(vpage)
        ffi.memmove(line, b"P" * LINE, LINE)   # the page was written since it came in
        return 1

    victim, buf = ffi.new("xc_victim_t *"), ffi.new("char[]", LINE)

    def pager_miss(pid, vpage):
        rc = lib.xc_miss_begin(base, -1, pid, vpage, victim, buf, unpin, ffi.NULL)
        if rc == 0:
            lib.xc_miss_end(base, -1, pid, vpage, 0, ffi.NULL, 1)
        return rc

    for page in range(6):
        assert pager_miss(PID, page) == 0
    for page in range(2):                      # the quarter left for unpinned lines
        install(xc, -1, 100 + page, 1, pid=77)
    for page in range(100):                    # others' misses only ever take those two
        install(xc, -1, 200 + page, 2, pid=77)
    assert unpinned == []
    assert pager_miss(PID, 6) == 0              # its own oldest page goes, dirty
    assert unpinned == [0] and (victim.pid, victim.vpage) == (PID, 0)
    assert bytes(ffi.buffer(buf, LINE)) == b"P" * LINE
    assert pager_miss(99, 0) == -errno.EBUSY    # a pager with no page in the full set
    assert xc.invalidate(PID, 0, 100) == 6      # a freed heap's lines just go
    assert pager_miss(99, 0) == 0


def test_a_pager_leaves_empty_ways_to_unpinned_lines_too(new_xc):
    from native._extcache import ffi, lib

    xc = new_xc(lines=4, ways=4)   # one set of 4 ways: pagers pin at most 3
    base = ffi.from_buffer(xc.mapping)
    unpin = ffi.callback("int(void *, uint64_t, void *)", lambda ctx, vpage, line: 0)
    victim, buf = ffi.new("xc_victim_t *"), ffi.new("char[]", LINE)
    for page in range(10):
        assert lib.xc_miss_begin(base, -1, PID, page, victim, buf, unpin, ffi.NULL) == 0
        lib.xc_miss_end(base, -1, PID, page, 0, ffi.NULL, 1)
    install(xc, -1, 0, 1, pid=77)   # the fourth way is still there for it
