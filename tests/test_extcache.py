"""The C extCache through its binding, on a private segment (no rack needed):
geometry, hits, the miss transaction, LRU vs FIFO, dirty victims, counters, the
victim cache (tests/test_victim.py: on a rack)."""

import array
import errno
import mmap
import os
import struct
import threading
import time

import pytest

from native.extcache import FLUSH_GONE, FLUSH_WRITTEN, ExtCache

LINE = 4096
PID = 4242


def segment(capacity, ways, victims=0):
    """A memfd the size of an extCache segment, and a mapping of it (as a pMonitor's
    region is); other mappings of the fd are other processes' views."""
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(capacity, LINE, ways, victims)
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


@pytest.fixture
def make():
    made = []

    def _make(lines=8, ways=2, policy="lru", victims=0):
        fd, mm = segment(lines * LINE, ways, victims)
        xc = ExtCache.create(mm, lines * LINE, LINE, ways, policy, victims)
        xc.fd = fd
        made.append(xc)
        return xc

    yield _make
    for xc in made:
        xc.close()
        os.close(xc.fd)


def reopen(xc):
    return ExtCache.open(mmap.mmap(xc.fd, os.fstat(xc.fd).st_size))


def install(xc, slot, vpage, byte, pid=PID):
    assert xc.miss_begin(slot, pid, vpage) is not None
    xc.miss_end(slot, pid, vpage, 0, bytes([byte]) * LINE)


def same_set_pages(xc, n, pid=PID):
    target = xc.set_of(pid, 0)
    return [p for p in range(10_000) if xc.set_of(pid, p) == target][:n]


def a_dirty_entry(xc, data):
    """A 2-way cache's page written with `data`, then evicted by two more of its set
    into the victim cache: its page."""
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    xc.write_from(slot, PID, a * LINE, data)
    install(xc, slot, b, 2)
    install(xc, slot, c, 3)
    return a


def test_geometry(make):
    xc = make(lines=64, ways=4)
    assert (xc.line_size, xc.ways, xc.nsets) == (LINE, 4, 16)


def test_bad_geometry_is_refused():
    with pytest.raises(ValueError):
        ExtCache.segment_size(LINE, 3000, 2)


def test_a_segment_of_another_layout_version_is_refused_saying_so(make):
    xc = make()
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


def test_other_processes_open_the_same_segment(make):
    xc = make()
    other = reopen(xc)
    slot = xc.slot_acquire(PID)
    install(xc, slot, 5, 7)
    buf = bytearray(LINE)
    assert other.read_into(-1, PID, 5 * LINE, buf) == LINE and buf == bytes([7]) * LINE
    other.close()


def test_miss_then_hit_and_ranges_stop_at_the_first_miss(make):
    xc = make()
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


def test_copies_count_bytes_and_refuse_a_read_only_destination(make):
    xc = make()
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


def test_lru_evicts_the_least_recently_used(make):
    xc = make(lines=8, ways=2, policy="lru")
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.read_into(slot, PID, a * LINE, bytearray(1))  # a is now more recent than b
    install(xc, slot, c, 3)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 1
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 0


def test_fifo_evicts_the_oldest_install(make):
    xc = make(lines=8, ways=2, policy="fifo")
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.read_into(slot, PID, a * LINE, bytearray(1))  # does not matter for FIFO
    install(xc, slot, c, 3)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 0
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 1


def test_dirty_victim_is_handed_out_for_write_back(make):
    xc = make(lines=8, ways=2)
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


def test_aborted_miss_changes_nothing(make):
    xc = make(lines=8, ways=2)
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    assert xc.miss_begin(slot, PID, c) == (0, 0, 0)
    xc.miss_abort(PID, c)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 1
    assert xc.read_into(slot, PID, b * LINE, bytearray(1)) == 1


def test_clean_invalidate_and_drop_pid(make):
    xc = make(lines=16, ways=4)
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


