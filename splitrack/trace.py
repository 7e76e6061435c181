"""`splitrack trace`: run a program on the rack, and see what its socket calls cause.

    splitrack trace [--json F] [--plot F.png] [--mermaid F.md] [--ops send,recv]
                    [--first N] [run options] -- PROGRAM [ARGS...]

It takes every option of `splitrack run` (cli.add_run_options) and runs the
program as `run` does, with SPLITRACK_TRACE=ID in its environment: its
process and every component that handles a message it causes record events
(fit_rpc/tracing.py; the FIT header carries the trace id). Once the program
has ended and the components have stopped recording (TRACE_SETTLE_S without a
new record, at most TRACE_SETTLE_MAX_S), it merges every process's records
(`merge`), prints them as a numbered list -- time in µs from the first event,
from -> to, link class, op, bytes, the event that caused it, and for a send's
and a recv's events the step of the paper's Fig. 5 (as docs/network.md numbers
them) with a line that says what happens -- and removes the records. Exit
status: the program's.

Events: every FIT message (request, reply, one-way), the program's socket
calls (app -> its process, kind "call"), a skeleton's kernel send and receive
(nN -> net, net -> nN, kind "kernel") and dDMA's and dDDIO's one-sided copies
(nN -> the mComponent or pComponent whose memory it is, kind "access"). Each
belongs to an operation: the socket call it descends from, or, for bytes that
arrive at an nComponent, a "recv" of their own (they arrive whether or not the
program waits in recv(): Fig. 5's recv steps 1-3; its recv() is step 4).
Events of no operation (what the program sends outside a socket call) are
shown only when neither --ops nor --first is given.

The trace JSON (--json F):
    {"events": [{"seq", "t_us", "src", "dst", "link", "op", "bytes", "cause", "step",
                 "kind", "operation", "opstart", "explain", "t_arrived_us"}]}
seq numbers the events from 1 in causal order (by time; an event after its
cause); t_us is µs from the first event; link is the pair of component kinds
(p-m, p-n, n-m, p-p, p-s, global for a link to the global process, app for a
socket call, n-net for the kernel); cause is the seq of the event that caused
it, or null; step is the Fig. 5 step, or null; kind is request, reply, oneway,
call, kernel or access; operation is the socket operation the event belongs to
(send, recv, connect, ...; null: none) and opstart the seq of the event that
began it; explain says what a step does (or null); t_arrived_us is when a
message reached its receiver (null: not a message, or not seen). --plot F.png and
--mermaid F.md draw the sequence (splitrack/sequence.py); each file written is
said on stderr ("wrote F").

Not traced: a pipe shortcut's bytes (a kernel pipe between two programs, no
FIT message), what a component does that no traced message caused (a process's
end: N_RELEASE, M_RELEASE from its pMonitor).
"""

import argparse
import os
import random
import sys
import time
from typing import Any

from fit_rpc import tracing
from fit_rpc.identity import kind_of
from splitrack import argtypes
from splitrack.params import TRACE_SETTLE_MAX_S, TRACE_SETTLE_S

OPERATIONS = ("socket", "bind", "listen", "accept", "connect", "send", "recv", "shutdown",
              "close", "setsockopt", "getsockopt")
KEYS = ("seq", "t_us", "src", "dst", "link", "op", "bytes", "cause", "step")

# Fig. 5's steps, numbered as docs/network.md walks them (DMA; DDIO has no step 2).
# operation -> op -> (step, what happens); a dict for an op: by the sender's kind
_CALL = {"send": (1, "the stub writes the bytes into its send ring (extCache lines)"),
         "recv": (4, "recv reads the bytes from the receive ring, through the extCache")}
