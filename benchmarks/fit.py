"""`splitrack bench fit`: FIT request/reply RTT over shm and over zmq, and the
interconnect floors, in the same run.

What is measured, per payload size (128 B and 4 KiB):
- FIT, once per transport: two racks are started from the same spec, one with
  rack.transport "shm" (the default), one with "zmq". In each, the first
  pComponent's monitor calls ECHO on the first mComponent's monitor
  (PING_PEER), so both ends are real monitor processes of a real rack and the
  clock runs inside the caller, as a component would see it;
- the floors (benchmarks/floors.py): the same echo between this process and a
  plain child process with no FIT code: linux_tcp (TCP loopback, TCP_NODELAY),
  unix (AF_UNIX stream socketpair), shm_eventfd (FIT's rings, both sides asleep
  on their eventfds between messages), shm_spin (the same rings, both sides
  spinning), raw_zmq (pyzmq DEALER/ROUTER over ipc).
All seven are interleaved in `reps` repetitions (their order rotating), each
warmed up alike in every repetition, so that the machine's noise hits all
alike (`--duration S`: repetitions until S seconds have passed). Reported:
the statistics of benchmarks/stats.py for every series ("stats"), and ratios
of p50s, each target's with its range over paired repetitions.
Also reported: how long `Rack.start()` took (`rack_up_s`: the shm rack, the
default transport; `rack_up_s_by_transport`: both).

Targets (docs/benchmarks.md): FIT shm RTT p50 / Linux TCP p50 <= 1.0 at 128 B
and <= 1.3 at 4 KiB.

JSON (--json FILE): {"bench": "fit", "caller", "target", "rounds", "reps",
"rack_up_s", "rack_up_s_by_transport": {"shm", "zmq"},
"results": [{"size", "transport": "shm"|"zmq", "fit_p50_us", "fit_p99_us",
             "over_linux_tcp", "over_shm_eventfd", "over_raw_zmq"}],
"floors": [{"size", "name", "p50_us", "p99_us"}],
"targets": [{"name", "value", "low", "high", "limit", "sense", "verdict", "met",
              "floor"}], "stats", "machine", "settings"} (report.py)
"""

import argparse
import array
import contextlib
import copy
import dataclasses
import os
import time
from typing import Any

from benchmarks import floors
from benchmarks.limits import FIT_RTT_OVER_LINUX, RACK_UP_S
from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.stats import Series, point, ratio_of, repetitions, target
from fit_rpc import Op
from splitrack.params import (
    BENCH_FIT_REPS,
    BENCH_FIT_ROUNDS,
    BENCH_FIT_SIZES_BYTES,
    BENCH_WARMUP_ROUNDS,
)
from splitrack.rack import Rack
from splitrack.spec import RackSpec, load_spec

TRANSPORTS = ("shm", "zmq")
_SIZE_LABELS = {128: "128 B", 4096: "4 KiB"}


