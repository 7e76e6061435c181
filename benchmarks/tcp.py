"""`splitrack bench tcp`: echo round trips through the rack against Linux, in the same run.

The server is benchmarks/echo_server.py: on the rack (p0, `splitrack run
--mode ddio|dma`, bound on the first NIC) and, for `linux`, the same program as
a plain process on 127.0.0.5. For linux, ddio and dma the client is this
process, outside the rack, with the ordinary socket module ("remote Linux" in
the paper). For the shortcuts the client is on the rack too
(benchmarks/echo_client.py): `pipe` on p0 (same pComponent as the server),
`fit` on the second pComponent. Modes are interleaved in `reps` repetitions so
that the machine's noise hits all alike.

Baselines measured in the same run: Linux TCP loopback (the `linux` mode),
raw pyzmq DEALER/ROUTER between two plain processes, raw os.pipe between two
plain processes (raw_pipe.py), and the relay floor
(benchmarks/relay_floor.py: the rack's process layout -- a TCP socket in one
process, one pyzmq hop each way to a second -- with no splitrack code). A rack
round trip is one TCP round trip plus one FIT round trip (stub <-> skeleton),
so the target is
    DDIO p50 <= 1.25 x (Linux TCP p50 + raw pyzmq p50)
and the paper's order is Linux < DDIO < DMA. The shortcuts' targets:
    pipe p50 <= 1.5 x raw os.pipe p50;  fit p50 <= 1.25 x raw pyzmq p50.

JSON (--json FILE): {"bench": "tcp", "results": [{"mode", "size", "rtt_p50_us",
"rtt_p99_us"}], "baselines": {"raw_zmq_p50_us", "raw_pipe_p50_us", "linux_tcp_p50_us",
"raw_zmq_p50_us_by_size", "raw_pipe_p50_us_by_size", "relay_floor_p50_us_by_size"},
"ddio_target_ratio": [{"size", "ratio", "over_floor"}],
"shortcut_ratios": [{"mode", "size", "ratio"}], "rounds", "reps"}
"""

import argparse
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks import raw_pipe
from benchmarks.raw_zmq import RawServer, measure_in_process
from benchmarks.report import finish
from splitrack.params import BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import load_spec

MODES = ("linux", "ddio", "dma", "pipe", "fit")
SIZES = (128, 4096)
ROUNDS = 2000
REPS = 5
LINUX_IP = "127.0.0.5"   # the "remote Linux" server's address, outside the rack


def run(spec: Any = None, modes: tuple[str, ...] = MODES, sizes: tuple[int, ...] = SIZES,
        rounds: int = ROUNDS, reps: int = REPS) -> dict[str, Any]:
    rack_spec = load_spec(spec, name=f"bench-tcp-{os.getpid()}")
    ps = [c["id"] for c in rack_spec.components if c["kind"] == "p"]
    p0 = ps[0]
    nic = next(c["nics"][0] for c in rack_spec.components if c["kind"] == "n")
    if "fit" in modes and len(ps) < 2:
        raise SystemExit("splitrack: error: mode fit needs a rack with two pComponents")
    samples: dict[tuple[str, int], list[float]] = {(m, s): [] for m in modes for s in sizes}
    raw: dict[int, list[float]] = {s: [] for s in sizes}
    floor: dict[int, list[float]] = {s: [] for s in sizes}
    pipe: dict[int, list[float]] = {s: [] for s in sizes}
    with Rack(rack_spec) as rack, contextlib.ExitStack() as servers:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root, SPLITRACK_RUN_DIR=rack.run.path)
        ports = {m: servers.enter_context(_server(m, env, rack_spec.name, p0, nic))
                 for m in (*modes, "floor")}
        raw_address = f"ipc://{rack.run.path}/raw-echo.sock"
        servers.enter_context(RawServer(raw_address))
        for _ in range(reps):
            for size in sizes:
                raw[size].extend(measure_in_process(raw_address, size, rounds,
                                                    BENCH_WARMUP_ROUNDS))
                floor[size].extend(echo_rtts(LINUX_IP, ports["floor"], size, rounds))
                pipe[size].extend(raw_pipe.measure(size, rounds, BENCH_WARMUP_ROUNDS))
                for mode in modes:
                    if mode in ("pipe", "fit"):   # the client is on the rack too
                        on = p0 if mode == "pipe" else ps[1]
                        samples[mode, size].extend(_rack_client(env, rack_spec.name, on, nic,
                                                                ports[mode], size, rounds))
                        continue
                    ip = LINUX_IP if mode == "linux" else nic
                    samples[mode, size].extend(echo_rtts(ip, ports[mode], size, rounds))
    return _report(samples, raw, floor, pipe, modes, sizes, rounds, reps)


