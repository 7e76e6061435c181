"""`splitrack bench extcache`: the memory path's costs, from a process on p0.

Measured (each a distribution of single operations, timed with perf_counter_ns):
- read_hit / write_hit    `size` bytes of a cached line: C only, no message;
- read_miss               one line from its home mComponent (M_MISS), the
                          line having been written back before;
- write_miss_zerofill     first touch of a page: zero-filled here, no message;
- evict_writeback         a miss that evicts a dirty line of the same home: the
                          victim rides in the M_MISS (LegoOS piggyback);
- m_miss_call             read_miss's M_MISS alone: the same request for the
                          same line after the same untimed invalidate, an
                          Endpoint.call and nothing of the extCache (the
                          interconnect's and the mComponent's part of a miss;
                          the rest is the extCache's and the VM's).
Baselines in the same run, interleaved with the read_miss repetitions:
- raw pyzmq DEALER/ROUTER, a small request answered with one line, between
  this process and a plain process (raw_zmq_p50_us);
- the interconnect floors (benchmarks/floors.py: linux_tcp, unix,
  shm_eventfd, shm_spin, raw_zmq) at 128 B and at the line size, between this
  process and plain echoing children, no FIT code;
- copy_4k_us: one 4 KiB copy in this process (a bytearray slice assignment;
  the median over batches of many, some in every repetition).
Every op is measured in every repetition, interleaved with the baselines.
Targets: read_miss p50 <= 1.5 x (shm_eventfd p50 at the line size +
copy_4k_us): a miss is one round trip over FIT's rings, each side asleep
between messages (the floor moves a line each way, a miss asks with a few
bytes), plus the line copied into the extCache; and read_hit p50 at the line
size <= 1 µs.

JSON (--json FILE): {"bench": "extcache", "config": {...}, "results": [{"op", "size",
"p50_us", "p99_us"}], "raw_zmq_p50_us", "raw_zmq_p99_us", "miss_ratio_p50",
"floors": [{"size", "name", "p50_us", "p99_us"}], "copy_4k_us", "miss_over_floor",
"miss_call_over_floor" (m_miss_call's p50 over the same bound as read_miss's),
"targets": [{"name", "value", "low", "high", "limit", "sense", "verdict", "met"}],
"stats", "machine", "settings"} (report.py; the target's range: repetition by
repetition, that repetition's read_miss median over its floor plus its copy)
"""

import argparse
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks import floors
from benchmarks.limits import MISS_OVER_FLOOR, READ_HIT_US
from benchmarks.progress import progress
from benchmarks.raw_zmq import RawClient, RawServer
from benchmarks.report import finish, print_stats
from benchmarks.stats import Series, repetitions, spanning, target
from fit_rpc import Op
from fit_rpc.pages import MISS
from splitrack.guest.vm import VirtualMemory
from splitrack.params import BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec

HIT_ROUNDS = 20_000
MISS_ROUNDS = 2_000
REPS = 5
COPY_BYTES = 4096
COPY_BATCH = 1000         # copies timed together: one copy is shorter than the clock's tick
COPY_SAMPLES = 40         # batches a repetition


