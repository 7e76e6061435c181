"""The benchmarks' figures (matplotlib, PNG) and a markdown summary next to them.

    tcp(report, "F.png")        four panels, shaped like the paper's Figs. 6 and 7:
                                (a) echo RTT vs message size, per mode, with the raw
                                    pyzmq and relay-floor baselines and the DDIO target
                                    (3 x Linux, 128 B-2 KiB); (b) one-way throughput vs
                                    size, per mode, with and without packing, the relay
                                    floor, and the DDIO and DMA targets at 4096 B;
                                (c) the intra-rack shortcuts against DDIO, Linux and
                                    their raw baselines; (d) throughput vs number of NICs
    wordcount(report, "F.png")  execution time per mode (the paper's Fig. 8), with the
                                target DDIO <= 1.2 x Linux
    tcp_figure(report), wordcount_figure(report) -> Figure   the same, not saved

Each point or bar is a series' p50 from report["stats"] (report.finish adds it)
with error bars (spread): p10..p90 of the samples, or the range of the
repetitions where each repetition is one sample (throughput, time). Panel (d)
is measured once: no error bars. Sizes are joined by lines only when no size is
more than double the one before (the full sweep, not --quick's 128 and 4096).
Legends are outside the axes. Each also writes F.md: the numbers behind the
figure as a markdown table, and the targets with what was measured. Both files
are named on stderr. docs/benchmarks.md says how to read them.
"""

import os
from itertools import pairwise
from typing import Any

from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from benchmarks.limits import (
    DDIO_RTT_OVER_LINUX,
    DDIO_RTT_UP_TO,
    TX_AT,
    TX_OVER_LINUX,
    WORDCOUNT_OVER_LINUX,
)
from benchmarks.report import wrote

Row = dict[str, Any]   # a row of report["stats"]

COLORS = {"linux": "tab:gray", "ddio": "tab:blue", "dma": "tab:red", "pipe": "tab:green",
          "fit": "tab:purple"}
BASELINES = {"raw_zmq": ("raw pyzmq", "tab:olive", "s"),
             "relay_floor": ("relay floor", "black", "D"),
             "raw_pipe": ("raw os.pipe", "yellowgreen", "^")}
SPREADS = ("p50; error bars: p10-p90 of the samples (RTT), "
           "the repetitions' range (throughput, one sample a repetition)")


def spread(row: Row) -> tuple[float, float, float]:
    """A stats row as (p50, error below, error above), for ax.errorbar's yerr."""
    one_each = row["n"] == row["reps"]   # each repetition one sample: show their range
    low, high = (row["p50_low"], row["p50_high"]) if one_each else (row["p10"], row["p90"])
    return row["p50"], max(row["p50"] - low, 0.0), max(high - row["p50"], 0.0)


def _stats(report: dict[str, Any]) -> dict[str, dict[int, Row]]:
    """report["stats"] by series, then size."""
    if "stats" not in report:
        raise ValueError("the plots draw report['stats']: call them after report.finish")
    out: dict[str, dict[int, Row]] = {}
    for row in report["stats"]:
        out.setdefault(row["series"], {})[row["size"]] = row
    return out


def _line(sizes: list[int], style: str = "-") -> str:
    """`style` if the sizes have no gap (none more than double the one before), else none."""
    return style if all(b <= 2 * a for a, b in pairwise(sizes)) else "none"


def _sweep(ax: Axes, curves: list[tuple[dict[int, Row], str, str, str]]) -> None:
    """p50 vs size with error bars, a curve each (rows by size, label, color, marker);
    the curves are moved sideways a little so that their error bars do not hide
    each other."""
    for i, (rows, label, color, marker) in enumerate(curves):
        sizes = sorted(rows)
        p50, below, above = zip(*(spread(rows[z]) for z in sizes), strict=True)
        dodge = 2 ** (0.04 * (i - (len(curves) - 1) / 2))
        ax.errorbar([z * dodge for z in sizes], p50, yerr=[below, above], color=color,
                    marker=marker, linestyle=_line(sizes), capsize=3, label=label)


