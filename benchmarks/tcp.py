"""`splitrack bench tcp`: the paper's TCP micro-benchmarks, against Linux in the same run.

The server is benchmarks/tcp_server.py: on the rack (p0, `splitrack run --mode
ddio|dma`, on the first NIC) and, for `linux`, the same program as a plain
process on 127.0.0.5. For linux, ddio and dma the client is this process,
outside the rack, with the ordinary socket module ("remote Linux" in the
paper). For the shortcuts the client is on the rack too (tcp_client.py run by
`splitrack run`): `pipe` on p0 (same pComponent as the server), `fit` on the
second pComponent. Repetitions interleave everything compared, so that the
machine's noise hits all alike (in each, size by size the baselines and the
clients outside the rack, then the rack's clients, one launch each for all
sizes). Per mode and size:

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
"packing": [{"mode", "size", "on_MBps", "off_MBps"}], "targets", "stats", "machine",
"settings"} (report.py, stats.py).
--plot F.png draws the figures (plots.py) and writes F.md, a summary table.

--fabric-latency LIST, after all of the above: the interconnect model swept
(fabric_sweep.py), a rack for each latency; adds "fabric_sweep": [{"latency_us",
"mode", "size", "rtt_p50_us", "throughput_MBps"}] and "fabric_same_order_up_to_us":
{size: L} to the JSON, its series to "stats", and with --plot F-fabric.png.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil

from benchmarks import nic_scaling, plots, raw_pipe, tcp_client
from benchmarks.limits import (
    CONNECT_OVER_LINUX,
    DDIO_RTT_OVER_LINUX,
    DDIO_RTT_UP_TO,
    NCOMPONENT_CORE_S_PER_GB,
    SHORTCUT_RTT,
    TX_AT,
    TX_OVER_LINUX,
)
from benchmarks.progress import progress
from benchmarks.raw_zmq import RawServer, measure_in_process
from benchmarks.report import finish, print_stats
from benchmarks.servers import LINUX_IP, server
from benchmarks.shm_peer import ShmPeer
from benchmarks.stats import Series, point, ratio_of, repetitions, target
from benchmarks.verbs import TCP_MODES
from splitrack.params import BENCH_CONNECT_WARMUP_S, BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec

MODES = TCP_MODES   # the order of tables and plots
SIZES = (128, 256, 512, 1024, 2048, 4096)
# The full sweep, and --quick's (well under a minute, the README's main job).
FULL = {"sizes": SIZES, "rounds": 1000, "reps": 5, "seconds": 0.25, "connects": 500,
        "cpu_seconds": 1.0, "nics": (1, 2, 4), "nic_seconds": 1.0}
QUICK = {"sizes": (128, 4096), "rounds": 300, "reps": 5, "seconds": 0.1, "connects": 100,
         "cpu_seconds": 0.5, "nics": (1, 2), "nic_seconds": 0.5}


def run(spec: Any = None, modes: tuple[str, ...] = MODES,
        **settings: Any) -> tuple[dict[str, Any], dict[str, Series]]:
    s = {**FULL, **{k: v for k, v in settings.items() if v is not None}}
    sizes, reps, duration = s["sizes"], s["reps"], s.get("duration")
    rack_spec = load_spec(spec, name=f"bench-tcp-{os.getpid()}")
    ps = [c["id"] for c in rack_spec.components if c["kind"] == "p"]
    ncomp = next(c for c in rack_spec.components if c["kind"] == "n")
    nic = ncomp["nics"][0]
    if "fit" in modes and len(ps) < 2:
        raise SystemExit("splitrack: error: mode fit needs a rack with two pComponents")
    packable = [m for m in ("ddio", "dma") if m in modes]
    on_rack = {m: ps[0] if m == "pipe" else ps[1] for m in modes if m in ("pipe", "fit")}
    rtt, base, connect = Series(), Series(), Series()
    tx, rx = Series("MB/s"), Series("MB/s")
    steps = None if duration else reps + 2 + len(s["nics"])
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
            warm = BENCH_WARMUP_ROUNDS

            def plan(size: int) -> list[dict[str, Any]]:
                return [{"kind": "echo", "size": size, "rounds": s["rounds"], "warmup": warm},
                        {"kind": "tx", "size": size, "seconds": s["seconds"]},
                        {"kind": "rx", "size": size, "seconds": s["seconds"]}]

            def record(m: str, size: int, got: list[Any]) -> None:
                rtt.add(m, size, got[0])
                tx.add(m, size, got[1]["MBps"])
                rx.add(m, size, got[2]["MBps"])

            for rep in repetitions(reps, duration):
                for size in sizes:
                    base.add("raw_zmq", size, measure_in_process(raw_address, size,
                                                                 s["rounds"], warm))
                    base.add("relay_floor", size, tcp_client.echo_rtts(
                        *addr["floor"], size, s["rounds"], warm))
                    tx.add("relay_floor", size, tcp_client.tx(*addr["floor"], size,
                                                              s["seconds"])["MBps"])
                    base.add("raw_pipe", size, raw_pipe.measure(size, s["rounds"], warm))
                    for m in modes:
                        if m not in on_rack:
                            record(m, size, tcp_client.run_plan(
                                [{**p, "ip": addr[m][0], "port": addr[m][1]}
                                 for p in plan(size)]))
                    for m in packable:
                        tx.add(m + "-unpacked", size,
                               tcp_client.tx(*addr[m + "-unpacked"], size, s["seconds"])["MBps"])
                for m, on in on_rack.items():   # the client on the rack too: one launch a rep
                    got = rack_client(rack_run, env, on, addr[m],
                                       [p for z in sizes for p in plan(z)])
                    for i, size in enumerate(sizes):
                        record(m, size, got[3 * i:3 * i + 3])
                n = max(1, s["connects"] // reps)
                connect.add("linux", 0, tcp_client.connect_times(*addr["linux"], n))
                _connect_floor(connect_floor, addr["linux"], BENCH_WARMUP_ROUNDS, spin)
                connect.add("floor", 0, _connect_floor(connect_floor, addr["linux"], n, spin))
                connect.add("rack", 0, rack_client(   # (after a warm-up: params.py says why)
                    rack_run, env, ps[0], addr["linux"],
                    [{"kind": "connect", "n": 20, "seconds": BENCH_CONNECT_WARMUP_S},
                     {"kind": "connect", "n": n}])[1])
                advance(f"repetition {rep + 1}")
            cpu = _ncomponent_cpu(rack, ncomp["id"], addr.get("ddio"), sizes,
                                  s["cpu_seconds"])
            advance("nComponent CPU")
            load = nic_scaling.load(rack, s["nic_seconds"], advance)
        scaling = nic_scaling.measure(spec, s["nics"], s["nic_seconds"], advance)
    series = {"rtt/": rtt, "base/": base, "connect/": connect, "tx/": tx, "rx/": rx}
    s["reps"] = len(connect.reps["linux", 0])
    return _report(series, cpu, scaling, load, modes, s), series


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


def rack_client(rack_run: list[str], env: dict[str, str], on: str, addr: tuple[str, int],
                plan: list[dict[str, Any]]) -> list[Any]:
    """tcp_client.py's plan run on the rack (pComponent `on`); its results. rack_run:
    the command `splitrack run --name RACK`."""
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


def _report(series: dict[str, Series], cpu: dict | None, scaling: list[dict[str, Any]],
            load: dict[str, Any], modes: tuple[str, ...], s: dict[str, Any]) -> dict[str, Any]:
    rtt, base, connect, tx, rx = (series[k] for k in ("rtt/", "base/", "connect/", "tx/", "rx/"))
    sizes = s["sizes"]
    results = []
    for mode, size in rtt.reps:
        got, mbps = rtt.summary(mode, size), tx.summary(mode, size)["p50"]
        results.append({"mode": mode, "size": size, "rtt_p50_us": round(got["p50"], 2),
                        "rtt_p99_us": round(got["p99"], 2), "throughput_MBps": round(mbps, 2),
                        "msgs_per_s": round(mbps * 1e6 / size),
                        "rx_throughput_MBps": round(rx.summary(mode, size)["p50"], 2)})

    def p50(what: Series, name: str, z: int) -> float:
        return round(what.summary(name, z)["p50"], 2)

    c = {who: connect.summary(who, 0) for who in ("linux", "rack", "floor")}
    report: dict[str, Any] = {
        "bench": "tcp", "results": results,
        "baselines": {"raw_zmq_p50_us": p50(base, "raw_zmq", sizes[0]),
                      "raw_pipe_p50_us": p50(base, "raw_pipe", sizes[0]),
                      "linux_tcp_p50_us": p50(rtt, "linux", sizes[0]),
                      **{f"{name}_p50_us_by_size": {str(z): p50(base, name, z) for z in sizes}
                         for name in ("raw_zmq", "raw_pipe", "relay_floor")},
                      "relay_floor_tx_MBps_by_size": {str(z): p50(tx, "relay_floor", z)
                                                      for z in sizes}},
        "ddio_over_relay_floor": {str(z): round(rtt.summary("ddio", z)["p50"]
                                                / base.summary("relay_floor", z)["p50"], 3)
                                  for z in sizes if "ddio" in modes},
        "connect": {"linux_p50_us": round(c["linux"]["p50"], 2),
                    "rack_p50_us": round(c["rack"]["p50"], 2),
                    "floor_p50_us": round(c["floor"]["p50"], 2),
                    "linux_p99_us": round(c["linux"]["p99"], 2),
                    "rack_p99_us": round(c["rack"]["p99"], 2)},
        "ncomponent_cpu": cpu, "nic_scaling": scaling, "load": load,
        "packing": [{"mode": m, "size": z, "on_MBps": p50(tx, m, z),
                     "off_MBps": p50(tx, m + "-unpacked", z)}
                    for m in ("ddio", "dma") if m in modes for z in sizes],
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()},
    }
    report["targets"] = _targets(report, series, modes)
    return report


def _targets(report: dict[str, Any], series: dict[str, Series],
             modes: tuple[str, ...]) -> list[dict]:
    """Each target of docs/benchmarks.md with what this run measured, its range
    over paired repetitions, and the floor it meets on this machine if any."""
    rtt, base, connect, tx = (series[k] for k in ("rtt/", "base/", "connect/", "tx/"))
    sizes = report["settings"]["sizes"]
    out = []
    if "ddio" in modes:
        for z in (z for z in sizes if z <= DDIO_RTT_UP_TO):
            relay = ratio_of(base.reps["relay_floor", z], rtt.reps["linux", z])["value"]
            out.append(target(f"DDIO RTT / Linux at {z} B", rtt.ratio(("ddio", z), ("linux", z)),
                              DDIO_RTT_OVER_LINUX,
                              floor={"name": "relay floor / Linux", "value": relay}))
        if "dma" in modes:
            p50 = {(m, z): rtt.summary(m, z)["p50"] for m in ("linux", "ddio", "dma")
                   for z in sizes}
            out.append(target("sizes with RTT p50 in the paper's order, Linux < DDIO < DMA",
                              point(sum(p50["linux", z] < p50["ddio", z] < p50["dma", z]
                                        for z in sizes)), len(sizes), at_most=False))
    for z in sizes:
        if "fit" in modes:
            out.append(target(f"fit shortcut RTT / Linux at {z} B",
                              rtt.ratio(("fit", z), ("linux", z)), SHORTCUT_RTT))
        if "pipe" in modes:
            out.append(target(f"pipe shortcut RTT / raw os.pipe at {z} B",
                              ratio_of(rtt.reps["pipe", z], base.reps["raw_pipe", z]),
                              SHORTCUT_RTT))
    c = report["connect"]
    ratio = connect.ratio(("rack", 0), ("linux", 0))
    floor = connect.ratio(("floor", 0), ("linux", 0))
    c.update(ratio=ratio["value"], floor_ratio=floor["value"],
             rack_over_floor=connect.ratio(("rack", 0), ("floor", 0))["value"])
    out.append(target("rack connect / Linux connect", ratio, CONNECT_OVER_LINUX,
                      floor={"name": "connect floor / Linux", "value": floor["value"]}))
    if TX_AT in sizes:
        floor_tx = tx.ratio(("relay_floor", TX_AT), ("linux", TX_AT))["value"]
        for m, limit in TX_OVER_LINUX.items():
            if m in modes:
                out.append(target(f"{m.upper()} throughput / Linux at {TX_AT} B",
                                  tx.ratio((m, TX_AT), ("linux", TX_AT)), limit, at_most=False,
                                  floor={"name": "relay floor tx / Linux", "value": floor_tx}))
    if report["ncomponent_cpu"]:
        for d in ("tx", "rx"):
            out.append(target(f"nComponent CPU {d}, core-s per GB",
                              point(report["ncomponent_cpu"][f"{d}_core_s_per_GB"]),
                              NCOMPONENT_CORE_S_PER_GB))
    return out


def print_table(report: dict[str, Any]) -> None:
    st = report["settings"]
    stats = report["stats"]
    print(f"TCP through the rack vs Linux ({st['reps']} repetitions, interleaved; "
          f"{st['rounds']} round trips each)")
    print("echo round trip, µs (rtt/: per mode; base/: raw pyzmq, raw os.pipe and the relay "
          "floor, no splitrack code):")
    order = [*(f"rtt/{m}" for m in MODES), "base/raw_zmq", "base/relay_floor", "base/raw_pipe"]
    print_stats(sorted((r for r in stats if r["series"] in order),
                       key=lambda r: (r["size"], order.index(r["series"]))), "series", 18)
    print("one-way throughput, the median [lowest..highest repetition] of each "
          f"{st['seconds']} s run. tx MB/s: the program under test sends (the rack's server "
          "on the rack); msgs/s: its send() calls of `size` bytes a second; rx MB/s: it "
          "receives")
    tput = {(r["series"], r["size"]): r for r in stats if r["unit"] == "MB/s"}

    def mbps(key: tuple[str, int]) -> str:
        r = tput[key]
        return f"{r['p50']:.1f} [{r['p50_low']:.1f}..{r['p50_high']:.1f}]"
    print(f"{'mode':<7}{'size':>6}  {'tx MB/s':>24} {'msgs/s':>9}  {'rx MB/s':>24}")
    for r in sorted(report["results"], key=lambda r: (r["size"], MODES.index(r["mode"]))):
        m, z = r["mode"], r["size"]
        print(f"{m:<7}{z:>6}  {mbps(('tx/' + m, z)):>24} {r['msgs_per_s']:>9.0f}  "
              f"{mbps(('rx/' + m, z)):>24}")
    if report["ddio_over_relay_floor"]:
        print("DDIO RTT / relay floor (what the emulator's code adds): " + ", ".join(
            f"{v:.2f} ({z} B)" for z, v in report["ddio_over_relay_floor"].items()))
    floor_tx = report["baselines"]["relay_floor_tx_MBps_by_size"]
    linux_tx = {str(r["size"]): r["throughput_MBps"] for r in report["results"]
                if r["mode"] == "linux"}
    print("relay floor tx MB/s (no splitrack code): " + ", ".join(
        f"{v:.1f} = {v / linux_tx[z]:.2f} x Linux ({z} B)" for z, v in floor_tx.items()))
    print("connect(), µs (rack: a program on p0; linux: a plain process; floor: the connect "
          "floor, no splitrack code):")
    print_stats([r for r in stats if r["series"].startswith("connect/")], "series", 18)
    c = report["connect"]
    print(f"connect() p50: rack {c['rack_p50_us']:.1f}us, Linux {c['linux_p50_us']:.1f}us, "
          f"connect floor {c['floor_p50_us']:.1f}us = {c['floor_ratio']:.2f} x Linux; "
          f"rack / floor {c['rack_over_floor']:.2f}")
    for p in report["packing"]:
        print(f"packing, {p['mode']} at {p['size']} B: {p['on_MBps']:.1f} MB/s on, "
              f"{p['off_MBps']:.1f} MB/s off")
    if report["ncomponent_cpu"]:
        cpu = report["ncomponent_cpu"]
        print(f"nComponent CPU (DDIO, {cpu['size']} B sends): {cpu['tx_core_s_per_GB']:.2f} "
              f"core-s/GB tx, {cpu['rx_core_s_per_GB']:.2f} rx (measured once)")
    for row in report["nic_scaling"]:
        print(f"{row['nics']} NIC(s), {row['clients']} clients: {row['throughput_MBps']:.1f} MB/s"
              " (measured once)")
    load = report["load"]
    print(f"{load['programs']} DDIO programs streaming at once: {load['all_MBps']:.1f} MB/s in "
          f"all, one alone {load['one_MBps']:.1f} MB/s ({load['ratio']:.2f} x); as plain "
          f"Linux processes {load['linux_all_MBps']:.1f} and {load['linux_one_MBps']:.1f} MB/s "
          f"({load['linux_ratio']:.2f} x) (measured once)")


def main(args: argparse.Namespace) -> int:
    modes = args.modes or MODES
    if "linux" not in modes:
        modes = ("linux", *modes)   # the baseline of every ratio
    base = QUICK if args.quick else FULL
    sizes = args.sizes or base["sizes"]
    given = {"rounds": args.rounds, "reps": args.reps}
    s = {**base, "sizes": sizes, "duration": args.duration,
         **{k: v for k, v in given.items() if v is not None}}
    report, series = run(args.spec, modes, **s)
    show = print_table
    if args.fabric_latency:
        from benchmarks import fabric_sweep

        rows, more = fabric_sweep.sweep(args.spec, args.fabric_latency, modes, sizes,
                                        s["rounds"], s["seconds"], s["reps"], args.duration)
        report["fabric_sweep"] = rows
        report["fabric_same_order_up_to_us"] = fabric_sweep.same_order(rows)
        series.update(more)

        def show(r: dict[str, Any]) -> None:
            print_table(r)
            fabric_sweep.print_table(r)
    status = finish(report, args, show, series)
    if args.plot:   # after finish: the plots draw report["stats"]
        plots.tcp(report, args.plot)
        if args.fabric_latency:
            fabric_sweep.plot(report, args.plot)
    return status
