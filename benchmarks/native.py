"""`splitrack bench native`: unmodified native programs on the rack (the native
interposer: native/preload.c) against the same programs on Linux, and against
`bench tcp`'s own DDIO echo, in the same run.

What is measured (a rack from the spec; DDIO, its default data path):
- echo RTT at each size, TCP_NODELAY, one connection, samples from sockperf's
  --full-log (every round trip of a `ping-pong -t SECONDS --full-rtt`, the
  first 400 ms its warm-up):
    sockperf/rack    `sockperf server` on the first pComponent, the client outside
    sockperf/linux   the same server as a plain process on LINUX_IP
    python/rack      bench tcp's DDIO echo: benchmarks/tcp_server.py on the rack,
                     `rounds` round trips of tcp_client.py from outside
- throughput, MB/s: `iperf3 -c -t SECONDS` from outside to `iperf3 -s` on the rack
  (iperf3/rack-server: the rack receives), from the rack to a server outside
  (iperf3/rack-client: the rack sends), and both ends plain (iperf3/linux).
- CPU, ms per MB received, over each of those runs (psutil; the client's from
  its rusage): iperf3/linux (server + client), and iperf3/rack-server split
  into its three processes, /n0 (the nComponent), /program (iperf3 -s on the
  rack) and /client. With cores kept busy (--busy) every process of a run
  shares the CPU, so CPU per MB sets throughput, and the rack's floor is
  what its own run would give if its program took no CPU at all, n0 and the
  client keeping the CPU the three had (iperf3/rack-server-floor, MB/s: rack
  MB/s x (n0 + program + client) / (n0 + client)), over Linux's MB/s. No
  program, however fast, gets the rack past it; with --busy the iperf3
  rack-server target reports it (`floor`).
- what the interposer costs a program that makes no socket call, ms a run, the
  whole process timed from outside: `dd` copying 10 MB of zeros in 512-byte
  reads and writes (40,000 calls the interposer sees and passes on), plain
  (no-sockets/plain) and with the interposer preloaded as `splitrack run` does
  (no-sockets/preloaded), NO_SOCKETS_RUNS of each a repetition, in turn.
All are interleaved in `reps` repetitions (`--duration S`: until S seconds).

Targets (the unmodified-programs issue): sockperf/rack p50 <= 1.3 x python/rack p50
at each size; iperf3 through the rack >= 0.5 x iperf3 on Linux, each direction;
"nothing measurable" for a program without sockets, taken as preloaded / plain
<= 1.05 (whole-process timings on this machine spread by about that much).

Needs sockperf and iperf3 (Debian: `apt install sockperf iperf3`).

JSON (--json FILE): {"bench": "native", "sizes", "reps", "rtt": [{"size", "name",
"p50_us", "p99_us"}], "throughput": [{"name", "MBps"}], "cpu": [{"name", "ms_per_MB"}],
"no_sockets": [{"name", "p50_ms", "p99_ms"}], "targets", "stats", "machine", "settings"}
(report.py)
"""

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import psutil

from benchmarks import tcp_client
from benchmarks.progress import progress
from benchmarks.report import finish, print_stats
from benchmarks.servers import LINUX_IP, server, stop
from benchmarks.stats import Series, repetitions, target
from splitrack.native_run import preload_env
from splitrack.rack import Rack
from splitrack.spec import load_spec

SIZES = (128, 4096)
DEFAULTS = {"rounds": 1000, "reps": 5, "seconds": 1.0}
ROUNDS, REPS = DEFAULTS["rounds"], DEFAULTS["reps"]
RTT_OVER_PYTHON = 1.3     # sockperf on the rack, against bench tcp's DDIO echo
IPERF_OVER_LINUX = 0.5
PRELOAD_OVER_PLAIN = 1.05   # "nothing measurable": within whole-process timing's spread
NO_SOCKETS_RUNS = 10        # dd runs of each kind a repetition
_NO_SOCKETS = ["if=/dev/zero", "of=/dev/null", "bs=512", "count=20000"]   # dd's: 10 MB
_WARMUP_S = 0.4           # sockperf's own warm-up, left out of its log


