"""Tracing: which FIT messages a program's operations cause, in every component.

`splitrack trace` (splitrack/trace.py) runs a program with SPLITRACK_TRACE=ID
in its environment. Then:

- that process is *traced*: every FIT message it sends carries the trace id
  and a number of its own (the header's `trace` and `event`, docs/protocol.md)
  and is recorded; its socket calls are recorded too, and what a call sends is
  caused by it (`operations`, installed by splitrack/guest/stub.py);
- any endpoint that handles a traced message records its arrival, and while
  it handles it (the handler, its reply, every message it sends meanwhile,
  nested calls too) whatever it sends is traced, caused by that message;
- what is no FIT message but a step of the path is recorded where it happens,
  caused likewise: a skeleton's kernel send and receive (monitors/skeleton.py)
  and the one-sided copies of dDMA and dDDIO (monitors/data_paths.py); a
  skeleton keeps the context of the last traced message about it, for what it
  does later on its own (monitors/nmonitor.py).

Records: one JSON object a line, appended to RUN_DIR/trace/ID-PID.jsonl by the
process that saw it (RUN_DIR: $SPLITRACK_RUN_DIR, a program's, else the current
directory, a monitor's). `t` is time.monotonic_ns(), one clock for every
process of the host. An event:
    {"t", "trace", "at", "id", "src", "dst", "op", "kind", "bytes", "cause",
     "operation", "opnum"}
named by (at, id): `at` is the id of the endpoint that recorded it, `id` its
process's number for it (what the header's `event` carries); `cause` is the
(at, id) of the event that caused it, or null; kind is request, reply, oneway,
call (a socket call), kernel or access (a one-sided copy); `operation` and
`opnum` name the socket call an event of the traced process belongs to. An
arrival: {"t", "trace", "at", "arrived": [at, id]}.

Costs nothing when off: a process that is not traced keeps `current.ctx` None
(one read per message an endpoint sends), and an endpoint compares the
header's `trace` with 0 (once per message it receives).

Interface:
    TRACE                        this process's trace id (0: not traced)
    current.ctx                  the Context what is sent now is traced in (None: not)
    Context(trace, cause, operation, opnum)
    sent(ctx, at, dst, kind, op, nbytes) -> id     a message about to go (recorded)
    arrived(at, src, trace, event) -> Context       a traced message came (recorded)
    event(ctx, at, src, dst, op, nbytes, kind) -> Context
                                                    a step that is no message (recorded);
                                                    the Context of what it causes
    root(ctx, operation) -> Context                 ctx's trace, caused by nothing
    within(ctx)                  a with-block that runs in ctx (None: as it is)
    operations(cls, names)       a traced process: cls's socket calls are recorded
    read(run_dir, trace) -> [record];  remove(run_dir, trace)
"""

import contextlib
import functools
import glob
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from fit_rpc.header import ONEWAY, REPLY, REQUEST
from fit_rpc.ops import op_name

ENV = "SPLITRACK_TRACE"
TRACE = int(os.environ.get(ENV) or 0) & 0xFFFFFFFF
KINDS = {REQUEST: "request", REPLY: "reply", ONEWAY: "oneway"}


class Context(NamedTuple):
    trace: int                          # the trace id
    cause: tuple[str, int] | None       # the event that causes what is sent now
    operation: str | None               # the socket call it belongs to (traced process)
    opnum: int | None                   # ... its number in the process


class _Current(threading.local):
    ctx: Context | None = None          # each thread's; a traced process's default below


current = _Current()
_ids = itertools.count(1)               # this process's event numbers (u32 on the wire)
_opnums = itertools.count(1)
_files: dict[int, int] = {}             # trace id -> this process's record file (the
_FILES_OPEN = 8                         # ... last few: a monitor outlives many traces)
_files_lock = threading.Lock()
_clock = time.monotonic_ns
if TRACE:   # a traced process: whatever it sends is traced, caused by nothing (a root)
    _Current.ctx = Context(TRACE, None, None, None)


def _next_id() -> int:
    return next(_ids) & 0xFFFFFFFF or next(_ids)


def sent(ctx: Context, at: str, dst: str, kind: int, op: int, nbytes: int) -> int:
    """Record the message `at` sends to `dst` now in ctx; its event number."""
    event = _next_id()
    _write(ctx.trace, {"t": _clock(), "trace": ctx.trace, "at": at, "id": event, "src": at,
                       "dst": dst, "op": op_name(op), "kind": KINDS.get(kind, str(kind)),
                       "bytes": nbytes, "cause": ctx.cause, "operation": ctx.operation,
                       "opnum": ctx.opnum})
    return event


