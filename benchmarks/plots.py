"""The benchmarks' figures (matplotlib, PNG) and a markdown summary next to them.

    tcp(report, "F.png")        six panels, shaped like the paper's Figs. 6 and 7:
                                (a) echo RTT vs message size, per mode (Fig. 6(a)),
                                    with the raw pyzmq and relay-floor baselines, the
                                    DDIO target (3 x Linux, 128 B-2 KiB) and the
                                    paper's FIT round trip (about 8 µs); (b) one-way
                                    throughput vs size, per mode (Fig. 6(b)), with and
                                    without packing, the relay floor, and the DDIO and
                                    DMA targets at 4096 B; (c) the intra-rack shortcuts
                                    (Fig. 7) against DDIO, Linux and their raw
                                    baselines, with the shortcut targets; (d)
                                    throughput vs number of NICs; (e) connect() with
                                    the paper's 255 µs and Linux's 252 µs and the
                                    target; (f) the nComponent's CPU per GB with the
                                    paper's 15 % / 25 % of a core at 880 Mb/s (derived
                                    into core-s/GB) and the target
    wordcount(report, "F.png")  execution time per mode (the paper's Fig. 8), with the
                                target DDIO <= 1.2 x Linux and the paper's DDIO time
                                (the same as Linux's)
    tcp_figure(report), wordcount_figure(report) -> Figure   the same, not saved

Each point or bar is a series' p50 from report["stats"] (report.finish adds it)
with error bars (spread): p10..p90 of the samples, or the range of the
repetitions where each repetition is one sample (throughput, time). Panel (a)
draws each curve's p99 too, as hollow markers. Panels (d) and (f) are
measured once: no error bars. Sizes are joined by lines only when no size is
more than double the one before (the full sweep, not --quick's 128 and 4096).
Three kinds of mark, told apart by their labels: splitrack's measurements
(the series' names), "target: ..." (splitrack's own, limits.py) and
"paper: ..." (the paper's figures, paper.py; orange stars and dotted lines).
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
from matplotlib.patheffects import withStroke

from benchmarks import paper
from benchmarks.limits import (
    CONNECT_OVER_LINUX,
    DDIO_RTT_OVER_LINUX,
    DDIO_RTT_UP_TO,
    NCOMPONENT_CORE_S_PER_GB,
    SHORTCUT_RTT,
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
             "raw_pipe": ("raw os.pipe", "yellowgreen", "^"),
             "raw_unix": ("raw AF_UNIX pair", "darkseagreen", "v")}
SPREADS = ("p50; error bars: p10-p90 of the samples (RTT), "
           "the repetitions' range (throughput, one sample a repetition)")
PAPER = "darkorange"   # the paper's figures: stars and dotted lines of this colour
P99 = "p99 (hollow markers, the curve's colour)"


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


def _sweep(ax: Axes, curves: list[tuple[dict[int, Row], str, str, str]],
           p99: bool = False) -> None:
    """p50 vs size with error bars, a curve each (rows by size, label, color, marker);
    the curves are moved sideways a little so that their error bars do not hide
    each other. p99: each curve's p99 as hollow markers above it (gid "p99/LABEL")."""
    for i, (rows, label, color, marker) in enumerate(curves):
        sizes = sorted(rows)
        p50, below, above = zip(*(spread(rows[z]) for z in sizes), strict=True)
        dodge = 2 ** (0.04 * (i - (len(curves) - 1) / 2))
        x = [z * dodge for z in sizes]
        ax.errorbar(x, p50, yerr=[below, above], color=color,
                    marker=marker, linestyle=_line(sizes), capsize=3, label=label)
        if p99:
            ax.plot(x, [rows[z]["p99"] for z in sizes], linestyle="none", marker=marker,
                    markerfacecolor="none", markeredgecolor=color, alpha=0.6,
                    gid=f"p99/{label}", label=f"_{label} p99")
    if p99:   # one legend entry for all of them
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none",
                markeredgecolor="dimgray", label=P99)


def _bars(ax: Axes, labels: list[str], rows: list[Row], colors: list[str]) -> BarContainer:
    """Bars of p50 with error bars, on a linear axis, at x = 0, 1, ..."""
    p50, below, above = zip(*map(spread, rows), strict=True)
    bars = ax.bar(range(len(rows)), p50, yerr=[below, above], capsize=4, color=colors)
    ax.set_xticks(range(len(rows)), [label.replace(" ", "\n") for label in labels])
    ax.set_yscale("linear")
    return bars


