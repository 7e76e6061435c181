"""`splitrack bench wordcount`: the paper's macro benchmark, against Linux in the same run.

The input (corpus.py: Zipf-distributed words, deterministic from --seed, about
--size bytes) is stored on the rack's sComponent (the one GSM names for its
path). One mapper (wordcount_mapper.py) reads it and sends each <word, count>
pair over TCP as soon as it is produced to one reducer (wordcount_reducer.py),
a plain process outside the rack, which adds them up. Per mode:

    linux      the mapper is a plain process; it reads the same file from the
               sComponent's directory on this host with plain Linux I/O
    ddio, dma  the mapper runs on the rack (p0, `splitrack run --mode M`): it
               reads the input from the sComponent over FIT, and its socket's
               bytes cross the nComponent by dDDIO or dDMA

With --memory rack, the rack modes' mapper runs with `splitrack run --memory
rack`: its whole heap is rack pages (splitrack/guest/rackmem.py), and its
pager's counts come back with its result; the DDIO mapper with --memory host
runs too, interleaved ("ddio-host"), for the target: rack memory's DDIO time
<= 1.3 x host memory's, with an extCache larger than the working set (the
default rack's). --extcache SIZES then runs the rack
modes again on a rack whose pComponents have each of these extCache sizes: the
time against the extCache's size, in DDIO and in DMA (--plot: F-extcache.png).

Execution time runs from the mapper's start to the reducer's EOF (one clock,
time.monotonic, for both processes); ops/s is <word, count> pairs per second
(each one a send() by the mapper and an update by the reducer). Each
reducer's result is compared with the corpus's reference count, taken from
the generator's word numbers, not from the text: a mismatch fails the run
(exit 1). Modes are interleaved over --reps repetitions; seconds are medians.
Target: DDIO time <= 1.2 x Linux time (at 64 MB).

JSON (--json FILE): {"bench": "wordcount", "results": [{"mode", "seconds",
"ops_per_s", "correct", "words_per_s", "runs"}], "input_bytes", "words",
"distinct", "pairs", "seed", "targets", "stats", "machine", "settings"}; each result
and, with --extcache, each row of "sweep": [{"extcache", "mode", "memory", "seconds",
"correct", "runs", "pager"}] carries "pager": the mapper's pager counts (medians;
{} under --memory host)
(report.py; the target's range: repetition by repetition, DDIO's time over
Linux's). --plot F.png: plots.wordcount.
The input file is removed from the sComponent at the end.
"""

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
from typing import Any

from benchmarks import plots
from benchmarks.corpus import Corpus
from benchmarks.limits import RACK_MEMORY_OVER_HOST, WORDCOUNT_OVER_LINUX
from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.servers import START_TIMEOUT_S
from benchmarks.stats import Series, repetitions, target
from benchmarks.verbs import WORDCOUNT_MODES
from fit_rpc import GLOBAL_ID, Op
from splitrack.rack import Rack
from splitrack.spec import load_spec

MODES = WORDCOUNT_MODES   # the order of tables and plots
SIZE = 64_000_000
QUICK_SIZE = 8_000_000
REPS, QUICK_REPS = 3, 3
SEED = 1
REDUCER_IP = "127.0.0.5"   # outside the rack
INPUT_DIR = "wordcount"
MAPPER_TIMEOUT_S = 3600


def run(spec: Any = None, modes: tuple[str, ...] = MODES, size: int = SIZE, seed: int = SEED,
        reps: int = REPS, duration: float | None = None, memory: str = "host",
        extcache: list[int] | None = None) -> tuple[dict[str, Any], dict[str, Series]]:
    """The modes on one rack; with `extcache`, then the rack modes again on a rack
    whose pComponents have each of these extCache sizes (the sweep)."""
    baseline = (HOST_DDIO,) if memory == "rack" and "ddio" in modes else ()
    runs = _on_rack(spec, modes + baseline, size, seed, reps, duration, memory, None)
    report, series = _report(runs, seed)
    sweep = []
    for cache in extcache or []:
        rack_modes = tuple(m for m in modes if m != "linux")
        for mode, rs in _on_rack(spec, rack_modes, size, seed, reps, duration, memory,
                                 cache).items():
            name = f"{mode}@{cache >> 20}MiB"
            for r in rs:
                series["seconds/"].add(name, report["input_bytes"], r["seconds"])
            median = series["seconds/"].summary(name, report["input_bytes"])["p50"]
            sweep.append({"extcache": cache, "mode": mode, "memory": memory,
                          "seconds": round(median, 3),
                          "correct": all(r["correct"] for r in rs),
                          "runs": [round(r["seconds"], 3) for r in rs],
                          "pager": _median_counts([r["pager"] for r in rs])})
    if extcache:
        report["sweep"] = sweep
    report["settings"] = {"modes": list(modes), "size": size, "seed": seed, "memory": memory,
                          "extcache": extcache,
                          "reps": len(report["results"][0]["runs"]), "duration": duration}
    return report, series


