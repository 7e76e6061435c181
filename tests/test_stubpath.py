"""A connection's send path in C (native/stubpath.h) on a private extCache segment (no
rack needed): sp_hold, a held send in one call, still lets a batch go once it is
pack_delay old, looking at the clock only every SP_CLOCK_EVERY holds. On a rack:
tests/test_packing.py."""
import mmap
import os

import pytest

from native import stubpath
from native.extcache import ExtCache

LINE, PID = 4096, 4242
RSTART, TSTART = 16 * LINE, 32 * LINE
DELAY_S = 0.001
ffi, lib = stubpath.ffi, stubpath.lib


@pytest.fixture
def path():
    """A connection's C state over a 16-line extCache, packing on, one byte held in a
    batch (as sp_put leaves a batch it holds)."""
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(16 * LINE, LINE, 4)
    os.ftruncate(fd, size)
    xc = ExtCache.create(mmap.mmap(fd, size), 16 * LINE, LINE, 4)
    slot = xc.slot_acquire(PID)
    c, stage = stubpath.new_path(xc, slot, PID, (RSTART, 4 * LINE), (TSTART, 4 * LINE),
                                 1 << 18, DELAY_S, DELAY_S)
    c.pack, c.held, c.staged, c.unclocked = 1, 1, 1, 0
    yield c
    del stage
    xc.close()
    os.close(fd)


def holds_in_a_row(c, limit=1000):
    n = 0
    while n < limit and lib.sp_hold(c, b"x", 1):
        n += 1
    return n


def test_a_batch_past_its_delay_is_let_go_within_a_few_holds(path):
    path.held_since = lib.sp_now() - int(3 * DELAY_S * 1e9)
    assert holds_in_a_row(path) == lib.SP_CLOCK_EVERY - 1
    assert path.unclocked == 0   # (it looked, and said no: sp_put announces the batch)


def test_a_young_batch_is_held_on_across_its_clock_reads(path):
    path.held_since = lib.sp_now()
    assert holds_in_a_row(path, 4 * lib.SP_CLOCK_EVERY) == 4 * lib.SP_CLOCK_EVERY
    assert (path.held, path.staged) == (1 + 4 * lib.SP_CLOCK_EVERY,) * 2


def test_a_fresh_batch_starts_its_count_of_holds_afresh(path):
    """sp_put starting a batch (bytes in flight, the last announcement just now) holds
    it, with held_since now and no holds counted against its clock yet."""
    path.held, path.staged, path.unclocked = 0, 0, 5
    path.credit = path.tsize - 100          # bytes in flight
    path.announced = lib.sp_now()           # announced just now
    taken = ffi.new("uint64_t *")
    assert lib.sp_put(path, b"x", 1, taken) == stubpath.HOLDING and taken[0] == 1
    assert path.unclocked == 0 and lib.sp_now() - path.held_since < int(DELAY_S * 1e9)