def run(spec: Any = None, sizes: tuple[int, ...] = SIZES, **settings: Any
        ) -> tuple[dict[str, Any], dict[str, Series]]:
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if v is not None}}
    s["seconds"] = max(1, math.ceil(s["seconds"]))   # whole seconds: sockperf refuses
    #                              others, and iperf3's -t 0.5 is 0, which runs forever
    sockperf, iperf3 = _tool("sockperf"), _tool("iperf3")
    rack_spec = load_spec(spec, name=f"bench-native-{os.getpid()}")
    p0 = next(c["id"] for c in rack_spec.components if c["kind"] == "p")
    n = next(c for c in rack_spec.components if c["kind"] == "n")
    nic = n["nics"][0]
    rtt, rate, cost, cpu = Series(), Series("MB/s"), Series("ms"), Series("ms/MB")
    dd = [_tool("dd"), *_NO_SOCKETS]
    with progress("bench native", None if s.get("duration") else s["reps"]) as advance, \
            Rack(rack_spec) as rack, contextlib.ExitStack() as up, \
            tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        on_rack = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack_spec.name,
                   "--on", p0, "--mode", "ddio", "--"]
        ports = iter(range(15301, 15400))
        sp = {"rack": (nic, next(ports)), "linux": (LINUX_IP, next(ports))}
        ip3 = {"rack-server": (nic, next(ports)), "linux": (LINUX_IP, next(ports))}
        tools = {}   # (ip, port) -> its server, for what it said when a client failed
        for where, (ip, port) in sp.items():
            tools[ip, port] = up.enter_context(_tool_server(
                [sockperf, "server", "--tcp", "-i", ip, "-p", str(port)],
                on_rack if where == "rack" else [], env, scratch))
        for where, (ip, port) in ip3.items():
            tools[ip, port] = up.enter_context(_tool_server(
                [iperf3, "-s", "-B", ip, "-p", str(port)],
                on_rack if where == "rack-server" else [], env, scratch))
        python = up.enter_context(server([*on_rack, sys.executable, "-m",
                                          "benchmarks.tcp_server", nic], env))
        for rep in repetitions(s["reps"], s.get("duration")):
            for size in sizes:
                for where, (ip, port) in sp.items():
                    rtt.add(f"sockperf/{where}", size, _sockperf(
                        sockperf, ip, port, size, s["seconds"], scratch, tools[ip, port]))
                rtt.add("python/rack", size, tcp_client.echo_rtts(*python, size, s["rounds"],
                                                                    50))
            for where, (ip, port) in ip3.items():
                tool = tools[ip, port]
                procs = {"server": tool.proc.pid} if where == "linux" else {
                    "n0": rack.components[n["id"]]["pid"],
                    "program": _program_of(rack.components[p0]["pid"], tool)}
                mbps, used = _iperf3([iperf3], ip, port, s["seconds"], tool, procs=procs)
                rate.add(f"iperf3/{where}", 0, mbps)
                for who, ms_per_mb in used.items():
                    cpu.add(f"iperf3/{where}/{who}", 0, ms_per_mb)
                cpu.add(f"iperf3/{where}", 0, sum(used.values()))
                if where == "rack-server":   # the same run without its program's CPU
                    rate.add("iperf3/rack-server-floor", 0, mbps * sum(used.values())
                             / (used["n0"] + used["client"]))
            rate.add("iperf3/rack-client", 0, _iperf3(
                [*on_rack, iperf3], *ip3["linux"], s["seconds"], tools[ip3["linux"]], env)[0])
            for name, ms in _no_sockets(dd, NO_SOCKETS_RUNS).items():
                cost.add(f"no-sockets/{name}", 0, ms)
            advance(f"repetition {rep + 1}")
    series = {"rtt/": rtt, "throughput/": rate, "cost/": cost, "cpu/": cpu}
    return _report(series, sizes, s), series


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"splitrack: error: bench native runs {name}, which is not installed "
                         f"(Debian: apt install {name})")
    return path


class _Tool:
    """A tool's server process and the file its output goes to."""

    def __init__(self, argv: list[str], env: dict[str, str], scratch: str):
        fd, self.log = tempfile.mkstemp(prefix="server-", suffix=".log", dir=scratch)
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, cwd="/", stdout=out,
                                         stderr=subprocess.STDOUT)

    def said(self) -> str:
        """Whether it is still running, and the end of its output: for an error."""
        with open(self.log, errors="replace") as f:
            tail = f.read()[-600:].strip() or "(nothing)"
        state = "running" if self.proc.poll() is None else f"exited ({self.proc.returncode})"
        return f"its server ({' '.join(self.proc.args[-6:])}) is {state}; it said: {tail}"


