"""`splitrack bench fit|extcache|tcp|wordcount` run and write the documented JSON.

Smoke runs with tiny counts: no timing is asserted (speed is measured by the
benchmarks themselves, never by tests); each must leave no run directory, no
extCache segment and no input file behind.
"""

import json
import os
import socket
import subprocess
import sys
from collections import Counter

from benchmarks.corpus import Corpus
from benchmarks.raw_zmq import RawClient, RawServer
from helpers import SPLITRACK


def bench(kind, run_root, tmp_path, rounds, *more):
    segments = set(os.listdir("/dev/shm"))
    out = tmp_path / f"{kind}.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    rounds_args = ["--rounds", str(rounds)] if rounds else []
    proc = subprocess.run([SPLITRACK, "bench", kind, *rounds_args, "--reps", "2", *more,
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
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


def test_bench_tcp_quick_writes_the_documented_json_plot_and_summary(run_root, tmp_path):
    png = tmp_path / "tcp.png"
    report, stdout = bench("tcp", run_root, tmp_path, 50, "--quick", "--plot", str(png))
    assert report["bench"] == "tcp"
    modes = {(r["mode"], r["size"]) for r in report["results"]}
    assert modes == {(m, s) for m in ("linux", "ddio", "dma", "pipe", "fit")
                     for s in (128, 4096)}
    for r in report["results"]:
        assert 0 < r["rtt_p50_us"] <= r["rtt_p99_us"]
        assert r["throughput_MBps"] > 0 and r["rx_throughput_MBps"] > 0
        assert abs(r["msgs_per_s"] * r["size"] / 1e6 - r["throughput_MBps"]) < 0.01
    baselines = report["baselines"]
    for key in ("raw_zmq_p50_us", "raw_pipe_p50_us", "linux_tcp_p50_us"):
        assert baselines[key] > 0
    assert set(baselines["relay_floor_p50_us_by_size"]) == {"128", "4096"}
    connect = report["connect"]
    assert connect["linux_p50_us"] > 0 and connect["rack_p50_us"] > 0
    assert connect["floor_p50_us"] > connect["linux_p50_us"]   # a pyzmq round trip more
    assert connect["rack_over_floor"] == round(connect["rack_p50_us"] / connect["floor_p50_us"], 3)
    cpu = report["ncomponent_cpu"]
    assert cpu["tx_core_s_per_GB"] > 0 and cpu["rx_core_s_per_GB"] > 0
    assert [(r["nics"], r["nics_used"]) for r in report["nic_scaling"]] == [(1, 1), (2, 2)]
    assert all(r["throughput_MBps"] > 0 for r in report["nic_scaling"])
    assert {(p["mode"], p["size"]) for p in report["packing"]} == \
        {(m, s) for m in ("ddio", "dma") for s in (128, 4096)}
    names = [t["name"] for t in report["targets"]]
    assert "DDIO RTT / (Linux + raw pyzmq) at 128 B" in names
    assert "rack connect / (Linux connect + raw pyzmq)" in names
    assert all(isinstance(t["met"], bool) for t in report["targets"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| ddio | 128 |" in (tmp_path / "tcp.md").read_text()
    assert "targets:" in stdout and "connect() p50" in stdout


def test_the_connect_floor_server_makes_each_connection_from_the_nic(tmp_path):
    listener = socket.create_server(("127.0.0.5", 0), backlog=16)
    listener.settimeout(10)
    address = f"ipc://{tmp_path}/floor.sock"
    with listener, RawServer(address, nic="127.0.0.11"):
        client = RawClient(address)
        try:
            assert len(client.connects(*listener.getsockname(), 3)) == 3
        finally:
            client.close()
        for _ in range(3):
            conn, peer = listener.accept()
            conn.close()
            assert peer[0] == "127.0.0.11"


def test_bench_wordcount_counts_right_in_every_mode(run_root, tmp_path):
    png = tmp_path / "wc.png"
    report, stdout = bench("wordcount", run_root, tmp_path, None, "--size", "1MB", "--seed",
                           "7", "--plot", str(png))
    assert report["bench"] == "wordcount" and report["input_bytes"] >= 1_000_000
    assert [r["mode"] for r in report["results"]] == ["linux", "ddio", "dma"]
    for r in report["results"]:
        assert r["correct"] is True and len(r["runs"]) == 2
        assert r["seconds"] > 0 and r["ops_per_s"] > 0
    assert report["targets"][0]["name"] == "word count DDIO time / Linux time"
    assert png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "wc.md").exists()
    left = [(d, files) for d, _, files in os.walk(tmp_path / "data")
            if files or os.path.basename(d) == "wordcount"]
    assert left == []   # the input and its directory were removed from the sComponent


def test_corpus_reference_is_the_texts_own_count():
    corpus = Corpus(3)
    text = b"".join(corpus.blocks(300_000))
    assert {w.decode(): n for w, n in Counter(text.split()).items()} == corpus.reference()
    assert b"".join(Corpus(3).blocks(300_000)) == text   # deterministic


def test_reducer_refuses_a_malformed_line(tmp_path):
    reducer = subprocess.Popen([sys.executable, "-m", "benchmarks.wordcount_reducer",
                                "127.0.0.5", str(tmp_path / "out.json")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ip, port = reducer.stdout.readline().split()
        with socket.create_connection((ip, int(port))) as sock:
            sock.sendall(b"good 3\nbad\n")
        assert reducer.wait(timeout=30) == 1
        assert "not 'word count'" in reducer.stderr.read()
        assert not (tmp_path / "out.json").exists()
    finally:
        if reducer.poll() is None:
            reducer.kill()
        reducer.wait()
        reducer.stdout.close()
        reducer.stderr.close()


def test_bench_refuses_bad_arguments():
    for args, words in ((["wordcount", "--size", "lots"], "is not a size"),
                        (["tcp", "--modes", "ddio,carrier-pigeon"], "unknown mode"),
                        (["wordcount", "--modes", "fit"], "unknown mode"),
                        (["fit", "--plot", "f.png"], "--plot is for bench tcp and wordcount"),
                        (["tcp", "--size", "3MB"], "--size is for bench wordcount")):
        proc = subprocess.run([SPLITRACK, "bench", *args], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode != 0 and words in proc.stderr, proc.stderr
