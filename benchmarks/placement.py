"""`splitrack bench placement`: Scylla's trade-off, pack against spread, on two workloads.

It starts a rack (unless --spec, the embedded shared one, splitrack/slices_rack.toml),
the rack manager on it (slices.serving), and one slice of min(--procs, the rack's
pComponents) pComponents, 1 mComponent and 1 nComponent. Then, in each of
--reps repetitions, the four pairs (workload, placement), their order
rotating, each one job of --procs processes (POST /slices/NAME/jobs with
that placement) that run placement_ring.py on the slice's first NIC:

    network  laps of a --quick/FULL-sized message around the ring
    cpu      the same processes on the same ring, each computing
             placement_cpu.work between a start lap and an end lap
    pack     GPM puts them on as few pComponents as fit (`cores` each, 4 by
             default): the ring's connections are pipes, and the processes
             share the host CPUs of that pComponent (`cpus`)
    spread   one a pComponent: FIT channels, and the CPUs of all of them

A run's time is rank 0's clock from the ring's barrier to its last token
(placement_ring.py): no process start-up, no polling. Each pair's result is
the median over repetitions; each workload's pack/spread ratio has its range
over paired repetitions, and a verdict: "pack faster" (the whole range below
1), "spread faster" (above 1) or "unresolved". Scylla's trade-off is shown
when network says pack and cpu says spread.

What makes a run clean, checked at each (a run that is not is run again, up
to ATTEMPTS times, and its reason kept in "reruns"; none clean: exit 1):
- it starts on an idle slice: GPM counts no process on its pComponents (GPM
  hears of a job's end from the pMonitors a moment later, and "pack" fills
  pComponents by that count);
- it exits 0;
- each of the ring's N connections took the shortcut its placement implies
  (expected_paths: a pipe between two ranks of one pComponent, else FIT),
  by the nComponent's counters (STATS network: shortcuts_pipe, shortcuts_fit,
  accepted) before and after. A connect that races its neighbour's listen()
  (the nComponent has no listener to name yet, the kernel socket listens a
  moment later) goes through the NIC instead, as Linux semantics allow.
The placed pComponents' `cpus` say which host CPUs the processes could use;
the machine's CPU count is in "machine".

JSON (--json F): {"bench": "placement", "results": [{"workload", "placement",
"seconds", "runs", "placed", "host_cpus", "paths": {"pipe", "fit", "nic"},
"reruns"}], "ratios": [{"workload", "value", "low", "high", "faster"}],
"tradeoff_shown", "procs", "slice", "laps", "bytes", "iterations", "stats",
"machine", "settings"}.
"""

import argparse
import itertools
import json
import os
import sys
import time
from typing import Any

from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.slices import SPEC, serving, wait_job
from benchmarks.stats import Series, repetitions
from fit_rpc import GLOBAL_ID, Op
from splitrack.manager.client import Client
from splitrack.params import WAIT_MAX_S
from splitrack.rack import Rack
from splitrack.spec import load_spec

WORKLOADS = ("network", "cpu")
PLACEMENTS = ("pack", "spread")
PROCS = 4                  # processes of a job (default)
REPS = 3                   # repetitions (default)
# network: a job that exchanges data (64 KiB a message, as an MPI job's), so that what
# crossing pComponents costs (the shared rack's p-p links: 10 Gb/s) is what it shows
FULL = {"laps": 200, "bytes": 64 * 1024, "iterations": 3_000_000}
QUICK = {"laps": 20, "bytes": 64 * 1024, "iterations": 300_000}
PORTS = (20000, 32000)     # rank i of a run listens on base + i, below the ephemeral range
ATTEMPTS = 6               # runs of one measurement before the bench gives up: a ring's
                           # connect races its neighbour's listen() (below) in 17-25 % of
                           # runs on 2 cores, so 3 attempts all lost it in ~2 % of CI runs
IDLE_POLL_S = 0.05         # GPM's process count asked this often before a run
IDLE_TIMEOUT_S = 10.0      # ... until it is 0 on the slice's pComponents
SLICE = "placement"


