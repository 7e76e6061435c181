"""`splitrack bench slices`: a stream of jobs through the rack manager, FlowOS-RM's Figs. 4, 5.

It starts a rack (unless --spec, the embedded shared one, splitrack/slices_rack.toml:
8 pComponents, 4 mComponents, 2 nComponents, 1 sComponent), then `splitrack
serve` on it (a
free port of 127.0.0.1), then sends a stream of --jobs jobs, one every
INTERVAL_S, each from a client thread of its own (concurrent clients, as
FlowOS-RM's users are). Job k asks for the slice MIX[k % len(MIX)] -- more
than the pool holds at once, so slices queue (FIFO) -- and does what a user
would:

    POST /slices {"name": "sliceK", "p", "m", "n"}   201 granted, or 202 queued
    POST /slices/sliceK/jobs  one process a pComponent (spread), each computing
                            placement_cpu.work(--work) (no sockets: a slice
                            without an nComponent runs it too); a job on a
                            queued slice waits for it
    GET /jobs/ID?wait=S     until the job has exited
    DELETE /slices/sliceK   detach-device and destroy-machine

Each job's record puts together its slice's steps and its own, in FlowOS-RM's
order (STEPS: attach-device, launch-machine, prepare-task, launch-task,
detach-device, destroy-machine), times relative to the stream's start.

JSON (--json F): {"bench": "slices", "jobs": [{"id", "slice", "request": {"p",
"m", "n"}, "components", "queued", "submitted_s", "steps": [{"name",
"start_s", "end_s"}], "exit", "exits"}], "pool": {"p", "m", "n"},
"makespan_s", "peak": {"slices", "p", "m", "n"}, "work", "interval_s",
"stats", "machine", "settings"}; "stats" has a series a step (each job's
duration of it, s) and "wait" (from the slice's request to its grant).
--plot F.png: slices_plots.lifecycle (Fig. 4: each job's steps as bars; Fig. 5:
the components each slice holds over time, stacked) and F.md. A job that did
not exit 0, or a step missing, is exit 1 after the report is written.

Also here, for bench placement: `serving(rack)`, the rack manager started on
a rack and always stopped, yielding its client (splitrack.manager.client),
and `wait_job(api, id)`.
"""

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.progress import progress
from benchmarks.report import finish
from benchmarks.servers import stop
from benchmarks.stats import Series
from splitrack.manager.client import Client, ClientError
from splitrack.params import WAIT_MAX_S
from splitrack.rack import Rack
from splitrack.spec import load_spec

SPEC = "slices"   # the embedded shared rack (splitrack/slices_rack.toml) unless --spec
STEPS = ("attach-device", "launch-machine", "prepare-task", "launch-task", "detach-device",
         "destroy-machine")
MIX = ({"p": 2, "m": 1, "n": 1}, {"p": 3, "m": 1, "n": 0}, {"p": 4, "m": 1, "n": 1},
       {"p": 1, "m": 1, "n": 0}, {"p": 2, "m": 1, "n": 0}, {"p": 3, "m": 1, "n": 1})
JOBS = 12              # the stream's length (default)
WORK = 3_000_000       # placement_cpu.work iterations a process (about 0.2 s of one core)
INTERVAL_S = 0.25      # between two jobs' arrivals
SERVE_START_S = 30.0   # `splitrack serve` must answer within this
JOB_TIMEOUT_S = 600.0  # a job (queue wait included) longer than this fails the run