STEPS: dict[str, dict[str, Any]] = {
    "send": {
        "M_MISS": (1, "a send-ring line that is not cached comes from its home first"),
        "M_WRITEBACK": (2, "DMA: the stub flushes the ring's lines to the mComponent"),
        "N_SEND_DMA": (3, "DMA: the stub tells the skeleton how many bytes wait in the "
                          "mComponent"),
        "N_SEND": (3, "DDIO: the stub tells the skeleton how many bytes wait in its "
                      "extCache lines"),
        "M_DMA_MAP": (4, "dDMA: the mComponent says where the send ring lies in its arena "
                         "(once a ring)"),
        "DMA_READ": (4, "dDMA: the skeleton copies the bytes from the arena into "
                        "nComponent DRAM"),
        "DDIO_READ": (4, "dDDIO: the skeleton copies the bytes from the extCache lines into "
                         "nComponent DRAM"),
        "KERNEL_SEND": (5, "the skeleton sends them on its kernel socket"),
    },
    "recv": {
        "KERNEL_RECV": (1, "the kernel socket is readable: the skeleton reads the bytes into "
                           "nComponent DRAM"),
        "M_DMA_MAP": (2, "dDMA: the mComponent says where the receive ring lies in its arena "
                         "(once a ring)"),
        "DMA_WRITE": (2, "dDMA: the skeleton copies the bytes into the mComponent's arena"),
        "DDIO_WRITE": (2, "dDDIO: the skeleton writes the bytes into the receive ring's "
                          "extCache lines"),
        "M_MISS": {"n": (2, "dDDIO: a ring line that is not cached is installed first"),
                   "p": (4, "recv: a ring line misses; the mComponent serves it")},
        "M_WRITEBACK": {"n": (2, "dDDIO: the installed line's dirty victim goes home")},
        "STUB_DATA_DMA": (3, "the skeleton tells the stub how many bytes; it drops the "
                             "ring's stale lines"),
        "STUB_DATA": (3, "the skeleton tells the stub how many bytes are in its extCache "
                         "lines"),
        "M_FETCH": (4, "recv: the ring's lines miss; the mComponent serves them together "
                       "(read-ahead)"),
    },
}
# not a step, but worth a word
NOTES = {"STUB_SENT": "the skeleton took the bytes: the send window reopens",
         "N_CREDIT": "the program consumed bytes: the receive window reopens",
         "M_DMA_DONE": "dDMA: the ring's mapping is released"}
_LANES = ("app", "process", "p", "n", "m", "s", "global", "client", "net")


# ---- the verb -------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from splitrack import cli  # here: cli imports this module (add_parser)

    p = sub.add_parser("trace", help="run a program on the rack and list the FIT messages "
                                     "its socket calls cause, in causal order",
                       description="Run PROGRAM as `splitrack run` does (it takes every "
                                   "option of run), recording every FIT message its socket "
                                   "calls cause, in every component, and the steps that are "
                                   "no message (kernel sends and receives, dDMA and dDDIO "
                                   "copies). Then print them in causal order, numbered: time "
                                   "(us from the first), from -> to, link, op, bytes, the "
                                   "event that caused it, and for sends and recvs the step "
                                   "of the paper's Fig. 5 with what happens. Exit status: "
                                   "the program's.")
    p.add_argument("--json", metavar="FILE", type=argtypes.out_file,
                   help='also write {"events": [{seq, t_us, src, dst, link, op, bytes, '
                        'cause, step, ...}]} here')
    p.add_argument("--plot", metavar="FILE.png", type=argtypes.out_file,
                   help="also draw the sequence (components as lanes, messages as arrows)")
    p.add_argument("--mermaid", metavar="FILE.md", type=argtypes.out_file,
                   help="also write the sequence as a Mermaid sequenceDiagram")
    p.add_argument("--ops", type=argtypes.choices(OPERATIONS, "operation"), metavar="OPS",
                   help="keep only the events of these socket operations, comma-separated: "
                        f"{', '.join(OPERATIONS)} (default: all events)")
    p.add_argument("--first", type=argtypes.count, metavar="N",
                   help="keep only the events of the first N operations (after --ops)")
    cli.add_run_options(p)
    p.set_defaults(func=cmd_trace)
    return p