def run(spec: Any = None, procs: int = PROCS, reps: int = REPS, duration: float | None = None,
        sizes: dict[str, int] = FULL) -> tuple[dict[str, Any], dict[str, Series]]:
    rack_spec = load_spec(spec, name=f"bench-place-{os.getpid()}", embedded=SPEC)
    cpus = {c["id"]: c.get("cpus") for c in rack_spec.components if c["kind"] == "p"}
    pairs = list(itertools.product(WORKLOADS, PLACEMENTS))
    seconds, runs = Series("s"), {pair: [] for pair in pairs}
    steps = None if duration else 1 + reps * len(pairs)
    with progress("bench placement", steps) as advance, Rack(rack_spec) as rack, \
            serving(rack) as api:
        ask = {"name": SLICE, "p": min(procs, len(cpus)), "m": 1, "n": 1}
        api.call("POST", "/slices", ask)
        _, view = api.call("GET", f"/slices/{SLICE}", query={"wait": WAIT_MAX_S})
        advance("slice ready")
        job = Job(rack, api, view, procs, sizes)
        for rep in repetitions(reps, duration):
            for workload, placement in pairs[rep % 4:] + pairs[:rep % 4]:
                got = job.measure(workload, placement)
                seconds.add(f"{workload}/{placement}", procs, got["seconds"])
                runs[workload, placement].append(got)
                advance(f"repetition {rep + 1}, {workload} {placement}")
        api.call("DELETE", f"/slices/{SLICE}")
    report = _report(seconds, runs, cpus, procs, sizes)
    report["slice"] = {"request": ask, "components": view["components"], "nics": view["nics"]}
    return report, {"seconds/": seconds}


class Job:
    """The ring's jobs in the bench's slice, one measured run at a time."""

    def __init__(self, rack: Rack, api: Client, view: dict[str, Any], procs: int,
                 sizes: dict[str, int]) -> None:
        self.rack, self.api, self.procs, self.sizes = rack, api, procs, sizes
        self.ps = [c for c in view["components"] if c.startswith("p")]
        self.n = next(c for c in view["components"] if c.startswith("n"))
        self.ip = view["nics"][0]
        self.runs = itertools.count()   # each run its own ports

    def measure(self, workload: str, placement: str) -> dict[str, Any]:
        """A clean run: exit 0, and every connection of the ring on the shortcut its
        placement implies; up to ATTEMPTS runs, the others' reasons kept."""
        reasons: list[str] = []
        for _ in range(ATTEMPTS):
            self._await_idle()
            got = self._one(workload, placement)
            problem = _problem(got)
            if problem is None:
                return {**got, "reruns": reasons}
            reasons.append(problem)
        raise RuntimeError(f"{workload} {placement}: no clean run in {ATTEMPTS}: "
                           + "; ".join(reasons))

    def _one(self, workload: str, placement: str) -> dict[str, Any]:
        low, high = PORTS
        base = low + (os.getpid() * 1009 + next(self.runs) * self.procs) % (high - low)
        argv = [sys.executable, "-m", "benchmarks.placement_ring", workload, "--ip", self.ip,
                "--port-base", str(base), *(f"--{k}={v}" for k, v in self.sizes.items())]
        before = self._paths()
        _, job = self.api.call("POST", f"/slices/{SLICE}/jobs",
                               {"argv": argv, "procs": self.procs, "placement": placement})
        job = wait_job(self.api, job["id"])
        after = self._paths()
        lines = _lines(job["stdout"]) if job["exit"] == 0 else []
        out = next((json.loads(line) for line in lines if '"seconds"' in line), {})
        return {"seconds": out.get("seconds"), "placed": job["placed"], "exit": job["exit"],
                "paths": {k: after[k] - before[k] for k in after},
                "error": None if job["exit"] == 0 else _last_line(job["stderr"])}

    def _paths(self) -> dict[str, int]:
        """The nComponent's connections so far: by pipe, by FIT, through a NIC."""
        with self.rack.endpoint() as ep:
            net = ep.call_args(self.n, Op.STATS)[0]["network"]
        return {"pipe": net["shortcuts_pipe"], "fit": net["shortcuts_fit"],
                "nic": net["accepted"]}

    def _await_idle(self) -> None:
        """Until GPM counts no process on the slice's pComponents: it hears of a job's
        end from their pMonitors a moment after it, and "pack" fills by its count."""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while True:
            with self.rack.endpoint() as ep:
                found = ep.call_args(GLOBAL_ID, Op.LIST)[0]["components"]
            busy = [c["id"] for c in found if c["id"] in self.ps and c["load"].get("processes")]
            if not busy:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"GPM still counts processes on {', '.join(busy)} "
                                   f"{IDLE_TIMEOUT_S:.0f} s after the last job")
            time.sleep(IDLE_POLL_S)


