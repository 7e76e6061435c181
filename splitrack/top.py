"""`splitrack top`: a live view of a running rack, from two samples an interval apart.

    splitrack top [--name N] [--spec F] [--interval S] [--once] [--json]

A sample is what `splitrack status` and `splitrack stats` see (Rack.status:
each component's PID and health; Rack.stats: its FIT counters, extCache,
memory and network counters) and each monitor process's CPU time (psutil).
Two successive samples give the rates over the interval between them:

- per link class (p-m, p-n, n-m, p-p, p-s, and global for any link to the
  global process; another class, e.g. n-s, once it has traffic): messages/s
  and bytes/s (FIT header included). Each message is counted once: by its
  sender if that is a monitor (tx), else by the monitor that received it (rx
  from a program's process). A program's process (pN.PID, or pN.* for the
  ended ones) counts as its pComponent: p0.1234 -> m0 is p-m, p0.1234 -> p0 is
  p-p. Clients (cli.*: this command's own STATS, a script's endpoint) and the
  FIT shortcut between two programs' stubs are not counted: no monitor sends
  or receives them. A component counts from its second sample on (a
  restarted one: from the second sample of its new process).
- per component: PID, state (ok, unreachable, dead: shown, never a crash),
  the monitor process's CPU % over the interval (100 = one core); p: the
  extCache hit rate over the interval, misses/s (a first touch's zero-fill is
  a miss) and evictions/s; n: open sockets (its bsdSocketSkeletons, listeners
  included) and DRAM in use (its socket rings); m: DRAM in use (frames x line).

Output:
- stdout a terminal: the tables, redrawn every interval (rich.live) until
  Ctrl-C, which exits 0;
- stdout no terminal (a pipe, a file): the same tables as plain text, printed
  again every interval, so a reader gets a snapshot an interval;
- --once: one snapshot (two samples an interval apart), then exit 0;
- --json: JSON instead of tables: with --once one object, without it one
  object a line, an interval each.
A rack that is not up, or goes down meanwhile: one line, exit 1.

The JSON of a snapshot (null: not measured, e.g. a dead component's CPU, or a
hit rate over an interval without an access):

    {"rack": "default", "t": 1718000000.123,        # Unix time of the second sample
     "interval_s": 1.002,                            # between the two samples
     "links": [{"link": "p-m", "msgs_per_s": 2010.0, "bytes_per_s": 104520.0}, ...],
     "components": [
       {"id": "p0", "kind": "p", "pid": 4242, "state": "ok", "cpu_percent": 12.5,
        "extcache_hit_rate": 0.97, "extcache_misses_per_s": 30.0,
        "extcache_evictions_per_s": 0.0},
       {"id": "m0", "kind": "m", ..., "dram_used_bytes": 409600, "dram_bytes": 67108864},
       {"id": "n0", "kind": "n", ..., "sockets": 2, "dram_used_bytes": 262144,
        "dram_bytes": 536870912},
       {"id": "s0", "kind": "s", ...}, ...]}      # global and s: the common fields

Components come in the rack's order (global first). From Python: sample(rack)
-> Sample; snapshot(before, after, line) -> the JSON's dict, but "rack".
"""

import argparse
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil

from fit_rpc.identity import kind_of
from splitrack import argtypes
from splitrack.params import NCOMPONENT_RING_BYTES
from splitrack.rack import Rack, RackError
from splitrack.rack_verbs import running_rack
from splitrack.rundir import identify

LINKS = ("p-m", "p-n", "n-m", "p-p", "p-s", "global")   # always shown, in this order
_ORDER = "pnms"          # a class names its ends in this order: p-m, n-m, p-s
_PLAIN_WIDTH = 160       # the tables' width when stdout is no terminal (rich's default: 80)
_EXTCACHE = ("extcache_hit_rate", "extcache_misses_per_s", "extcache_evictions_per_s")


@dataclass
class Sample:
    t: float                          # time.monotonic() as its STATS round began
    wall: float                       # time.time() then
    rows: list[dict[str, Any]]        # Rack.status()
    cpu: dict[str, float]             # id -> its monitor's CPU seconds (user + system)
    stats: dict[str, dict[str, Any]]  # Rack.stats()

    def pid(self, cid: str) -> int | None:
        return next((r["pid"] for r in self.rows if r["id"] == cid), None)


def sample(rack: Rack) -> Sample:
    rows = rack.status()
    cpu = {}
    for cid, rec in rack.components.items():
        proc = identify(rec["pid"], rec["create_time"])
        with contextlib.suppress(psutil.Error):
            if proc is not None:
                times = proc.cpu_times()
                cpu[cid] = times.user + times.system
    return Sample(time.monotonic(), time.time(), rows, cpu, rack.stats())


