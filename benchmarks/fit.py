"""`splitrack bench fit`: FIT request/reply RTT over shm and over zmq, and the
interconnect floors, in the same run.

What is measured, per payload size (128 B and 4 KiB):
- FIT, once per transport: two racks are started from the same spec, one with
  rack.transport "shm" (the default), one with "zmq". In each, the first
  pComponent's monitor calls ECHO on the first mComponent's monitor
  (PING_PEER), so both ends are real monitor processes of a real rack and the
  clock runs inside the caller, as a component would see it. ECHO is FIT's own
  ping (the Endpoint's op): over shm the mComponent's data plane answers it in
  C where its inbox waits (native/mplane.h), as it answers M_MISS, so this is
  the transport's round trip with no handler behind it;
- shm_python: the same ECHO from the same caller to a component whose inbox
  wait is Python's (the first other pComponent or sComponent; none: not
  measured), so its Endpoint's Python handler answers it: what a round trip
  to an op served in Python costs on top (not a target);
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

The interconnect model (--fabric-latency LIST, --fabric-bandwidth BW): one more
shm rack for each latency L, with [fabric] latency = L, and one with [fabric]
bandwidth = BW, interleaved with the rest. Reported: each one's FIT RTT p50 and
its increase over the shm rack's (no model) at each size, against 2L (the
request's L and the reply's); and ECHO round trips of BW_SIZE bytes on the
bandwidth's rack and on the shm rack, their throughput 2 x BW_SIZE / RTT (the
bytes carried one way, then the other) against the bandwidth. Targets: the
increase is 2L within 10 % for L >= 10 µs; the throughput is the bandwidth
within 10 %.

Targets (docs/benchmarks.md): FIT shm RTT p50 / Linux TCP p50 <= 1.0 at 128 B
and <= 1.3 at 4 KiB; each with its floor, shm_spin / Linux TCP (the rings
between two Python processes spinning, no FIT code: a FIT call from Python to
a Python handler cannot beat it; to the mComponent's C it can, with a core
busy, where the two ends take turns on one core and the callee's turn is
short). `over_shm_spin` is FIT's round trip over it.

JSON (--json FILE): {"bench": "fit", "caller", "target", "rounds", "reps",
"rack_up_s", "rack_up_s_by_transport": {"shm", "zmq"},
"results": [{"size", "transport": "shm"|"zmq", "fit_p50_us", "fit_p99_us",
             "over_linux_tcp", "over_shm_eventfd", "over_shm_spin", "over_raw_zmq"}],
"python_handler": [{"size", "target", "fit_p50_us", "fit_p99_us", "over_linux_tcp"}]
    (shm_python; empty without such a component),
"floors": [{"size", "name", "p50_us", "p99_us"}],
"fabric": {"latency": [{"latency_us", "size", "fit_p50_us", "increase_us", "over_2L",
                        "min_over_2L"}],
           "bandwidth": {"bandwidth_MBps", "size", "fit_p50_us", "throughput_MBps",
                         "over_bandwidth", "no_model_throughput_MBps"}} (with the options),
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

import numpy as np

from benchmarks import floors
from benchmarks.limits import FABRIC_BAND, FABRIC_FROM_US, FIT_RTT_OVER_LINUX, RACK_UP_S
from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.stats import Series, point, ratio_of, repetitions, spanning, target
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
BW_SIZE = 1 << 20          # the bandwidth's ECHO size (PING_PEER's largest)
BW_WARMUP = 5              # ... its warm-up round trips


def run(spec: Any = None, sizes: tuple[int, ...] = BENCH_FIT_SIZES_BYTES,
        rounds: int = BENCH_FIT_ROUNDS, reps: int = BENCH_FIT_REPS,
        duration: float | None = None, latencies: tuple[int, ...] = (),
        bandwidth: int | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    """latencies (ns) and bandwidth (bytes/s): the interconnect model's racks."""
    base = load_spec(spec, name=f"bench-fit-{os.getpid()}")
    caller = next(c["id"] for c in base.components if c["kind"] == "p")
    target = next(c["id"] for c in base.components if c["kind"] == "m")
    handler = next((c["id"] for c in base.components
                    if c["kind"] in ("p", "s") and c["id"] != caller), None)
    fit, floor = Series(), Series()
    rack_up_s: dict[str, float] = {}
    done = 0
    modeled = {_latency_name(ns): (ns, None) for ns in latencies}
    if bandwidth:
        modeled[BW_NAME] = (None, bandwidth)
    with contextlib.ExitStack() as stack:
        endpoints = {}
        for i, name in enumerate([*TRANSPORTS, *modeled]):
            t0 = time.monotonic()
            rack_spec = _with_transport(base, name) if name in TRANSPORTS else \
                _with_fabric(base, i, *modeled[name])
            rack = stack.enter_context(Rack(rack_spec))
            rack_up_s[name] = round(time.monotonic() - t0, 3)
            endpoints[name] = rack.endpoint()
        echoes = stack.enter_context(floors.Echoes(floors.NAMES))
        kinds = [("fit", t) for t in TRANSPORTS] + [("floor", n) for n in floors.NAMES]
        kinds += [("fit", name) for name in modeled if name != BW_NAME]
        kinds += [("fit", PYTHON)] if handler else []
        advance = stack.enter_context(progress("bench fit", None if duration else reps))
        for rep in repetitions(reps, duration):
            order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
            for size in sizes:
                for what, name in order:
                    if name == PYTHON:
                        fit.add(name, size, _ping(endpoints["shm"], caller, handler, size,
                                                  rounds))
                    elif what == "fit":
                        fit.add(name, size, _ping(endpoints[name], caller, target, size, rounds))
                    else:
                        floor.add(name, size, echoes.round_trips(name, size, rounds,
                                                                 BENCH_WARMUP_ROUNDS))
            if bandwidth:   # a few round trips of BW_SIZE on its rack and on shm's
                few = max(10, rounds // 200)
                for name in (BW_NAME, "shm")[::1 if rep % 2 else -1]:
                    fit.add(name, BW_SIZE, _ping(endpoints[name], caller, target, BW_SIZE,
                                                 few, BW_WARMUP))
            done += 1
            advance(f"repetition {done}")
    floor_rows = floors.summarize(floor)
    results = [_result(transport, size, fit, floor) for size in sizes for transport in TRANSPORTS]
    report = {"bench": "fit", "caller": caller, "target": target, "rounds": rounds,
              "reps": done, "rack_up_s": rack_up_s["shm"],
              "rack_up_s_by_transport": {t: rack_up_s[t] for t in TRANSPORTS},
              "results": results, "floors": floor_rows,
              "python_handler": [_python_row(handler, size, fit, floor)
                                 for size in sizes if handler]}
    report["targets"] = _targets(sizes, fit, floor, rack_up_s["shm"])
    if modeled:
        report["fabric"] = _fabric(sizes, fit, latencies, bandwidth)
        report["targets"] += _fabric_targets(report["fabric"], fit, sizes, latencies, bandwidth)
    report["settings"] = {"rounds": rounds, "reps": done, "sizes": list(sizes),
                          "duration": duration, "fabric_latency_ns": list(latencies),
                          "fabric_bandwidth_Bps": bandwidth}
    return report, {"fit/": fit, "floor/": floor}


BW_NAME = "shm+bandwidth"
PYTHON = "shm_python"   # ECHO answered by a Python handler (the module's docstring)


def _latency_name(ns: int) -> str:
    return f"shm+{ns / 1000:g}us"


def _with_fabric(base: RackSpec, i: int, latency_ns: int | None,
                 bytes_per_s: int | None) -> RackSpec:
    """The shm rack of `base` with a [fabric] of this latency or bandwidth, named -f<i>."""
    spec = _with_transport(base, "shm")
    return dataclasses.replace(spec, name=f"{base.name}-f{i}", fabric={
        "latency_ns": latency_ns, "bytes_per_s": bytes_per_s, "links": {}})


def _fabric(sizes: tuple[int, ...], fit: Series, latencies: tuple[int, ...],
            bandwidth: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"latency": []}
    for ns in latencies:
        for size in sizes:
            got, none = fit.summary(_latency_name(ns), size), fit.summary("shm", size)
            p50, low = got["p50"] - none["p50"], got["min"] - none["min"]
            out["latency"].append({"latency_us": ns / 1000, "size": size,
                                   "fit_p50_us": round(got["p50"], 2),
                                   "increase_us": round(p50, 2),
                                   "over_2L": round(p50 * 1000 / (2 * ns), 3) if ns else None,
                                   "min_over_2L": round(low * 1000 / (2 * ns), 3)
                                   if ns else None})
    if bandwidth:
        p50, none = fit.summary(BW_NAME, BW_SIZE)["p50"], fit.summary("shm", BW_SIZE)["p50"]
        out["bandwidth"] = {"bandwidth_MBps": bandwidth / 1e6, "size": BW_SIZE,
                            "fit_p50_us": round(p50, 1),
                            "throughput_MBps": round(2 * BW_SIZE / p50, 1),
                            "over_bandwidth": round(2 * BW_SIZE / p50 * 1e6 / bandwidth, 3),
                            "no_model_throughput_MBps": round(2 * BW_SIZE / none, 1)}
    return out


def _fabric_targets(fabric: dict[str, Any], fit: Series, sizes: tuple[int, ...],
                    latencies: tuple[int, ...], bandwidth: int | None) -> list[dict[str, Any]]:
    """The increase over 2L, and the throughput over the bandwidth, each within
    FABRIC_BAND, with their range over paired repetitions."""
    out = []

    def band(name: str, value: float, paired: list[float]) -> None:
        got = spanning(value, paired)
        out.append(target(f"{name} (>= {FABRIC_BAND[0]})", got, FABRIC_BAND[0], at_most=False))
        out.append(target(f"{name} (<= {FABRIC_BAND[1]})", got, FABRIC_BAND[1]))

    for row in fabric["latency"]:
        ns, size = round(row["latency_us"] * 1000), row["size"]
        if ns >= FABRIC_FROM_US * 1000:
            two_l = 2 * ns / 1000
            band(f"FIT RTT increase / 2L at L = {row['latency_us']:g} us, "
                 f"{_SIZE_LABELS.get(size, f'{size} B')}", row["over_2L"],
                 [(m - b) / two_l for m, b in _paired(fit, _latency_name(ns), "shm", size)])
    if bandwidth:
        row = fabric["bandwidth"]
        band(f"FIT throughput / bandwidth at {row['bandwidth_MBps']:g} MB/s, 1 MiB ECHO",
             row["over_bandwidth"], [2 * BW_SIZE / m * 1e6 / bandwidth
                                     for m, _ in _paired(fit, BW_NAME, "shm", BW_SIZE)])
    return out


def _paired(fit: Series, a: str, b: str, size: int) -> list[tuple[float, float]]:
    """Each repetition's medians of series a and b at this size."""
    return [(float(np.median(x)), float(np.median(y)))
            for x, y in zip(fit.reps[a, size], fit.reps[b, size], strict=True)]


def _with_transport(base: RackSpec, transport: str) -> RackSpec:
    """The spec `base` with this transport, under a rack name of its own."""
    endpoints = base.endpoints if transport == "zmq" else "ipc"   # tcp inboxes are zmq's
    return dataclasses.replace(base, transport=transport, endpoints=endpoints,
                               name=f"{base.name}-{transport}",
                               components=copy.deepcopy(base.components))


def _ping(ep: Any, caller: str, target: str, size: int, rounds: int,
          warmup: int = BENCH_WARMUP_ROUNDS) -> list[float]:
    """`rounds` ECHO round trips from `caller` to `target`, timed inside the caller."""
    _, data = ep.call_args(caller, Op.PING_PEER,
                           {"target": target, "size": size, "count": rounds,
                            "warmup": warmup},
                           timeout=60 + rounds * 0.01)
    return list(array.array("d", bytes(data)))


def _result(transport: str, size: int, fit: Series, floor: Series) -> dict[str, Any]:
    got = fit.summary(transport, size)
    row: dict[str, Any] = {"size": size, "transport": transport,
                           "fit_p50_us": round(got["p50"], 2), "fit_p99_us": round(got["p99"], 2)}
    for name in ("linux_tcp", "shm_eventfd", "shm_spin", "raw_zmq"):
        row[f"over_{name}"] = round(got["p50"] / floor.summary(name, size)["p50"], 3)
    return row


def _python_row(handler: str, size: int, fit: Series, floor: Series) -> dict[str, Any]:
    got = fit.summary(PYTHON, size)
    return {"size": size, "target": handler, "fit_p50_us": round(got["p50"], 2),
            "fit_p99_us": round(got["p99"], 2),
            "over_linux_tcp": round(got["p50"] / floor.summary("linux_tcp", size)["p50"], 3)}


def _targets(sizes: tuple[int, ...], fit: Series, floor: Series,
             rack_up_s: float) -> list[dict[str, Any]]:
    """Each target of docs/benchmarks.md with what this run measured, and its floor:
    shm_spin, the same rings between two Python processes that spin, with no FIT
    code. A FIT call between two Python ends does all of that and more, so it
    cannot be faster; the ECHO measured here is answered in C (with a core busy
    it can be). (shm_eventfd is no floor: FIT polls, rack.poll_us, so it can
    beat the rings asleep.)"""
    out = [target(f"FIT shm RTT p50 / Linux TCP p50 at {_SIZE_LABELS[size]}",
                  ratio_of(fit.reps["shm", size], floor.reps["linux_tcp", size]),
                  FIT_RTT_OVER_LINUX[size],
                  floor={"name": "shm_spin / Linux TCP",
                         "value": ratio_of(floor.reps["shm_spin", size],
                                           floor.reps["linux_tcp", size])["value"]})
           for size in sizes if size in FIT_RTT_OVER_LINUX]
    return [*out, target("shm rack up, seconds", point(rack_up_s), RACK_UP_S)]


def print_table(report: dict[str, Any]) -> None:
    print(f"FIT {report['caller']} -> {report['target']} ECHO over shm and zmq, and the "
          f"interconnect floors ({report['reps']} x {report['rounds']} round trips each, "
          "interleaved); round trips in µs")
    print_stats(sorted(report["stats"], key=lambda r: r["size"]), "what")
    print(f"{'size':>6}  {'what':<14} {'p50 / linux_tcp':>15}")
    for size in sorted({r["size"] for r in report["results"]}):
        linux = floors.p50(report["floors"], "linux_tcp", size)
        lines = [(f"FIT {r['transport']}", r["fit_p50_us"])
                 for r in report["results"] if r["size"] == size]
        lines += [(f"FIT {PYTHON}", r["fit_p50_us"])
                  for r in report["python_handler"] if r["size"] == size]
        lines += [(f["name"], f["p50_us"]) for f in report["floors"] if f["size"] == size]
        for what, p50 in lines:
            print(f"{size:>6}  {what:<14} {p50 / linux:>15.3f}")
    up = report["rack_up_s_by_transport"]
    print("rack up in " + ", ".join(f"{s:.2f} s ({t})" for t, s in up.items()))
    fabric = report.get("fabric")
    if fabric:
        print("the interconnect model ([fabric]): FIT shm RTT p50 with latency L, and its "
              "increase over the shm rack's (no model), against 2L; min / 2L: the same "
              "for the fastest round trips (on a loaded machine the p50s of the rack without "
              "a model pay wake-ups that a model's waits, spinning to a due time, do not)")
        print(f"{'L us':>7}{'size':>7}{'p50 us':>10}{'increase us':>13}{'/ 2L':>7}"
              f"{'min / 2L':>10}")
        for r in fabric["latency"]:
            over, low = ("", "") if r["over_2L"] is None else \
                (f"{r['over_2L']:.3f}", f"{r['min_over_2L']:.3f}")
            print(f"{r['latency_us']:>7g}{r['size']:>7}{r['fit_p50_us']:>10.2f}"
                  f"{r['increase_us']:>13.2f}{over:>7}{low:>10}")
        bw = fabric.get("bandwidth")
        if bw:
            print(f"bandwidth {bw['bandwidth_MBps']:g} MB/s: 1 MiB ECHO p50 "
                  f"{bw['fit_p50_us']:.0f} us = {bw['throughput_MBps']:.1f} MB/s "
                  f"({bw['over_bandwidth']:.3f} x the bandwidth; no model: "
                  f"{bw['no_model_throughput_MBps']:.1f} MB/s)")


def main(args: argparse.Namespace) -> int:
    report, series = run(args.spec, rounds=args.rounds or BENCH_FIT_ROUNDS,
                         reps=args.reps or BENCH_FIT_REPS, duration=args.duration,
                         latencies=args.fabric_latency or (),
                         bandwidth=args.fabric_bandwidth)
    return finish(report, args, print_table, series)
