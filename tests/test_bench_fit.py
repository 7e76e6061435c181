"""`splitrack bench fit` runs and writes the documented JSON (a smoke run: tiny
counts, no timing asserted; the real figures come from the benchmark itself)."""

import json
import os
import subprocess
import sys

SPLITRACK = os.path.join(os.path.dirname(sys.executable), "splitrack")


def test_bench_fit_smoke(run_root, tmp_path):
    out = tmp_path / "fit.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.run([SPLITRACK, "bench", "fit", "--rounds", "50", "--reps", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["bench"] == "fit"
    rows = report["results"]
    assert [r["size"] for r in rows] == [128, 4096]
    for r in rows:
        assert r["transport"] == "zmq"
        for key in ("fit_p50_us", "fit_p99_us", "raw_p50_us", "raw_p99_us"):
            assert isinstance(r[key], float) and r[key] > 0
        assert r["fit_p99_us"] >= r["fit_p50_us"] and r["raw_p99_us"] >= r["raw_p50_us"]
    assert "FIT/raw p50" in proc.stdout
    assert os.listdir(run_root) == [".lock"]  # the rack it started is gone
