"""What every benchmark does with its report: print it, write it.

    finish(report, args, print_table, series={"rtt/": Series, ...}) -> exit code

adds to the report "stats" (every series' statistics, stats.Series.rows),
"machine" (machine.describe) and "settings" (the command line's options, and
over them the values the benchmark used), writes what was asked for: --json
(the report), --csv (the "stats" rows), --samples (the raw samples, CSV or
.npz), each file named on stderr; then prints the benchmark's table and its
targets the one way every benchmark prints them.

    print_stats(rows, label)   a table of statistics, one row a series
    print_targets(targets)     "met / NOT met / unresolved", the ratio, its
                               range, the limit, and the floor when the same
                               run shows the limit to be below it
"""

import argparse
import csv
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.machine import describe
from benchmarks.stats import STATS, Series

EVALUATION = "docs/evaluation.md"


def finish(report: dict[str, Any], args: argparse.Namespace,
           print_table: Callable[[dict[str, Any]], None],
           series: dict[str, Series] | None = None) -> int:
    series = series or {}
    report["stats"] = [row for prefix, s in series.items() for row in s.rows(prefix)]
    report["machine"] = describe(int(getattr(args, "busy", 0)))
    given = {k: v for k, v in vars(args).items() if k not in ("func", "command", "kind")}
    report["settings"] = {**given, **report.get("settings", {})}
    if args.json:   # written first: a long run's results survive a failure to print
        _write(args.json, lambda f: json.dump(report, f, indent=1))
    if getattr(args, "csv", None):
        _write(args.csv, lambda f: _stats_csv(f, report["stats"]))
    if getattr(args, "samples", None):
        _samples(args.samples, series)
    print_table(report)
    print_targets(report.get("targets", []))
    return 0


def wrote(path: str) -> None:
    print(f"wrote {path}", file=sys.stderr)


def _write(path: str, dump: Callable[[Any], None]) -> None:
    with open(path, "w", newline="") as f:
        dump(f)
    wrote(path)


def _stats_csv(f: Any, rows: list[dict[str, Any]]) -> None:
    fields = ["series", "size", "unit", *STATS, "p10", "iqr", "reps", "n"]
    out = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    out.writeheader()
    out.writerows(rows)


def _samples(path: str, series: dict[str, Series]) -> None:
    raw = [r for prefix, s in series.items() for r in s.raw(prefix)]
    if path.endswith(".npz"):
        arrays = {f"{name}@{size}#{rep}": np.asarray(v, dtype=float)
                  for name, size, rep, v in raw}
        np.savez_compressed(path, **arrays)   # type: ignore[arg-type]
        wrote(path)
        return

    def dump(f: Any) -> None:
        out = csv.writer(f)
        out.writerow(["series", "size", "rep", "value"])
        for name, size, rep, values in raw:
            out.writerows((name, size, rep, v) for v in values)
    _write(path, dump)


def print_stats(rows: list[dict[str, Any]], label: str = "what", width: int = 24) -> None:
    """p50 [lowest..highest repetition's p50], p90, p99, p99.9, min, max."""
    print(f"{label:<{width}}{'size':>6}  {'p50 [repetitions]':>24} {'p90':>8} {'p99':>8} "
          f"{'p99.9':>8} {'min':>8} {'max':>8}")
    for r in rows:
        spread = f"{_g(r['p50'])} [{_g(r['p50_low'])}..{_g(r['p50_high'])}]"
        print(f"{r['series']:<{width}}{r['size']:>6}  {spread:>24} " + " ".join(
            f"{_g(r[k]):>8}" for k in ("p90", "p99", "p99_9", "min", "max")))


def _g(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"


def print_targets(targets: list[dict[str, Any]]) -> None:
    if not targets:
        return
    print("targets (value [range over repetitions]; met: the whole range meets the limit, "
          "unresolved: the range straddles it):")
    for t in targets:
        line = (f"  {t['verdict']:<10}  {t['name']}: {t['value']:.3f} "
                f"[{t['low']:.3f}..{t['high']:.3f}], limit {t['sense']} {t['limit']}")
        floor = t.get("floor")
        if t.get("once"):
            line += " (measured once)"
        if floor and floor["below"] and t["verdict"] != "met":
            line += (f"; below this machine's floor ({floor['name']}: {floor['value']:.3f}), "
                     f"see {EVALUATION}")
        print(line)
