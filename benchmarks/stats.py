"""The statistics every benchmark reports, and its verdicts on targets.

A benchmark repeats what it compares (interleaved, so the machine's noise
hits all alike) and keeps each repetition's samples apart:

    series = Series()
    series.add("ddio", 128, samples_us)        one repetition of one series
    series.summary("ddio", 128) -> {"p50", "p90", "p99", "p99_9", "min", "max",
        "p10", "iqr", "p50_low", "p50_high", "reps", "n"}
                                               over the pooled samples; p50_low and
                                               p50_high: the lowest and highest
                                               repetition's median, the spread over
                                               repetitions
    series.ratio(("ddio", 128), ("linux", 128)) -> {"value", "low", "high"}
                                               the ratio of the pooled medians, and
                                               its range over paired repetitions
                                               (repetition i over repetition i),
                                               widened to hold the value (with
                                               bimodal samples the pooled ratio can
                                               lie outside every paired one)
    target(name, ratio, limit, at_most=True, floor=None) -> a verdict row
    point(value) -> a ratio measured once: the verdict says "(measured once)"
    repetitions(reps, duration)                the repetitions to run: `reps`, or
                                               as many as fit in `duration` seconds
                                               (at least MIN_REPS)

A verdict is "met" when the whole range is on the right side of the limit,
"NOT met" when the whole range is on the wrong side, and "unresolved" when
the range straddles it. A target whose floor (the same measure with no
splitrack code, in the same run) is already past the limit is "below this
machine's floor" (said only when the target is not met): docs/evaluation.md
says which floors there are.
"""

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

MIN_REPS = 3          # --duration runs at least this many repetitions
QUANTILES = {"p10": 10, "p50": 50, "p90": 90, "p99": 99, "p99_9": 99.9}
STATS = ("p50", "p90", "p99", "p99_9", "min", "max", "p50_low", "p50_high")


def summarize(reps: list[list[float]], digits: int = 3) -> dict[str, Any]:
    """The statistics of one series kept as repetitions of samples."""
    reps = [r for r in reps if len(r)]
    if not reps:
        raise ValueError("a series with no samples")
    pooled = np.concatenate([np.asarray(r, dtype=float) for r in reps])
    q = np.percentile(pooled, list(QUANTILES.values()))
    out: dict[str, Any] = {k: round(float(v), digits) for k, v in zip(QUANTILES, q, strict=True)}
    medians = [float(np.median(r)) for r in reps]
    q25, q75 = np.percentile(pooled, [25, 75])
    out.update(min=round(float(pooled.min()), digits), max=round(float(pooled.max()), digits),
               iqr=round(float(q75 - q25), digits), p50_low=round(min(medians), digits),
               p50_high=round(max(medians), digits), reps=len(reps), n=int(pooled.size))
    return out


def ratio_of(num: list[list[float]], den: list[list[float]], digits: int = 3) -> dict[str, Any]:
    """Median of num over median of den, and the range over paired repetitions."""
    value = float(np.median(np.concatenate(num))) / float(np.median(np.concatenate(den)))
    paired = [float(np.median(a)) / float(np.median(b)) for a, b in zip(num, den, strict=True)
              if len(a) and len(b)]
    return spanning(value, paired, digits)


def spanning(value: float, paired: list[float], digits: int = 3) -> dict[str, Any]:
    """A ratio's value and its range: the paired ratios' range, holding the value."""
    return {"value": round(value, digits), "low": round(min([*paired, value]), digits),
            "high": round(max([*paired, value]), digits)}


def verdict(low: float, high: float, limit: float, at_most: bool = True) -> str:
    if at_most:
        return "met" if high <= limit else "NOT met" if low > limit else "unresolved"
    return "met" if low >= limit else "NOT met" if high < limit else "unresolved"


def target(name: str, ratio: dict[str, Any], limit: float, at_most: bool = True,
           floor: dict[str, Any] | None = None) -> dict[str, Any]:
    """A target row: {"name", "value", "low", "high", "limit", "sense", "verdict",
    "met", "floor"}. `floor`, if given, is {"name", "value"}: the same ratio with
    no splitrack code, measured in this run."""
    row = {"name": name, "value": ratio["value"], "low": ratio["low"], "high": ratio["high"],
           "limit": limit, "sense": "<=" if at_most else ">=",
           "verdict": verdict(ratio["low"], ratio["high"], limit, at_most)}
    row["met"] = row["verdict"] == "met"
    if ratio.get("once"):
        row["once"] = True
    if floor is not None:
        past = floor["value"] > limit if at_most else floor["value"] < limit
        row["floor"] = {**floor, "below": bool(past)}
    return row


def point(value: float) -> dict[str, Any]:
    """A ratio measured once (no repetitions): its range is itself."""
    return {"value": round(value, 3), "low": round(value, 3), "high": round(value, 3),
            "once": True}


def repetitions(reps: int, duration: float | None) -> Iterator[int]:
    if duration is None:
        yield from range(reps)
        return
    end, i = time.monotonic() + duration, 0
    while i < MIN_REPS or time.monotonic() < end:
        yield i
        i += 1


class Series:
    """Samples by (name, size), one list per repetition."""

    def __init__(self, unit: str = "us") -> None:
        self.unit = unit
        self.reps: dict[tuple[str, int], list[list[float]]] = {}

    def add(self, name: str, size: int, samples: list[float] | float) -> None:
        if isinstance(samples, (int, float)):
            samples = [float(samples)]
        self.reps.setdefault((name, size), []).append(list(samples))

    def summary(self, name: str, size: int) -> dict[str, Any]:
        return summarize(self.reps[name, size])

    def ratio(self, num: tuple[str, int], den: tuple[str, int]) -> dict[str, Any]:
        return ratio_of(self.reps[num], self.reps[den])

    def p50_rows(self, key: str) -> list[dict[str, Any]]:
        """[{key: name, "size", "p50_us", "p99_us"}], a row a series (a report's
        "results" where the unit is µs)."""
        out = []
        for name, size in self.reps:
            got = self.summary(name, size)
            out.append({key: name, "size": size, "p50_us": got["p50"], "p99_us": got["p99"]})
        return out

    def rows(self, prefix: str = "") -> list[dict[str, Any]]:
        """Every series' statistics, for the report's "stats" list."""
        return [{"series": prefix + name, "size": size, "unit": self.unit,
                 **summarize(reps)} for (name, size), reps in self.reps.items() if reps]

    def raw(self, prefix: str = "") -> Iterator[tuple[str, int, int, list[float]]]:
        for (name, size), reps in self.reps.items():
            for i, samples in enumerate(reps):
                yield prefix + name, size, i, samples
