"""The benchmarks' figures (matplotlib, PNG) and a markdown summary next to them.

    tcp(report, "F.png")        four panels, shaped like the paper's Figs. 6 and 7:
                                (a) echo RTT p50 vs message size, per mode, with the raw
                                    pyzmq and relay-floor baselines; (b) one-way
                                    throughput vs size, per mode; (c) the intra-rack
                                    shortcuts against DDIO, Linux and their raw baselines;
                                    (d) throughput vs number of NICs
    wordcount(report, "F.png")  execution time per mode (the paper's Fig. 8)

Each also writes F.md: the numbers behind the figure as a markdown table, and
the targets with what was measured. docs/benchmarks.md says how to read them.
"""

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"linux": "tab:gray", "ddio": "tab:blue", "dma": "tab:red", "pipe": "tab:green",
          "fit": "tab:purple"}


def tcp(report: dict[str, Any], path: str) -> None:
    rows = report["results"]
    modes = [m for m in COLORS if any(r["mode"] == m for r in rows)]
    sizes = report["settings"]["sizes"]
    fig, ((lat, thr), (short, nics)) = plt.subplots(2, 2, figsize=(12, 9))
    for m in modes:
        mine = sorted((r for r in rows if r["mode"] == m), key=lambda r: r["size"])
        xs = [r["size"] for r in mine]
        lat.plot(xs, [r["rtt_p50_us"] for r in mine], "o-", color=COLORS[m], label=m)
        thr.plot(xs, [r["throughput_MBps"] for r in mine], "o-", color=COLORS[m], label=m)
    for key, label, style in (("raw_zmq_p50_us_by_size", "raw pyzmq", "k--"),
                              ("relay_floor_p50_us_by_size", "relay floor", "k:")):
        by = report["baselines"][key]
        lat.plot(sizes, [by[str(z)] for z in sizes], style, label=label)
    for m in ("ddio", "dma"):
        off = sorted((p for p in report.get("packing", []) if p["mode"] == m),
                     key=lambda p: p["size"])
        if off:
            thr.plot([p["size"] for p in off], [p["off_MBps"] for p in off], "x--",
                     color=COLORS[m], label=f"{m}, no packing")
    for ax, title, unit in ((lat, "(a) echo round trip, p50", "RTT (µs)"),
                            (thr, "(b) one-way throughput, the rack program sends",
                             "throughput (MB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    _shortcuts(short, report)
    scaling = report.get("nic_scaling") or []
    nics.bar([str(r["nics"]) for r in scaling], [r["throughput_MBps"] for r in scaling],
             color="tab:blue")
    nics.set_xlabel("NICs (one nComponent each), 4 clients")
    nics.set_ylabel("aggregate throughput (MB/s)")
    nics.set_title("(d) NIC scaling, DDIO, 4 KiB sends")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    _write_summary(path, _tcp_summary(report))


def _shortcuts(ax: Any, report: dict[str, Any]) -> None:
    """RTT p50 at the smallest size: the shortcuts against what they replace."""
    size = report["settings"]["sizes"][0]
    by = {r["mode"]: r["rtt_p50_us"] for r in report["results"] if r["size"] == size}
    base = report["baselines"]
    bars = [(m, by[m], COLORS[m]) for m in ("linux", "pipe", "fit", "ddio", "dma") if m in by]
    bars += [("raw os.pipe", base["raw_pipe_p50_us_by_size"][str(size)], "lightgreen"),
             ("raw pyzmq", base["raw_zmq_p50_us_by_size"][str(size)], "plum")]
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.set_yscale("log")
    ax.set_ylabel("RTT p50 (µs)")
    ax.set_title(f"(c) intra-rack shortcuts vs the paths they skip, {size} B")
    ax.tick_params(axis="x", labelsize=8)


def _tcp_summary(report: dict[str, Any]) -> list[str]:
    lines = ["# splitrack bench tcp", "",
             "| mode | size (B) | RTT p50 (µs) | RTT p99 (µs) | tx MB/s | msgs/s | rx MB/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(report["results"], key=lambda r: (r["size"], list(COLORS).index(r["mode"]))):
        lines.append(f"| {r['mode']} | {r['size']} | {r['rtt_p50_us']:.1f} | "
                     f"{r['rtt_p99_us']:.1f} | {r['throughput_MBps']:.1f} | "
                     f"{r['msgs_per_s']:.0f} | {r['rx_throughput_MBps']:.1f} |")
    c = report["connect"]
    lines += ["", f"connect() p50: rack {c['rack_p50_us']:.1f} µs, Linux "
                  f"{c['linux_p50_us']:.1f} µs, connect floor {c['floor_p50_us']:.1f} µs", ""]
    if report.get("ncomponent_cpu"):
        cpu = report["ncomponent_cpu"]
        lines += [f"nComponent CPU: {cpu['tx_core_s_per_GB']:.2f} core-s/GB tx, "
                  f"{cpu['rx_core_s_per_GB']:.2f} rx", ""]
    return lines + _targets(report)


def wordcount(report: dict[str, Any], path: str) -> None:
    rows = report["results"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.bar([r["mode"] for r in rows], [r["seconds"] for r in rows],
           color=[COLORS.get(r["mode"], "tab:gray") for r in rows])
    for i, r in enumerate(rows):
        ax.annotate(f"{r['ops_per_s'] / 1e3:.0f}k ops/s", (i, r["seconds"]), ha="center",
                    va="bottom", fontsize=8)
    ax.set_ylabel("execution time (s)")
    ax.set_xlabel("mapper's network path")
    ax.set_title(f"word count, {report['input_bytes'] / 1e6:.0f} MB of input")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    lines = ["# splitrack bench wordcount", "",
             f"input: {report['input_bytes']} bytes, {report['words']} words, "
             f"{report['distinct']} distinct (seed {report['seed']})", "",
             "| mode | seconds | ops/s | correct |", "|---|---:|---:|---|"]
    lines += [f"| {r['mode']} | {r['seconds']:.2f} | {r['ops_per_s']:.0f} | {r['correct']} |"
              for r in rows]
    _write_summary(path, [*lines, "", *_targets(report)])


def _targets(report: dict[str, Any]) -> list[str]:
    lines = ["| target | measured [range] | limit | verdict |", "|---|---:|---:|---|"]
    for t in report.get("targets", []):
        verdict = t["verdict"] if t["met"] else f"**{t['verdict']}**"
        lines.append(f"| {t['name']} | {t['value']:.3f} [{t['low']:.3f}..{t['high']:.3f}] | "
                     f"{t['sense']} {t['limit']} | {verdict} |")
    return lines


def _write_summary(png: str, lines: list[str]) -> None:
    with open(os.path.splitext(png)[0] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