def test_counter_slots_fold_into_totals(make):
    xc = make()
    slot = xc.slot_acquire(PID)
    install(xc, slot, 0, 0)
    assert xc.slot_release(PID)
    assert xc.counters(PID) == {}
    assert xc.counters()["fetches"] == 1


def test_a_process_killed_holding_a_set_lock_does_not_wedge_the_others(make):
    xc = make(lines=8, ways=2)
    pid = os.fork()
    if pid == 0:  # the child takes the set lock (miss in flight) and dies with it
        child = reopen(xc)
        child.miss_begin(-1, 77, 0)
        os._exit(0)
    os.waitpid(pid, 0)
    slot = xc.slot_acquire(PID)
    install(xc, slot, 0, 5, pid=77)  # the same set: would hang without robust locks
    assert xc.read_into(slot, 77, 0, bytearray(1)) == 1


def test_pinned_lines_are_evicted_only_by_their_own_pager(make):
    """A rack heap's lines (native/pager.c): pinned while a page maps them; another
    process's miss never takes one; their pager unmaps the page through its unpin
    callback (a dirty page's bytes go into the line); it takes no unpinned way once
    all but a quarter of the set is pinned, and without a line of its own to evict
    there it gets EBUSY."""
    from native._extcache import ffi, lib

    xc = make(lines=8, ways=8)   # one set of 8 ways: pagers pin at most 6
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


def test_a_pager_leaves_empty_ways_to_unpinned_lines_too(make):
    from native._extcache import ffi, lib

    xc = make(lines=4, ways=4)   # one set of 4 ways: pagers pin at most 3
    base = ffi.from_buffer(xc.mapping)
    unpin = ffi.callback("int(void *, uint64_t, void *)", lambda ctx, vpage, line: 0)
    victim, buf = ffi.new("xc_victim_t *"), ffi.new("char[]", LINE)
    for page in range(10):
        assert lib.xc_miss_begin(base, -1, PID, page, victim, buf, unpin, ffi.NULL) == 0
        lib.xc_miss_end(base, -1, PID, page, 0, ffi.NULL, 1)
    install(xc, -1, 0, 1, pid=77)   # the fourth way is still there for it


# ---- the victim cache (victim.c) -------------------------------------------------------

def read_line(xc, vpage, pid=PID):
    buf = bytearray(LINE)
    assert xc.read_into(-1, pid, vpage * LINE, buf) == LINE
    return bytes(buf)


def test_a_victim_cache_is_refused_past_its_maximum():
    with pytest.raises(ValueError, match="victim entries"):
        ExtCache.segment_size(8 * LINE, LINE, 2, 65)
    assert ExtCache.segment_size(8 * LINE, LINE, 2, 8) > ExtCache.segment_size(8 * LINE, LINE, 2)


def test_a_victim_goes_to_the_victim_cache_and_a_miss_is_served_from_it(make):
    xc = make(lines=8, ways=2, victims=2)
    slot = xc.slot_acquire(PID)
    a, b, c = same_set_pages(xc, 3)
    install(xc, slot, a, 1)
    install(xc, slot, b, 2)
    xc.write_from(slot, PID, a * LINE, b"dirty")
    xc.read_into(slot, PID, b * LINE, bytearray(1))     # a is the LRU victim
    assert xc.miss_begin(slot, PID, c) == (0, 0, 0)      # nothing to write back: it moved
    xc.miss_end(slot, PID, c, 0, None)
    assert xc.victim_entries(PID) == 1 and xc.victim_holds(PID, a)
    assert xc.read_into(slot, PID, a * LINE, bytearray(1)) == 0   # not in a way now
    assert xc.miss_begin(slot, PID, a) is None           # served from the victim cache
    assert read_line(xc, a) == b"dirty" + bytes([1]) * (LINE - 5)
    assert xc.victim_holds(PID, b) and not xc.victim_holds(PID, a)   # b made room for a
    out = bytearray(LINE)
    assert xc.clean(PID, a, out) == 0 and out[:5] == b"dirty"        # still dirty
    c = xc.counters(PID)
    assert (c["victim_stores"], c["victim_hits"], c["writebacks"]) == (2, 1, 0)


