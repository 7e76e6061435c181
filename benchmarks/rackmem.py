"""`splitrack bench rackmem`: what `splitrack run --memory rack` costs a program.

One rack (the spec's, its pComponents' extCache set to --extcache, default
16 MiB), one probe program (benchmarks/rackmem_probe.py) run on p0 with
--memory rack and with --memory host, alternately, --reps times each:

- resident_ms: ROUNDS passes over memory that stays resident (a sha256 of a
  bytearray and a Python sum over a list, an eighth of the extCache in all):
  the same loads either way; resident_faults: the pager's faults meanwhile;
- heap_miss: a first touch of a heap page that was written and then evicted
  from the extCache (--memory rack): a page fault the pager serves with an
  M_MISS to the home, the line copied into the page;
- vm_miss: vm.read_into of one line written back and not cached, in the host
  runs: what bench extcache calls read_miss (its Python miss path).
Targets: resident rack / host <= 1.05 (repetition by repetition, each pair of
runs); heap_miss p50 <= 1.5 x vm_miss p50.

JSON (--json FILE): {"bench": "rackmem", "config": {"extcache_bytes", "ways"},
"resident_faults": [the rack runs' faults during the resident passes],
"results": [{"memory", "resident_ms", "heap_miss_p50_us", "vm_miss_p50_us"}],
"targets", "stats", "machine", "settings"} (report.py).
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np

from benchmarks.limits import RACK_MISS_OVER_VM_MISS, RESIDENT_OVER_HOST
from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.stats import Series, repetitions, spanning, target
from splitrack.params import MEMORY_MODES
from splitrack.rack import Rack
from splitrack.spec import load_spec

EXTCACHE = 16 << 20
ROUNDS = 100
REPS = 5
PROBE_TIMEOUT_S = 600


def run(spec: Any = None, extcache: int = EXTCACHE, rounds: int = ROUNDS, reps: int = REPS,
        duration: float | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    rack_spec = load_spec(spec, name=f"bench-rm-{os.getpid()}")
    for comp in rack_spec.components:
        if comp["kind"] == "p":
            comp["extcache"] = extcache
    p0 = next(c for c in rack_spec.components if c["kind"] == "p")
    ms, us, faults = Series("ms"), Series("us"), []
    with Rack(rack_spec) as rack, \
            progress("bench rackmem", None if duration else reps * 2) as advance:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        for rep in repetitions(reps, duration):
            for memory in MEMORY_MODES:
                got = _probe(env, rack_spec.name, p0["id"], memory, extcache, rounds)
                ms.add(f"resident/{memory}", 0, got["resident_s"] * 1e3)
                if memory == "rack":
                    faults.append(got["resident_faults"])
                if memory == "rack":
                    us.add("heap_miss", 4096, got["heap_miss_us"])
                else:
                    us.add("vm_miss", 4096, got["vm_miss_us"])
                advance(f"repetition {rep + 1}, --memory {memory}")
    resident = {m: ms.summary(f"resident/{m}", 0) for m in MEMORY_MODES}
    paired = [float(r[0]) / float(h[0]) for r, h in zip(
        ms.reps["resident/rack", 0], ms.reps["resident/host", 0], strict=True)]
    heap, vm = us.summary("heap_miss", 4096), us.summary("vm_miss", 4096)
    per_rep = [float(np.median(a)) / float(np.median(b)) for a, b in zip(
        us.reps["heap_miss", 4096], us.reps["vm_miss", 4096], strict=True)]
    report = {"bench": "rackmem",
              "config": {"pcomponent": p0["id"], "extcache_bytes": extcache,
                         "ways": p0["ways"]},
              "resident_faults": faults,
              "results": [{"memory": m, "resident_ms": resident[m]["p50"],
                           "heap_miss_p50_us": round(heap["p50"], 2) if m == "rack" else None,
                           "vm_miss_p50_us": round(vm["p50"], 2) if m == "host" else None}
                          for m in MEMORY_MODES],
              "targets": [
                  target("resident loop, --memory rack / --memory host",
                         spanning(resident["rack"]["p50"] / resident["host"]["p50"], paired),
                         RESIDENT_OVER_HOST),
                  target("heap miss p50 / vm read miss p50 (bench extcache's read_miss)",
                         spanning(heap["p50"] / vm["p50"], per_rep), RACK_MISS_OVER_VM_MISS)],
              "settings": {"extcache": extcache, "rounds": rounds, "duration": duration,
                           "reps": len(paired)}}
    return report, {"ms/": ms, "us/": us}


def _probe(env: dict[str, str], rack: str, p0: str, memory: str, extcache: int,
           rounds: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "splitrack.cli", "run", "--name", rack, "--on", p0, "--memory",
         memory, "--", sys.executable, "-m", "benchmarks.rackmem_probe", str(extcache),
         str(rounds)], env=env, cwd="/", capture_output=True, text=True,
        timeout=PROBE_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"the probe with --memory {memory} failed: "
                           f"{proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


def print_table(report: dict[str, Any]) -> None:
    c = report["config"]
    print(f"a probe on {c['pcomponent']} (extCache {c['extcache_bytes'] >> 20} MiB, "
          f"{c['ways']}-way), --memory rack and host alternately: resident passes (ms), "
          "a heap page's miss and a vm line's read miss (µs)")
    for r in report["results"]:
        print(f"  --memory {r['memory']:<5} resident {r['resident_ms']:.3f} ms"
              + (f"   heap miss p50 {r['heap_miss_p50_us']:.1f} µs"
                 if r["heap_miss_p50_us"] else "")
              + (f"   vm read miss p50 {r['vm_miss_p50_us']:.1f} µs"
                 if r["vm_miss_p50_us"] else ""))
    print(f"  the pager's faults during the resident passes, each rack run: "
          f"{report['resident_faults']}")
    print_stats(report["stats"], "series", 16)


def main(args: argparse.Namespace) -> int:
    report, series = run(args.spec, args.extcache or EXTCACHE, args.rounds or ROUNDS,
                         args.reps or REPS, args.duration)
    return finish(report, args, print_table, series)
