"""dDMA's native copies (native/dma.c) through their binding, on a private arena and
DRAM ring (no rack needed): a process's ring mapped as runs scattered over the
arena, bytes that wrap in both rings land where the runs say and come back in
order, against a model of the ring, on random geometries; what was copied leaves
(store) or joins (fetch) the DRAM ring; runs that do not cover the ring, or leave
the arena, are refused."""

import errno
import random

import pytest

from native.dma import DmaRing
from native.nring import NRing, lib

START = 0x7F0000


def scattered(rng: random.Random, size: int, arena: int) -> list[tuple[int, int, int]]:
    """The ring [0, size) cut into runs, each at a distinct place of the arena."""
    cuts = sorted({0, size, *(rng.randrange(1, size) for _ in range(rng.randrange(4)))})
    slots = rng.sample(range(arena // size), len(cuts) - 1)
    return [(a, slot * size, b - a) for a, b, slot in zip(cuts, cuts[1:], slots, strict=False)]


def model_bytes(arena: bytearray, runs, size: int, pos: int, n: int) -> bytes:
    out = bytearray()
    for i in range(n):
        at = (pos + i) % size
        a, off, _ = next(r for r in runs if r[0] <= at < r[0] + r[2])
        out.append(arena[off + at - a])
    return bytes(out)


@pytest.mark.parametrize("seed", range(20))
def test_store_and_fetch_wrap_through_scattered_runs(seed):
    rng = random.Random(seed)
    size = rng.randrange(1, 5000)
    arena = bytearray(16 * 5000)
    runs = scattered(rng, size, len(arena))
    ring = DmaRing(arena, START, size, runs)
    dram = bytearray(rng.randrange(1, 3000))
    rx, tx = NRing(dram, 0, len(dram)), NRing(bytearray(len(dram)), 0, len(dram))
    pos = rng.randrange(3 * size)
    for _ in range(10):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, len(dram) + 1)))
        assert rx.put(data) == len(data)
        n = rng.randrange(min(len(data), size) + 1)   # (at most a lap of the ring)
        done = lib.dm_store(rx._r, ring.ring, pos, n)
        assert done == n
        assert model_bytes(arena, runs, size, pos, done) == data[:done]
        assert rx.used == len(data) - done
        rx.drop(rx.used)
        assert lib.dm_fetch(tx._r, ring.ring, pos, done) == done
        assert tx.get(done) == data[:done]
        pos += done


def test_runs_that_do_not_cover_the_ring_or_leave_the_arena_are_refused():
    arena = bytearray(4096)
    for runs in ([(0, 0, 100)], [(0, 0, 100), (150, 200, 50)], [(0, 4000, 200)],
                 [(0, -1, 200)], []):
        with pytest.raises(OSError) as got:
            DmaRing(arena, START, 200, runs)
        assert got.value.errno == errno.EINVAL
    assert DmaRing(arena, START, 200, [(0, 4000, 96), (96, 0, 104)]).ring.nruns == 2