def link_class(a: str, b: str) -> str | None:
    """The class of a link between FIT ids a and b; None if a client is one end."""
    ends = [_party(a), _party(b)]
    if None in ends:
        return None
    if "global" in ends:
        return "global"
    x, y = sorted(ends, key=_ORDER.index)
    return f"{x}-{y}"


def _party(cid: str) -> str | None:
    kind = kind_of(cid.removesuffix(".*"))   # pN.*: the ended processes of pN
    return "p" if kind == "process" else kind if kind in ("global", *_ORDER) else None


def _traffic(stats: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """class -> (messages, bytes) one monitor counts, each message once in the rack."""
    out: dict[str, tuple[int, int]] = {}
    for peer, ops in stats["links"].items():
        link = link_class(stats["id"], peer)
        if link is None:
            continue
        process = "." in peer   # a program's process: no monitor of its own counts its sends
        msgs, nbytes = out.get(link, (0, 0))
        for c in ops.values():
            msgs += c["tx_msgs"] + (c["rx_msgs"] if process else 0)
            nbytes += c["tx_bytes"] + (c["rx_bytes"] if process else 0)
        out[link] = (msgs, nbytes)
    return out


def snapshot(before: Sample, after: Sample, line: int | None) -> dict[str, Any]:
    """The rates between two samples of one rack (the module docstring's JSON,
    but "rack"); line: the rack's line size, for an mComponent's DRAM in use."""
    dt = after.t - before.t

    def measured(cid: str) -> bool:   # the same live process in both samples
        return (before.pid(cid) == after.pid(cid)
                and all(cid in s.stats and "error" not in s.stats[cid] for s in (before, after)))

    totals = dict.fromkeys(LINKS, (0, 0))
    for cid in filter(measured, after.stats):
        old = _traffic(before.stats[cid])
        for link, (msgs, nbytes) in _traffic(after.stats[cid]).items():
            m0, b0 = old.get(link, (0, 0))
            m, b = totals.get(link, (0, 0))
            totals[link] = (m + max(msgs - m0, 0), b + max(nbytes - b0, 0))
    order = {link: i for i, link in enumerate(LINKS)}
    links = [{"link": link, "msgs_per_s": round(m / dt, 1), "bytes_per_s": round(b / dt, 1)}
             for link, (m, b) in sorted(totals.items(), key=lambda kv: (order.get(kv[0], 99),
                                                                         kv[0]))]
    components = []
    for row in after.rows:
        cid = row["id"]
        rec = {k: row[k] for k in ("id", "kind", "pid", "state")}
        rec["cpu_percent"] = None
        if before.pid(cid) == row["pid"] and cid in before.cpu and cid in after.cpu:
            rec["cpu_percent"] = round(100 * max(after.cpu[cid] - before.cpu[cid], 0) / dt, 1)
        now = after.stats[cid] if measured(cid) else None
        if row["kind"] == "p":
            rec.update(dict.fromkeys(_EXTCACHE))
            if now is not None:
                rec.update(_extcache(before.stats[cid]["extcache"]["total"],
                                     now["extcache"]["total"], dt))
        elif row["kind"] == "n":
            net = now["network"] if now else None
            rec.update(sockets=net and net["skeletons"],
                       dram_used_bytes=net and net["dram_buffers_used"] * NCOMPONENT_RING_BYTES,
                       dram_bytes=net and net["dram_buffers"] * NCOMPONENT_RING_BYTES)
        elif row["kind"] == "m":
            mem = now["memory"] if now else None
            rec.update(dram_used_bytes=mem["frames_used"] * line if mem and line else None,
                       dram_bytes=mem and mem["arena"])
        components.append(rec)
    return {"t": round(after.wall, 3), "interval_s": round(dt, 3), "links": links,
            "components": components}


def _extcache(old: dict[str, int], new: dict[str, int], dt: float) -> dict[str, Any]:
    hits, misses, evictions = (max(new[k] - old[k], 0) for k in ("hits", "misses", "evictions"))
    return {"extcache_hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
            "extcache_misses_per_s": round(misses / dt, 1),
            "extcache_evictions_per_s": round(evictions / dt, 1)}


def _line(rack: Rack) -> int | None:
    try:
        with open(rack.run.spec_path) as f:
            return int(json.load(f)["rack"]["line"])
    except (OSError, ValueError, KeyError):
        return None


# ---- the tables -------------------------------------------------------------------------
def render(snap: dict[str, Any]) -> Any:
    """The snapshot as rich tables (a Group): a headline, the links, the components."""
    # rich is imported here and in cmd_top: every `splitrack` command imports this module
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    when = time.strftime("%H:%M:%S", time.localtime(snap["t"]))
    head = Text(f"rack {snap['rack']!r} at {when}, rates over {snap['interval_s']:.2f} s",
                style="bold")
    links = Table("LINK", "MSGS/S", "BYTES/S", box=box.SIMPLE, show_edge=False)
    for row in snap["links"]:
        links.add_row(row["link"], f"{row['msgs_per_s']:,.0f}", _rate(row["bytes_per_s"]))
    comps = Table("ID", "KIND", "PID", "STATE", "CPU %", "XC HIT", "MISSES/S", "EVICT/S",
                  "SOCKETS", "DRAM USED", box=box.SIMPLE, show_edge=False)
    for col in [*links.columns[1:], comps.columns[2], *comps.columns[4:]]:   # numbers
        col.justify = "right"
    for col in [*links.columns, *comps.columns]:
        col.no_wrap = True
    for c in snap["components"]:
        p = c["kind"] == "p"
        hit = c.get("extcache_hit_rate")
        comps.add_row(
            c["id"], c["kind"], str(c["pid"]),
            Text(c["state"], style="green" if c["state"] == "ok" else "bold red"),
            _num(c["cpu_percent"], "{:.1f}"),
            (f"{100 * hit:.1f}%" if hit is not None else "-") if p else "",
            _num(c.get("extcache_misses_per_s"), "{:,.0f}") if p else "",
            _num(c.get("extcache_evictions_per_s"), "{:,.0f}") if p else "",
            _num(c.get("sockets"), "{}") if c["kind"] == "n" else "",
            _dram(c) if "dram_bytes" in c else "")
    return Group(head, links, Text(""), comps)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _rate(bps: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.1f} {unit}"
    return f"{bps:.0f} B/s"


def _dram(c: dict[str, Any]) -> str:
    if c["dram_bytes"] is None or c["dram_used_bytes"] is None:
        return "-"
    return f"{c['dram_used_bytes'] / 2**20:.1f} / {c['dram_bytes'] / 2**20:.0f} MiB"


# ---- the verb ---------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("top", help="a live view of a running rack: traffic per link, "
                                   "CPU, extCache, sockets and DRAM per component",
                       description="Show the running rack's rates over each interval: "
                                   "messages/s and bytes/s per link class (p-m, p-n, n-m, "
                                   "p-p, p-s, global; a program's processes count as their "
                                   "pComponent), and per component its state, CPU, extCache "
                                   "hit rate, misses and evictions, open sockets and DRAM in "
                                   "use. Redrawn until Ctrl-C on a terminal; printed once an "
                                   "interval into a pipe. Uses the rack --name or --spec "
                                   "names, else 'default', else the one that is up. "
                                   "Exit status 1 if it is not up.")
    p.add_argument("--spec", metavar="FILE", help="take the rack name from this spec")
    p.add_argument("--name", type=argtypes.rack_name,
                   help="rack name (default: the spec's, else 'default')")
    p.add_argument("--interval", type=argtypes.seconds, default=1.0, metavar="S",
                   help="seconds between samples, the rates' window (default: 1)")
    p.add_argument("--once", action="store_true",
                   help="print one snapshot (two samples an interval apart) and exit")
    p.add_argument("--json", action="store_true",
                   help="print JSON (docs/rack.md): one object with --once, else one a line "
                        "an interval")
    p.set_defaults(func=cmd_top)
    return p


