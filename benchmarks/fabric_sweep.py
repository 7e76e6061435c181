"""`splitrack bench tcp --fabric-latency LIST`: the paper's Fig. 6 against the
interconnect's latency.

For each latency L of LIST, a shm rack of the spec with [fabric] latency = L on
every link (the interconnect model, fit_rpc/fabric.py; the spec's own [fabric]
bandwidth, if any, is kept), with the TCP server (benchmarks/tcp_server.py) on
its first pComponent in DDIO and in DMA mode. The shortcuts' clients run on the
rack (pipe: the same pComponent, fit: the second) to the DDIO server, which
they skip. Linux is the same server as a plain process, no rack and no model:
the level each curve is read against. Per L, mode and size: the echo RTT and
the one-way throughput where the server sends (tcp_client.py's echo and tx, as
bench tcp measures them). Repetitions interleave Linux and every L.

Interface:
    rows, series = sweep(spec, latencies_ns, modes, sizes, rounds, seconds, reps,
                         duration)
        rows: [{"latency_us", "mode", "size", "rtt_p50_us", "throughput_MBps"}]
              (Linux: latency_us None); series: {"fabric-rtt/", "fabric-tx/"}, for
              report["stats"], each named MODE@Lus ("linux" alone)
    same_order(rows) -> {size: the largest L at which DDIO's RTT p50 is at most
              DDIO_RTT_OVER_LINUX x Linux's (None: at none)}
    print_table(report)    the sweep's table
    plot(report, "F.png")  F-fabric.png: (a) RTT p50 against L, a curve per mode at
              the smallest and the largest size, Linux's as levels, DDIO's target
              (DDIO_RTT_OVER_LINUX x Linux) as another; (b) throughput against L
              at TX_AT (or the largest size), Linux's as a level. F-fabric.md: the
              numbers behind it.
"""

import contextlib
import copy
import dataclasses
import os
import sys
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from benchmarks import tcp_client
from benchmarks.limits import DDIO_RTT_OVER_LINUX, TX_AT
from benchmarks.plots import COLORS, SPREADS, spread
from benchmarks.progress import progress
from benchmarks.report import wrote
from benchmarks.servers import LINUX_IP, server
from benchmarks.stats import Series, repetitions
from benchmarks.tcp_client import rack_client
from splitrack.params import BENCH_WARMUP_ROUNDS
from splitrack.rack import Rack
from splitrack.spec import RackSpec, load_spec

SWEPT = ("ddio", "dma", "pipe", "fit")   # the rack's modes, each at every latency


def series_name(mode: str, latency_ns: int) -> str:
    return f"{mode}@{latency_ns / 1000:g}us"


def sweep(spec: Any, latencies: tuple[int, ...], modes: tuple[str, ...],
          sizes: tuple[int, ...], rounds: int, seconds: float, reps: int,
          duration: float | None) -> tuple[list[dict[str, Any]], dict[str, Series]]:
    base = load_spec(spec, name=f"bench-fab-{os.getpid()}")
    ps = [c["id"] for c in base.components if c["kind"] == "p"]
    nic = next(c for c in base.components if c["kind"] == "n")["nics"][0]
    modes = tuple(m for m in SWEPT if m in modes and (m != "fit" or len(ps) > 1))
    rtt, tx = Series(), Series("MB/s")
    program = [sys.executable, "-m", "benchmarks.tcp_server"]

    def plan(z: int) -> list[dict[str, Any]]:
        return [{"kind": "echo", "size": z, "rounds": rounds,
                 "warmup": min(rounds, BENCH_WARMUP_ROUNDS)},
                {"kind": "tx", "size": z, "seconds": seconds}]

    def to(addr: tuple[str, int], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**p, "ip": addr[0], "port": addr[1]} for p in steps]

    def record(name: str, z: int, got: list[Any]) -> None:
        rtt.add(name, z, got[0])
        tx.add(name, z, got[1]["MBps"])

    with contextlib.ExitStack() as stack:
        linux = stack.enter_context(server([*program, LINUX_IP], None))
        racks = []
        for i, ns in enumerate(latencies):
            rack = stack.enter_context(Rack(_with_latency(base, i, ns)))
            env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
            run = [sys.executable, "-m", "splitrack.cli", "run", "--name", rack.name]
            servers = {m: stack.enter_context(server(
                [*run, "--on", ps[0], "--mode", m, "--", *program, nic], env))
                for m in ("ddio", "dma") if m == "ddio" or m in modes}
            racks.append((ns, run, env, servers))
        advance = stack.enter_context(progress("bench tcp --fabric-latency",
                                               None if duration else reps))
        for rep in repetitions(reps, duration):
            for z in sizes:
                record("linux", z, tcp_client.run_plan(to(linux, plan(z))))
            for ns, run, env, servers in racks[rep % len(racks):] + racks[:rep % len(racks)]:
                for m in modes:
                    if m in servers:   # this process is the client, outside the rack
                        for z in sizes:
                            record(series_name(m, ns), z,
                                   tcp_client.run_plan(to(servers[m], plan(z))))
                        continue
                    got = rack_client(run, env, ps[0] if m == "pipe" else ps[1],
                                      servers["ddio"], [p for z in sizes for p in plan(z)])
                    for i, z in enumerate(sizes):   # one launch on the rack, every size
                        record(series_name(m, ns), z, got[2 * i:2 * i + 2])
            advance(f"repetition {rep + 1}")
    return _rows(rtt, tx, latencies, modes, sizes), {"fabric-rtt/": rtt, "fabric-tx/": tx}