@contextlib.contextmanager
def _tool_server(argv: list[str], prefix: list[str], env: dict[str, str],
                 scratch: str) -> Iterator[_Tool]:
    """A tool's server (on the rack if `prefix` is `splitrack run ...`), always stopped."""
    tool = _Tool([*prefix, *argv], env, scratch)
    try:
        yield tool
    finally:
        stop(tool.proc)


def _until_up(argv: list[str], env: dict[str, str] | None, ok,
              tool: _Tool) -> subprocess.CompletedProcess:
    """A client run, again until its server (started just before) answers (30 s), or
    until that server has ended."""
    end = time.monotonic() + 30
    while True:
        got = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True,
                             timeout=300)
        if ok(got) or time.monotonic() > end or tool.proc.poll() is not None:
            return got
        time.sleep(0.2)


def _sockperf(sockperf: str, ip: str, port: int, size: int, seconds: float,
              scratch: str, tool: _Tool) -> list[float]:
    """Every round trip (µs) of one ping-pong run, its warm-up left out."""
    log = os.path.join(scratch, "rtt.csv")
    got = _until_up([sockperf, "ping-pong", "--tcp", "-i", ip, "-p", str(port), "-m", str(size),
                     "-t", str(seconds), "--full-rtt", "--full-log", log], None,
                    lambda g: g.returncode == 0 and "percentile 50.000" in g.stdout, tool)
    lines: list[str] = []
    if got.returncode == 0 and "percentile 50.000" in got.stdout:   # (else no answer in 30 s)
        with open(log) as f:
            lines = f.read().splitlines()
    head = [i for i, line in enumerate(lines) if line.startswith("packet,")]
    if not head:
        raise RuntimeError(f"sockperf ping-pong to {ip}:{port} failed: {got.stdout[-400:]} "
                           f"{got.stderr[-400:]}; {tool.said()}")
    start = head[0] + 1
    samples = []
    for line in lines[start:]:
        cells = line.split(",")
        if len(cells) != 4:
            break
        samples.append(float(cells[3]))
    os.unlink(log)
    return samples


def _iperf3(client: list[str], ip: str, port: int, seconds: float, tool: _Tool,
            env: dict[str, str] | None = None, procs: dict[str, int | None] | None = None
            ) -> tuple[float, dict[str, float]]:
    """MB/s received at the server, one iperf3 run; with `procs` ({name: pid}), the
    CPU each of them and the client (a child of ours: its rusage) used, in ms per MB
    received."""
    procs = {name: psutil.Process(pid) for name, pid in (procs or {}).items() if pid}
    before = {name: _cpu_s(p) for name, p in procs.items()}
    children = _children_cpu_s()
    got = _until_up([*client, "-c", ip, "-p", str(port), "-t", str(seconds), "-J"], env,
                    lambda g: g.returncode == 0 and '"error"' not in g.stdout,   # (-J: exit 0)
                    tool)
    used = {name: _cpu_s(p) - before[name] for name, p in procs.items()}
    used["client"] = _children_cpu_s() - children
    try:
        report = json.loads(got.stdout[got.stdout.index("{"):])
        mb = report["end"]["sum_received"]["bytes"] / 1e6
        mbps = mb / report["end"]["sum_received"]["seconds"]
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"iperf3 to {ip}:{port} failed: {got.stdout[-400:]} "
                           f"{got.stderr[-400:]}; {tool.said()}") from exc
    return mbps, ({name: s * 1e3 / mb for name, s in used.items()} if procs else {})


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _children_cpu_s() -> float:
    """CPU seconds of the children this process waited for, in all."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _program_of(pmonitor: int, tool: _Tool) -> int:
    """The PID of a tool's program on the rack: the pMonitor's child running its argv
    (the tool's own process is `splitrack run`, which asked for it; 10 s at most)."""
    argv = tool.proc.args[tool.proc.args.index("--") + 1:]
    end = time.monotonic() + 10
    while time.monotonic() < end:
        for child in psutil.Process(pmonitor).children():
            with contextlib.suppress(psutil.Error):
                if child.cmdline()[1:] == argv[1:] and \
                        os.path.basename(child.cmdline()[0]) == os.path.basename(argv[0]):
                    return child.pid
        time.sleep(0.05)
    raise RuntimeError(f"no program {' '.join(argv)} on the rack: {tool.said()}")


def _no_sockets(argv: list[str], runs: int) -> dict[str, list[float]]:
    """ms a whole run of argv (a program without sockets) takes, plain and with the
    interposer preloaded as the pMonitor starts a program, `runs` of each in turn."""
    plain = dict(os.environ)
    preloaded = {**plain, **preload_env(plain)}
    ms: dict[str, list[float]] = {"plain": [], "preloaded": []}
    for _ in range(runs):
        for name, env in (("plain", plain), ("preloaded", preloaded)):
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, timeout=60)
            ms[name].append((time.perf_counter() - t0) * 1e3)
    return ms


