"""FlowOS-RM's Figs. 4 and 5 from a `bench slices` report (its JSON).

    lifecycle(report, "F.png")    one PNG of two figures, sharing the time axis
                                  (seconds from the stream's start):
        Fig. 4  a row a job, top to bottom in arrival order: a thin grey line
                from the slice's request to its grant (the FIFO queue's wait),
                then each step a bar of its own colour (attach-device,
                launch-machine, prepare-task, launch-task, detach-device,
                destroy-machine); a job that did not exit 0 is labelled so
        Fig. 5  a panel per kind (pComponents, mComponents, nComponents): the
                components each slice holds, stacked, from its grant
                (attach-device's end) to its release (detach-device's end),
                with the pool's size as a dashed line
    lifecycle_figure(report) -> Figure    the same, not saved

It also writes F.md: a row a job (its request, when it came, its wait and
each step's duration, its exit). Both files are named on stderr.

    python -m benchmarks.slices_plots REPORT.json F.png    draws them again
                                                           from a saved report
"""

import json
import os
import sys
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from benchmarks.report import wrote
from benchmarks.slices import STEPS, held

STEP_COLORS = dict(zip(STEPS, ("tab:blue", "tab:orange", "tab:green", "tab:red",
                               "tab:purple", "tab:brown"), strict=True))
KINDS = (("p", "pComponents"), ("m", "mComponents"), ("n", "nComponents"))
BAR_HEIGHT = 0.6


def lifecycle(report: dict[str, Any], path: str) -> None:
    fig = lifecycle_figure(report)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    wrote(path)
    md = os.path.splitext(path)[0] + ".md"
    with open(md, "w") as f:
        f.write(markdown(report))
    wrote(md)


def lifecycle_figure(report: dict[str, Any]) -> Figure:
    jobs = report["jobs"]
    fig = Figure(figsize=(10, max(3.0, 0.3 * len(jobs)) + 5.5), layout="constrained")
    grid = fig.add_gridspec(4, 1, height_ratios=[max(3.0, 0.3 * len(jobs)), 1.5, 1.5, 1.5])
    steps_ax = fig.add_subplot(grid[0])
    _fig4(steps_ax, jobs)
    colors = _slice_colors(jobs)
    for row, (kind, label) in enumerate(KINDS, start=1):
        ax = fig.add_subplot(grid[row], sharex=steps_ax)
        _fig5(ax, jobs, kind, label, report["pool"][kind], colors)
    ax.set_xlabel("seconds from the stream's start")
    steps_ax.set_xlim(left=0)
    fig.suptitle(f"bench slices: {len(jobs)} jobs on a pool of {report['pool']['p']} p, "
                 f"{report['pool']['m']} m, {report['pool']['n']} n "
                 "(FlowOS-RM Figs. 4 and 5)")
    return fig


def _fig4(ax: Axes, jobs: list[dict[str, Any]]) -> None:
    for row, job in enumerate(jobs):
        steps = {s["name"]: s for s in job["steps"]}
        if "attach-device" in steps:
            ax.hlines(row, job["submitted_s"], steps["attach-device"]["start_s"],
                      color="0.6", linewidth=1)
        for name in STEPS:
            if name in steps:
                s = steps[name]
                ax.barh(row, max(s["end_s"] - s["start_s"], 1e-3), left=s["start_s"],
                        height=BAR_HEIGHT, color=STEP_COLORS[name])
    ax.set_yticks(range(len(jobs)), [_label(j) for j in jobs], fontsize=8)
    ax.invert_yaxis()
    handles = [Patch(color=c, label=n) for n, c in STEP_COLORS.items()]
    handles.append(Line2D([], [], color="0.6", label="queued (waiting for its slice)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title("Fig. 4: each job's lifecycle steps", fontsize=10, loc="left")


def _label(job: dict[str, Any]) -> str:
    r = job["request"]
    text = f"{job['id']} {job['slice']} ({r['p']}p {r['m']}m {r['n']}n)"
    return text if job["exit"] == 0 else f"{text} exit {job['exit']}"


def _slice_colors(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    return {j["slice"]: cmap(i % cmap.N) for i, j in enumerate(jobs)}


def _fig5(ax: Axes, jobs: list[dict[str, Any]], kind: str, label: str, pool: int,
          colors: dict[str, Any]) -> None:
    spans = [(j, held(j)) for j in jobs]
    spans = [(j, s) for j, s in spans if s is not None]
    times = sorted({t for _, s in spans for t in s} | {0.0})
    layers, names = [], []
    for job, (start, end) in spans:
        count = sum(c[0] == kind for c in job["components"])
        if count:
            layers.append([count if start <= t < end else 0 for t in times])
            names.append(job["slice"])
    if layers:
        ax.stackplot(times, layers, step="post", colors=[colors[n] for n in names],
                     labels=names)
    ax.axhline(pool, color="black", linestyle="--", linewidth=1, label="pool")
    ax.set_ylim(0, pool + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(label, fontsize=8)
    if kind == "p":   # every slice has a pComponent: one legend names them all
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, ncol=2)
        ax.set_title("Fig. 5: components granted to each slice over time (stacked)",
                     fontsize=10, loc="left")


def markdown(report: dict[str, Any]) -> str:
    head = ["job", "slice", "p m n", "submitted s", "wait s", *[f"{s} s" for s in STEPS],
            "exit"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for job in report["jobs"]:
        steps = {s["name"]: s for s in job["steps"]}
        attach = steps.get("attach-device")
        wait = f"{attach['start_s'] - job['submitted_s']:.3f}" if attach else "-"
        took = [f"{steps[n]['end_s'] - steps[n]['start_s']:.3f}" if n in steps else "-"
                for n in STEPS]
        ask = " ".join(str(job["request"][k]) for k in "pmn")
        lines.append("| " + " | ".join([job["id"], job["slice"], ask,
                                        f"{job['submitted_s']:.3f}", wait, *took,
                                        str(job["exit"])]) + " |")
    peak = report["peak"]
    lines.append(f"\nAll done at {report['makespan_s']:.2f} s; at most {peak['slices']} "
                 f"slices at once ({peak['p']} p, {peak['m']} m, {peak['n']} n of "
                 f"{report['pool']['p']} p, {report['pool']['m']} m, {report['pool']['n']} n).")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m benchmarks.slices_plots REPORT.json F.png")
    with open(sys.argv[1]) as f:
        lifecycle(json.load(f), sys.argv[2])