def _with_latency(base: RackSpec, i: int, latency_ns: int) -> RackSpec:
    """A shm rack of `base` with this latency on every link, named -<i>."""
    own = base.fabric or {}
    return dataclasses.replace(base, name=f"{base.name}-{i}", transport="shm", endpoints="ipc",
                               components=copy.deepcopy(base.components),
                               fabric={"latency_ns": latency_ns,
                                       "bytes_per_s": own.get("bytes_per_s"), "links": {}})


def _rows(rtt: Series, tx: Series, latencies: tuple[int, ...], modes: tuple[str, ...],
          sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    def row(latency_ns: int | None, mode: str, z: int) -> dict[str, Any]:
        name = "linux" if latency_ns is None else series_name(mode, latency_ns)
        return {"latency_us": None if latency_ns is None else latency_ns / 1000, "mode": mode,
                "size": z, "rtt_p50_us": round(rtt.summary(name, z)["p50"], 2),
                "throughput_MBps": round(tx.summary(name, z)["p50"], 2)}
    return [row(None, "linux", z) for z in sizes] + \
        [row(ns, m, z) for ns in latencies for m in modes for z in sizes]


def same_order(rows: list[dict[str, Any]]) -> dict[int, float | None]:
    linux = {r["size"]: r["rtt_p50_us"] for r in rows if r["mode"] == "linux"}
    out: dict[int, float | None] = {}
    for z, level in linux.items():
        ok = [r["latency_us"] for r in rows if r["mode"] == "ddio" and r["size"] == z
              and r["rtt_p50_us"] <= DDIO_RTT_OVER_LINUX * level]
        out[z] = max(ok) if ok else None
    return out


def print_table(report: dict[str, Any]) -> None:
    rows = report["fabric_sweep"]
    print("the interconnect model swept ([fabric] latency L on every link): echo RTT p50 "
          "(us) and tx throughput (MB/s) per mode; Linux: no rack, no model")
    print(f"{'L us':>8} {'mode':<6}{'size':>6} {'RTT p50':>9} {'x Linux':>8} {'MB/s':>9}")
    linux = {r["size"]: r for r in rows if r["mode"] == "linux"}
    for r in rows:
        lat = "-" if r["latency_us"] is None else f"{r['latency_us']:g}"
        times = r["rtt_p50_us"] / linux[r["size"]]["rtt_p50_us"]
        print(f"{lat:>8} {r['mode']:<6}{r['size']:>6} {r['rtt_p50_us']:>9.1f} {times:>8.2f} "
              f"{r['throughput_MBps']:>9.1f}")
    for z, up_to in report["fabric_same_order_up_to_us"].items():
        print(f"DDIO's RTT at {z} B is within {DDIO_RTT_OVER_LINUX:g} x Linux's "
              + ("at no latency swept" if up_to is None else f"up to L = {up_to:g} us"))


# ---- the figure ------------------------------------------------------------------------
def plot(report: dict[str, Any], path: str) -> None:
    png = os.path.splitext(path)[0] + "-fabric.png"
    figure(report).savefig(png, dpi=110)
    wrote(png)
    md = os.path.splitext(png)[0] + ".md"
    with open(md, "w") as f:
        f.write("\n".join(_summary(report)) + "\n")
    wrote(md)


def figure(report: dict[str, Any]) -> Figure:
    stats = {(r["series"], r["size"]): r for r in report["stats"]
             if r["series"].startswith("fabric-")}
    rows = report["fabric_sweep"]
    sizes = sorted({r["size"] for r in rows})
    latencies = sorted({r["latency_us"] for r in rows if r["latency_us"] is not None})
    modes = [m for m in SWEPT if any(r["mode"] == m for r in rows)]
    fig = Figure(figsize=(15, 6), layout="constrained")
    lat, thr = fig.subplots(1, 2)
    fig.suptitle("splitrack bench tcp --fabric-latency: the paper's Fig. 6 against the "
                 f"interconnect's latency L (every link).\nPoints: {SPREADS}.")
    shown = [sizes[0]] if len(sizes) == 1 else [sizes[0], sizes[-1]]
    for z, style in zip(shown, ("-", "--"), strict=False):
        _curves(lat, stats, "fabric-rtt/", modes, latencies, z, style)
        lat.axhline(stats["fabric-rtt/linux", z]["p50"], color=COLORS["linux"],
                    linestyle=style, label=f"Linux, {z} B (no rack)")
    lat.axhline(DDIO_RTT_OVER_LINUX * stats["fabric-rtt/linux", sizes[0]]["p50"],
                color=COLORS["ddio"], linestyle=":",
                label=f"target: DDIO <= {DDIO_RTT_OVER_LINUX:g} x Linux, {sizes[0]} B")
    lat.set(title="(a) echo RTT p50 against L (Fig. 6(a))", ylabel="RTT, µs", yscale="log")
    at = TX_AT if TX_AT in sizes else sizes[-1]
    _curves(thr, stats, "fabric-tx/", modes, latencies, at, "-")
    thr.axhline(stats["fabric-tx/linux", at]["p50"], color=COLORS["linux"],
                label=f"Linux, {at} B (no rack)")
    thr.set(title=f"(b) one-way throughput against L at {at} B (Fig. 6(b))",
            ylabel="MB/s")
    for ax in (lat, thr):
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.1, max(latencies) * 1.4 if latencies[-1] > 0 else 1)
        ax.set_xticks(latencies, [f"{us:g}" for us in latencies])
        ax.set_xlabel("interconnect latency L, µs (each way, every link)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    return fig


def _curves(ax: Axes, stats: dict[tuple[str, int], dict[str, Any]], prefix: str,
            modes: list[str], latencies: list[float], size: int, style: str) -> None:
    for m in modes:
        got = [stats[f"{prefix}{m}@{us:g}us", size] for us in latencies]
        p50, below, above = zip(*map(spread, got), strict=True)
        ax.errorbar(latencies, p50, yerr=[below, above], color=COLORS[m], marker="o",
                    linestyle=style, capsize=3, label=f"{m}, {size} B")


def _summary(report: dict[str, Any]) -> list[str]:
    lines = ["# bench tcp --fabric-latency", "",
             "| L (µs) | mode | size (B) | RTT p50 (µs) | x Linux | throughput (MB/s) |",
             "|---:|---|---:|---:|---:|---:|"]
    rows = report["fabric_sweep"]
    linux = {r["size"]: r["rtt_p50_us"] for r in rows if r["mode"] == "linux"}
    for r in rows:
        lat = "-" if r["latency_us"] is None else f"{r['latency_us']:g}"
        lines.append(f"| {lat} | {r['mode']} | {r['size']} | {r['rtt_p50_us']:.1f} | "
                     f"{r['rtt_p50_us'] / linux[r['size']]:.2f} | "
                     f"{r['throughput_MBps']:.1f} |")
    lines.append("")
    for z, up_to in report["fabric_same_order_up_to_us"].items():
        lines.append(f"DDIO's RTT at {z} B is within {DDIO_RTT_OVER_LINUX:g} x Linux's "
                     + ("at no latency swept." if up_to is None else f"up to L = {up_to:g} µs."))
    return lines
