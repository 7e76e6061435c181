"""`splitrack bench extcache` runs and writes the documented JSON (a smoke run:
tiny counts; no timing is asserted)."""

import json
import os
import subprocess
import sys

SPLITRACK = os.path.join(os.path.dirname(sys.executable), "splitrack")


def test_bench_extcache_smoke(run_root, tmp_path):
    segments = set(os.listdir("/dev/shm"))
    out = tmp_path / "xc.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.run([SPLITRACK, "bench", "extcache", "--rounds", "40", "--reps", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=180,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["bench"] == "extcache"
    ops = {(r["op"], r["size"]) for r in report["results"]}
    assert {("read_hit", 4096), ("write_hit", 4096), ("read_miss", 4096),
            ("write_miss_zerofill", 4096), ("evict_writeback", 4096)} <= ops
    for r in report["results"]:
        assert 0 < r["p50_us"] <= r["p99_us"]
    assert report["raw_zmq_p50_us"] > 0 and report["config"]["line"] == 4096
    assert os.listdir(run_root) == [".lock"]
    assert set(os.listdir("/dev/shm")) <= segments  # the bench rack's extCaches are gone