def _bars(ax: Axes, labels: list[str], rows: list[Row], colors: list[str]) -> BarContainer:
    """Bars of p50 with error bars, on a linear axis."""
    p50, below, above = zip(*map(spread, rows), strict=True)
    bars = ax.bar([label.replace(" ", "\n") for label in labels], p50, yerr=[below, above],
                  capsize=4, color=colors)
    ax.set_yscale("linear")
    return bars


def _target(ax: Axes, sizes: list[int], values: list[float], color: str, label: str) -> None:
    ax.plot(sizes, values, marker="_", markersize=24, markeredgewidth=2.5,
            linestyle=_line(sizes, "--"), color=color, label=label, zorder=1)


def _legend(ax: Axes) -> None:
    """The legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)


def tcp(report: dict[str, Any], path: str) -> None:
    _save(tcp_figure(report), path, _tcp_summary(report))


def tcp_figure(report: dict[str, Any]) -> Figure:
    stats = _stats(report)
    sizes = sorted(report["settings"]["sizes"])
    modes = [m for m in COLORS if f"rtt/{m}" in stats]
    fig = Figure(figsize=(15, 10), layout="constrained")
    (lat, thr), (short, nics) = fig.subplots(2, 2)
    fig.suptitle(f"splitrack bench tcp, {report['settings']['reps']} repetitions. "
                 f"Points and bars: {SPREADS}", fontsize=10)
    _sweep(lat, [(stats[f"rtt/{m}"], m, COLORS[m], "o") for m in modes]
           + [(stats[f"base/{b}"], *BASELINES[b]) for b in ("raw_zmq", "relay_floor")])
    near = [z for z in sizes if z <= DDIO_RTT_UP_TO]
    if "ddio" in modes and near:
        _target(lat, near, [DDIO_RTT_OVER_LINUX * stats["rtt/linux"][z]["p50"] for z in near],
                COLORS["ddio"], f"target: DDIO <= {DDIO_RTT_OVER_LINUX:g} x Linux")
    packable = [m for m in ("ddio", "dma") if f"tx/{m}-unpacked" in stats]
    _sweep(thr, [(stats[f"tx/{m}"], m, COLORS[m], "o") for m in modes]
           + [(stats[f"tx/{m}-unpacked"], f"{m}, no packing", COLORS[m], "x") for m in packable]
           + [(stats["tx/relay_floor"], *BASELINES["relay_floor"])])
    linux_tx = stats["tx/linux"].get(TX_AT)
    for m, k in TX_OVER_LINUX.items():
        if m in modes and linux_tx:
            _target(thr, [TX_AT], [k * linux_tx["p50"]], COLORS[m],
                    f"target: {m.upper()} >= {k:g} x Linux at {TX_AT} B")
    for ax, title, unit in ((lat, "(a) echo round trip", "RTT (µs)"),
                            (thr, "(b) one-way throughput, the rack program sends",
                             "throughput (MB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(z) for z in sizes])
        ax.set_xticks([], minor=True)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax)
    _shortcuts(short, stats, sizes[0])
    scaling = report.get("nic_scaling") or []
    nics.bar([str(r["nics"]) for r in scaling], [r["throughput_MBps"] for r in scaling],
             color="tab:blue")
    nics.set_xlabel("NICs (one nComponent each), 4 clients")
    nics.set_ylabel("aggregate throughput (MB/s)")
    nics.set_title("(d) NIC scaling, DDIO, 4 KiB sends (measured once: no error bars)")
    return fig


def _shortcuts(ax: Axes, stats: dict[str, dict[int, Row]], size: int) -> None:
    """RTT at one size: the shortcuts against what they replace."""
    bars = [(m, stats[f"rtt/{m}"][size], COLORS[m])
            for m in ("linux", "pipe", "fit", "ddio", "dma") if f"rtt/{m}" in stats]
    bars += [(label, stats[f"base/{b}"][size], color)
             for b, (label, color, _) in BASELINES.items() if b != "relay_floor"]
    _bars(ax, *(list(column) for column in zip(*bars, strict=True)))
    ax.set_ylabel("RTT (µs)")
    ax.set_title(f"(c) intra-rack shortcuts vs the paths they skip, {size} B")
    ax.tick_params(axis="x", labelsize=8)


def _tcp_summary(report: dict[str, Any]) -> list[str]:
    stats = _stats(report)
    lines = ["# splitrack bench tcp", "",
             "RTT p50 [the lowest..highest repetition's p50], p90 and p99 over all samples.", "",
             "| mode | size (B) | RTT p50 [repetitions] (µs) | RTT p90 (µs) | RTT p99 (µs) | "
             "tx MB/s | msgs/s | rx MB/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(report["results"], key=lambda r: (r["size"], list(COLORS).index(r["mode"]))):
        s = stats[f"rtt/{r['mode']}"][r["size"]]
        lines.append(f"| {r['mode']} | {r['size']} | {r['rtt_p50_us']:.1f} "
                     f"[{s['p50_low']:.1f}..{s['p50_high']:.1f}] | {s['p90']:.1f} | "
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
    lines = ["# splitrack bench wordcount", "",
             f"input: {report['input_bytes']} bytes, {report['words']} words, "
             f"{report['distinct']} distinct (seed {report['seed']})", "",
             "| mode | seconds | ops/s | correct |", "|---|---:|---:|---|"]
    lines += [f"| {r['mode']} | {r['seconds']:.2f} | {r['ops_per_s']:.0f} | {r['correct']} |"
              for r in rows]
    _save(wordcount_figure(report), path, [*lines, "", *_targets(report)])


def wordcount_figure(report: dict[str, Any]) -> Figure:
    rows, size = report["results"], report["input_bytes"]
    seconds = {name[len("seconds/"):]: by[size] for name, by in _stats(report).items()
               if name.startswith("seconds/")}
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    bars = _bars(ax, [r["mode"] for r in rows], [seconds[r["mode"]] for r in rows],
                 [COLORS.get(r["mode"], "tab:gray") for r in rows])
    ax.bar_label(bars, [f"{r['ops_per_s'] / 1e3:.0f}k ops/s" for r in rows],
                 label_type="center", fontsize=8, color="white")
    if "linux" in seconds and "ddio" in seconds:
        ax.axhline(WORDCOUNT_OVER_LINUX * seconds["linux"]["p50"], linestyle="--",
                   color=COLORS["ddio"],
                   label=f"target: DDIO <= {WORDCOUNT_OVER_LINUX:g} x Linux")
        _legend(ax)
    ax.set_ylabel("execution time (s)")
    ax.set_xlabel("mapper's network path")
    reps = max(r["reps"] for r in seconds.values())
    ax.set_title(f"word count, {size / 1e6:.0f} MB of input\n"
                 f"bars: p50 of {reps} repetitions; error bars: their range", fontsize=10)
    return fig


def _targets(report: dict[str, Any]) -> list[str]:
    lines = ["| target | measured [range] | limit | verdict |", "|---|---:|---:|---|"]
    for t in report.get("targets", []):
        verdict = t["verdict"] if t["met"] else f"**{t['verdict']}**"
        lines.append(f"| {t['name']} | {t['value']:.3f} [{t['low']:.3f}..{t['high']:.3f}] | "
                     f"{t['sense']} {t['limit']} | {verdict} |")
    return lines


def _save(fig: Figure, png: str, lines: list[str]) -> None:
    """The figure to `png`, the summary to the .md beside it; each named on stderr."""
    fig.savefig(png, dpi=110)
    wrote(png)
    md = os.path.splitext(png)[0] + ".md"
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    wrote(md)