def _target(ax: Axes, sizes: list[int], values: list[float], color: str, label: str) -> None:
    """A target: a short level at each size (or bar), outlined in white so that it
    shows on a bar of its own colour."""
    ax.plot(sizes, values, marker="_", markersize=24, markeredgewidth=2.5,
            linestyle=_line(sizes, "--"), color=color, label=label, zorder=3,
            path_effects=[withStroke(linewidth=5, foreground="white")])


def _paper_level(ax: Axes, value: float, label: str) -> None:
    """One of the paper's figures as a dotted level across the panel."""
    ax.axhline(value, color=PAPER, linestyle=":", linewidth=2, label=label, zorder=1)


def _paper_points(ax: Axes, xs: list[float], values: list[float], label: str) -> None:
    """The paper's figures as stars (at bars' positions, say)."""
    ax.plot(xs, values, linestyle="none", marker="*", markersize=15, color=PAPER,
            markeredgecolor="black", label=label, zorder=4)


def _legend(ax: Axes) -> None:
    """The legend to the right of the axes, off the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)


def tcp(report: dict[str, Any], path: str) -> None:
    _save(tcp_figure(report), path, _tcp_summary(report))


def tcp_figure(report: dict[str, Any]) -> Figure:
    stats = _stats(report)
    sizes = sorted(report["settings"]["sizes"])
    modes = [m for m in COLORS if f"rtt/{m}" in stats]
    fig = Figure(figsize=(15, 14), layout="constrained")
    (lat, thr), (short, nics), (conn, cpu) = fig.subplots(
        3, 2, gridspec_kw={"height_ratios": [1, 1, 0.8]})
    fig.suptitle(f"splitrack bench tcp, {report['settings']['reps']} repetitions. "
                 f"Points and bars: {SPREADS}.\nOrange stars and dotted lines: the paper's "
                 "own figures (its testbed: kernel C, InfiniBand, 1 GbE; compare ratios, "
                 "not microseconds)", fontsize=10)
    _sweep(lat, [(stats[f"rtt/{m}"], m, COLORS[m], "o") for m in modes]
           + [(stats[f"base/{b}"], *BASELINES[b]) for b in ("raw_zmq", "relay_floor")],
           p99=True)
    near = [z for z in sizes if z <= DDIO_RTT_UP_TO]
    if "ddio" in modes and near:
        _target(lat, near, [DDIO_RTT_OVER_LINUX * stats["rtt/linux"][z]["p50"] for z in near],
                COLORS["ddio"], f"target: DDIO <= {DDIO_RTT_OVER_LINUX:g} x Linux")
    _paper_level(lat, paper.FIT_RTT_US, f"paper: FIT ~{paper.FIT_RTT_US:g} µs a round trip\n"
                 "(LegoOS FIT on InfiniBand)")
    packable = [m for m in ("ddio", "dma") if f"tx/{m}-unpacked" in stats]
    _sweep(thr, [(stats[f"tx/{m}"], m, COLORS[m], "o") for m in modes]
           + [(stats[f"tx/{m}-unpacked"], f"{m}, no packing", COLORS[m], "x") for m in packable]
           + [(stats["tx/relay_floor"], *BASELINES["relay_floor"])])
    linux_tx = stats["tx/linux"].get(TX_AT)
    for m, k in TX_OVER_LINUX.items():
        if m in modes and linux_tx:
            _target(thr, [TX_AT], [k * linux_tx["p50"]], COLORS[m],
                    f"target: {m.upper()} >= {k:g} x Linux at {TX_AT} B")
    for ax, title, unit in ((lat, "(a) echo round trip (the paper's Fig. 6(a))", "RTT (µs)"),
                            (thr, "(b) one-way throughput, the rack program sends "
                                  "(the paper's Fig. 6(b))", "throughput (MB/s)")):
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
    _connect(conn, stats)
    _cpu(cpu, report.get("ncomponent_cpu"))
    return fig


def _shortcuts(ax: Axes, stats: dict[str, dict[int, Row]], size: int) -> None:
    """RTT at one size: the shortcuts against what they replace, and their targets
    (fit <= 1.5 x Linux, pipe <= 1.5 x raw os.pipe) over their bars."""
    bars = [(m, stats[f"rtt/{m}"][size], COLORS[m])
            for m in ("linux", "pipe", "fit", "ddio", "dma") if f"rtt/{m}" in stats]
    bars += [(label, stats[f"base/{b}"][size], color)
             for b, (label, color, _) in BASELINES.items()
             if b != "relay_floor" and f"base/{b}" in stats]
    labels = [label for label, _, _ in bars]
    _bars(ax, *(list(column) for column in zip(*bars, strict=True)))
    for m, against, name in (("fit", "rtt/linux", "Linux"),
                             ("pipe", "base/raw_pipe", "raw os.pipe")):
        if m in labels and against in stats:
            _target(ax, [labels.index(m)], [SHORTCUT_RTT * stats[against][size]["p50"]],
                    COLORS[m], f"target: {m} <= {SHORTCUT_RTT:g} x {name}")
    ax.set_ylabel("RTT (µs)")
    ax.set_title(f"(c) intra-rack shortcuts, {size} B (the paper's Fig. 7)")
    ax.tick_params(axis="x", labelsize=8)
    _legend(ax)


def _connect(ax: Axes, stats: dict[str, dict[int, Row]]) -> None:
    """connect() p50 (this run: Linux, the rack, the connect floor) beside the
    paper's 252 µs (Linux) and 255 µs (through the nComponent), and the target."""
    who = [("linux", "Linux", COLORS["linux"]), ("rack", "rack", "tab:blue"),
           ("floor", "connect floor", "black")]
    who = [w for w in who if f"connect/{w[0]}" in stats]
    _bars(ax, [label for _, label, _ in who], [stats[f"connect/{k}"][0] for k, _, _ in who],
          [color for _, _, color in who])
    keys = [k for k, _, _ in who]
    if "linux" in keys and "rack" in keys:
        linux = stats["connect/linux"][0]["p50"]
        _target(ax, [keys.index("rack")], [CONNECT_OVER_LINUX * linux], "tab:blue",
                f"target: rack <= {CONNECT_OVER_LINUX:g} x Linux")
        rack = stats["connect/rack"][0]["p50"]
        ax.text(0.02, 0.97, f"rack / Linux: this run {rack / linux:.1f} x; paper "
                f"{paper.CONNECT_US:g} / {paper.LINUX_CONNECT_US:g} = "
                f"{paper.CONNECT_US / paper.LINUX_CONNECT_US:.2f} x",
                transform=ax.transAxes, va="top", fontsize=8)
    marks = [(keys.index(k), v) for k, v in (("linux", paper.LINUX_CONNECT_US),
                                             ("rack", paper.CONNECT_US)) if k in keys]
    _paper_points(ax, [x for x, _ in marks], [v for _, v in marks],
                  f"paper: connect() {paper.CONNECT_US:g} µs through the\n"
                  f"nComponent, {paper.LINUX_CONNECT_US:g} µs on Linux")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.12)   # room for the ratio line
    ax.set_ylabel("connect() (µs)")
    ax.set_title("(e) connect(), p50; error bars p10-p90")
    _legend(ax)