def _report(series: dict[str, Series], sizes: tuple[int, ...], s: dict[str, Any]
            ) -> dict[str, Any]:
    rtt, rate, cost = series["rtt/"], series["throughput/"], series["cost/"]
    cpu = series["cpu/"]
    targets = [target(f"sockperf on the rack / bench tcp's DDIO echo, RTT p50 at {z} B",
                      rtt.ratio(("sockperf/rack", z), ("python/rack", z)), RTT_OVER_PYTHON)
               for z in sizes]
    floor = None   # (CPU per MB sets throughput only where every process shares the CPU)
    if s.get("busy"):
        floor = {"name": "the rack-server run with its program's CPU taken out / Linux",
                 "value": rate.ratio(("iperf3/rack-server-floor", 0),
                                     ("iperf3/linux", 0))["value"]}
    targets += [target(f"iperf3 {what} / iperf3 on Linux",
                       rate.ratio((f"iperf3/{what}", 0), ("iperf3/linux", 0)),
                       IPERF_OVER_LINUX, at_most=False,
                       floor=floor if what == "rack-server" else None)
                for what in ("rack-server", "rack-client")]
    targets.append(target("a program without sockets (dd, 512 B reads and writes): "
                          "interposer preloaded / plain, whole run p50",
                          cost.ratio(("no-sockets/preloaded", 0), ("no-sockets/plain", 0)),
                          PRELOAD_OVER_PLAIN))
    return {"bench": "native", "sizes": list(sizes), "reps": len(rate.reps["iperf3/linux", 0]),
            "rtt": [{"size": z, "name": name, "p50_us": round(rtt.summary(name, z)["p50"], 2),
                     "p99_us": round(rtt.summary(name, z)["p99"], 2)}
                    for z in sizes for name in ("sockperf/linux", "sockperf/rack",
                                                 "python/rack")],
            "throughput": [{"name": name, "MBps": round(rate.summary(name, 0)["p50"], 1)}
                           for name in ("iperf3/linux", "iperf3/rack-server",
                                        "iperf3/rack-client", "iperf3/rack-server-floor")],
            "cpu": [{"name": name, "ms_per_MB": round(cpu.summary(name, 0)["p50"], 4)}
                    for name in ("iperf3/linux", "iperf3/linux/server", "iperf3/linux/client",
                                 "iperf3/rack-server", "iperf3/rack-server/n0",
                                 "iperf3/rack-server/program", "iperf3/rack-server/client")],
            "no_sockets": [{"name": name, "p50_ms": round(cost.summary(name, 0)["p50"], 3),
                            "p99_ms": round(cost.summary(name, 0)["p99"], 3)}
                           for name in ("no-sockets/plain", "no-sockets/preloaded")],
            "targets": targets, "settings": {**s, "sizes": list(sizes)}}


def print_table(report: dict[str, Any]) -> None:
    print("echo round trip, µs (sockperf ping-pong --tcp; python/rack: bench tcp's DDIO echo)")
    print_stats([r for r in report["stats"] if r["series"].startswith("rtt/")])
    print("iperf3, MB/s received (rack-server: the rack receives; rack-client: it sends; "
          "rack-server-floor: the rack-server run without its program's CPU)")
    print_stats([r for r in report["stats"] if r["series"].startswith("throughput/")])
    print("CPU over the iperf3 runs, ms per MB received")
    print_stats([r for r in report["stats"] if r["series"].startswith("cpu/")], width=34)
    print("a program without sockets (dd), ms a run: plain, and with the interposer preloaded")
    print_stats([r for r in report["stats"] if r["series"].startswith("cost/")])


def main(args: argparse.Namespace) -> int:
    report, series = run(args.spec, args.sizes or SIZES, rounds=args.rounds, reps=args.reps,
                         duration=args.duration, seconds=args.seconds, busy=args.busy)
    return finish(report, args, print_table, series)