def cmd_trace(args: argparse.Namespace) -> int:
    from splitrack import cli  # here: cli imports this module (add_parser)

    trace = random.SystemRandom().randrange(1, 1 << 32)
    records: list[dict[str, Any]] = []

    def finished(rack: Any) -> None:   # the program has ended; the rack is still up
        _settle(rack.run.path, trace)
        records.extend(tracing.read(rack.run.path, trace))
        tracing.remove(rack.run.path, trace)

    status = cli.cmd_run(args, env={tracing.ENV: str(trace)}, finished=finished)
    events = select(merge(records), args.ops, args.first)
    print_events(events)
    sys.stdout.flush()   # the list before what stderr says
    if args.json:
        _write(args.json, lambda f: json_dump({"events": events}, f))
    if args.mermaid:
        from splitrack import sequence

        _write(args.mermaid, lambda f: f.write(sequence.mermaid(events)))
    if args.plot:
        from splitrack import sequence

        sequence.figure(events).savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}", file=sys.stderr)
    return status


def _settle(run_dir: str, trace: int) -> None:
    """Until no process has added a record for TRACE_SETTLE_S (a component may still
    be finishing what the program's last call caused), TRACE_SETTLE_MAX_S at most."""
    deadline, last = time.monotonic() + TRACE_SETTLE_MAX_S, None
    while time.monotonic() < deadline:
        sizes = [(path, os.path.getsize(path)) for path in tracing.paths(run_dir, trace)]
        if sizes == last:
            return
        last = sizes
        time.sleep(TRACE_SETTLE_S)


def _write(path: str, dump: Any) -> None:
    with open(path, "w") as f:
        dump(f)
    print(f"wrote {path}", file=sys.stderr)


def json_dump(obj: Any, f: Any) -> None:
    import json

    json.dump(obj, f, indent=1)
    f.write("\n")


