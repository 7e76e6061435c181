"""`splitrack bench slices` and `splitrack bench placement` run and write the documented JSON.

Each verb runs once at its smallest size on a copy of the embedded shared rack,
splitrack/slices_rack.toml (its storage root in the test's directory), and bench
slices once on the embedded rack itself (no --spec): real racks, a real `splitrack
serve`, real jobs. No timing is asserted; the JSON's shape and what must hold
whatever the timing are: every job's six FlowOS-RM steps in order, each ending
after it starts, no more components granted at once than the pool has, exits
0; placement's four rows, each job placed as asked, its ring's connections on
the shortcut its placement implies. Afterwards no run directory and no process
of the run is left.
"""

import json
import os
import re
import subprocess
from importlib import resources

import psutil
import pytest

from benchmarks.slices import STEPS
from helpers import SPLITRACK, wait_gone
from splitrack.cli import main

EMBEDDED = resources.files("splitrack").joinpath("slices_rack.toml")
TAG = "SPLITRACK_BENCH_TEST_TAG"


def bench(verb, run_root, tmp_path, *args, embedded=False):
    """The verb's run, on a copy of the shared rack's spec (its storage root goes to
    tmp_path) or, embedded, on the embedded rack (its storage in a data directory of
    tmp_path, XDG_DATA_HOME); its JSON report and what it printed."""
    spec = tmp_path / "slices_rack.toml"
    spec.write_text(EMBEDDED.read_text())
    out = tmp_path / f"{verb}.json"
    env = dict(os.environ, **{TAG: str(tmp_path)}, XDG_DATA_HOME=str(tmp_path / "data"))
    where = [] if embedded else ["--spec", str(spec)]
    try:
        proc = subprocess.run([SPLITRACK, "bench", verb, *where, *args, "--json", str(out)],
                              capture_output=True, text=True, timeout=180, env=env)
    finally:
        tagged = [p.pid for p in psutil.process_iter(["environ"])
                  if (p.info["environ"] or {}).get(TAG) == str(tmp_path)]
        left = wait_gone(tagged, timeout=10)
        for pid in left:   # a failed run's leftovers: stopped by PID, then reported
            psutil.Process(pid).kill()
    assert proc.returncode == 0, proc.stderr
    assert not left, f"processes left behind: {left}"
    assert os.listdir(run_root) in ([".lock"], [])   # its rack is gone
    return json.loads(out.read_text()), proc.stdout


def test_bench_slices_runs_a_stream_of_jobs(run_root, tmp_path):
    plot = tmp_path / "slices.png"
    report, stdout = bench("slices", run_root, tmp_path, "--jobs", "3", "--plot", str(plot))
    assert report["bench"] == "slices" and report["pool"] == {"p": 8, "m": 4, "n": 2}
    jobs = report["jobs"]
    assert [j["slice"] for j in jobs] == ["slice1", "slice2", "slice3"]
    for job in jobs:
        assert set(job) >= {"id", "slice", "submitted_s", "steps", "exit"}
        assert job["exit"] == 0 and job["exits"] == [0] * job["request"]["p"]
        assert [s["name"] for s in job["steps"]] == list(STEPS)
        starts = [s["start_s"] for s in job["steps"]]
        assert starts == sorted(starts) and 0 <= job["submitted_s"] <= starts[0]
        assert all(s["end_s"] >= s["start_s"] for s in job["steps"])
        kinds = [c[0] for c in job["components"]]
        assert [kinds.count(k) for k in "pmn"] == [job["request"][k] for k in "pmn"]
    assert all(report["peak"][k] <= report["pool"][k] for k in "pmn")
    assert {r["series"] for r in report["stats"]} == {f"step/{s}" for s in ("wait", *STEPS)}
    table = (tmp_path / "slices.md").read_text()
    assert plot.stat().st_size > 0 and len(re.findall(r"^\| j\d+ \|", table, re.M)) == 3
    assert "bench slices: 3 jobs" in stdout


def test_bench_slices_without_a_spec_starts_the_embedded_shared_rack(run_root, tmp_path):
    report, _ = bench("slices", run_root, tmp_path, "--jobs", "1", embedded=True)
    assert report["pool"] == {"p": 8, "m": 4, "n": 2} and report["jobs"][0]["exit"] == 0
    assert report["settings"]["spec"] == "<embedded slices>"
    assert os.listdir(tmp_path / "data" / "splitrack")   # its storage: the data directory


def test_bench_placement_measures_four_pairs(run_root, tmp_path):
    report, stdout = bench("placement", run_root, tmp_path, "--procs", "2", "--reps", "1",
                           "--quick")
    rows = {(r["workload"], r["placement"]): r for r in report["results"]}
    assert set(rows) == {(w, p) for w in ("network", "cpu") for p in ("pack", "spread")}
    for (_, placement), r in rows.items():
        assert r["seconds"] > 0 and len(r["runs"]) == 1 and len(r["placed"]) == 2
        if placement == "pack":   # one pComponent (cores 4 >= 2): pipes, its one CPU
            assert len(set(r["placed"])) == 1 and r["host_cpus"] == [0]
            assert r["paths"] == {"pipe": 2, "fit": 0, "nic": 0}
        else:                     # one a pComponent: FIT channels, both CPUs
            assert len(set(r["placed"])) == 2 and r["host_cpus"] == [0, 1]
            assert r["paths"] == {"pipe": 0, "fit": 2, "nic": 0}
    assert [r["workload"] for r in report["ratios"]] == ["network", "cpu"]
    assert all(r["faster"] in ("pack faster", "spread faster", "unresolved")
               for r in report["ratios"])
    assert isinstance(report["tradeoff_shown"], bool) and report["slice"]["request"]["p"] == 2
    assert "Scylla's trade-off" in stdout


@pytest.mark.parametrize("verb, args, says", [
    ("slices", ["--jobs", "0"], "argument --jobs: '0' is not a whole number >= 1"),
    ("slices", ["--reps", "2"], "unrecognized arguments: --reps 2"),
    ("slices", ["--plot", "/no/such/dir/f.png"], "no such directory"),
    ("placement", ["--procs", "1"], "argument --procs: '1' is not a whole number >= 2"),
    ("placement", ["--plot", "f.png"], "unrecognized arguments: --plot f.png"),
    ("placement", ["--spec", "/no/such/rack.toml"], "/no/such/rack.toml: cannot read"),
])
def test_a_bad_value_is_one_line_and_exit_2(run_root, capsys, verb, args, says):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", verb, *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert len(err.splitlines()) == 1 and says in err, err
    assert not os.listdir(run_root)