def arrived(at: str, src: str, trace: int, event: int) -> Context:
    """Record that the traced message (src, event) reached `at`; the Context of what
    its handling sends."""
    _write(trace, {"t": _clock(), "trace": trace, "at": at, "arrived": [src, event]})
    return Context(trace, (src, event), None, None)


def event(ctx: Context, at: str, src: str, dst: str, op: str, nbytes: int, kind: str,
          t: int | None = None, **more: Any) -> Context:
    """Record a step that is no FIT message (`at` saw it); the Context of what it causes."""
    number = _next_id()
    _write(ctx.trace, {"t": _clock() if t is None else t, "trace": ctx.trace, "at": at,
                       "id": number, "src": src, "dst": dst, "op": op, "kind": kind,
                       "bytes": nbytes, "cause": ctx.cause, "operation": ctx.operation,
                       "opnum": ctx.opnum, **more})
    return Context(ctx.trace, (at, number), ctx.operation, ctx.opnum)


def root(ctx: Context, operation: str) -> Context:
    """ctx's trace, for a step that starts an operation of its own (caused by nothing
    traced: bytes arriving at an nComponent start a recv)."""
    return Context(ctx.trace, None, operation, None)


@contextlib.contextmanager
def within(ctx: Context | None) -> Iterator[None]:
    """Run the block in ctx (what it sends is traced so), then go back to what was."""
    if ctx is None:
        yield
        return
    before, current.ctx = current.ctx, ctx
    try:
        yield
    finally:
        current.ctx = before


def operations(cls: type, names: dict[str, str], process: str) -> None:
    """Each method of cls named in `names` (method -> operation, e.g. "sendall": "send")
    becomes a recorded socket call of `process` (its FIT id): an event app -> process,
    whose context is what the call sends. A call made inside another (sendall in a
    with-block of send) is the outer one's."""
    for method, operation in names.items():
        setattr(cls, method, _recorded(getattr(cls, method), method, operation, process))


def _recorded(fn: Callable[..., Any], method: str, operation: str,
              process: str) -> Callable[..., Any]:
    label = f"{operation}()" if method.startswith("_") else f"{method}()"   # __init__: socket()

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = current.ctx
        if outer is None or outer.opnum is not None:   # not traced, or inside a call
            return fn(self, *args, **kwargs)
        t, number, opnum = _clock(), _next_id(), next(_opnums)
        ctx = current.ctx = Context(outer.trace, (process, number), operation, opnum)
        error, result = None, None
        try:
            result = fn(self, *args, **kwargs)
            return result
        except OSError as exc:
            error = exc.errno
            raise
        finally:
            current.ctx = outer
            _write(ctx.trace, {"t": t, "trace": ctx.trace, "at": process, "id": number,
                               "src": "app", "dst": process, "op": label, "kind": "call",
                               "bytes": _size(result, args), "cause": None,
                               "operation": operation, "opnum": opnum, "errno": error})
    return call


def _size(result: Any, args: tuple) -> int:
    """The bytes a socket call moved: its count, its data's, or its argument's."""
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    if isinstance(result, (bytes, bytearray)):
        return len(result)
    if args and isinstance(args[0], (bytes, bytearray, memoryview)):
        return memoryview(args[0]).nbytes
    return 0


# ---- the record files ---------------------------------------------------------------
def directory(run_dir: str | None = None) -> str:
    """Where the records go: RUN_DIR/trace."""
    return os.path.join(run_dir or os.environ.get("SPLITRACK_RUN_DIR") or os.getcwd(), "trace")


def _write(trace: int, record: dict[str, Any]) -> None:
    fd = _files.get(trace)
    if fd is None:
        with _files_lock:
            fd = _files.get(trace)
            if fd is None:
                if len(_files) >= _FILES_OPEN:   # the oldest trace is over
                    os.close(_files.pop(next(iter(_files))))
                os.makedirs(directory(), mode=0o700, exist_ok=True)
                path = os.path.join(directory(), f"{trace}-{os.getpid()}.jsonl")
                fd = _files[trace] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                             | os.O_CLOEXEC, 0o600)
    os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def paths(run_dir: str, trace: int) -> list[str]:
    return sorted(glob.glob(os.path.join(directory(run_dir), f"{trace}-*.jsonl")))


def read(run_dir: str, trace: int) -> list[dict[str, Any]]:
    """Every record of a trace, from every process (a line cut short is skipped)."""
    records = []
    for path in paths(run_dir, trace):
        with open(path, "rb") as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
    return records


def remove(run_dir: str, trace: int) -> None:
    """The trace's files, and the trace directory if nothing else is in it."""
    for path in paths(run_dir, trace):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(directory(run_dir))