def _cpu(ax: Axes, cpu: dict[str, Any] | None) -> None:
    """The nMonitor's core-seconds per GB, each way (measured once), beside the
    paper's 15 % / 25 % of a core at 880 Mb/s turned into the same unit."""
    ways = ["tx", "rx"]
    if cpu:
        ax.bar(ways, [cpu[f"{d}_core_s_per_GB"] for d in ways], color="tab:blue",
               label="nMonitor, this run")
    else:
        ax.text(0.5, 0.5, "not measured (needs the ddio mode)", transform=ax.transAxes,
                ha="center")
    ax.axhline(NCOMPONENT_CORE_S_PER_GB, linestyle="--", color="tab:blue",
               label=f"target: <= {NCOMPONENT_CORE_S_PER_GB:g} core-s/GB each way")
    tx, rx = paper.NCOMPONENT_CORE_TX, paper.NCOMPONENT_CORE_RX
    _paper_points(ax, [0, 1], [paper.core_s_per_gb(tx), paper.core_s_per_gb(rx)],
                  f"paper: {tx:.0%} (tx) / {rx:.0%} (rx) of a core at "
                  f"{paper.NCOMPONENT_AT_MBPS} Mb/s\n= {tx:g} / 0.110 GB/s = "
                  f"{paper.core_s_per_gb(tx):.2f} and {rx:g} / 0.110 = "
                  f"{paper.core_s_per_gb(rx):.2f} core-s/GB (derived)")
    ax.set_xticks([0, 1], ["tx (the program sends)", "rx (it receives)"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(0, NCOMPONENT_CORE_S_PER_GB * 1.15)
    ax.set_ylabel("core-seconds per GB")
    ax.set_title("(f) nComponent CPU, DDIO, 4 KiB (measured once: no error bars)")
    _legend(ax)


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
                  f"{c['linux_p50_us']:.1f} µs, connect floor {c['floor_p50_us']:.1f} µs "
                  f"(the paper: {paper.CONNECT_US:g} µs through the nComponent, "
                  f"{paper.LINUX_CONNECT_US:g} µs on Linux)", ""]
    tx, rx = paper.NCOMPONENT_CORE_TX, paper.NCOMPONENT_CORE_RX
    if report.get("ncomponent_cpu"):
        cpu = report["ncomponent_cpu"]
        lines += [f"nComponent CPU: {cpu['tx_core_s_per_GB']:.2f} core-s/GB tx, "
                  f"{cpu['rx_core_s_per_GB']:.2f} rx (the paper: {tx:.0%} / {rx:.0%} of a "
                  f"core at {paper.NCOMPONENT_AT_MBPS} Mb/s, which is "
                  f"{paper.core_s_per_gb(tx):.2f} / {paper.core_s_per_gb(rx):.2f} "
                  "core-s/GB, derived)", ""]
    return lines + _targets(report)


def wordcount(report: dict[str, Any], path: str) -> None:
    rows = report["results"]
    lines = ["# splitrack bench wordcount", "",
             f"input: {report['input_bytes']} bytes, {report['words']} words, "
             f"{report['distinct']} distinct (seed {report['seed']})", "",
             "| mode | seconds | ops/s | correct |", "|---|---:|---:|---|"]
    lines += [f"| {r['mode']} | {r['seconds']:.2f} | {r['ops_per_s']:.0f} | {r['correct']} |"
              for r in rows]
    lines += ["", "The paper (its Fig. 8): DDIO in the same time as Linux, with no "
                  "message packing."]
    _save(wordcount_figure(report), path, [*lines, "", *_targets(report)])


def wordcount_figure(report: dict[str, Any]) -> Figure:
    rows, size = report["results"], report["input_bytes"]
    seconds = {name[len("seconds/"):]: by[size] for name, by in _stats(report).items()
               if name.startswith("seconds/")}
    modes = [r["mode"] for r in rows]
    fig = Figure(figsize=(10, 4.8), layout="constrained")
    ax = fig.subplots()
    bars = _bars(ax, modes, [seconds[m] for m in modes],
                 [COLORS.get(m, "tab:gray") for m in modes])
    ax.bar_label(bars, [f"{r['ops_per_s'] / 1e3:.0f}k ops/s" for r in rows],
                 label_type="center", fontsize=8, color="white")
    if "linux" in seconds and "ddio" in seconds:
        linux = seconds["linux"]["p50"]
        ax.axhline(WORDCOUNT_OVER_LINUX * linux, linestyle="--", color=COLORS["ddio"],
                   label=f"target: DDIO <= {WORDCOUNT_OVER_LINUX:g} x Linux")
        # the paper's time is its testbed's: drawn as its ratio, on this run's Linux
        _paper_points(ax, [modes.index("ddio")], [paper.WORDCOUNT_DDIO_OVER_LINUX * linux],
                      "paper: DDIO in the same time as Linux (its Fig. 8,\n"
                      "no packing; drawn at this run's Linux time)")
        _legend(ax)
    ax.set_ylabel("execution time (s)")
    ax.set_xlabel("mapper's network path")
    reps = max(r["reps"] for r in seconds.values())
    ax.set_title(f"word count (the paper's Fig. 8), {size / 1e6:.0f} MB of input\n"
                 f"bars: p50 of {reps} repetitions; error bars: their range", fontsize=10)
    return fig


def wordcount_extcache(report: dict[str, Any], path: str) -> None:
    """F-extcache.png beside F.png: word count's time against the extCache's size."""
    rows, memory = report["sweep"], report["settings"]["memory"]
    png = os.path.splitext(path)[0] + "-extcache.png"
    lines = ["# splitrack bench wordcount --extcache", "",
             f"the mapper's memory: {memory}; input {report['input_bytes']} bytes", "",
             "| extCache | mode | seconds | misses at the home | evictions |",
             "|---:|---|---:|---:|---:|"]
    lines += [f"| {r['extcache'] >> 20} MiB | {r['mode']} | {r['seconds']:.2f} | "
              f"{r['pager'].get('misses', '-')} | {r['pager'].get('evictions', '-')} |"
              for r in rows]
    lines += ["", "The paper: \"sending larger blocks which don't fit in the extCache would "
                  "be more favorable for DMA\" (docs/evaluation.md reads this plot)."]
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    ax = fig.subplots()
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        ax.plot([r["extcache"] >> 20 for r in mine], [r["seconds"] for r in mine], "o-",
                color=COLORS.get(mode, "tab:gray"), label=mode)
    linux = next((r["seconds"] for r in report["results"] if r["mode"] == "linux"), None)
    if linux is not None:
        ax.axhline(linux, linestyle=":", color=COLORS["linux"], label="Linux")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("extCache of each pComponent (MiB)")
    ax.set_ylabel("execution time (s), p50")
    ax.set_title(f"word count against the extCache's size (mapper's memory: {memory})",
                 fontsize=10)
    _legend(ax)
    _save(fig, png, lines)


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