def expected_paths(placed: list[str]) -> dict[str, int]:
    """Rank i's connection to rank i+1: a pipe on one pComponent, else FIT."""
    same = sum(placed[i] == placed[(i + 1) % len(placed)] for i in range(len(placed)))
    return {"pipe": same, "fit": len(placed) - same, "nic": 0}


def _problem(got: dict[str, Any]) -> str | None:
    if got["exit"] != 0:
        return f"exit {got['exit']}: {got['error']}"
    if got["paths"] != expected_paths(got["placed"]):
        return (f"placed {','.join(got['placed'])}, connections {got['paths']}: one missed "
                "its shortcut")
    return None


def _lines(path: str) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def _last_line(path: str) -> str:
    lines = [line for line in _lines(path) if line.strip()]
    return lines[-1] if lines else "(nothing on stderr)"


def _report(seconds: Series, runs: dict[tuple[str, str], list[dict[str, Any]]],
            cpus: dict[str, list[int] | None], procs: int, sizes: dict[str, int]
            ) -> dict[str, Any]:
    results = []
    for (workload, placement), rs in runs.items():
        placed = rs[0]["placed"]
        pinned = [cpus.get(p) for p in placed]
        host = None if None in pinned else sorted({c for cs in pinned for c in cs})
        results.append({"workload": workload, "placement": placement,
                        "seconds": seconds.summary(f"{workload}/{placement}", procs)["p50"],
                        "runs": [round(r["seconds"], 4) for r in rs], "placed": placed,
                        "host_cpus": host, "paths": rs[0]["paths"],
                        "reruns": [why for r in rs for why in r["reruns"]]})
    ratios = []
    for workload in WORKLOADS:
        ratio = seconds.ratio((f"{workload}/pack", procs), (f"{workload}/spread", procs))
        faster = ("pack faster" if ratio["high"] < 1 else
                  "spread faster" if ratio["low"] > 1 else "unresolved")
        ratios.append({"workload": workload, **ratio, "faster": faster})
    shown = [r["faster"] for r in ratios] == ["pack faster", "spread faster"]
    return {"bench": "placement", "results": results, "ratios": ratios,
            "tradeoff_shown": shown, "procs": procs, **sizes}


def print_table(report: dict[str, Any]) -> None:
    print(f"bench placement: {report['procs']} processes on a ring; network: "
          f"{report['laps']} laps of {report['bytes']} B; cpu: {report['iterations']} "
          f"iterations each; {report['settings']['reps']} repetitions, interleaved")
    print("seconds: median of rank 0's clock from the barrier to the last token; "
          "paths: the ring's connections by pipe / FIT / through the NIC")
    print(f"{'workload':<9}{'placement':<10}{'seconds':>9}  {'placed':<24}{'host CPUs':<11}"
          "pipe/fit/nic  reruns  runs")
    for r in report["results"]:
        host = ",".join(map(str, r["host_cpus"])) if r["host_cpus"] is not None else "any"
        paths = "/".join(str(r["paths"][k]) for k in ("pipe", "fit", "nic"))
        print(f"{r['workload']:<9}{r['placement']:<10}{r['seconds']:>9.3f}  "
              f"{','.join(r['placed']):<24}{host:<11}{paths:<14}{len(r['reruns']):>6}  "
              f"{r['runs']}")
    for why in (why for r in report["results"] for why in r["reruns"]):
        print(f"  run again: {why}")
    for r in report["ratios"]:
        print(f"{r['workload']}: pack / spread = {r['value']:.3f} [{r['low']:.3f}.."
              f"{r['high']:.3f}]: {r['faster']}")
    print("Scylla's trade-off (network: pack faster, cpu: spread faster): "
          + ("shown" if report["tradeoff_shown"] else "NOT shown"))
    print("seconds (the size column: processes):")
    print_stats(report["stats"], "series", 24)


def main(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    try:
        report, series = run(args.spec, args.procs or PROCS, args.reps or REPS, args.duration,
                             sizes)
    except RuntimeError as exc:   # a job that failed, a manager that did not answer
        print(f"splitrack: error: {exc}", file=sys.stderr)
        return 1
    report["settings"] = {"procs": report["procs"], "reps": len(report["results"][0]["runs"]),
                          "duration": args.duration,
                          "spec": args.spec or f"<embedded {SPEC}>", **sizes}
    return finish(report, args, print_table, series)
