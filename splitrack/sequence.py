"""A trace as a sequence picture: components as lanes, events as arrows (`splitrack trace`).

    mermaid(events) -> str       a Mermaid sequenceDiagram (text; GitHub renders it)
    figure(events) -> Figure     the same drawn with matplotlib (savefig it)

`events` are the trace JSON's (splitrack/trace.py). Lanes, left to right: the
program (app), its process (pN.PID: the bsdSocketStub), pN, nN, mN, sN,
global, and net (the nComponent's kernel socket and the wire). Each event is
an arrow from its src's lane to its dst's, top to bottom in order, labelled
"seq op bytes" and its Fig. 5 step; a reply's arrow is dashed. The figure
draws at most TRACE_PLOT_MAX_EVENTS events (its title says so).
"""

from typing import Any

from splitrack.params import TRACE_PLOT_MAX_EVENTS
from splitrack.trace import label, lane_order


def lanes(events: list[dict[str, Any]]) -> list[str]:
    return sorted({e[end] for e in events for end in ("src", "dst")}, key=lane_order)


def text(e: dict[str, Any]) -> str:
    step = f" (step {e['step']})" if e["step"] is not None else ""
    return f"{e['seq']}. {label(e)} {e['bytes']} B{step}"


def mermaid(events: list[dict[str, Any]]) -> str:
    names = lanes(events)
    alias = {name: f"L{i}" for i, name in enumerate(names)}
    out = ["sequenceDiagram"]
    out += [f"    participant {alias[name]} as {name}" for name in names]
    for e in events:
        arrow = "-->>" if e["kind"] == "reply" else "->>"
        out.append(f"    {alias[e['src']]}{arrow}{alias[e['dst']]}: {text(e)}")
    return "\n".join(out) + "\n"


def figure(events: list[dict[str, Any]]) -> Any:
    from matplotlib.figure import Figure

    shown = events[:TRACE_PLOT_MAX_EVENTS]
    names = lanes(shown)
    x = {name: i for i, name in enumerate(names)}
    rows = max(len(shown), 1)
    fig = Figure(figsize=(max(6.0, 1.9 * len(names)), 1.2 + 0.32 * rows))
    ax = fig.add_subplot()
    for name, i in x.items():
        ax.axvline(i, color="0.8", linewidth=1, zorder=0)
        ax.text(i, 0.2, name, ha="center", va="bottom", fontsize=9, weight="bold")
    for row, e in enumerate(shown, start=1):
        a, b, y = x[e["src"]], x[e["dst"]], -row
        ax.annotate("", xy=(b, y), xytext=(a, y), arrowprops={
            "arrowstyle": "->", "linestyle": "--" if e["kind"] == "reply" else "-",
            "color": "tab:blue" if e["step"] is not None else "0.3"})
        ax.text((a + b) / 2, y + 0.08, text(e), ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(-rows - 0.6, 0.8)
    ax.axis("off")
    more = f" (the first {len(shown)} of {len(events)})" if len(shown) < len(events) else ""
    ax.set_title(f"splitrack trace: {len(shown)} events{more}; blue: a Fig. 5 step",
                 fontsize=10)
    fig.tight_layout()
    return fig
