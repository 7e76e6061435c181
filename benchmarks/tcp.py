"""`splitrack bench tcp`: the paper's TCP micro-benchmarks, against Linux in the same run.

The server is benchmarks/tcp_server.py: on the rack (p0, `splitrack run --mode
ddio|dma`, on the first NIC) and, for `linux`, the same program as a plain
process on 127.0.0.5. For linux, ddio and dma the client is this process,
outside the rack, with the ordinary socket module ("remote Linux" in the
paper). For the shortcuts the client is on the rack too (tcp_client.py run by
`splitrack run`): `pipe` on p0 (same pComponent as the server), `fit` on the
second pComponent. Repetitions interleave everything compared, so that the
machine's noise hits all alike. Per mode and size:

- echo RTT p50/p99 (TCP_NODELAY, one connection, `rounds` round trips);
- one-way throughput, MB/s and messages/s, each over `seconds`: the server
  send()s `size` bytes at a time (`throughput_MBps`: the send path, where
  message packing acts), and receives (`rx_throughput_MBps`). DDIO and DMA
  are measured with packing off too (`packing`).

And once: connect() time, a client on the rack (p0) vs the same client as a
plain process, both to the plain Linux server; the nComponent's CPU time
(psutil, the nMonitor process's own accounting) while the DDIO server streams
out and in for `cpu_seconds` each, per GB moved; and NIC scaling
(nic_scaling.py), and load: one DDIO program streaming alone, then eight at
once, their aggregate against the one (nic_scaling.load). `linux` is always
measured: it is the baseline.

Baselines measured in the same run: Linux TCP loopback (the `linux` mode),
raw pyzmq DEALER/ROUTER between two plain processes, raw os.pipe between two
plain processes (raw_pipe.py), the relay floor (relay_floor.py: the rack's
process layout -- a TCP socket in one process, one shared-memory hop each way
through FIT's rings to a second, waiting as FIT waits -- with no splitrack
code; its echo RTT, and its send throughput, where a third process streams
through a ring and the relay copies into its own buffer and to the socket, as
a DDIO send does), and the connect floor (shm_peer.py's connect role: one such round trip
to a process that makes the kernel connect from the NIC).
The targets (docs/benchmarks.md):
    DDIO RTT p50 <= 3 x Linux at 128 B-2 KiB, Linux < DDIO < DMA
    fit shortcut RTT p50 <= 1.5 x Linux;  pipe shortcut p50 <= 1.5 x raw os.pipe
    rack connect p50 <= 4 x Linux connect p50
    throughput at 4 KiB: DDIO >= 0.8 x Linux, DMA (packing) >= 0.35 x Linux
    nComponent CPU <= 4 core-seconds per GB each way
`splitrack bench --busy` keeps one core busy meanwhile (the other condition of
a VM whose idle cores halt; docs/evaluation.md).

JSON (--json FILE): {"bench": "tcp", "results": [{"mode", "size", "rtt_p50_us",
"rtt_p99_us", "throughput_MBps", "msgs_per_s", "rx_throughput_MBps"}],
"baselines": {"raw_zmq_p50_us", "raw_pipe_p50_us", "linux_tcp_p50_us",
"raw_zmq_p50_us_by_size", "raw_pipe_p50_us_by_size", "relay_floor_p50_us_by_size",
"relay_floor_tx_MBps_by_size"},
"ddio_over_relay_floor": {size: ratio}, "connect": {"linux_p50_us", "rack_p50_us",
"floor_p50_us", "ratio", "floor_ratio", "rack_over_floor", ...},
"ncomponent_cpu": {"tx_core_s_per_GB", "rx_core_s_per_GB", "size", "tx_bytes",
"rx_bytes"}, "nic_scaling": [{"nics", "throughput_MBps", ...}], "load": {"programs",
"one_MBps", "all_MBps", "ratio", "linux_one_MBps", "linux_all_MBps", "linux_ratio"},
"packing": [{"mode", "size", "on_MBps", "off_MBps"}], "targets": [{"name", "value",
"target", "met"}], "settings": {...}}
--plot F.png draws the figures (plots.py) and writes F.md, a summary table.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import psutil

from benchmarks import nic_scaling, plots, raw_pipe, tcp_client
from benchmarks.progress import progress
from benchmarks.raw_zmq import RawServer, measure_in_process
from benchmarks.report import finish
from benchmarks.servers import LINUX_IP, server
from benchmarks.shm_peer import ShmPeer
from benchmarks.verbs import TCP_MODES
from splitrack.params import BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec

MODES = TCP_MODES   # the order of tables and plots
SIZES = (128, 256, 512, 1024, 2048, 4096)
# The full sweep, and --quick's (well under a minute, the README's main job).
FULL = {"sizes": SIZES, "rounds": 1000, "reps": 5, "seconds": 0.25, "connects": 500,
        "cpu_seconds": 1.0, "nics": (1, 2, 4), "nic_seconds": 1.0}
QUICK = {"sizes": (128, 4096), "rounds": 300, "reps": 2, "seconds": 0.1, "connects": 100,
         "cpu_seconds": 0.5, "nics": (1, 2), "nic_seconds": 0.5}


def run(spec: Any = None, modes: tuple[str, ...] = MODES, **settings: Any) -> dict[str, Any]:
    s = {**FULL, **{k: v for k, v in settings.items() if v is not None}}
    sizes, reps = s["sizes"], s["reps"]
    rack_spec = load_spec(spec, name=f"bench-tcp-{os.getpid()}")
    ps = [c["id"] for c in rack_spec.components if c["kind"] == "p"]
    ncomp = next(c for c in rack_spec.components if c["kind"] == "n")
    nic = ncomp["nics"][0]
    if "fit" in modes and len(ps) < 2:
        raise SystemExit("splitrack: error: mode fit needs a rack with two pComponents")
    packable = [m for m in ("ddio", "dma") if m in modes]
    rtt: dict[tuple[str, int], list[float]] = {(m, z): [] for m in modes for z in sizes}
    tput: dict[tuple[str, str, int], list[float]] = {}   # (direction, mode, size) -> MB/s
    base: dict[tuple[str, int], list[float]] = {(b, z): [] for b in ("raw", "floor", "pipe")
                                                for z in sizes}
    connect: dict[str, list[float]] = {"linux": [], "rack": [], "floor": []}
    steps = reps * len(sizes) + reps + 2 + len(s["nics"])
    with progress("bench tcp", steps) as advance:
        with Rack(rack_spec) as rack, contextlib.ExitStack() as servers:
            env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root,
                       SPLITRACK_RUN_DIR=rack.run.path)
            rack_run = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack_spec.name]
            program = [sys.executable, "-m", "benchmarks.tcp_server"]

            def start(cmd: list[str], run_env: dict[str, str] = env) -> tuple[str, int]:
                return servers.enter_context(server(cmd, run_env))

            addr = {"linux": start([*program, LINUX_IP]),
                    "floor": start([sys.executable, "-m", "benchmarks.relay_floor", LINUX_IP,
                                    str(rack_spec.poll_us)])}
            for m in modes:
                if m != "linux":   # the shortcuts' listener is a DDIO server (they skip it)
                    data_path = m if m in ("ddio", "dma") else "ddio"
                    addr[m] = start([*rack_run, "--on", ps[0], "--mode", data_path, "--",
                                     *program, nic])
            for m in packable:
                addr[m + "-unpacked"] = start([*rack_run, "--on", ps[0], "--mode", m,
                                               "--no-packing", "--", *program, nic])
            raw_address = f"ipc://{rack.run.path}/raw-echo.sock"
            servers.enter_context(RawServer(raw_address))
            spin = rack_spec.poll_us / 1e6
            connect_floor = servers.enter_context(ShmPeer("connect", spin, nic))
            for _ in range(reps):
                for size in sizes:
                    warm = BENCH_WARMUP_ROUNDS
                    base["raw", size] += measure_in_process(raw_address, size, s["rounds"], warm)
                    base["floor", size] += tcp_client.echo_rtts(*addr["floor"], size,
                                                                s["rounds"], warm)
                    tput.setdefault(("tx", "floor", size), []).append(
                        tcp_client.tx(*addr["floor"], size, s["seconds"])["MBps"])
                    base["pipe", size] += raw_pipe.measure(size, s["rounds"], warm)
                    for m in modes:
                        plan = [{"kind": "echo", "size": size, "rounds": s["rounds"],
                                 "warmup": warm},
                                {"kind": "tx", "size": size, "seconds": s["seconds"]},
                                {"kind": "rx", "size": size, "seconds": s["seconds"]}]
                        if m in ("pipe", "fit"):   # the client is on the rack too
                            on = ps[0] if m == "pipe" else ps[1]
                            got = _rack_client(rack_run, env, on, addr[m], plan)
                        else:
                            got = tcp_client.run_plan([{**p, "ip": addr[m][0],
                                                        "port": addr[m][1]} for p in plan])
                        rtt[m, size] += got[0]
                        tput.setdefault(("tx", m, size), []).append(got[1]["MBps"])
                        tput.setdefault(("rx", m, size), []).append(got[2]["MBps"])
                    for m in packable:
                        got = tcp_client.tx(*addr[m + "-unpacked"], size, s["seconds"])
                        tput.setdefault(("tx", m + "-unpacked", size), []).append(got["MBps"])
                    advance()
                n = max(1, s["connects"] // reps)
                connect["linux"] += tcp_client.connect_times(*addr["linux"], n)
                _connect_floor(connect_floor, addr["linux"], BENCH_WARMUP_ROUNDS, spin)
                connect["floor"] += _connect_floor(connect_floor, addr["linux"], n, spin)
                connect["rack"] += _rack_client(
                    rack_run, env, ps[0], addr["linux"],
                    [{"kind": "connect", "n": 20}, {"kind": "connect", "n": n}])[1]
                advance()
            cpu = _ncomponent_cpu(rack, ncomp["id"], addr.get("ddio"), sizes,
                                  s["cpu_seconds"])
            advance()
            load = nic_scaling.load(rack, s["nic_seconds"], advance)
        scaling = nic_scaling.measure(spec, s["nics"], s["nic_seconds"], advance)
    return _report(rtt, tput, base, connect, cpu, scaling, load, modes, s)


def _connect_floor(peer: ShmPeer, addr: tuple[str, int], n: int, spin_s: float) -> list[float]:
    """n connect-floor round trips (the peer connects from the NIC), in µs."""
    request, clock, out = f"{addr[0]} {addr[1]}".encode(), time.perf_counter_ns, []
    try:
        for _ in range(n):
            t0 = clock()
            err = int(peer.call(request, spin_s))
            out.append((clock() - t0) / 1000.0)
            if err:
                raise OSError(err, f"the connect floor's connect: {os.strerror(err)}")
    finally:
        peer.rest()
    return out


def _rack_client(rack_run: list[str], env: dict[str, str], on: str, addr: tuple[str, int],
                 plan: list[dict[str, Any]]) -> list[Any]:
    """tcp_client.py's plan run on the rack (pComponent `on`); its results."""
    plan = [{**p, "ip": addr[0], "port": addr[1]} for p in plan]
    proc = subprocess.run([*rack_run, "--on", on, "--", sys.executable, "-m",
                           "benchmarks.tcp_client", json.dumps(plan)],
                          env=env, cwd="/", capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"the rack client failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


def _ncomponent_cpu(rack: Rack, n_id: str, addr: tuple[str, int] | None,
                    sizes: tuple[int, ...], seconds: float) -> dict[str, float] | None:
    """Core-seconds the nMonitor spends per GB while the DDIO server streams out and in."""
    if addr is None:
        return None
    proc = psutil.Process(rack.components[n_id]["pid"])
    size = 4096 if 4096 in sizes else max(sizes)
    out: dict[str, float] = {"size": size}
    for direction, measure in (("tx", tcp_client.tx), ("rx", tcp_client.rx)):
        before = proc.cpu_times()
        moved = measure(*addr, size, seconds)["bytes"]
        after = proc.cpu_times()
        core_s = (after.user - before.user) + (after.system - before.system)
        out[f"{direction}_bytes"] = moved
        out[f"{direction}_core_s_per_GB"] = round(core_s / (moved / 1e9), 3)
    return out


def _p(samples: list[float], q: float) -> float:
    return round(float(np.percentile(samples, q)), 2)


def _report(rtt: dict, tput: dict, base: dict, connect: dict, cpu: dict | None,
            scaling: list[dict[str, Any]], load: dict[str, Any], modes: tuple[str, ...],
            s: dict[str, Any]) -> dict[str, Any]:
    sizes = s["sizes"]
    results = []
    for (mode, size), samples in rtt.items():
        mbps = float(np.median(tput["tx", mode, size]))
        results.append({"mode": mode, "size": size, "rtt_p50_us": _p(samples, 50),
                        "rtt_p99_us": _p(samples, 99), "throughput_MBps": round(mbps, 2),
                        "msgs_per_s": round(mbps * 1e6 / size),
                        "rx_throughput_MBps": round(float(np.median(tput["rx", mode, size])), 2)})
    p50 = {name: {z: _p(base[name, z], 50) for z in sizes} for name in ("raw", "floor", "pipe")}
    report: dict[str, Any] = {
        "bench": "tcp", "results": results,
        "baselines": {"raw_zmq_p50_us": p50["raw"][sizes[0]],
                      "raw_pipe_p50_us": p50["pipe"][sizes[0]],
                      "raw_zmq_p50_us_by_size": {str(z): v for z, v in p50["raw"].items()},
                      "raw_pipe_p50_us_by_size": {str(z): v for z, v in p50["pipe"].items()},
                      "relay_floor_p50_us_by_size": {str(z): v
                                                     for z, v in p50["floor"].items()},
                      "relay_floor_tx_MBps_by_size": {
                          str(z): round(float(np.median(tput["tx", "floor", z])), 2)
                          for z in sizes}},
        "ddio_over_relay_floor": {str(z): round(r["rtt_p50_us"] / p50["floor"][z], 3)
                                  for r in results if r["mode"] == "ddio"
                                  for z in [r["size"]]},
        "connect": {"linux_p50_us": _p(connect["linux"], 50),
                    "rack_p50_us": _p(connect["rack"], 50),
                    "floor_p50_us": _p(connect["floor"], 50),
                    "linux_p99_us": _p(connect["linux"], 99),
                    "rack_p99_us": _p(connect["rack"], 99)},
        "ncomponent_cpu": cpu, "nic_scaling": scaling, "load": load,
        "packing": [{"mode": m, "size": z,
                     "on_MBps": round(float(np.median(tput["tx", m, z])), 2),
                     "off_MBps": round(float(np.median(tput["tx", m + "-unpacked", z])), 2)}
                    for m in ("ddio", "dma") if m in modes for z in sizes],
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()},
    }
    report["baselines"]["linux_tcp_p50_us"] = next(
        r["rtt_p50_us"] for r in results if r["mode"] == "linux" and r["size"] == sizes[0])
    report["targets"] = _targets(report, modes, p50)
    return report


