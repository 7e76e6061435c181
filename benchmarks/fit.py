"""`splitrack bench fit`: FIT request/reply RTT against raw pyzmq, in the same run.

What is measured, per payload size (128 B and 4 KiB by default):
- FIT: the first pComponent's monitor calls ECHO on the first mComponent's
  monitor (PING_PEER), so both ends are real monitor processes of a real rack
  and the clock runs inside the caller, as a component would see it;
- raw: a plain pyzmq DEALER in a plain process against a plain ROUTER echo
  process, one frame each way: what FIT costs before FIT adds anything. Like
  the FIT caller, the raw caller is a process of its own (not this one), so
  both pairs are placed on the machine's cores alike.
The two are interleaved in `reps` repetitions so that the machine's noise hits
both alike. Reported: p50 and p99 of all samples, and the ratio of the p50s.
Also reported: how long `Rack.start()` took (the rack is started here).

JSON (--json FILE): {"bench": "fit", "results": [{"size", "transport", "fit_p50_us",
"fit_p99_us", "raw_p50_us", "raw_p99_us", "ratio_p50"}], "rack_up_s", "rounds", "reps"}
"""

import argparse
import array
import os
import time
from typing import Any

import numpy as np

from benchmarks.raw_zmq import RawServer, measure_in_process
from benchmarks.report import finish
from fit_rpc import Op
from splitrack.params import (
    BENCH_FIT_REPS,
    BENCH_FIT_ROUNDS,
    BENCH_FIT_SIZES_BYTES,
    BENCH_WARMUP_ROUNDS,
)
from splitrack.rack import Rack
from splitrack.spec import load_spec


def run(spec: Any = None, sizes: tuple[int, ...] = BENCH_FIT_SIZES_BYTES,
        rounds: int = BENCH_FIT_ROUNDS, reps: int = BENCH_FIT_REPS) -> dict[str, Any]:
    rack_spec = load_spec(spec, name=f"bench-fit-{os.getpid()}")
    caller = next(c["id"] for c in rack_spec.components if c["kind"] == "p")
    target = next(c["id"] for c in rack_spec.components if c["kind"] == "m")
    t0 = time.monotonic()
    with Rack(rack_spec) as rack:
        rack_up_s = time.monotonic() - t0
        ep = rack.endpoint()
        raw_address = f"ipc://{rack.run.path}/raw-echo.sock"
        with RawServer(raw_address):
            results = [_measure_size(ep, caller, target, raw_address, size, rounds, reps)
                       for size in sizes]
    return {"bench": "fit", "caller": caller, "target": target, "rounds": rounds, "reps": reps,
            "rack_up_s": round(rack_up_s, 3), "results": results}


def _measure_size(ep: Any, caller: str, target: str, raw_address: str, size: int,
                  rounds: int, reps: int) -> dict[str, Any]:
    fit_samples: list[float] = []
    raw_samples: list[float] = []
    for _ in range(reps):  # each side warms up in every repetition, alike
        _, data = ep.call_args(caller, Op.PING_PEER,
                               {"target": target, "size": size, "count": rounds,
                                "warmup": BENCH_WARMUP_ROUNDS},
                               timeout=60 + rounds * 0.01)
        fit_samples.extend(array.array("d", bytes(data)))
        raw_samples.extend(measure_in_process(raw_address, size, rounds, BENCH_WARMUP_ROUNDS))
    fit_p50, fit_p99 = np.percentile(fit_samples, [50, 99])
    raw_p50, raw_p99 = np.percentile(raw_samples, [50, 99])
    return {"size": size, "transport": "zmq",
            "fit_p50_us": round(float(fit_p50), 2), "fit_p99_us": round(float(fit_p99), 2),
            "raw_p50_us": round(float(raw_p50), 2), "raw_p99_us": round(float(raw_p99), 2),
            "ratio_p50": round(float(fit_p50 / raw_p50), 3)}


def print_table(report: dict[str, Any]) -> None:
    print(f"FIT {report['caller']} -> {report['target']} ECHO vs raw pyzmq DEALER/ROUTER "
          f"({report['reps']} x {report['rounds']} round trips each, interleaved)")
    print(f"{'size':>6}  {'FIT p50':>9} {'FIT p99':>9}  {'raw p50':>9} {'raw p99':>9}  "
          f"{'FIT/raw p50':>11}")
    for r in report["results"]:
        print(f"{r['size']:>6}  {r['fit_p50_us']:>7.1f}us {r['fit_p99_us']:>7.1f}us  "
              f"{r['raw_p50_us']:>7.1f}us {r['raw_p99_us']:>7.1f}us  {r['ratio_p50']:>11.3f}")
    print(f"rack up in {report['rack_up_s']:.2f} s")


def main(args: argparse.Namespace) -> int:
    report = run(args.spec, rounds=args.rounds or BENCH_FIT_ROUNDS,
                 reps=args.reps or BENCH_FIT_REPS)
    return finish(report, args, print_table)