def test_a_full_victim_cache_of_dirty_lines_hands_the_victim_back(make):
    xc = make(lines=8, ways=2, victims=1)
    slot = xc.slot_acquire(PID)
    pages = same_set_pages(xc, 4)
    for i, p in enumerate(pages[:2]):
        install(xc, slot, p, i)
        xc.write_from(slot, PID, p * LINE, b"w")
    assert xc.miss_begin(slot, PID, pages[2]) == (0, 0, 0)   # pages[0] into the entry
    xc.miss_end(slot, PID, pages[2], 0, None)
    assert xc.miss_begin(slot, PID, pages[3]) == (PID, 0, pages[1])   # as without one
    xc.miss_end(slot, PID, pages[3], 0, None)
    assert xc.victim_holds(PID, pages[0]) and not xc.victim_holds(PID, pages[1])


def test_clean_lines_replace_the_oldest_clean_entry(make):
    xc = make(lines=8, ways=2, victims=2)
    slot = xc.slot_acquire(PID)
    pages = same_set_pages(xc, 6)
    for p in pages:
        install(xc, slot, p, p % 256)
    assert xc.victim_entries() == 2
    assert [xc.victim_holds(PID, p) for p in pages] == [False, False, True, True, False, False]
    assert xc.miss_begin(-1, PID, pages[2]) is None and read_line(xc, pages[2])[0] == pages[2] % 256


def test_flush_and_invalidate_see_victim_entries(make):
    xc = make(lines=8, ways=2, victims=4)
    slot = xc.slot_acquire(PID)
    a, b, c, d = same_set_pages(xc, 4)
    for p in (a, b):
        install(xc, slot, p, 7)
        xc.write_from(slot, PID, p * LINE, b"new")
    install(xc, slot, c, 0)
    install(xc, slot, d, 0)                      # a and b are dirty entries now
    assert xc.victim_holds(PID, a) and xc.victim_holds(PID, b)
    out = bytearray(2 * LINE)
    pages, nxt, other = xc.clean_run(PID, min(a, b), max(a, b) - min(a, b) + 1, 0, out)
    assert pages == sorted((a, b)) and out[:3] == b"new" and out[LINE:LINE + 3] == b"new"
    assert xc.clean(PID, a, out) is None         # clean now
    assert xc.victim_holds(PID, a)               # and still served from there
    assert xc.invalidate(PID, a, 1) == 1 and not xc.victim_holds(PID, a)
    install(xc, slot, 50, 1, pid=PID + 1)
    assert xc.drop_pid(PID) >= 1 and xc.victim_entries(PID) == 0


def test_the_flusher_writes_dirty_entries_home_and_a_miss_waits_for_it(make):
    xc = make(lines=8, ways=2, victims=2)
    a = a_dirty_entry(xc, b"home")
    served = []

    def write(home, pid, vpages, lines):
        # while it is on its way, a miss of the page waits (never reads the home)
        t = threading.Thread(target=lambda: served.append(xc.miss_begin(-1, PID, a)))
        t.start()
        time.sleep(0.05)
        assert served == [] and t.is_alive()
        written.append((home, pid, vpages, bytes(lines[0][:4])))
        threads.append(t)
        return FLUSH_WRITTEN

    written, threads = [], []
    assert xc.victim_flush(write) == 1
    threads[0].join()
    assert written == [(0, PID, [a], b"home")] and served == [None]   # a victim hit
    assert xc.clean(PID, a, bytearray(LINE)) is None   # CLEAN: at its home now
    assert xc.counters()["victim_flushes"] == 1


def test_a_flush_of_a_gone_process_drops_its_entry(make):
    xc = make(lines=8, ways=2, victims=2)
    a = a_dirty_entry(xc, b"x")
    assert xc.victim_holds(PID, a)
    assert xc.victim_flush(lambda *args: FLUSH_GONE) == 1
    assert not xc.victim_holds(PID, a)