# ---- the rack manager: started, asked, stopped ------------------------------------------
def wait_job(api: Client, job: str) -> dict[str, Any]:
    """The job once it has ended (GET ?wait=, asked again until it has)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        _, out = api.call("GET", f"/jobs/{job}", query={"wait": WAIT_MAX_S})
        if out["state"] in ("exited", "stopped"):
            return out
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job} still {out['state']} after {JOB_TIMEOUT_S:.0f} s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(rack: Rack) -> Iterator[Client]:
    """`splitrack serve --name RACK` on a free port, until it answers GET /rack;
    stopped (SIGTERM, then SIGKILL) on every way out."""
    port = _free_port()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "splitrack.cli", "serve", "--name",
                                 rack.name, "--port", str(port)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, cwd="/",
                                env=dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root))
        try:
            api = Client(f"http://127.0.0.1:{port}")
            _await_serving(api, proc, log)
            yield api
        finally:
            stop(proc)


def _await_serving(api: Client, proc: subprocess.Popen, log: Any) -> None:
    deadline = time.monotonic() + SERVE_START_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            api.call("GET", "/rack")
            return
        except ClientError:
            pass   # not listening yet
        time.sleep(0.05)
    log.seek(0)
    said = log.read().strip().splitlines()[-1:] or ["(nothing on stderr)"]
    raise RuntimeError(f"splitrack serve did not start: {said[0]}")


# ---- the stream of jobs ------------------------------------------------------------------
def run(spec: Any = None, jobs: int = JOBS, work: int = WORK,
        interval_s: float = INTERVAL_S) -> tuple[dict[str, Any], dict[str, Series]]:
    rack_spec = load_spec(spec, name=f"bench-slices-{os.getpid()}", embedded=SPEC)
    pool = {k: sum(c["kind"] == k for c in rack_spec.components) for k in "pmn"}
    with progress("bench slices", 2 + jobs) as advance, Rack(rack_spec) as rack:
        advance("rack up")
        with serving(rack) as api:
            advance("serve up")
            t0 = time.time()
            lock = threading.Lock()

            def one(k: int) -> dict[str, Any]:
                time.sleep(max(0.0, t0 + k * interval_s - time.time()))   # its arrival
                record = _job(api, k, work, t0)
                with lock:
                    advance(f"{record['slice']} exit {record['exit']}")
                return record
            with ThreadPoolExecutor(max_workers=jobs) as clients:
                records = list(clients.map(one, range(jobs)))
    return _report(records, pool, work, interval_s)


def _job(api: Client, k: int, work: int, t0: float) -> dict[str, Any]:
    name, request = f"slice{k + 1}", MIX[k % len(MIX)]
    status, view = api.call("POST", "/slices", {"name": name, **request})   # 201 or 202
    argv = [sys.executable, "-m", "benchmarks.placement_cpu", str(work)]
    _, job = api.call("POST", f"/slices/{name}/jobs",
                      {"argv": argv, "procs": request["p"], "placement": "spread"})
    job = wait_job(api, job["id"])
    _, view = api.call("DELETE", f"/slices/{name}")
    steps = sorted(view["steps"] + job["steps"], key=lambda s: _order(s["name"]))
    return {"id": job["id"], "slice": name, "request": request,
            "components": view["components"], "queued": status == 202,
            "submitted_s": round(view["created_s"] - t0, 4),
            "steps": [{"name": s["name"], "start_s": round(s["start_s"] - t0, 4),
                       "end_s": round(s["end_s"] - t0, 4)} for s in steps],
            "exit": job["exit"], "exits": job["exits"]}


def _order(step: str) -> int:
    return STEPS.index(step) if step in STEPS else len(STEPS)


def _report(records: list[dict[str, Any]], pool: dict[str, int], work: int,
            interval_s: float) -> tuple[dict[str, Any], dict[str, Series]]:
    seconds = Series("s")
    for r in records:
        steps = {s["name"]: s for s in r["steps"]}
        if "attach-device" in steps:
            seconds.add("wait", 0, steps["attach-device"]["start_s"] - r["submitted_s"])
        for s in r["steps"]:
            seconds.add(s["name"], 0, s["end_s"] - s["start_s"])
    ends = [s["end_s"] for r in records for s in r["steps"]]
    report = {"bench": "slices", "jobs": records, "pool": pool,
              "makespan_s": round(max(ends, default=0.0), 3), "peak": peak(records),
              "work": work, "interval_s": interval_s}
    return report, {"step/": seconds}


def held(record: dict[str, Any]) -> tuple[float, float] | None:
    """When a job's slice held its components: from attach-device's end (granted)
    to detach-device's end (released)."""
    steps = {s["name"]: s for s in record["steps"]}
    if "attach-device" not in steps or "detach-device" not in steps:
        return None
    return steps["attach-device"]["end_s"], steps["detach-device"]["end_s"]