def _targets(report: dict[str, Any], modes: tuple[str, ...], p50: dict) -> list[dict]:
    """Each target of docs/benchmarks.md with the value this run measured."""
    by = {(r["mode"], r["size"]): r for r in report["results"]}
    sizes = report["settings"]["sizes"]
    out = []

    def target(name: str, value: float, limit: float, at_most: bool = True) -> None:
        out.append({"name": name, "value": round(value, 3), "target": limit,
                    "met": value <= limit if at_most else value >= limit})

    if "ddio" in modes:
        for z in (z for z in sizes if z <= 2048):
            target(f"DDIO RTT / Linux at {z} B",
                   by["ddio", z]["rtt_p50_us"] / by["linux", z]["rtt_p50_us"], 3.0)
        if "dma" in modes:
            rtt = {(m, z): by[m, z]["rtt_p50_us"] for m in ("linux", "ddio", "dma") for z in sizes}
            target("sizes with RTT p50 in the paper's order, Linux < DDIO < DMA",
                   sum(rtt["linux", z] < rtt["ddio", z] < rtt["dma", z] for z in sizes),
                   len(sizes), at_most=False)
    for z in sizes:
        if "fit" in modes:
            target(f"fit shortcut RTT / Linux at {z} B",
                   by["fit", z]["rtt_p50_us"] / by["linux", z]["rtt_p50_us"], 1.5)
        if "pipe" in modes:
            target(f"pipe shortcut RTT / raw os.pipe at {z} B",
                   by["pipe", z]["rtt_p50_us"] / p50["pipe"][z], 1.5)
    c = report["connect"]
    c["ratio"] = round(c["rack_p50_us"] / c["linux_p50_us"], 3)
    c["floor_ratio"] = round(c["floor_p50_us"] / c["linux_p50_us"], 3)
    c["rack_over_floor"] = round(c["rack_p50_us"] / c["floor_p50_us"], 3)
    target("rack connect / Linux connect", c["ratio"], 4.0)
    if 4096 in sizes:
        linux = by["linux", 4096]["throughput_MBps"]
        for m, limit in (("ddio", 0.8), ("dma", 0.35)):
            if m in modes:
                target(f"{m.upper()} throughput / Linux at 4096 B",
                       by[m, 4096]["throughput_MBps"] / linux, limit, at_most=False)
    if report["ncomponent_cpu"]:
        for d in ("tx", "rx"):
            target(f"nComponent CPU {d}, core-s per GB", report["ncomponent_cpu"][
                f"{d}_core_s_per_GB"], 4.0)
    return out