def run(spec: Any = None, sizes: tuple[int, ...] = BENCH_FIT_SIZES_BYTES,
        rounds: int = BENCH_FIT_ROUNDS, reps: int = BENCH_FIT_REPS,
        duration: float | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    base = load_spec(spec, name=f"bench-fit-{os.getpid()}")
    caller = next(c["id"] for c in base.components if c["kind"] == "p")
    target = next(c["id"] for c in base.components if c["kind"] == "m")
    fit, floor = Series(), Series()
    rack_up_s: dict[str, float] = {}
    done = 0
    with contextlib.ExitStack() as stack:
        endpoints = {}
        for transport in TRANSPORTS:
            t0 = time.monotonic()
            rack = stack.enter_context(Rack(_with_transport(base, transport)))
            rack_up_s[transport] = round(time.monotonic() - t0, 3)
            endpoints[transport] = rack.endpoint()
        echoes = stack.enter_context(floors.Echoes(floors.NAMES))
        kinds = [("fit", t) for t in TRANSPORTS] + [("floor", n) for n in floors.NAMES]
        advance = stack.enter_context(progress("bench fit", None if duration else reps))
        for rep in repetitions(reps, duration):
            order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
            for size in sizes:
                for what, name in order:
                    if what == "fit":
                        fit.add(name, size, _ping(endpoints[name], caller, target, size, rounds))
                    else:
                        floor.add(name, size, echoes.round_trips(name, size, rounds,
                                                                 BENCH_WARMUP_ROUNDS))
            done += 1
            advance(f"repetition {done}")
    floor_rows = floors.summarize(floor)
    results = [_result(transport, size, fit, floor) for size in sizes for transport in TRANSPORTS]
    report = {"bench": "fit", "caller": caller, "target": target, "rounds": rounds,
              "reps": done, "rack_up_s": rack_up_s["shm"], "rack_up_s_by_transport": rack_up_s,
              "results": results, "floors": floor_rows}
    report["targets"] = _targets(sizes, fit, floor, rack_up_s["shm"])
    report["settings"] = {"rounds": rounds, "reps": done, "sizes": list(sizes),
                          "duration": duration}
    return report, {"fit/": fit, "floor/": floor}


def _with_transport(base: RackSpec, transport: str) -> RackSpec:
    """The spec `base` with this transport, under a rack name of its own."""
    endpoints = base.endpoints if transport == "zmq" else "ipc"   # tcp inboxes are zmq's
    return dataclasses.replace(base, transport=transport, endpoints=endpoints,
                               name=f"{base.name}-{transport}",
                               components=copy.deepcopy(base.components))


def _ping(ep: Any, caller: str, target: str, size: int, rounds: int) -> list[float]:
    """`rounds` ECHO round trips from `caller` to `target`, timed inside the caller."""
    _, data = ep.call_args(caller, Op.PING_PEER,
                           {"target": target, "size": size, "count": rounds,
                            "warmup": BENCH_WARMUP_ROUNDS},
                           timeout=60 + rounds * 0.01)
    return list(array.array("d", bytes(data)))


def _result(transport: str, size: int, fit: Series, floor: Series) -> dict[str, Any]:
    got = fit.summary(transport, size)
    row: dict[str, Any] = {"size": size, "transport": transport,
                           "fit_p50_us": round(got["p50"], 2), "fit_p99_us": round(got["p99"], 2)}
    for name in ("linux_tcp", "shm_eventfd", "raw_zmq"):
        row[f"over_{name}"] = round(got["p50"] / floor.summary(name, size)["p50"], 3)
    return row


def _targets(sizes: tuple[int, ...], fit: Series, floor: Series,
             rack_up_s: float) -> list[dict[str, Any]]:
    """Each target of docs/benchmarks.md with what this run measured. No floor:
    FIT polls (rack.poll_us), so it can beat the rings asleep (shm_eventfd)."""
    out = [target(f"FIT shm RTT p50 / Linux TCP p50 at {_SIZE_LABELS[size]}",
                  ratio_of(fit.reps["shm", size], floor.reps["linux_tcp", size]),
                  FIT_RTT_OVER_LINUX[size]) for size in sizes if size in FIT_RTT_OVER_LINUX]
    return [*out, target("shm rack up, seconds", point(rack_up_s), RACK_UP_S)]


def print_table(report: dict[str, Any]) -> None:
    print(f"FIT {report['caller']} -> {report['target']} ECHO over shm and zmq, and the "
          f"interconnect floors ({report['reps']} x {report['rounds']} round trips each, "
          "interleaved); round trips in µs")
    print_stats(sorted(report["stats"], key=lambda r: r["size"]), "what")
    print(f"{'size':>6}  {'what':<12} {'p50 / linux_tcp':>15}")
    for size in sorted({r["size"] for r in report["results"]}):
        linux = floors.p50(report["floors"], "linux_tcp", size)
        lines = [(f"FIT {r['transport']}", r["fit_p50_us"])
                 for r in report["results"] if r["size"] == size]
        lines += [(f["name"], f["p50_us"]) for f in report["floors"] if f["size"] == size]
        for what, p50 in lines:
            print(f"{size:>6}  {what:<12} {p50 / linux:>15.3f}")
    up = report["rack_up_s_by_transport"]
    print("rack up in " + ", ".join(f"{s:.2f} s ({t})" for t, s in up.items()))


def main(args: argparse.Namespace) -> int:
    report, series = run(args.spec, rounds=args.rounds or BENCH_FIT_ROUNDS,
                         reps=args.reps or BENCH_FIT_REPS, duration=args.duration)
    return finish(report, args, print_table, series)