def cmd_top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    name, rack = running_rack(args)
    if rack is None:
        raise RackError(f"rack {name!r} is not up")
    line = _line(rack)
    live = not args.once and not args.json and sys.stdout.isatty()
    console = Console(highlight=False, width=None if live else _PLAIN_WIDTH)

    def show(snap: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(snap, indent=1 if args.once else None), flush=True)
        else:   # plain text: no trailing blanks (rich pads every cell)
            with console.capture() as text:
                console.print(render(snap))
            print("\n".join(line.rstrip() for line in text.get().splitlines()), flush=True)

    with contextlib.suppress(KeyboardInterrupt):   # how top ends: exit 0
        if live:
            with Live(Text(f"rack {name!r}: sampling every {args.interval:g} s ..."),
                      console=console, auto_refresh=False) as screen:
                _watch(rack, line, args.interval, lambda s: screen.update(render(s),
                                                                          refresh=True))
        else:
            _watch(rack, line, args.interval, show, once=args.once)
    return 0


def _watch(rack: Rack, line: int | None, interval: float, show: Any,
           once: bool = False) -> None:
    """show(snapshot) every interval (once: one); the rack is looked up again for
    each sample (a restarted component has a new PID), RackError once it is down."""
    before = sample(rack)
    while True:
        time.sleep(max(before.t + interval - time.monotonic(), 0))
        rack = Rack.attach(rack.name, rack.run.root)
        after = sample(rack)
        show({"rack": rack.name, **snapshot(before, after, line)})
        if once:
            return
        before = after