def _on_rack(spec: Any, modes: tuple[str, ...], size: int, seed: int, reps: int,
             duration: float | None, memory: str, extcache: int | None
             ) -> dict[str, list[dict[str, Any]]]:
    """Each mode's runs on one rack (its pComponents' extCache `extcache` bytes, if given)."""
    rack_spec = load_spec(spec, name=f"bench-wc-{os.getpid()}")
    if extcache is not None:
        for comp in rack_spec.components:
            if comp["kind"] == "p":
                comp["extcache"] = extcache
    p0 = next(c["id"] for c in rack_spec.components if c["kind"] == "p")
    path = f"{INPUT_DIR}/input-{os.getpid()}-{seed}-{size}.txt"   # this run's alone
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    steps = None if duration else 1 + reps * len(modes)
    what = "bench wordcount" + (f", extCache {extcache >> 20} MiB" if extcache else "")
    with progress(what, steps) as advance, \
            Rack(rack_spec) as rack, tempfile.TemporaryDirectory() as tmp, \
            rack.endpoint() as ep:
        home = ep.call_args(GLOBAL_ID, Op.GSM_LOOKUP, {"path": path})[0]["id"]
        root = next(c["root"] for c in rack_spec.components if c["id"] == home)
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        corpus = Corpus(seed)
        try:
            input_bytes = _store(ep, home, path, corpus.blocks(size))
            reference = corpus.reference()
            advance("input stored")
            for rep in repetitions(reps, duration):
                for mode in modes:
                    runs[mode].append(_one(mode, env, rack_spec.name, p0, path,
                                           os.path.join(root, path), tmp, reference, memory))
                    runs[mode][-1].update(input_bytes=input_bytes, reference=reference)
                    advance(f"repetition {rep + 1}, {mode}")
        finally:
            _remove(ep, home, path)
    return runs


HOST_DDIO = "ddio-host"   # --memory rack's baseline: the DDIO mapper with its memory the host's


