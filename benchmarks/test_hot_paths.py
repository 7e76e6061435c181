"""pytest-benchmark cases for the hot paths that need no rack:

    pytest benchmarks/test_hot_paths.py

(not part of the test suite: `pytest` alone collects tests/ only). The figures
with their baselines, on a real rack, come from `splitrack bench fit|extcache`.
"""

import mmap

import pytest

from fit_rpc import codec, header
from native.extcache import ExtCache

LINE = 4096
PID = 1


@pytest.fixture(scope="module")
def xc():
    size = ExtCache.segment_size(1 << 20, LINE, 8)
    cache = ExtCache.create(mmap.mmap(-1, size), 1 << 20, LINE, 8)
    slot = cache.slot_acquire(PID)
    cache.miss_begin(slot, PID, 0)
    cache.miss_end(slot, PID, 0, 0, b"\1" * LINE)
    yield cache, slot
    cache.close()


def test_header_pack_parse(benchmark):
    frame = header.pack(header.REQUEST, 1, 7, 128) + b"\0" * 128
    benchmark(header.parse, frame)


def test_codec_round_trip(benchmark):
    benchmark(lambda: codec.decode(codec.encode({"path": "a/b", "offset": 0, "length": 4096})))


@pytest.mark.parametrize("size", [64, LINE])
def test_extcache_read_hit(benchmark, xc, size):
    cache, slot = xc
    buf = bytearray(size)
    assert benchmark(cache.read_into, slot, PID, 0, buf) == size


@pytest.mark.parametrize("size", [64, LINE])
def test_extcache_write_hit(benchmark, xc, size):
    cache, slot = xc
    data = b"\2" * size
    assert benchmark(cache.write_from, slot, PID, 0, data) == size
