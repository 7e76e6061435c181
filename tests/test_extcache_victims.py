"""The extCache's victim cache (native/victim.c) through its binding, on a private segment
(no rack needed): victims kept and served, a full cache of dirty lines, clean lines
replacing the oldest clean entry, flush and invalidate, the flusher, processes gone
or killed mid-miss, a pager's victim hits (on a rack: tests/test_victim.py)."""

import os
import threading
import time

import pytest

from native.extcache import FLUSH_GONE, FLUSH_WRITTEN, ExtCache
from xcsegments import LINE, PID, a_dirty_entry, install, read_line, reopen, same_set_pages


def test_a_victim_cache_is_refused_past_its_maximum():
    with pytest.raises(ValueError, match="victim entries"):
        ExtCache.segment_size(8 * LINE, LINE, 2, 65)
    assert ExtCache.segment_size(8 * LINE, LINE, 2, 8) > ExtCache.segment_size(8 * LINE, LINE, 2)


def test_a_victim_goes_to_the_victim_cache_and_a_miss_is_served_from_it(new_xc):
    xc = new_xc(lines=8, ways=2, victims=2)
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


def test_a_full_victim_cache_of_dirty_lines_hands_the_victim_back(new_xc):
    xc = new_xc(lines=8, ways=2, victims=1)
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


def test_clean_lines_replace_the_oldest_clean_entry(new_xc):
    xc = new_xc(lines=8, ways=2, victims=2)
    slot = xc.slot_acquire(PID)
    pages = same_set_pages(xc, 6)
    for p in pages:
        install(xc, slot, p, p % 256)
    assert xc.victim_entries() == 2
    assert [xc.victim_holds(PID, p) for p in pages] == [False, False, True, True, False, False]
    assert xc.miss_begin(-1, PID, pages[2]) is None and read_line(xc, pages[2])[0] == pages[2] % 256


def test_flush_and_invalidate_see_victim_entries(new_xc):
    xc = new_xc(lines=8, ways=2, victims=4)
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


def test_the_flusher_writes_dirty_entries_home_and_a_miss_waits_for_it(new_xc):
    xc = new_xc(lines=8, ways=2, victims=2)
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


def test_a_flush_of_a_gone_process_drops_its_entry(new_xc):
    xc = new_xc(lines=8, ways=2, victims=2)
    a = a_dirty_entry(xc, b"x")
    assert xc.victim_holds(PID, a)
    assert xc.victim_flush(lambda *args: FLUSH_GONE) == 1
    assert not xc.victim_holds(PID, a)


def test_a_process_killed_mid_miss_leaves_its_victim_in_the_victim_cache(new_xc):
    xc = new_xc(lines=8, ways=2, victims=2)
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


def test_a_pagers_victim_hit_is_pinned_and_its_bytes_handed_out(new_xc):
    from native._extcache import ffi, lib

    xc = new_xc(lines=8, ways=4, victims=2)   # two sets of 4 ways
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


def test_processes_killed_while_moving_lines_leave_each_page_in_one_place(new_xc):
    """Children serve misses from the victim cache (ways and entries trade lines)
    and are SIGKILLed at random moments, locks held or not: every page is still in
    exactly one place, a way or an entry, with its bytes (victim.c: xc_move_t)."""
    import random
    import signal

    xc = new_xc(lines=8, ways=2, victims=8)    # a set of 2 ways: 10 pages fit with the entries
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
