"""dDDIO's native copies (native/ddio.c) through their binding, on a private
extCache segment and DRAM ring (no rack needed): bytes that wrap in both rings
arrive in order, a copy stops at the first line that is not cached and goes on
once it is, and what was copied leaves (store) or joins (fetch) the DRAM ring;
against a model of both rings, on random geometries; bad rings and a closed
extCache are errors."""

import errno
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
    for start, size in ((START, 0), (-1, SIZE), (START, 1 << 64), (START, 1.5)):
        with pytest.raises(OSError) as bad:
            DdioRing(xc, PID, start, size)
        assert bad.value.errno == errno.EINVAL


def test_a_closed_extcache_says_ebadf_and_stays_mapped(xc):
    cache_lines(xc, START // LINE, 1)
    ring = DdioRing(xc, PID, START, SIZE)
    dram = mmap.mmap(-1, 200)
    rx = NRing(dram, 0, 100)
    rx.put(b"x" * 10)
    xc.close()   # its pComponent ended: the ring's copies fail, and touch nothing
    for copy in (ring.store, ring.fetch):
        with pytest.raises(OSError) as closed:
            copy(rx, 0, 10)
        assert closed.value.errno == errno.EBADF
    assert rx.used == 10


@pytest.mark.parametrize("seed", range(40))
def test_copies_match_a_model_of_the_two_rings(seed):
    """Random geometry (a ring that starts inside a line and is no multiple of
    one), random lines cached and dropped, DRAM rings wrapped anywhere: each copy
    takes the bytes in stream order up to the first line that is not cached."""
    rng = random.Random(seed)
    line, ways = rng.choice([64, 128, 256]), rng.choice([1, 2, 4])
    fd = os.memfd_create("xc", os.MFD_CLOEXEC)
    size = ExtCache.segment_size(32 * line, line, ways)
    os.ftruncate(fd, size)
    cache = ExtCache.create(mmap.mmap(fd, size), 32 * line, line, ways)
    os.close(fd)
    start, size = rng.randrange(50 * line), rng.randrange(1, 6 * line)
    ring = DdioRing(cache, PID, start, size)
    pages = range(start // line, (start + size - 1) // line + 1)
    cap = rng.randrange(1, 4 * size + 2)
    dram = bytearray(2 * cap + 7)
    rx, tx = NRing(dram, 0, cap), NRing(dram, cap + 7, cap)
    skew = rng.randrange(cap)   # the DRAM rings' positions start anywhere
    rx.put(bytes(skew))
    rx.drop(skew)
    tx.put(bytes(skew))
    tx.drop(skew)

    def cached(addr):
        return cache.read_into(-1, PID, addr, bytearray(1)) == 1

    def addr(i):
        return start + (pos + i) % size

    pos = rng.randrange(10 * size)
    for _ in range(10):
        for page in pages:
            r = rng.random()
            if r < 0.1:
                cache.invalidate(PID, page, 1)
            elif r < 0.4 and cache.miss_begin(-1, PID, page) is not None:
                cache.miss_end(-1, PID, page, 0, None)
        rx.reset()
        data = rng.randbytes(rx.put(rng.randbytes(rng.randrange(cap + 1))))
        rx.reset()
        rx.put(data)
        n = rng.randrange(cap + 3)
        want = 0
        while want < min(n, len(data)) and cached(addr(want)):
            want += 1
        assert ring.store(rx, pos, n) == want
        assert rx.peek(rx.used) == data[want:]
        last = {addr(i): data[i] for i in range(want)}   # a ring shorter than n: the
        for a, byte in last.items():                       # last lap's bytes are there
            out = bytearray(1)
            assert cache.read_into(-1, PID, a, out) == 1 and out[0] == byte
        tx.reset()
        fill = rng.randrange(cap + 1)
        tx.put(b"\xee" * fill)
        n = rng.randrange(cap + 3)
        want = 0
        while want < min(n, cap - fill) and cached(addr(want)):
            want += 1
        expect = bytearray(want)
        for i in range(want):
            cache.read_into(-1, PID, addr(i), memoryview(expect)[i:i + 1])
        assert ring.fetch(tx, pos, n) == want
        assert tx.get(tx.used) == b"\xee" * fill + bytes(expect)
        pos += rng.randrange(2 * size)
    cache.close()
