"""dDDIO's native copies (native/ddio.c) through their binding, on a private
extCache segment and DRAM ring (no rack needed): bytes that wrap in both rings
arrive in order, a copy stops at the first line that is not cached and goes on
once it is, and what was copied leaves (store) or joins (fetch) the DRAM ring."""

import mmap
import os
import random

import pytest

from native.ddio import DdioRing
from native.extcache import ExtCache
from native.nring import NRing

LINE = 4096
PID = 4242
START = 16 * LINE     # the process's ring: 3 lines from here
SIZE = 3 * LINE


@pytest.fixture
def xc():
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(16 * LINE, LINE, 4)
    os.ftruncate(fd, size)
    cache = ExtCache.create(mmap.mmap(fd, size), 16 * LINE, LINE, 4)
    yield cache
    cache.close()
    os.close(fd)


def cache_lines(xc, first, count):
    for vpage in range(first, first + count):
        assert xc.miss_begin(-1, PID, vpage) == (0, 0, 0)
        xc.miss_end(-1, PID, vpage, 0, None)


def ring_bytes(xc, pos, n):
    """n bytes of the process's ring from stream offset pos, read as the process would."""
    out = bytearray(n)
    for i in range(n):
        addr = START + (pos + i) % SIZE
        assert xc.read_into(-1, PID, addr, memoryview(out)[i:i + 1]) == 1
    return bytes(out)


def test_store_then_fetch_wrap_in_both_rings(xc):
    cache_lines(xc, START // LINE, 3)
    ring = DdioRing(xc, PID, START, SIZE)
    dram = mmap.mmap(-1, 5000)
    rx, tx = NRing(dram, 0, 2500), NRing(dram, 2500, 2500)
    rng, pos, sent = random.Random(1), SIZE - 700, b""   # starts 700 B before the ring's end
    for _ in range(12):
        data = rng.randbytes(rng.randint(1, 2500))
        rx.drop(rx.used)
        rx.put(data[:rx.space])
        n = rx.used
        assert ring.store(rx, pos, n) == n and rx.used == 0
        assert ring_bytes(xc, pos, n) == data[:n]
        assert ring.fetch(tx, pos, n) == n
        sent += tx.get(n)
        assert sent[-n:] == data[:n]
        pos += n


def test_copies_stop_at_a_line_not_cached(xc):
    cache_lines(xc, START // LINE, 1)   # only the ring's first line
    ring = DdioRing(xc, PID, START, SIZE)
    dram = mmap.mmap(-1, 3 * LINE)
    rx, tx = NRing(dram, 0, LINE + 100), NRing(dram, LINE + 100, LINE + 100)
    rx.put(b"a" * LINE + b"b" * 100)
    assert ring.store(rx, 0, 10_000) == LINE   # n is clamped to what rx holds
    assert rx.used == 100 and rx.peek(100) == b"b" * 100   # the rest waits in rx
    assert ring.fetch(tx, 0, LINE + 50) == LINE           # the cached line, no more
    assert tx.get(LINE + 100) == b"a" * LINE
    cache_lines(xc, START // LINE + 1, 1)
    assert ring.store(rx, LINE, 100) == 100 and rx.used == 0
    assert ring.fetch(tx, LINE, 100) == 100 and tx.get(100) == b"b" * 100


def test_full_and_empty_rings_copy_nothing(xc):
    cache_lines(xc, START // LINE, 3)
    ring = DdioRing(xc, PID, START, SIZE)
    dram = mmap.mmap(-1, 200)
    rx, tx = NRing(dram, 0, 100), NRing(dram, 100, 100)
    assert ring.store(rx, 0, 50) == 0            # rx empty
    tx.put(b"x" * 100)
    assert ring.fetch(tx, 0, 50) == 0            # tx full
    with pytest.raises(ValueError):
        DdioRing(xc, PID, START, 0)