def _median_counts(counts: list[dict[str, int]]) -> dict[str, int]:
    return {k: sorted(c[k] for c in counts)[len(counts) // 2] for k in counts[0]} \
        if counts and counts[0] else {}


def _store(ep: Any, home: str, path: str, blocks: Any) -> int:
    """The generated input, written to the sComponent; its size."""
    try:
        ep.call_args(home, Op.S_MKDIR, {"path": INPUT_DIR})
    except FileExistsError:
        pass
    ep.call_args(home, Op.S_OPEN, {"path": path, "create": True, "truncate": True})
    offset = 0
    for block in blocks:
        for at in range(0, len(block), 1 << 20):
            piece = block[at:at + (1 << 20)]
            ep.call_args(home, Op.S_WRITE, {"path": path, "offset": offset}, piece)
            offset += len(piece)
    return offset


def _remove(ep: Any, home: str, path: str) -> None:
    """The input off the sComponent, and its directory if nothing else is in it."""
    for op, args in ((Op.S_UNLINK, {"path": path}), (Op.S_RMDIR, {"path": INPUT_DIR})):
        try:
            ep.call_args(home, op, args)
        except OSError:
            pass   # never written (an early failure), or another run's input is there


def _one(mode: str, env: dict[str, str], rack: str, p0: str, path: str, host_path: str,
         tmp: str, reference: dict[str, int], memory: str) -> dict[str, Any]:
    out = os.path.join(tmp, f"reduced-{mode}.json")
    mapper = [sys.executable, "-m", "benchmarks.wordcount_mapper"]
    reducer = subprocess.Popen([sys.executable, "-m", "benchmarks.wordcount_reducer",
                                REDUCER_IP, out], cwd="/", stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([reducer.stdout], [], [], START_TIMEOUT_S)
        words = (reducer.stdout.readline() if ready else "").split()
        if len(words) != 2:
            raise RuntimeError("the reducer did not start")
        ip, port = words
        if mode == "linux":
            cmd = [*mapper, "file", host_path, ip, port]
        else:
            if mode == HOST_DDIO:
                mode, memory = "ddio", "host"
            cmd = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack, "--on", p0,
                   "--mode", mode, "--memory", memory, "--", *mapper, "rack", path, ip, port]
        proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True,
                              timeout=MAPPER_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"the {mode} mapper failed: {proc.stderr.strip()[-800:]}")
        mapped = json.loads(proc.stdout)
        if reducer.wait(timeout=MAPPER_TIMEOUT_S) != 0:
            raise RuntimeError(f"the {mode} reducer failed")
    finally:
        if reducer.poll() is None:
            reducer.kill()
            reducer.wait()
        reducer.stdout.close()
    with open(out) as f:
        reduced = json.load(f)
    os.unlink(out)
    return {"seconds": reduced["end"] - mapped["start"], "pairs": reduced["pairs"],
            "words": mapped["words"], "correct": reduced["counts"] == reference,
            "pager": mapped.get("pager", {})}


def _report(runs: dict[str, list[dict[str, Any]]], seed: int
            ) -> tuple[dict[str, Any], dict[str, Series]]:
    first = next(iter(runs.values()))[0]
    input_bytes, reference = first["input_bytes"], first["reference"]
    seconds = Series("s")
    for mode, rs in runs.items():
        for r in rs:
            seconds.add(mode, input_bytes, r["seconds"])
    results = []
    for mode, rs in runs.items():
        median = seconds.summary(mode, input_bytes)["p50"]
        results.append({"mode": mode, "seconds": round(median, 3),
                        "ops_per_s": round(rs[0]["pairs"] / median),
                        "words_per_s": round(rs[0]["words"] / median),
                        "correct": all(r["correct"] for r in rs),
                        "runs": [round(r["seconds"], 3) for r in rs],
                        "pager": _median_counts([r["pager"] for r in rs])})
    report: dict[str, Any] = {"bench": "wordcount", "results": results,
                              "input_bytes": input_bytes, "words": sum(reference.values()),
                              "distinct": len(reference), "pairs": first["pairs"],
                              "seed": seed, "targets": []}
    if "linux" in runs and "ddio" in runs:
        report["targets"].append(target(
            "word count DDIO time / Linux time",
            seconds.ratio(("ddio", input_bytes), ("linux", input_bytes)), WORDCOUNT_OVER_LINUX))
    if HOST_DDIO in runs:
        report["targets"].append(target(
            "word count DDIO time, --memory rack / --memory host",
            seconds.ratio(("ddio", input_bytes), (HOST_DDIO, input_bytes)),
            RACK_MEMORY_OVER_HOST))
    return report, {"seconds/": seconds}


def print_table(report: dict[str, Any]) -> None:
    print(f"word count: {report['input_bytes']} bytes of input, {report['words']} words, "
          f"{report['distinct']} distinct, {report['pairs']} <word, count> pairs sent "
          f"(seed {report['seed']}), {report['settings']['reps']} repetitions, interleaved")
    print("seconds: the median time from the mapper's start to the reducer's end; pairs/s "
          "and words/s: the mapper's sends and words counted a second, at that median; "
          "runs: each repetition's seconds")
    print(f"{'mode':<7}{'seconds':>9}{'pairs/s':>11}{'words/s':>12}  correct  runs")
    for r in report["results"]:
        print(f"{r['mode']:<7}{r['seconds']:>9.2f}{r['ops_per_s']:>11.0f}"
              f"{r['words_per_s']:>12.0f}  {str(r['correct']):<7}  {r['runs']}")
    pager = [r for r in report["results"] if r.get("pager")]
    if pager:
        print("--memory rack: the mapper's pager (medians): faults, misses at m0, evictions, "
              "write-backs")
        for r in pager:
            c = r["pager"]
            print(f"  {r['mode']:<7}{c['faults']:>10}{c['misses']:>10}{c['evictions']:>10}"
                  f"{c['writebacks']:>10}")
    if report.get("sweep"):
        print(f"extCache sweep (--memory {report['settings']['memory']}): seconds, p50; "
              "the pager's misses and evictions")
        for r in report["sweep"]:
            c = r["pager"] or {"misses": "-", "evictions": "-"}
            print(f"  {r['extcache'] >> 20:>6} MiB  {r['mode']:<6}{r['seconds']:>8.2f}"
                  f"{c['misses']:>10}{c['evictions']:>10}  {r['runs']}")
    print("execution time, s (the size column: bytes of input):")
    print_stats(report["stats"], "series", 16)


def main(args: argparse.Namespace) -> int:
    modes = args.modes or MODES
    size = args.size or (QUICK_SIZE if args.quick else SIZE)
    reps = args.reps or (QUICK_REPS if args.quick else REPS)
    report, series = run(args.spec, modes, size, SEED if args.seed is None else args.seed,
                         reps, args.duration, args.memory, args.extcache)
    status = finish(report, args, print_table, series)
    if args.plot:   # after finish: the plots draw report["stats"]
        plots.wordcount(report, args.plot)
        if report.get("sweep"):
            plots.wordcount_extcache(report, args.plot)
    wrong = [r["mode"] for r in [*report["results"], *report.get("sweep", [])]
             if not r["correct"]]
    if wrong:
        print(f"splitrack: error: the reducer's count is wrong for {', '.join(wrong)}",
              file=sys.stderr)
        return 1
    return status