# ---- merging ----------------------------------------------------------------------------------
def merge(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every process's records as one list of events in causal order, numbered (the
    trace JSON's events, all of them; `select` keeps some)."""
    events = {(r["at"], r["id"]): r for r in records if "id" in r}
    arrived: dict[tuple[str, int], int] = {}
    for r in records:
        if "arrived" in r:
            key = (r["arrived"][0], r["arrived"][1])
            arrived[key] = min(r["t"], arrived.get(key, r["t"]))

    def cause_of(r: dict[str, Any]) -> dict[str, Any] | None:
        return events.get(tuple(r["cause"])) if r.get("cause") else None

    when: dict[int, int] = {}   # id(record) -> its time, never before its cause's

    def order(r: dict[str, Any]) -> int:
        chain, seen = [], set()
        while id(r) not in when and id(r) not in seen:
            chain.append(r)
            seen.add(id(r))
            parent = cause_of(r)
            if parent is None:
                break
            r = parent
        t = when.get(id(r), -1)
        for r in reversed(chain):
            t = when[id(r)] = max(r["t"], t)
        return t

    def root_of(r: dict[str, Any]) -> dict[str, Any]:
        seen = {id(r)}
        while (parent := cause_of(r)) is not None and id(parent) not in seen:
            seen.add(id(parent))
            r = parent
        return r

    ranked = sorted(events.values(), key=lambda r: (order(r), r["t"]))
    seq = {id(r): i + 1 for i, r in enumerate(ranked)}
    t0 = ranked[0]["t"] if ranked else 0
    out: list[dict[str, Any]] = []
    for r in ranked:
        root, cause = root_of(r), cause_of(r)
        operation = root.get("operation")
        if r["kind"] == "reply" and cause is not None:   # a reply is its request's step
            step, explain = out[seq[id(cause)] - 1]["step"], out[seq[id(cause)] - 1]["explain"]
        else:
            step, explain = step_of(operation, r)
        t_in = arrived.get((r["at"], r["id"]))
        out.append({
            "seq": seq[id(r)], "t_us": round((r["t"] - t0) / 1000, 1), "src": r["src"],
            "dst": r["dst"], "link": link_class(r["src"], r["dst"]), "op": r["op"],
            "bytes": r["bytes"], "cause": None if cause is None else seq[id(cause)],
            "step": step, "kind": r["kind"], "operation": operation,
            "opstart": seq[id(root)] if operation else None, "explain": explain,
            "t_arrived_us": None if t_in is None else round((t_in - t0) / 1000, 1)})
    return out


def step_of(operation: str | None, r: dict[str, Any]) -> tuple[int | None, str | None]:
    """(Fig. 5 step, what happens) of an event of a send or recv; (None, a note or None)."""
    op = r["op"]
    if r["kind"] == "call":
        found = _CALL.get(operation) if r["src"] == "app" else None
    else:
        found = STEPS.get(operation or "", {}).get(op)
        if isinstance(found, dict):
            found = found.get(_party(r["src"]))
    if found is None:
        return None, NOTES.get(op)
    return found


def select(events: list[dict[str, Any]], ops: tuple[str, ...] | None,
           first: int | None) -> list[dict[str, Any]]:
    """The events of the operations --ops names, of the first N of those (--first), numbered
    again from 1 (a cause left out becomes null) and timed from the first kept."""
    if ops is None and first is None:
        return events
    starts = [e["seq"] for e in events if e["opstart"] == e["seq"]
              and (ops is None or e["operation"] in ops)]
    keep = set(starts[:first] if first is not None else starts)
    kept = [dict(e) for e in events if e["opstart"] in keep]
    renumber = {e["seq"]: i + 1 for i, e in enumerate(kept)}
    t0 = kept[0]["t_us"] if kept else 0.0
    for e in kept:
        e["seq"] = renumber[e["seq"]]
        e["cause"] = renumber.get(e["cause"])
        e["opstart"] = renumber[e["opstart"]]
        e["t_us"] = round(e["t_us"] - t0, 1)
        if e["t_arrived_us"] is not None:
            e["t_arrived_us"] = round(e["t_arrived_us"] - t0, 1)
    return kept


def link_class(src: str, dst: str) -> str:
    """p-m, p-n, n-m, p-p, p-s, ... (the kinds in the order p, n, m, s; a program's
    process counts as its pComponent); global for a link to it; app, n-net."""
    if "app" in (src, dst):
        return "app"
    ends = sorted((_party(src), _party(dst)), key=lambda k: _LANES.index(k))
    if "global" in ends:
        return "global"
    return "-".join(ends)


def _party(cid: str) -> str:
    if cid in ("app", "net"):
        return cid
    kind = kind_of(cid)
    return "p" if kind == "process" else kind if kind in _LANES else "client"


def lane_order(cid: str) -> tuple[int, str]:
    """Lanes left to right: the program, its process, pN, nN, mN, sN, global, net."""
    kind = "process" if kind_of(cid) == "process" else _party(cid)
    return _LANES.index(kind), cid


# ---- printing ---------------------------------------------------------------------------------
def label(e: dict[str, Any]) -> str:
    return f"{e['op']} reply" if e["kind"] == "reply" else e["op"]


def print_events(events: list[dict[str, Any]]) -> None:
    operations = sum(1 for e in events if e["opstart"] == e["seq"])
    print(f"trace: {len(events)} events, {operations} operations (steps: the paper's Fig. 5, "
          "as docs/network.md numbers them)")
    if not events:
        return
    width = max(len(f"{e['src']} -> {e['dst']}") for e in events)
    print(f"{'#':>4} {'t_us':>9}  {'from -> to':<{width}}  {'link':<7} {'op':<18} "
          f"{'bytes':>7} {'cause':>5}  step")
    for e in events:
        step = f"{e['step']:>4}" if e["step"] is not None else "    "
        note = f"  {e['explain']}" if e["explain"] else ""
        cause = "" if e["cause"] is None else e["cause"]
        print(f"{e['seq']:>4} {e['t_us']:>9.1f}  {e['src'] + ' -> ' + e['dst']:<{width}}  "
              f"{e['link']:<7} {label(e):<18} {e['bytes']:>7} {cause:>5}  {step}{note}"
              .rstrip())