def test_a_process_killed_mid_miss_leaves_its_victim_in_the_victim_cache(make):
    xc = make(lines=8, ways=2, victims=2)
    a, b, c = same_set_pages(xc, 3)
    install(xc, -1, a, 1)
    xc.write_from(-1, PID, a * LINE, b"keep")
    install(xc, -1, b, 2)
    pid = os.fork()
    if pid == 0:   # the child's miss moves a into the victim cache and dies before its end
        child = reopen(xc)
        os._exit(0 if child.miss_begin(-1, PID, c) == (0, 0, 0) else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert xc.miss_begin(-1, PID, a) is None     # (the set lock repaired) from the entry
    assert read_line(xc, a)[:4] == b"keep"


def test_a_pagers_victim_hit_is_pinned_and_its_bytes_handed_out(make):
    from native._extcache import ffi, lib

    xc = make(lines=8, ways=4, victims=2)   # two sets of 4 ways
    base = ffi.from_buffer(xc.mapping)
    unpin = ffi.callback("int(void *, uint64_t, void *)",
                         lambda ctx, vpage, line: ffi.memmove(line, b"P" * LINE, LINE) or 1)
    victim, buf = ffi.new("xc_victim_t *"), ffi.new("char[]", LINE)
    pages = same_set_pages(xc, 4)
    for page in pages:                       # the fourth evicts the first: dirty, stored
        assert lib.xc_miss_begin(base, -1, PID, page, victim, buf, unpin, ffi.NULL) == 0
        assert victim.pid == 0
        lib.xc_miss_end(base, -1, PID, page, 0, ffi.NULL, 1)
    assert xc.victim_holds(PID, pages[0])
    ffi.memmove(buf, b"\0" * LINE, LINE)
    rc = lib.xc_miss_begin(base, -1, PID, pages[0], victim, buf, unpin, ffi.NULL)
    assert rc == lib.XC_VICTIM_HIT and bytes(ffi.buffer(buf, LINE)) == b"P" * LINE
    assert xc.victim_holds(PID, pages[1])    # the pinned line it evicted, unpinned and stored
    target = xc.set_of(PID, pages[0])
    others = [p for p in range(100_000) if xc.set_of(77, p) == target][:12]
    for p in others:                         # pinned: another process's misses never take it
        install(xc, -1, p, 9, pid=77)
    assert read_line(xc, pages[0]) == b"P" * LINE


def test_processes_killed_while_moving_lines_leave_each_page_in_one_place(make):
    """Children serve misses from the victim cache (ways and entries trade lines)
    and are SIGKILLed at random moments, locks held or not: every page is still in
    exactly one place, a way or an entry, with its bytes (victim.c: xc_move_t)."""
    import random
    import signal

    xc = make(lines=8, ways=2, victims=8)    # a set of 2 ways: 10 pages fit with the entries
    pages = same_set_pages(xc, 10)
    for i, p in enumerate(pages):
        install(xc, -1, p, i)
        xc.write_from(-1, PID, p * LINE, b"dirty")   # (dirty: losing one would show)
    assert xc.victim_entries() == 8
    rng = random.Random(18)
    for _ in range(40):
        pid = os.fork()
        if pid == 0:
            child, pick = reopen(xc), random.Random(os.getpid())
            while True:   # every miss finds its page in a way or in an entry
                if child.miss_begin(-1, PID, pick.choice(pages)) is not None:
                    os._exit(3)
        time.sleep(rng.uniform(0.0005, 0.01))
        os.kill(pid, signal.SIGKILL)
        assert os.waitpid(pid, 0)[1] == signal.SIGKILL   # (not exit 3: a page lost)
        for i, p in enumerate(pages):
            in_way = xc.read_into(-1, PID, p * LINE, bytearray(1)) == 1
            assert in_way != xc.victim_holds(PID, p), (i, in_way)
        assert xc.victim_entries() <= 9
    for i, p in enumerate(pages):
        assert xc.miss_begin(-1, PID, p) is None
        assert read_line(xc, p) == b"dirty" + bytes([i]) * (LINE - 5)
