"""`splitrack bench hot`: the hot paths that need no rack, timed in this process.

    header     fit_rpc.header.parse_traced of a 128 B request frame (what an
               endpoint parses each message with)
    codec      fit_rpc.codec encode + decode of a small args dict
    read_hit   extCache read of a cached line (64 B and 4 KiB), C through cffi
    write_hit  extCache write of the same

The extCache is a private segment (ExtCache.create on an anonymous mmap), so
nothing else runs. One call is shorter than the clock resolves, so a sample is
the mean of BATCH calls; `rounds` samples a repetition, `reps` repetitions
(or as many as `--duration` S allows). No targets: these are the costs the
rack's figures are built from (docs/benchmarks.md).

JSON (--json FILE): {"bench": "hot", "batch", "rounds", "reps", "results": [{"op",
"size", "p50_us", "p99_us"}], "stats", "machine", "settings"} (report.py).
"""

import argparse
import mmap
import time
from collections.abc import Callable
from typing import Any

from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.stats import Series, repetitions
from fit_rpc import codec, header
from native.extcache import ExtCache

LINE = 4096
PID = 1
BATCH = 1000
ROUNDS, REPS = 200, 5


def _ops(cache: ExtCache, slot: int) -> dict[tuple[str, int], Callable[[], Any]]:
    frame = header.pack(header.REQUEST, 1, 7, 128) + b"\0" * 128
    args = {"path": "a/b", "offset": 0, "length": 4096}
    ops: dict[tuple[str, int], Callable[[], Any]] = {
        ("header", 128): lambda: header.parse_traced(frame),
        ("codec", len(codec.encode(args))): lambda: codec.decode(codec.encode(args))}
    for size in (64, LINE):
        buf, data = bytearray(size), b"\2" * size
        ops["read_hit", size] = lambda b=buf: cache.read_into(slot, PID, 0, b)
        ops["write_hit", size] = lambda d=data: cache.write_from(slot, PID, 0, d)
        if ops["read_hit", size]() != size or ops["write_hit", size]() != size:
            raise RuntimeError(f"the extCache did not hit on a cached line ({size} B)")
    return ops


def _samples(op: Callable[[], Any], rounds: int) -> list[float]:
    clock, out = time.perf_counter_ns, []
    for _ in range(rounds):
        t0 = clock()
        for _ in range(BATCH):
            op()
        out.append((clock() - t0) / 1000.0 / BATCH)
    return out


def run(rounds: int = ROUNDS, reps: int = REPS,
        duration: float | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    size = ExtCache.segment_size(1 << 20, LINE, 8)
    cache = ExtCache.create(mmap.mmap(-1, size), 1 << 20, LINE, 8)
    series = Series()
    try:
        slot = cache.slot_acquire(PID)
        cache.miss_begin(slot, PID, 0)
        cache.miss_end(slot, PID, 0, 0, b"\1" * LINE)
        ops = _ops(cache, slot)
        for op in ops.values():   # warm up
            _samples(op, 10)
        done = 0
        with progress("bench hot", None if duration else reps) as advance:
            for _ in repetitions(reps, duration):
                for (name, z), op in ops.items():
                    series.add(name, z, _samples(op, rounds))
                done += 1
                advance(f"repetition {done}")
    finally:
        cache.close()
    return ({"bench": "hot", "batch": BATCH, "rounds": rounds, "reps": done,
             "results": series.p50_rows("op"), "targets": [],
             "settings": {"rounds": rounds, "reps": done, "batch": BATCH,
                          "duration": duration}}, {"": series})


def print_table(report: dict[str, Any]) -> None:
    print(f"hot paths in this process, no rack: µs a call, each sample the mean of "
          f"{report['batch']} calls ({report['reps']} x {report['rounds']} samples)")
    print_stats(report["stats"], "op", 12)


def main(args: argparse.Namespace) -> int:
    report, series = run(args.rounds or ROUNDS, args.reps or REPS, args.duration)
    return finish(report, args, print_table, series)
