"""`splitrack bench fit|extcache` run and write the documented JSON.

Smoke runs with tiny counts: no timing is asserted (speed is measured by the
benchmarks themselves, never by tests); each must leave no run directory and
no extCache segment behind.
"""

import json
import os
import subprocess

from helpers import SPLITRACK


def bench(kind, run_root, tmp_path, rounds):
    segments = set(os.listdir("/dev/shm"))
    out = tmp_path / f"{kind}.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = subprocess.run([SPLITRACK, "bench", kind, "--rounds", str(rounds), "--reps", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=180,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(run_root) == [".lock"]                   # its rack is gone
    assert set(os.listdir("/dev/shm")) <= segments             # and its extCaches
    return json.loads(out.read_text()), proc.stdout


def test_bench_fit(run_root, tmp_path):
    report, stdout = bench("fit", run_root, tmp_path, 50)
    assert report["bench"] == "fit" and report["rack_up_s"] > 0
    assert [r["size"] for r in report["results"]] == [128, 4096]
    for r in report["results"]:
        assert r["transport"] == "zmq"
        for key in ("fit_p50_us", "fit_p99_us", "raw_p50_us", "raw_p99_us"):
            assert isinstance(r[key], float) and r[key] > 0
        assert r["fit_p99_us"] >= r["fit_p50_us"] and r["raw_p99_us"] >= r["raw_p50_us"]
    assert "FIT/raw p50" in stdout


def test_bench_extcache(run_root, tmp_path):
    report, stdout = bench("extcache", run_root, tmp_path, 40)
    assert report["bench"] == "extcache" and report["config"]["line"] == 4096
    ops = {(r["op"], r["size"]) for r in report["results"]}
    assert {("read_hit", 4096), ("write_hit", 4096), ("read_miss", 4096),
            ("write_miss_zerofill", 4096), ("evict_writeback", 4096)} <= ops
    for r in report["results"]:
        assert 0 < r["p50_us"] <= r["p99_us"]
    assert report["raw_zmq_p50_us"] > 0
    assert "read_miss / raw p50" in stdout


def test_bench_tcp(run_root, tmp_path):
    report, stdout = bench("tcp", run_root, tmp_path, 50)
    assert report["bench"] == "tcp"
    modes = {(r["mode"], r["size"]) for r in report["results"]}
    assert modes == {(m, s) for m in ("linux", "ddio", "dma", "pipe", "fit")
                     for s in (128, 4096)}
    for r in report["results"]:
        assert 0 < r["rtt_p50_us"] <= r["rtt_p99_us"]
    baselines = report["baselines"]
    assert baselines["linux_tcp_p50_us"] > 0 and baselines["raw_zmq_p50_us"] > 0
    assert set(baselines["relay_floor_p50_us_by_size"]) == {"128", "4096"}
    assert [t["size"] for t in report["ddio_target_ratio"]] == [128, 4096]
    assert baselines["raw_pipe_p50_us"] > 0
    assert {(t["mode"], t["size"]) for t in report["shortcut_ratios"]} == \
        {(m, s) for m in ("pipe", "fit") for s in (128, 4096)}
    assert "DDIO / (Linux + raw pyzmq)" in stdout and "fit shortcut / raw pyzmq" in stdout