def _rack_client(env: dict[str, str], rack: str, on: str, ip: str, port: int, size: int,
                 rounds: int) -> list[float]:
    """benchmarks/echo_client.py run on the rack; its round-trip times."""
    proc = subprocess.run(
        [sys.executable, "-m", "splitrack.cli", "run", "--name", rack, "--on", on, "--",
         sys.executable, "-m", "benchmarks.echo_client", ip, str(port), str(size), str(rounds),
         str(BENCH_WARMUP_ROUNDS)], env=env, cwd="/", capture_output=True, text=True,
        timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the rack echo client failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


@contextlib.contextmanager
def _server(mode: str, env: dict[str, str], rack: str, p0: str, nic: str) -> Iterator[int]:
    """The echo server for `mode`, started and always stopped; yields its port."""
    program = [sys.executable, "-m", "benchmarks.echo_server"]
    if mode == "linux":
        cmd = [*program, LINUX_IP]
    elif mode == "floor":
        cmd = [sys.executable, "-m", "benchmarks.relay_floor", env["SPLITRACK_RUN_DIR"], LINUX_IP]
    else:
        data_path = mode if mode in ("ddio", "dma") else "ddio"   # shortcuts skip it anyway
        cmd = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack, "--on", p0,
               "--mode", data_path, "--", *program, nic]
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            raise RuntimeError(f"the {mode} echo server did not start")
        yield int(line)
    finally:
        proc.terminate()   # `splitrack run` forwards it to the program
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def echo_rtts(ip: str, port: int, size: int, rounds: int,
              warmup: int = BENCH_WARMUP_ROUNDS) -> list[float]:
    """Round trips of `size` bytes, in µs, on one connection (after `warmup` of them)."""
    out = []
    payload = b"\x5a" * size
    buf = bytearray(size)
    clock = time.perf_counter_ns
    with socket.create_connection((ip, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(warmup + rounds):
            t0 = clock()
            sock.sendall(payload)
            got = 0
            while got < size:
                n = sock.recv_into(memoryview(buf)[got:])
                if not n:
                    raise ConnectionError("the echo server closed the connection")
                got += n
            if i >= warmup:
                out.append((clock() - t0) / 1000.0)
    return out


def _report(samples: dict[tuple[str, int], list[float]], raw: dict[int, list[float]],
            floor: dict[int, list[float]], pipe: dict[int, list[float]],
            modes: tuple[str, ...], sizes: tuple[int, ...], rounds: int, reps: int
            ) -> dict[str, Any]:
    results = []
    for (mode, size), s in samples.items():
        p50, p99 = np.percentile(s, [50, 99])
        results.append({"mode": mode, "size": size, "rtt_p50_us": round(float(p50), 2),
                        "rtt_p99_us": round(float(p99), 2)})
    raw_p50 = {size: float(np.percentile(raw[size], 50)) for size in sizes}
    floor_p50 = {size: float(np.percentile(floor[size], 50)) for size in sizes}
    pipe_p50 = {size: float(np.percentile(pipe[size], 50)) for size in sizes}
    report: dict[str, Any] = {
        "bench": "tcp", "rounds": rounds, "reps": reps, "results": results,
        "baselines": {"raw_zmq_p50_us": round(raw_p50[sizes[0]], 2),
                      "raw_pipe_p50_us": round(pipe_p50[sizes[0]], 2),
                      "raw_pipe_p50_us_by_size": {str(s): round(v, 2)
                                                  for s, v in pipe_p50.items()},
                      "raw_zmq_p50_us_by_size": {str(s): round(v, 2) for s, v in raw_p50.items()},
                      "relay_floor_p50_us_by_size": {str(s): round(v, 2)
                                                     for s, v in floor_p50.items()}},
    }
    p50 = {(r["mode"], r["size"]): r["rtt_p50_us"] for r in results}
    report["shortcut_ratios"] = [
        {"mode": m, "size": s, "ratio": round(p50[m, s] / base[s], 3)}
        for m, base in (("pipe", pipe_p50), ("fit", raw_p50)) if m in modes for s in sizes]
    if "linux" in modes:
        report["baselines"]["linux_tcp_p50_us"] = p50["linux", sizes[0]]
        if "ddio" in modes:
            report["ddio_target_ratio"] = [
                {"size": s, "ratio": round(p50["ddio", s] / (p50["linux", s] + raw_p50[s]), 3),
                 "over_floor": round(p50["ddio", s] / floor_p50[s], 3)} for s in sizes]
    return report


def print_table(report: dict[str, Any]) -> None:
    print(f"echo RTT, client outside the rack ({report['reps']} x {report['rounds']} round "
          "trips per mode and size, interleaved)")
    print(f"{'mode':<7}{'size':>7}  {'p50':>9} {'p99':>9}")
    for r in sorted(report["results"], key=lambda r: (r["size"], r["mode"])):
        print(f"{r['mode']:<7}{r['size']:>7}  {r['rtt_p50_us']:>7.1f}us {r['rtt_p99_us']:>7.1f}us")
    by_size = report["baselines"]["raw_zmq_p50_us_by_size"]
    print("raw pyzmq DEALER/ROUTER p50: " + ", ".join(f"{v:.1f}us ({s} B)"
                                                     for s, v in by_size.items()))
    floor = report["baselines"]["relay_floor_p50_us_by_size"]
    print("relay floor (no splitrack code) p50: " + ", ".join(f"{v:.1f}us ({s} B)"
                                                              for s, v in floor.items()))
    raw_pipe_p50 = report["baselines"]["raw_pipe_p50_us_by_size"]
    print("raw os.pipe p50: " + ", ".join(f"{v:.1f}us ({s} B)" for s, v in raw_pipe_p50.items()))
    for t in report.get("ddio_target_ratio", []):
        print(f"DDIO / (Linux + raw pyzmq) p50 at {t['size']} B: {t['ratio']:.3f} "
              f"(target <= 1.25); DDIO / relay floor: {t['over_floor']:.3f}")
    targets = {"pipe": ("raw os.pipe", 1.5), "fit": ("raw pyzmq", 1.25)}
    for t in report["shortcut_ratios"]:
        base, target = targets[t["mode"]]
        print(f"{t['mode']} shortcut / {base} p50 at {t['size']} B: {t['ratio']:.3f} "
              f"(target <= {target})")


def main(args: argparse.Namespace) -> int:
    modes = tuple(args.modes.split(",")) if args.modes else MODES
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"splitrack: error: unknown mode(s) {', '.join(bad)} "
                         f"(have {', '.join(MODES)})")
    report = run(args.spec, modes, sizes, rounds=args.rounds or ROUNDS, reps=args.reps or REPS)
    return finish(report, args, print_table)
