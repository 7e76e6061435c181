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
plain processes (raw_pipe.py; with the pipe mode, also the same echo over a
Unix-domain stream pair, the pipe shortcut's own kernel object: its floor),
the relay floor (relay_floor.py: the rack's
process layout -- a TCP socket in one process, one shared-memory hop each way
through FIT's rings to a second, waiting as FIT waits -- with no splitrack
code; its echo RTT, and its send throughput, where a third process streams
through a ring and the relay copies into its own buffer and to the socket, as
a DDIO send does), and the connect floor (shm_peer.py's connect role: one such round trip
to a process that connects from the NIC, doing what the nComponent's data plane does:
its socket made before, its CPU held; each connection closed by a round trip of its
own, off the clock, as a rack program's close() is).
The targets (docs/benchmarks.md):
    DDIO RTT p50 <= 3 x Linux at 128 B-2 KiB, Linux < DDIO < DMA
    fit shortcut RTT p50 <= 1.5 x Linux;  pipe shortcut p50 <= 1.5 x raw os.pipe
    rack connect p50 <= 4 x Linux connect p50
    throughput at 4 KiB: DDIO >= 0.8 x Linux, DMA (packing) >= 0.35 x Linux
    nComponent CPU <= 4 core-seconds per GB each way
`splitrack bench --busy [N]` keeps one core (N cores) busy meanwhile (the
other condition of a VM whose idle cores halt; docs/evaluation.md).

The report (--json FILE: its JSON, with the targets judged) and the table
printed are tcp_report.py's.
--plot F.png draws the figures (plots.py) and writes F.md, a summary table.

--fabric-latency LIST, after all of the above: the interconnect model swept
(fabric_sweep.py), a rack for each latency; adds "fabric_sweep": [{"latency_us",
"mode", "size", "rtt_p50_us", "throughput_MBps"}] and "fabric_same_order_up_to_us":
{size: L} to the JSON, its series to "stats", and with --plot F-fabric.png.
"""

import argparse
import contextlib
import os
import sys
import time
from typing import Any

import psutil

from benchmarks import nic_scaling, plots, raw_pipe, tcp_client
from benchmarks.progress import progress
from benchmarks.raw_zmq import RawServer, measure_in_process
from benchmarks.report import finish
from benchmarks.servers import LINUX_IP, server
from benchmarks.shm_peer import ShmPeer
from benchmarks.stats import Series, repetitions
from benchmarks.tcp_client import rack_client
from benchmarks.tcp_report import MODES, build_report, print_table
from splitrack.params import BENCH_CONNECT_WARMUP_S, BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec

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
                    if "pipe" in modes:   # the pipe shortcut's kernel object: its floor
                        base.add("raw_unix", size, raw_pipe.measure(size, s["rounds"], warm,
                                                                    "unix"))
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
    return build_report(series, cpu, scaling, load, modes, s), series


def _connect_floor(peer: ShmPeer, addr: tuple[str, int], n: int, spin_s: float) -> list[float]:
    """n connect-floor round trips (the peer connects from the NIC), in µs; each
    connection is closed by a round trip of its own, off the clock, as a rack
    program's close() is."""
    request, clock, out = f"{addr[0]} {addr[1]}".encode(), time.perf_counter_ns, []
    try:
        for _ in range(n):
            t0 = clock()
            err = int(peer.call(request, spin_s))
            out.append((clock() - t0) / 1000.0)
            if err:
                raise OSError(err, f"the connect floor's connect: {os.strerror(err)}")
            peer.call(b"close", spin_s)
    finally:
        peer.rest()
    return out


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