def print_table(report: dict[str, Any]) -> None:
    st = report["settings"]
    print(f"TCP through the rack vs Linux ({st['reps']} repetitions, interleaved; "
          f"{st['rounds']} round trips each)")
    print(f"{'mode':<7}{'size':>6}  {'RTT p50':>9} {'p99':>9}  {'tx MB/s':>9} {'msgs/s':>9} "
          f"{'rx MB/s':>9}")
    for r in sorted(report["results"], key=lambda r: (r["size"], MODES.index(r["mode"]))):
        print(f"{r['mode']:<7}{r['size']:>6}  {r['rtt_p50_us']:>7.1f}us {r['rtt_p99_us']:>7.1f}us"
              f"  {r['throughput_MBps']:>9.1f} {r['msgs_per_s']:>9.0f} "
              f"{r['rx_throughput_MBps']:>9.1f}")
    b = report["baselines"]
    for label, key in (("raw pyzmq DEALER/ROUTER", "raw_zmq_p50_us_by_size"),
                       ("relay floor (no splitrack code)", "relay_floor_p50_us_by_size"),
                       ("raw os.pipe", "raw_pipe_p50_us_by_size")):
        print(f"{label} p50: " + ", ".join(f"{v:.1f}us ({z} B)" for z, v in b[key].items()))
    if report["ddio_over_relay_floor"]:
        print("DDIO RTT / relay floor (what the emulator's code adds): " + ", ".join(
            f"{v:.2f} ({z} B)" for z, v in report["ddio_over_relay_floor"].items()))
    floor_tx = b["relay_floor_tx_MBps_by_size"]
    linux_tx = {str(r["size"]): r["throughput_MBps"] for r in report["results"]
                if r["mode"] == "linux"}
    print("relay floor tx MB/s (no splitrack code): " + ", ".join(
        f"{v:.1f} = {v / linux_tx[z]:.2f} x Linux ({z} B)" for z, v in floor_tx.items()))
    c = report["connect"]
    print(f"connect() p50: rack {c['rack_p50_us']:.1f}us, Linux {c['linux_p50_us']:.1f}us, "
          f"connect floor (no splitrack code) {c['floor_p50_us']:.1f}us "
          f"= {c['floor_ratio']:.2f} x Linux; rack / floor {c['rack_over_floor']:.2f}")
    for p in report["packing"]:
        print(f"packing, {p['mode']} at {p['size']} B: {p['on_MBps']:.1f} MB/s on, "
              f"{p['off_MBps']:.1f} MB/s off")
    if report["ncomponent_cpu"]:
        cpu = report["ncomponent_cpu"]
        print(f"nComponent CPU (DDIO, {cpu['size']} B sends): {cpu['tx_core_s_per_GB']:.2f} "
              f"core-s/GB tx, {cpu['rx_core_s_per_GB']:.2f} rx")
    for row in report["nic_scaling"]:
        print(f"{row['nics']} NIC(s), {row['clients']} clients: {row['throughput_MBps']:.1f} MB/s")
    load = report["load"]
    print(f"{load['programs']} DDIO programs streaming at once: {load['all_MBps']:.1f} MB/s in "
          f"all, one alone {load['one_MBps']:.1f} MB/s ({load['ratio']:.2f} x); as plain "
          f"Linux processes {load['linux_all_MBps']:.1f} and {load['linux_one_MBps']:.1f} MB/s "
          f"({load['linux_ratio']:.2f} x)")
    print("targets:")
    for t in report["targets"]:
        sign = ">=" if "throughput" in t["name"] or "order" in t["name"] else "<="
        print(f"  {'met    ' if t['met'] else 'NOT met'}  {t['name']}: {t['value']:.3f} "
              f"(target {sign} {t['target']})")


def main(args: argparse.Namespace) -> int:
    modes = args.modes or MODES
    if "linux" not in modes:
        modes = ("linux", *modes)   # the baseline of every ratio
    base = QUICK if args.quick else FULL
    sizes = tuple(int(z) for z in args.sizes.split(",")) if args.sizes else base["sizes"]
    given = {"rounds": args.rounds, "reps": args.reps}
    report = run(args.spec, modes, **{**base, "sizes": sizes,
                                      **{k: v for k, v in given.items() if v is not None}})
    if args.plot:
        plots.tcp(report, args.plot)
    return finish(report, args, print_table)