def run(spec: Any = None, rounds: int = MISS_ROUNDS, reps: int = REPS,
        duration: float | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    rack_spec = load_spec(spec, name=f"bench-xc-{os.getpid()}")
    p0 = next(c for c in rack_spec.components if c["kind"] == "p")
    line = rack_spec.line
    ops, floor, base = Series(), Series(), Series()
    with Rack(rack_spec) as rack, VirtualMemory.attach(rack, p0["id"]) as vm:
        raw_address = f"ipc://{rack.run.path}/raw-line.sock"
        with RawServer(raw_address, reply_bytes=line), floors.Echoes(floors.NAMES) as echoes, \
                progress("bench extcache", None if duration else reps) as advance:
            raw = RawClient(raw_address)
            try:
                _measure(vm, raw, line, rounds, repetitions(reps, duration), ops, base,
                         lambda: _baselines(echoes, floor, base, rounds, line, advance))
            finally:
                raw.close()
    results = ops.p50_rows("op")
    raw_stats = base.summary("raw_zmq_line", line)
    miss = ops.summary("read_miss", line)
    floor_rows = floors.summarize(floor)
    # the bound, repetition by repetition: the floor at the line, plus one 4 KiB copy
    bound = [float(np.median(f)) + float(np.median(c)) for f, c in
             zip(floor.reps["shm_eventfd", line], base.reps["copy_4k", COPY_BYTES], strict=True)]
    paired = [float(np.median(m)) / b for m, b in zip(ops.reps["read_miss", line], bound,
                                                       strict=True)]
    floor_and_copy = (floors.p50(floor_rows, "shm_eventfd", line)
                      + base.summary("copy_4k", COPY_BYTES)["p50"])
    over = spanning(miss["p50"] / floor_and_copy, paired)
    hit, call = ops.summary("read_hit", line), ops.summary("m_miss_call", line)
    report = {"bench": "extcache",
              "config": {"pcomponent": p0["id"], "extcache_bytes": p0["extcache"],
                         "ways": p0["ways"], "eviction": p0["eviction"], "line": line},
              "results": results, "raw_zmq_p50_us": round(raw_stats["p50"], 2),
              "raw_zmq_p99_us": round(raw_stats["p99"], 2),
              "miss_ratio_p50": round(miss["p50"] / raw_stats["p50"], 3),
              "floors": floor_rows,
              "copy_4k_us": round(base.summary("copy_4k", COPY_BYTES)["p50"], 4),
              "miss_over_floor": over["value"],
              "miss_call_over_floor": round(call["p50"] / floor_and_copy, 3),
              "targets": [target(f"extCache read miss p50 / (shm_eventfd p50 at {line} B + "
                                 "4 KiB copy)", over, MISS_OVER_FLOOR),
                          target(f"extCache read hit p50 at {line} B, µs",
                                 spanning(hit["p50"], [hit["p50_low"], hit["p50_high"]]),
                                 READ_HIT_US)],
              "settings": {"rounds": rounds, "hit_rounds": HIT_ROUNDS,
                           "reps": len(base.reps["copy_4k", COPY_BYTES]), "duration": duration}}
    return report, {"op/": ops, "floor/": floor, "base/": base}


def _baselines(echoes: floors.Echoes, floor: Series, base: Series, rounds: int, line: int,
               advance: Callable[..., None]) -> None:
    """One repetition of every floor at every size (128 B and the line), and of
    the copy."""
    for size in sorted({128, line}):
        for name in floors.NAMES:
            floor.add(name, size, echoes.round_trips(name, size, rounds, BENCH_WARMUP_ROUNDS))
    base.add("copy_4k", COPY_BYTES, _copies(COPY_BYTES, COPY_SAMPLES))
    advance(f"repetition {len(base.reps['copy_4k', COPY_BYTES])}")


def _copies(size: int, n: int) -> list[float]:
    """n samples of one copy of `size` bytes into a bytearray, in µs, each the
    mean of a batch (one copy alone is shorter than the clock resolves)."""
    src, dst = b"\4" * size, bytearray(size)
    clock = time.perf_counter_ns
    out = []
    for _ in range(n):
        t0 = clock()
        for _ in range(COPY_BATCH):
            dst[0:size] = src
        out.append((clock() - t0) / 1000.0 / COPY_BATCH)
    return out


def _measure(vm: VirtualMemory, raw: RawClient, line: int, rounds: int, reps: Iterator[int],
             ops: Series, base: Series, baselines: Callable[[], None]) -> None:
    """Every op in every repetition, interleaved with the baselines: the same
    noise for all."""
    addr = vm.alloc(line)
    buf = bytearray(line)
    home, ask = vm.home_of(addr), MISS.pack(vm.pid, addr // line, 0, 0)   # (m_miss_call's)
    evict = _eviction_pages(vm, line)
    raw.measure(28, BENCH_WARMUP_ROUNDS)  # the same warm-up for both sides
    _timed(BENCH_WARMUP_ROUNDS, lambda: vm.read_into(addr, buf),
           before=lambda: vm.invalidate(addr, line))
    for _ in reps:
        vm.write(addr, b"\1" * line)
        for size in (64, line):
            hit, data = bytearray(size), b"\2" * size
            ops.add("read_hit", size, _timed(HIT_ROUNDS, lambda b=hit: vm.read_into(addr, b)))
            ops.add("write_hit", size, _timed(HIT_ROUNDS, lambda d=data: vm.write(addr, d)))
        vm.flush(addr, line)
        base.add("raw_zmq_line", line, raw.measure(28, rounds))
        ops.add("read_miss", line, _timed(rounds, lambda: vm.read_into(addr, buf),
                                          before=lambda: vm.invalidate(addr, line)))
        ops.add("m_miss_call", line, _timed(rounds, lambda: vm.ep.call(home, Op.M_MISS, ask),
                                            before=lambda: vm.invalidate(addr, line)))
        ops.add("write_miss_zerofill", line, _zero_fills(vm, line, rounds))
        ops.add("evict_writeback", line, _evictions(vm, evict, line, rounds))
        baselines()


def _zero_fills(vm: VirtualMemory, line: int, rounds: int) -> list[float]:
    """First writes of `rounds` fresh pages: each zero-filled, no message."""
    fresh, data = vm.alloc(rounds * line), b"\5" * line
    pages = iter(range(rounds))
    try:
        return _timed(rounds, lambda: vm.write(fresh + next(pages) * line, data))
    finally:
        vm.free(fresh)


def _evictions(vm: VirtualMemory, pages: list[int], line: int, rounds: int) -> list[float]:
    """Writes to `pages` in turn: each misses and evicts a dirty line of its set."""
    cycle, data = iter(range(rounds)), b"\3" * line
    return _timed(rounds, lambda: vm.write(pages[next(cycle) % len(pages)] * line, data))


def _eviction_pages(vm: VirtualMemory, line: int) -> list[int]:
    """ways+1 pages of one set, written and written back: writing them in turn,
    every write misses and evicts the dirty least-recently-used line of the
    same home (later misses fetch, not zero-fill)."""
    region = vm.alloc(line * vm.xc.nsets * (vm.xc.ways + 2) * 4)
    first = region // line
    target = vm.xc.set_of(vm.pid, first)
    pages = [p for p in range(first, first + vm.xc.nsets * (vm.xc.ways + 2) * 4)
             if vm.xc.set_of(vm.pid, p) == target][:vm.xc.ways + 1]
    if len(pages) <= vm.xc.ways:
        raise RuntimeError("could not find enough pages of one extCache set")
    data = b"\3" * line
    for p in pages:           # touched and written back: later misses fetch, not zero-fill
        vm.write(p * line, data)
    vm.flush(region, len(pages) * line + (pages[-1] - first) * line)
    return pages


def _timed(n: int, op: Any, before: Any = None) -> list[float]:
    clock = time.perf_counter_ns
    out = [0.0] * n
    for i in range(n):
        if before is not None:
            before()
        t0 = clock()
        op()
        out[i] = (clock() - t0) / 1000.0
    return out


def print_table(report: dict[str, Any]) -> None:
    c = report["config"]
    print(f"extCache of {c['pcomponent']}: {c['extcache_bytes'] >> 20} MiB, {c['ways']}-way, "
          f"{c['eviction'].upper()}, {c['line']} B lines; single operations in µs (op/), "
          "the interconnect floors (floor/: plain processes, no FIT code, interleaved with "
          "read_miss), raw pyzmq with a one-line reply and one 4 KiB copy (base/)")
    print_stats(report["stats"], "what")
    print(f"read_miss / raw pyzmq p50 = {report['miss_ratio_p50']:.3f}; one 4 KiB copy: "
          f"{report['copy_4k_us']:.3f}us")
    print(f"over the bound (shm_eventfd at the line + one 4 KiB copy): read_miss "
          f"{report['miss_over_floor']:.3f}, its M_MISS call alone "
          f"{report['miss_call_over_floor']:.3f}")


def main(args: argparse.Namespace) -> int:
    report, series = run(args.spec, rounds=args.rounds or MISS_ROUNDS, reps=args.reps or REPS,
                         duration=args.duration)
    return finish(report, args, print_table, series)