def peak(records: list[dict[str, Any]]) -> dict[str, int]:
    """The most slices, and components of each kind, granted at one time."""
    events = []
    for r in records:
        span = held(r)
        if span is None:
            continue
        count = {k: sum(c[0] == k for c in r["components"]) for k in "pmn"}
        events += [(span[0], 1, {"slices": 1, **count}), (span[1], 0, {"slices": -1, **{
            k: -v for k, v in count.items()}})]
    now = dict.fromkeys(("slices", "p", "m", "n"), 0)
    best = dict(now)
    for _, _, delta in sorted(events, key=lambda e: (e[0], e[1])):   # releases first
        for k, v in delta.items():
            now[k] += v
            best[k] = max(best[k], now[k])
    return best


def problems(report: dict[str, Any]) -> list[str]:
    """What makes a run fail: a job that did not exit 0, a step missing or out of order."""
    out = []
    for r in report["jobs"]:
        names = [s["name"] for s in r["steps"]]
        if names != list(STEPS):
            out.append(f"{r['slice']}: steps {', '.join(names)}")
        if r["exit"] != 0:
            out.append(f"{r['slice']}: job {r['id']} exit {r['exit']} (each: {r['exits']})")
    return out


def print_table(report: dict[str, Any]) -> None:
    pool, peak_ = report["pool"], report["peak"]
    print(f"bench slices: {len(report['jobs'])} jobs, one every {report['interval_s']} s, "
          f"on a pool of {pool['p']} p, {pool['m']} m, {pool['n']} n; "
          f"{sum(r['queued'] for r in report['jobs'])} queued; all done at "
          f"{report['makespan_s']:.2f} s; at most {peak_['slices']} slices at once "
          f"({peak_['p']} p, {peak_['m']} m, {peak_['n']} n)")
    print("seconds from the stream's start; wait: from the slice's request to its grant; "
          "then each step's duration, in FlowOS-RM's order")
    short = ("wait", "attach", "launch-m", "prepare", "launch-t", "detach", "destroy")
    print(f"{'job':<6}{'slice':<9}{'p m n':<7}{'submit':>8}" + "".join(f"{s:>9}" for s in short)
          + "  exit")
    for r in report["jobs"]:
        steps = {s["name"]: s for s in r["steps"]}
        attach = steps.get("attach-device")
        wait = attach["start_s"] - r["submitted_s"] if attach else float("nan")
        durations = [steps[n]["end_s"] - steps[n]["start_s"] if n in steps else float("nan")
                     for n in STEPS]
        ask = " ".join(str(r["request"][k]) for k in "pmn")
        print(f"{r['id']:<6}{r['slice']:<9}{ask:<7}{r['submitted_s']:>8.2f}"
              + "".join(f"{d:>9.3f}" for d in [wait, *durations]) + f"  {r['exit']}")


def main(args: argparse.Namespace) -> int:
    try:
        report, series = run(args.spec, args.jobs or JOBS)
    except RuntimeError as exc:   # the manager refused (ClientError), or did not start
        print(f"splitrack: error: {exc}", file=sys.stderr)
        return 1
    report["settings"] = {"jobs": len(report["jobs"]),
                          "spec": args.spec or f"<embedded {SPEC}>",
                          "work": report["work"], "interval_s": report["interval_s"]}
    status = finish(report, args, print_table, series)
    if args.plot:
        from benchmarks.slices_plots import lifecycle
        lifecycle(report, args.plot)
    for problem in problems(report):
        print(f"splitrack: error: {problem}", file=sys.stderr)
        status = 1
    return status
