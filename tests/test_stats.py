"""benchmarks/stats.py and `splitrack bench compare` on synthetic data with known answers."""

import json

import pytest

from benchmarks import compare
from benchmarks.stats import MIN_REPS, Series, ratio_of, repetitions, summarize, target, verdict
from splitrack.cli import main


def test_summary_of_known_samples():
    # 1..100 in two repetitions: the pooled quantiles are numpy's (linear interpolation)
    got = summarize([list(range(1, 51)), list(range(51, 101))])
    assert (got["p50"], got["p90"], got["p99"], got["p99_9"]) == (50.5, 90.1, 99.01, 99.901)
    assert (got["min"], got["max"], got["iqr"]) == (1, 100, 49.5)
    assert (got["p50_low"], got["p50_high"]) == (25.5, 75.5)   # each repetition's median
    assert (got["reps"], got["n"]) == (2, 100)


def test_a_series_with_no_samples_is_refused():
    with pytest.raises(ValueError, match="no samples"):
        summarize([[], []])


def test_ratio_of_medians_with_the_range_over_paired_repetitions():
    num = [[10, 10, 10], [30, 30, 30]]
    den = [[5, 5, 5], [10, 10, 10]]
    assert ratio_of(num, den) == {"value": 2.667, "low": 2.0, "high": 3.0}  # 20/7.5; 10/5, 30/10


def test_a_ratio_range_always_holds_its_value():
    # bimodal repetitions: the pooled medians' ratio (16/11) lies outside the paired
    # ones (14/14, 8/8): the range widens to hold it, so a verdict never contradicts it
    got = ratio_of([[16, 14, 14], [8, 17, 3]], [[11, 14, 17], [10, 8, 6]])
    assert got["low"] <= got["value"] <= got["high"]
    assert verdict(got["low"], got["high"], 1.2) == "unresolved"


@pytest.mark.parametrize("low, high, at_most, says", [
    (1.0, 2.0, True, "met"), (3.5, 4.0, True, "NOT met"), (2.0, 4.0, True, "unresolved"),
    (3.0, 3.0, True, "met"),                 # at the limit is within it
    (3.5, 4.0, False, "met"), (1.0, 2.0, False, "NOT met"), (2.0, 4.0, False, "unresolved"),
])
def test_verdicts_follow_the_whole_range(low, high, at_most, says):
    assert verdict(low, high, 3.0, at_most) == says


def test_a_target_names_the_floor_it_is_below():
    row = target("x / Linux", {"value": 5.0, "low": 4.0, "high": 6.0}, 3.0,
                 floor={"name": "floor / Linux", "value": 3.4})
    assert row == {"name": "x / Linux", "value": 5.0, "low": 4.0, "high": 6.0, "limit": 3.0,
                   "sense": "<=", "verdict": "NOT met", "met": False,
                   "floor": {"name": "floor / Linux", "value": 3.4, "below": True}}
    above = target("y", {"value": 0.5, "low": 0.4, "high": 0.6}, 0.8, at_most=False,
                   floor={"name": "f", "value": 1.1})
    assert above["verdict"] == "NOT met" and not above["floor"]["below"]


def test_repetitions_by_count_or_by_duration():
    assert list(repetitions(4, None)) == [0, 1, 2, 3]
    assert list(repetitions(100, 0.0)) == list(range(MIN_REPS))   # never fewer than MIN_REPS


def test_series_rows_and_raw_samples():
    s = Series("MB/s")
    for v in (1.0, 3.0, 2.0):
        s.add("tx", 4096, v)
    (row,) = s.rows("tx/")
    assert (row["series"], row["size"], row["unit"], row["p50"]) == ("tx/tx", 4096, "MB/s", 2.0)
    assert (row["p50_low"], row["p50_high"], row["reps"]) == (1.0, 3.0, 3)
    assert list(s.raw()) == [("tx", 4096, 0, [1.0]), ("tx", 4096, 1, [3.0]),
                             ("tx", 4096, 2, [2.0])]


def _report(bench, rows, targets=()):
    return {"bench": bench, "stats": [dict(zip(("series", "size", "unit", "p50", "p50_low",
                                                "p50_high", "reps"), (*r, 5), strict=True))
                                      for r in rows],
            "targets": list(targets), "machine": {"git_commit": "abc"}}


OLD = _report("tcp", [("rtt/ddio", 128, "us", 100.0, 95.0, 105.0),
                      ("rtt/linux", 128, "us", 20.0, 19.0, 21.0),
                      ("tx/ddio", 4096, "MB/s", 400.0, 380.0, 420.0),
                      ("rtt/dma", 128, "us", 300.0, 200.0, 400.0),
                      ("rtt/gone", 128, "us", 1.0, 1.0, 1.0)])
NEW = _report("tcp", [("rtt/ddio", 128, "us", 50.0, 45.0, 55.0),        # better: faster
                      ("rtt/linux", 128, "us", 30.0, 29.0, 31.0),       # worse: +50 %
                      ("tx/ddio", 4096, "MB/s", 300.0, 290.0, 310.0),   # worse: fewer MB/s
                      ("rtt/dma", 128, "us", 330.0, 250.0, 420.0)])     # same: ranges overlap


def test_compare_gives_each_series_a_verdict_the_spreads_justify():
    rows = {r["series"]: r for r in compare.compare(OLD, NEW)}
    assert set(rows) == {"rtt/ddio", "rtt/linux", "tx/ddio", "rtt/dma"}
    assert {k: (r["change_pct"], r["verdict"]) for k, r in rows.items()} == {
        "rtt/ddio": (-50.0, "better"), "rtt/linux": (50.0, "worse"),
        "tx/ddio": (-25.0, "worse"), "rtt/dma": (10.0, "no clear change")}
    assert [r["series"] for r in compare.failing(list(rows.values()), 30)] == ["rtt/linux"]


@pytest.mark.parametrize("pct, code", [(30, 1), (60, 0)])
def test_bench_compare_fails_above_a_percentage(tmp_path, capsys, pct, code):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    assert main(["bench", "compare", str(old), str(new), "--fail-above", str(pct)]) == code
    out = capsys.readouterr().out
    assert "rtt/linux" in out and "worse" in out and "better" in out
    assert "only in old: rtt/gone@128" in out


def test_a_series_measured_once_is_unresolved_and_never_fails_a_ci_check():
    once = {**NEW, "stats": [{**r, "reps": 1} for r in NEW["stats"]]}
    rows = compare.compare(OLD, once)
    assert {r["verdict"] for r in rows} == {"unresolved"}
    assert compare.failing(rows, 0) == []


def test_bench_compare_refuses_reports_of_different_benchmarks(tmp_path, capsys):
    old, new, junk = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "junk.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps({**NEW, "bench": "fit"}))
    junk.write_text("{not json")
    assert main(["bench", "compare", str(old), str(new)]) == 1
    assert main(["bench", "compare", str(old), str(junk)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "compare runs of one benchmark" in err[0]
    assert "not a bench --json report" in err[1]
