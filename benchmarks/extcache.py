"""`splitrack bench extcache`: the memory path's costs, from a process on p0.

Measured (each a distribution of single operations, timed with perf_counter_ns):
- read_hit / write_hit    `size` bytes of a cached line: C only, no message;
- read_miss               one line from its home mComponent (M_MISS), the
                          line having been written back before;
- write_miss_zerofill     first touch of a page: zero-filled here, no message;
- evict_writeback         a miss that evicts a dirty line of the same home: the
                          victim rides in the M_MISS (LegoOS piggyback).
Baseline in the same run: raw pyzmq DEALER/ROUTER, a small request answered
with one line, between two plain processes, interleaved with read_miss.

JSON (--json FILE): {"bench": "extcache", "config": {...}, "results": [{"op", "size",
"p50_us", "p99_us"}], "raw_zmq_p50_us", "raw_zmq_p99_us", "miss_ratio_p50"}
"""

import argparse
import os
import time
from typing import Any

import numpy as np

from benchmarks.raw_zmq import RawClient, RawServer
from benchmarks.report import finish
from splitrack.params import BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec
from splitrack.vm import VirtualMemory

HIT_ROUNDS = 20_000
MISS_ROUNDS = 2_000
REPS = 5


def run(spec: Any = None, rounds: int = MISS_ROUNDS, reps: int = REPS) -> dict[str, Any]:
    rack_spec = load_spec(spec, name=f"bench-xc-{os.getpid()}")
    p0 = next(c for c in rack_spec.components if c["kind"] == "p")
    line = rack_spec.line
    with Rack(rack_spec) as rack, VirtualMemory.attach(rack, p0["id"]) as vm:
        raw_address = f"ipc://{rack.run.path}/raw-line.sock"
        with RawServer(raw_address, reply_bytes=line):
            raw = RawClient(raw_address)
            try:
                results, raw_samples = _measure(vm, raw, line, rounds, reps)
            finally:
                raw.close()
    raw_p50, raw_p99 = np.percentile(raw_samples, [50, 99])
    miss = next(r for r in results if r["op"] == "read_miss")
    return {"bench": "extcache",
            "config": {"pcomponent": p0["id"], "extcache_bytes": p0["extcache"],
                       "ways": p0["ways"], "eviction": p0["eviction"], "line": line},
            "results": results, "raw_zmq_p50_us": round(float(raw_p50), 2),
            "raw_zmq_p99_us": round(float(raw_p99), 2),
            "miss_ratio_p50": round(miss["p50_us"] / float(raw_p50), 3)}


def _measure(vm: VirtualMemory, raw: RawClient, line: int, rounds: int,
             reps: int) -> tuple[list[dict], list[float]]:
    results = []
    addr = vm.alloc(line)
    vm.write(addr, b"\1" * line)
    for size in (64, line):
        buf, data = bytearray(size), b"\2" * size
        read_hit = _timed(HIT_ROUNDS, lambda b=buf: vm.read_into(addr, b))
        write_hit = _timed(HIT_ROUNDS, lambda d=data: vm.write(addr, d))
        results += [_row("read_hit", size, read_hit), _row("write_hit", size, write_hit)]
    vm.flush(addr, line)
    buf = bytearray(line)
    misses: list[float] = []
    raw_samples: list[float] = []
    raw.measure(28, BENCH_WARMUP_ROUNDS)  # the same warm-up for both sides
    _timed(BENCH_WARMUP_ROUNDS, lambda: vm.read_into(addr, buf),
           before=lambda: vm.invalidate(addr, line))
    for _ in range(reps):  # interleaved with the raw baseline: the same noise for both
        raw_samples += raw.measure(28, rounds)
        misses += _timed(rounds, lambda: vm.read_into(addr, buf),
                         before=lambda: vm.invalidate(addr, line))
    results.append(_row("read_miss", line, misses))
    fresh = vm.alloc(rounds * line)
    pages = iter(range(rounds))
    results.append(_row("write_miss_zerofill", line, _timed(
        rounds, lambda: vm.write(fresh + next(pages) * line, buf))))
    results.append(_row("evict_writeback", line, _evictions(vm, line, rounds)))
    return results, raw_samples


def _evictions(vm: VirtualMemory, line: int, rounds: int) -> list[float]:
    """Cycle through ways+1 dirty pages of one set: every write misses and evicts
    the dirty least-recently-used line of the same home."""
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
    cycle = iter(range(10**9))
    return _timed(rounds, lambda: vm.write(pages[next(cycle) % len(pages)] * line, data))


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


def _row(op: str, size: int, samples: list[float]) -> dict[str, Any]:
    p50, p99 = np.percentile(samples, [50, 99])
    return {"op": op, "size": size, "p50_us": round(float(p50), 3),
            "p99_us": round(float(p99), 3)}


def print_table(report: dict[str, Any]) -> None:
    c = report["config"]
    print(f"extCache of {c['pcomponent']}: {c['extcache_bytes'] >> 20} MiB, {c['ways']}-way, "
          f"{c['eviction'].upper()}, {c['line']} B lines")
    print(f"{'op':<22}{'size':>6}  {'p50':>10} {'p99':>10}")
    for r in report["results"]:
        print(f"{r['op']:<22}{r['size']:>6}  {r['p50_us']:>8.2f}us {r['p99_us']:>8.2f}us")
    print(f"raw pyzmq RTT (small request, one-line reply): p50 {report['raw_zmq_p50_us']:.1f}us"
          f" p99 {report['raw_zmq_p99_us']:.1f}us; read_miss / raw p50 = "
          f"{report['miss_ratio_p50']:.3f}")


def main(args: argparse.Namespace) -> int:
    report = run(args.spec, rounds=args.rounds or MISS_ROUNDS, reps=args.reps or REPS)
    return finish(report, args, print_table)
