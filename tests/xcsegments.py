"""extCaches on segments of their own, made in the test process (no rack): for the
tests of the C extCache through its binding (test_extcache.py, test_extcache_victims.py).

    segment(capacity, ways, victims)  a memfd the size of a segment, and a mapping of it
    maker()                           a context: new(lines, ways, policy, victims) -> ExtCache
    reopen(xc)                        the same segment, mapped again (another process's view)
    install(xc, slot, vpage, byte)    a miss of vpage, filled with `byte`
    same_set_pages(xc, n)             n pages of one set
    a_dirty_entry(xc, data)           a page written, then evicted into the victim cache
    read_line(xc, vpage)              a whole line's bytes (a hit)
"""

import contextlib
import mmap
import os

from native.extcache import ExtCache

LINE = 4096
PID = 4242


def segment(capacity, ways, victims=0):
    """A memfd the size of an extCache segment, and a mapping of it (as a pMonitor's
    region is); other mappings of the fd are other processes' views."""
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(capacity, LINE, ways, victims)
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


@contextlib.contextmanager
def maker():
    """new(lines=8, ways=2, policy="lru", victims=0) -> an ExtCache on a segment of its
    own; all of them closed at the end (conftest's new_xc fixture)."""
    made = []

    def new(lines=8, ways=2, policy="lru", victims=0):
        fd, mm = segment(lines * LINE, ways, victims)
        xc = ExtCache.create(mm, lines * LINE, LINE, ways, policy, victims)
        xc.fd = fd
        made.append(xc)
        return xc

    try:
        yield new
    finally:
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


def read_line(xc, vpage, pid=PID):
    buf = bytearray(LINE)
    assert xc.read_into(-1, pid, vpage * LINE, buf) == LINE
    return bytes(buf)
