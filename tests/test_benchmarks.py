"""`splitrack bench fit|extcache|tcp|wordcount|hot` run and write the documented JSON.

Smoke runs with tiny counts: no timing is asserted (speed is measured by the
benchmarks themselves, never by tests); each must leave no run directory, no
extCache segment and no input file behind, and fit and extcache no process
(every process a bench run starts carries its test's tag in its environment).
The interconnect floors (benchmarks/floors.py) are also driven in-process.
"""

import csv
import errno
import json
import os
import socket
import struct
import subprocess
import sys
from collections import Counter

import numpy as np
import psutil
import pytest

from benchmarks import floors, machine, tcp_client
from benchmarks.corpus import Corpus
from benchmarks.servers import server
from benchmarks.shm_peer import STREAM_MAX, ShmPeer
from benchmarks.stats import verdict
from helpers import SPLITRACK, alive, wait_gone

TAG = "SPLITRACK_BENCH_TEST_TAG"
FLOOR_NAMES = {"linux_tcp", "unix", "shm_eventfd", "shm_spin", "raw_zmq"}


def bench(kind, run_root, tmp_path, rounds, *more):
    segments = set(os.listdir("/dev/shm"))
    out = tmp_path / f"{kind}.json"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), **{TAG: str(tmp_path)})
    rounds_args = ["--rounds", str(rounds)] if rounds else []
    proc = subprocess.run([SPLITRACK, "bench", kind, *rounds_args, "--reps", "2", *more,
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(run_root) in ([".lock"], [])              # its rack is gone (or none)
    assert set(os.listdir("/dev/shm")) <= segments             # and its extCaches
    return json.loads(out.read_text()), proc.stdout


def left_behind(tmp_path) -> list[int]:
    """PIDs of processes a bench run of this test started that are still alive."""
    tagged = [p.pid for p in psutil.process_iter(["environ"])
              if (p.info["environ"] or {}).get(TAG) == str(tmp_path)]
    return wait_gone(tagged, timeout=5)


def check_floors(rows, sizes):
    assert {(r["name"], r["size"]) for r in rows} == {(n, z) for n in FLOOR_NAMES for z in sizes}
    for r in rows:
        assert set(r) == {"size", "name", "p50_us", "p99_us"}
        assert isinstance(r["p50_us"], float) and 0 < r["p50_us"] <= r["p99_us"]


def check_targets(report, names):
    assert [t["name"] for t in report["targets"]] == names
    for t in report["targets"]:
        assert 0 < t["low"] <= t["high"] and t["value"] > 0
        assert t["verdict"] == verdict(t["low"], t["high"], t["limit"], t["sense"] == "<=")
        assert t["met"] == (t["verdict"] == "met")


def check_report(report, series):
    """The statistics of every series, the machine and the settings (report.py)."""
    assert {r["series"] for r in report["stats"]} >= set(series)
    for r in report["stats"]:
        assert r["min"] <= r["p50_low"] <= r["p50"] <= r["p50_high"] <= r["max"]
        assert r["p50"] <= r["p90"] <= r["p99"] <= r["p99_9"] <= r["max"]
    machine = report["machine"]
    assert machine["cpus"] >= 1 and machine["python"] and machine["kernel"]
    assert machine["splitrack"] and machine["busy_core"] == (machine["busy_cores"] > 0)
    assert report["settings"]["json"] and "reps" in report["settings"]


def test_bench_fit_measures_shm_and_zmq_against_the_floors(run_root, tmp_path):
    csv_file, samples = tmp_path / "fit.csv", tmp_path / "fit-samples.csv"
    report, stdout = bench("fit", run_root, tmp_path, 50, "--csv", str(csv_file),
                           "--samples", str(samples))
    assert left_behind(tmp_path) == []
    assert report["bench"] == "fit" and report["rack_up_s"] > 0
    assert (report["caller"], report["target"], report["rounds"], report["reps"]) == \
        ("p0", "m0", 50, 2)
    assert set(report["rack_up_s_by_transport"]) == {"shm", "zmq"}
    assert [(r["size"], r["transport"]) for r in report["results"]] == \
        [(128, "shm"), (128, "zmq"), (4096, "shm"), (4096, "zmq")]
    check_floors(report["floors"], (128, 4096))
    tcp = {r["size"]: r["p50_us"] for r in report["floors"] if r["name"] == "linux_tcp"}
    for r in report["results"]:
        for key in ("fit_p50_us", "fit_p99_us"):
            assert isinstance(r[key], float) and r[key] > 0
        assert r["fit_p99_us"] >= r["fit_p50_us"]
        # (from the unrounded p50s: both here are rounded to 0.01 us, the ratio to 0.001)
        slack = r["over_linux_tcp"] * 0.005 * (1 / r["fit_p50_us"] + 1 / tcp[r["size"]]) + 5e-4
        assert r["over_linux_tcp"] == pytest.approx(r["fit_p50_us"] / tcp[r["size"]],
                                                    abs=slack + 1e-9)
        assert r["over_shm_eventfd"] > 0 and r["over_shm_spin"] > 0 and r["over_raw_zmq"] > 0
    check_targets(report, ["FIT shm RTT p50 / Linux TCP p50 at 128 B",
                           "FIT shm RTT p50 / Linux TCP p50 at 4 KiB", "shm rack up, seconds"])
    assert [t["limit"] for t in report["targets"]] == [1.0, 1.3, 2.0]
    for t in report["targets"][:2]:   # each with its floor: the rings spinning, no FIT code
        assert t["floor"]["name"] == "shm_spin / Linux TCP" and t["floor"]["value"] > 0
        assert t["floor"]["below"] == (t["floor"]["value"] > t["limit"])
    assert "floor" not in report["targets"][2]
    assert report["targets"][2]["value"] == report["rack_up_s"] and report["targets"][2]["once"]
    assert "targets" in stdout and "FIT shm RTT p50 / Linux TCP p50 at 128 B" in stdout
    assert "shm_eventfd" in stdout and "FIT zmq" in stdout
    check_report(report, {f"fit/{t}" for t in ("shm", "zmq")}
                 | {f"floor/{n}" for n in FLOOR_NAMES})
    with open(csv_file) as f:
        rows = list(csv.DictReader(f))
    assert [(r["series"], int(r["size"])) for r in rows] == \
        [(r["series"], r["size"]) for r in report["stats"]]
    with open(samples) as f:
        raw = Counter((r["series"], r["size"], r["rep"]) for r in csv.DictReader(f))
    assert raw[("fit/shm", "128", "1")] == 50 and len(raw) == 2 * len(rows)   # 2 repetitions


def test_bench_extcache(run_root, tmp_path):
    report, stdout = bench("extcache", run_root, tmp_path, 40)
    assert left_behind(tmp_path) == []
    assert report["bench"] == "extcache" and report["config"]["line"] == 4096
    ops = {(r["op"], r["size"]) for r in report["results"]}
    assert {("read_hit", 4096), ("write_hit", 4096), ("read_miss", 4096),
            ("write_miss_zerofill", 4096), ("evict_writeback", 4096), ("m_miss_call", 4096)} <= ops
    for r in report["results"]:
        assert 0 < r["p50_us"] <= r["p99_us"]
    assert report["raw_zmq_p50_us"] > 0 and report["miss_ratio_p50"] > 0
    check_floors(report["floors"], (128, 4096))
    assert report["copy_4k_us"] > 0
    miss = next(r["p50_us"] for r in report["results"] if r["op"] == "read_miss")
    floor = next(r["p50_us"] for r in report["floors"]
                 if (r["name"], r["size"]) == ("shm_eventfd", 4096))
    assert report["miss_over_floor"] == pytest.approx(miss / (floor + report["copy_4k_us"]),
                                                     abs=2e-3)
    call = next(r["p50_us"] for r in report["results"] if r["op"] == "m_miss_call")
    assert report["miss_call_over_floor"] == pytest.approx(
        call / (floor + report["copy_4k_us"]), abs=2e-3)
    check_targets(report, ["extCache read miss p50 / (shm_eventfd p50 at 4096 B + 4 KiB copy)",
                           "extCache read hit p50 at 4096 B, µs"])
    assert report["targets"][0]["value"] == report["miss_over_floor"]
    assert "read_miss / raw pyzmq p50" in stdout and "targets" in stdout
    assert "its M_MISS call alone" in stdout
    check_report(report, {"op/read_miss", "base/copy_4k", "floor/shm_eventfd"})


def test_bench_hot_times_the_hot_paths_without_a_rack(run_root, tmp_path):
    report, stdout = bench("hot", run_root, tmp_path, 20, "--samples", str(tmp_path / "s.npz"))
    assert {(r["op"], r["size"]) for r in report["results"]} >= \
        {("header", 128), ("read_hit", 64), ("write_hit", 4096)}
    check_report(report, {"header", "codec", "read_hit", "write_hit"})
    with np.load(tmp_path / "s.npz") as raw:
        assert len(raw["read_hit@4096#1"]) == 20
    assert "read_hit" in stdout


def test_floors_measure_every_floor_interleaved_and_stop_their_children():
    rows = floors.measure((128, 4096), rounds=20, reps=2, warmup=5)
    check_floors(rows, (128, 4096))
    assert [(r["size"], r["name"]) for r in rows] == \
        [(z, n) for z in (128, 4096) for n in floors.NAMES]
    one = floors.measure_one("shm_eventfd", 4096, rounds=20, reps=2, warmup=5)
    assert one["name"] == "shm_eventfd" and one["size"] == 4096 and one["p50_us"] > 0


def test_busy_cores_spin_n_processes_and_stop_them_on_every_way_out():
    """machine.py: `--busy N` is N spinning children, gone after the run, or an error."""
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    with pytest.raises(KeyboardInterrupt):
        with machine.busy_cores(2):
            spinners = [p for p in me.children() if p.pid not in before]
            assert len(spinners) == 2
            assert all(p.cmdline()[-1] == "while True: pass" for p in spinners)
            raise KeyboardInterrupt
    assert not any(alive(p.pid) for p in spinners)
    report_machine = machine.describe(2)
    assert report_machine["busy_cores"] == 2 and report_machine["busy_core"] is True


def test_floor_children_are_stopped_on_an_exception_too():
    with pytest.raises(KeyboardInterrupt):
        with floors.Echoes() as echoes:
            pids = echoes.pids
            assert len(pids) == len(floors.NAMES) and all(alive(p) for p in pids)
            for name in floors.NAMES:
                assert len(echoes.round_trips(name, 64, 3, warmup=1)) == 3
            raise KeyboardInterrupt
    assert not any(alive(p) for p in pids)


def test_a_floor_whose_echo_child_died_raises_instead_of_hanging():
    with floors.Echoes(("shm_eventfd", "shm_spin", "unix")) as echoes:
        for name, pid in zip(echoes.names, echoes.pids, strict=True):
            assert len(echoes.round_trips(name, 128, 2)) == 2
            os.kill(pid, 9)
            assert wait_gone([pid]) == []
            with pytest.raises((RuntimeError, OSError)):
                echoes.round_trips(name, 128, 3)
    with pytest.raises(ValueError, match="unknown floor"):
        floors.Echoes(("carrier_pigeon",))


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
    assert all(v > 0 for v in baselines["raw_unix_p50_us_by_size"].values())
    pipe = next(t for t in report["targets"]
                if t["name"] == "pipe shortcut RTT / raw os.pipe at 128 B")
    assert pipe["floor"]["name"] == "raw AF_UNIX pair / raw os.pipe" and pipe["floor"]["value"] > 0
    assert set(baselines["relay_floor_tx_MBps_by_size"]) == {"128", "4096"}
    assert all(v > 0 for v in baselines["relay_floor_tx_MBps_by_size"].values())
    assert "relay floor tx MB/s" in stdout
    load = report["load"]   # eight programs at once finish, and move bytes
    assert load["programs"] == 8 and load["one_MBps"] > 0 and load["all_MBps"] > 0
    assert load["ratio"] == pytest.approx(load["all_MBps"] / load["one_MBps"], rel=0.01)
    assert load["linux_ratio"] == pytest.approx(load["linux_all_MBps"] / load["linux_one_MBps"],
                                                rel=0.01)
    connect = report["connect"]
    assert connect["linux_p50_us"] > 0 and connect["rack_p50_us"] > 0
    assert connect["rack_over_floor"] == pytest.approx(
        connect["rack_p50_us"] / connect["floor_p50_us"], abs=2e-3)
    cpu = report["ncomponent_cpu"]
    assert cpu["tx_core_s_per_GB"] > 0 and cpu["rx_core_s_per_GB"] > 0
    assert [(r["nics"], r["nics_used"]) for r in report["nic_scaling"]] == [(1, 1), (2, 2)]
    assert all(r["throughput_MBps"] > 0 for r in report["nic_scaling"])
    assert {(p["mode"], p["size"]) for p in report["packing"]} == \
        {(m, s) for m in ("ddio", "dma") for s in (128, 4096)}
    names = [t["name"] for t in report["targets"]]
    assert {"DDIO RTT / Linux at 128 B", "fit shortcut RTT / Linux at 4096 B",
            "rack connect / Linux connect", "DDIO throughput / Linux at 4096 B"} <= set(names)
    assert all(t["verdict"] in ("met", "NOT met", "unresolved") for t in report["targets"])
    check_report(report, {"rtt/ddio", "tx/ddio", "rx/fit", "base/relay_floor", "connect/rack"})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| ddio | 128 |" in (tmp_path / "tcp.md").read_text()
    assert "targets" in stdout and "connect() p50" in stdout


def test_the_connect_floor_makes_each_connection_from_the_nic():
    listener = socket.create_server(("127.0.0.5", 0), backlog=16)
    listener.settimeout(10)
    request = "{} {}".format(*listener.getsockname()).encode()
    with listener, ShmPeer("connect", 0.0, "127.0.0.11") as peer:
        pid = peer.pid
        assert [peer.call(request, 0.0) for _ in range(3)] == [b"0"] * 3
        conns = [listener.accept() for _ in range(3)]
        assert [address[0] for _, address in conns] == ["127.0.0.11"] * 3
        conns[2][0].settimeout(0.2)
        with pytest.raises(TimeoutError):   # the last one stays open until its close
            conns[2][0].recv(1)
        assert peer.call(b"close", 0.0) == b"0"   # a program's close(): a call of its own
        assert peer.call(b"close", 0.0) == b"0"   # (again: nothing more to close)
        for conn, _ in conns:   # each closed: by the next connect, the last by "close"
            with conn:
                conn.settimeout(10)
                assert conn.recv(1) == b""
        closed = socket.create_server(("127.0.0.5", 0))
        nobody = "{} {}".format(*closed.getsockname()).encode()
        closed.close()
        assert int(peer.call(nobody, 0.0)) == errno.ECONNREFUSED
    assert not wait_gone([pid])


def test_the_relay_floor_echoes_and_streams_through_fits_rings():
    with server([sys.executable, "-m", "benchmarks.relay_floor", "127.0.0.5", "50"],
                dict(os.environ)) as addr:
        assert len(tcp_client.echo_rtts(*addr, 300, 20, 2)) == 20
        for size in (128, 4096):   # a stream, then another: each ends cleanly
            with socket.create_connection(addr, timeout=10) as sock:
                sock.sendall(b"T" + struct.pack("<I", size))
                got = b""
                while len(got) < 3 * size:
                    got += sock.recv(1 << 16)
                assert got[:3 * size] == bytes(3 * size)   # the stream role sends zeros
            assert tcp_client.tx(*addr, size, 0.1)["MBps"] > 0
        for bad in (b"T", b"T\x01\x00", struct.pack("<cI", b"T", 0),
                    struct.pack("<cI", b"T", STREAM_MAX + 1)):   # each ends its connection
            with socket.create_connection(addr, timeout=10) as sock:
                sock.sendall(bad)
                sock.shutdown(socket.SHUT_WR)
                assert sock.recv(1) == b""
        assert len(tcp_client.echo_rtts(*addr, 300, 20, 2)) == 20   # echo after all that


def test_bench_wordcount_counts_right_in_every_mode(run_root, tmp_path):
    png = tmp_path / "wc.png"
    report, stdout = bench("wordcount", run_root, tmp_path, None, "--size", "1MB", "--seed",
                           "7", "--plot", str(png))
    assert report["bench"] == "wordcount" and report["input_bytes"] >= 1_000_000
    assert [r["mode"] for r in report["results"]] == ["linux", "ddio", "dma"]
    for r in report["results"]:
        assert r["correct"] is True and len(r["runs"]) == 2
        assert r["seconds"] > 0 and r["ops_per_s"] > 0
    check_targets(report, ["word count DDIO time / Linux time"])
    check_report(report, {"seconds/linux", "seconds/ddio", "seconds/dma"})
    assert png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "wc.md").exists()
    left = [(d, files) for d, _, files in os.walk(tmp_path / "data")
            if files or os.path.basename(d) == "wordcount"]
    assert left == []   # the input and its directory were removed from the sComponent


def test_bench_wordcount_with_rack_memory_and_an_extcache_sweep(run_root, tmp_path):
    png = tmp_path / "wc.png"
    report, stdout = bench("wordcount", run_root, tmp_path, None, "--size", "1MB",
                           "--modes", "ddio,dma", "--memory", "rack", "--extcache", "4MiB",
                           "--plot", str(png))
    assert [r["mode"] for r in report["results"]] == ["ddio", "dma", "ddio-host"]
    assert all(r["correct"] for r in [*report["results"], *report["sweep"]])
    rack, host = report["results"][0]["pager"], report["results"][2]["pager"]
    assert rack["faults"] > 0 and rack["zero_fills"] > 0 and host == {}
    assert [(r["extcache"], r["mode"], r["memory"]) for r in report["sweep"]] == \
        [(4 << 20, "ddio", "rack"), (4 << 20, "dma", "rack")]
    assert all(r["pager"]["faults"] > 0 for r in report["sweep"])
    check_targets(report, ["word count DDIO time, --memory rack / --memory host"])
    check_report(report, {"seconds/ddio", "seconds/ddio-host", "seconds/ddio@4MiB",
                          "seconds/dma@4MiB"})
    extcache_png = tmp_path / "wc-extcache.png"
    assert extcache_png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "wc-extcache.md").exists()


def test_bench_rackmem(run_root, tmp_path):
    report, stdout = bench("rackmem", run_root, tmp_path, 3, "--extcache", "4MiB")
    assert report["bench"] == "rackmem" and report["config"]["extcache_bytes"] == 4 << 20
    rack, host = report["results"][1], report["results"][0]
    assert (host["memory"], rack["memory"]) == ("host", "rack")
    assert rack["resident_ms"] > 0 and host["resident_ms"] > 0
    assert rack["heap_miss_p50_us"] > 0 and host["vm_miss_p50_us"] > 0
    assert len(report["resident_faults"]) == 2
    check_targets(report, ["resident loop, --memory rack / --memory host",
                           "heap miss p50 / vm read miss p50 (bench extcache's read_miss)"])
    check_report(report, {"ms/resident/rack", "ms/resident/host", "us/heap_miss",
                          "us/vm_miss"})


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
