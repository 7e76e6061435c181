"""`splitrack bench compare OLD.json NEW.json [--fail-above PCT]`: what changed
between two runs of one benchmark (their --json reports).

One row a series both reports measured (their "stats", matched by series and
size): the old and the new p50 with the range of their repetitions' medians,
the change in percent, and a verdict the spreads justify:

    better / worse   the two ranges do not overlap, and the new p50 is on the
                     better / worse side (lower is better for times, higher
                     for MB/s)
    no clear change  the ranges overlap: the spread cannot tell them apart
    unresolved       a side was measured in one repetition: it has no spread

then the series only one report has, and each target's old and new value
and verdict. With --fail-above PCT, the
exit status is 1 if any row is "worse" by more than PCT percent (a CI
regression check; pytest-benchmark's --benchmark-compare-fail does the same).
Reports of different benchmarks, or files that are not reports, are refused
in one line (exit 1).
"""

import argparse
import json
import sys
from typing import Any

HIGHER_IS_BETTER = {"MB/s"}


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a bench --json report ({exc})") from None
    if not isinstance(report, dict) or "bench" not in report or "stats" not in report:
        raise ValueError(f"{path}: not a bench --json report of this version (no \"stats\")")
    return report


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["p50_low"] <= b["p50_high"] and b["p50_low"] <= a["p50_high"]


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """One row a series in both: {"series", "size", "unit", "old", "new",
    "change_pct", "verdict"} (old and new: the stats rows)."""
    before = {(r["series"], r["size"]): r for r in old["stats"]}
    rows = []
    for r in new["stats"]:
        o = before.get((r["series"], r["size"]))
        if o is None or o["p50"] == 0:
            continue
        change = (r["p50"] - o["p50"]) / o["p50"] * 100
        better = change > 0 if r["unit"] in HIGHER_IS_BETTER else change < 0
        if min(o.get("reps", 1), r.get("reps", 1)) < 2:
            verdict = "unresolved"
        elif _overlap(o, r):
            verdict = "no clear change"
        else:
            verdict = "better" if better else "worse"
        rows.append({"series": r["series"], "size": r["size"], "unit": r["unit"], "old": o,
                     "new": r, "change_pct": round(change, 1), "verdict": verdict})
    return rows


def failing(rows: list[dict[str, Any]], pct: float) -> list[dict[str, Any]]:
    """The rows that are worse by more than pct percent."""
    return [r for r in rows if r["verdict"] == "worse" and abs(r["change_pct"]) > pct]


def _p50(r: dict[str, Any]) -> str:
    return f"{r['p50']:.4g} [{r['p50_low']:.4g}..{r['p50_high']:.4g}]"


def print_rows(old: dict[str, Any], new: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    def who(r: dict[str, Any]) -> str:
        m = r.get("machine", {})
        commit = (m.get("git_commit") or "")[:10] or "no commit"
        busy = m.get("busy_cores", int(bool(m.get("busy_core"))))   # (older reports: a flag)
        return f"{commit}, splitrack {m.get('splitrack', '?')}, busy cores {busy}"
    print(f"bench {new['bench']}: old ({who(old)}) -> new ({who(new)})")
    print("p50 [lowest..highest repetition's p50]; no clear change: the ranges overlap; "
          "unresolved: one repetition, no range")
    print(f"{'series':<24}{'size':>8}  {'unit':<5}{'old':>26}{'new':>26}{'change':>9}  verdict")
    for r in rows:
        print(f"{r['series']:<24}{r['size']:>8}  {r['unit']:<5}{_p50(r['old']):>26}"
              f"{_p50(r['new']):>26}{r['change_pct']:>+8.1f}%  {r['verdict']}")
    matched = {(r["series"], r["size"]) for r in rows}
    for label, report in (("old", old), ("new", new)):
        alone = [f"{r['series']}@{r['size']}" for r in report["stats"]
                 if (r["series"], r["size"]) not in matched]
        if alone:
            print(f"only in {label}: " + ", ".join(alone))
    targets = {t["name"]: t for t in old.get("targets", [])}
    for t in new.get("targets", []):
        o = targets.get(t["name"])
        if o is not None and "verdict" in o:
            print(f"target {t['name']}: {o['value']:.3f} ({o['verdict']}) -> "
                  f"{t['value']:.3f} ({t['verdict']})")


def main(args: argparse.Namespace) -> int:
    try:
        old, new = _load(args.old), _load(args.new)
        if old["bench"] != new["bench"]:
            raise ValueError(f"{args.old} is bench {old['bench']}, {args.new} is bench "
                             f"{new['bench']}: compare runs of one benchmark")
    except ValueError as exc:
        print(f"splitrack: error: {exc}", file=sys.stderr)
        return 1
    rows = compare(old, new)
    print_rows(old, new, rows)
    if args.fail_above is not None:
        bad = failing(rows, args.fail_above)
        print(f"{len(bad)} series worse by more than {args.fail_above:g}%"
              + (": " + ", ".join(f"{r['series']}@{r['size']}" for r in bad) if bad else ""))
        return 1 if bad else 0
    return 0
