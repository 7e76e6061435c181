"""The interconnect floors: round trips between two plain processes, no FIT code.

What a FIT round trip is measured against. Each floor is an echo: this process
sends `size` bytes, a child process sends them back, and this process times the
round trip (perf_counter_ns, one sample per round trip, in µs):

    linux_tcp     TCP over loopback (127.0.0.1), TCP_NODELAY, blocking recv/send
    unix          an AF_UNIX stream socketpair, blocking recv/send
    shm_eventfd   one request and one reply through the two rings of one
                  native.fitring Segment (FIT's own rings), each side asleep on
                  its eventfd between messages: WaitSet.wait with spin 0
    shm_spin      the same rings, both sides spinning (WaitSet.wait with a spin
                  of SPIN_S, far longer than a round trip; fitring's waiter still
                  sleeps when another task wants its CPU)
    raw_zmq       pyzmq DEALER (here) / ROUTER (the child) over ipc (an abstract
                  socket: no file), one frame each way (benchmarks/raw_zmq.py:
                  its client and its server loop)

The shm floors are benchmarks/shm_peer.py's echo child: the answer is copied
out of the ring, as a FIT caller copies its reply.

Interface:
    with Echoes(names) as echoes:            one echoing child per floor; every child
                                             is stopped by PID (SIGKILL, then reaped)
                                             on every way out, Ctrl-C included
        echoes.pids                          their PIDs
        echoes.round_trips(name, size, n, warmup) -> n RTTs in µs, after `warmup`
    measure(sizes, rounds, reps, names, warmup) -> [{"size", "name", "p50_us", "p99_us"}]
                                             the floors interleaved over `reps`
                                             repetitions (the order rotating), the
                                             samples pooled per (name, size)
    measure_one(name, size, rounds, reps, warmup) -> {"size", "name", "p50_us", "p99_us"}
    summarize({(name, size): samples}) -> rows as measure() returns them
    python -m benchmarks.floors [--sizes 128,4096] [--rounds N] [--reps N] [--json F]
                                             the table on stdout (and the rows as JSON)
    python -m benchmarks.floors --echo KIND --parent PID FD...|ADDRESS
                                             an echoing child (internal)

Children die with this process too (PR_SET_PDEATHSIG, and each sees its peer's
end hang up), so a killed benchmark leaks none.
"""

import argparse
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import raw_zmq
from benchmarks.shm_peer import ShmPeer
from benchmarks.stats import Series
from splitrack.params import BENCH_WARMUP_ROUNDS

NAMES = ("linux_tcp", "unix", "shm_eventfd", "shm_spin", "raw_zmq")
SPIN_S = 1.0                 # shm_spin: a waiter spins this long (far beyond a round trip)
START_TIMEOUT_S = 30.0       # the raw_zmq echo must say READY within this
_STREAM_BYTES = 1 << 20      # a stream echo's receive buffer
_PR_SET_PDEATHSIG = 1


@dataclass
class _Child:
    """One floor's echoing child and this side's end of the connection."""

    name: str
    proc: subprocess.Popen | None = None
    sock: socket.socket | None = None                 # stream floors
    peer: ShmPeer | None = None                       # shm floors
    client: raw_zmq.RawClient | None = None           # raw_zmq

    @property
    def pid(self) -> int | None:
        return self.peer.pid if self.peer is not None else \
            None if self.proc is None else self.proc.pid


class Echoes:
    """The echoing children of `names` (a context manager): started on entry,
    stopped by PID on exit, whatever the way out."""

    def __init__(self, names: tuple[str, ...] | list[str] = NAMES):
        bad = [n for n in names if n not in NAMES]
        if bad:
            raise ValueError(f"unknown floor(s) {', '.join(bad)} (have {', '.join(NAMES)})")
        self.names = tuple(names)
        self._children: dict[str, _Child] = {}

    def __enter__(self) -> "Echoes":
        try:
            for name in self.names:
                self._start(name)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [pid for c in self._children.values() if (pid := c.pid) is not None]

    # ---- starting -------------------------------------------------------------------
    def _start(self, name: str) -> None:
        child = self._children[name] = _Child(name)
        if name == "raw_zmq":
            address = f"ipc://@splitrack-floor-{os.getpid()}-{id(self):x}"
            child.proc = _spawn("raw_zmq", [], [address], stdout=subprocess.PIPE)
            assert child.proc.stdout is not None
            ready, _, _ = select.select([child.proc.stdout], [], [], START_TIMEOUT_S)
            if not ready or child.proc.stdout.readline().strip() != b"READY":
                raise RuntimeError("the raw_zmq echo child did not start")
            child.client = raw_zmq.RawClient(address)
        elif name in ("linux_tcp", "unix"):
            mine, theirs = _tcp_pair() if name == "linux_tcp" else socket.socketpair()
            child.sock = mine
            try:
                child.proc = _spawn("stream", [theirs.fileno()])
            finally:
                theirs.close()
        else:   # shm_eventfd, shm_spin
            child.peer = ShmPeer("echo", SPIN_S if name == "shm_spin" else 0.0).start()

    # ---- measuring ------------------------------------------------------------------
    def round_trips(self, name: str, size: int, n: int, warmup: int = 0) -> list[float]:
        """n round trips of `size` bytes each way to the `name` echo, in µs, after
        `warmup` untimed ones."""
        child = self._children[name]
        if size < 1:
            raise ValueError("a floor's message has at least one byte")
        if child.client is not None:
            child.client.measure(size, warmup)
            return child.client.measure(size, n)
        if child.peer is not None:
            if size > child.peer.tx.max_payload:
                raise ValueError(f"{size} B is more than a floor ring carries")
            spin = SPIN_S if name == "shm_spin" else 0.0
            try:
                _shm_round_trips(child.peer, size, warmup, spin)
                return _shm_round_trips(child.peer, size, n, spin)
            finally:
                child.peer.rest()   # the child stops spinning until the next batch
        _stream_round_trips(child, size, warmup)
        return _stream_round_trips(child, size, n)

    # ---- stopping -------------------------------------------------------------------
    def close(self) -> None:
        """Stop every child by its PID and release what this side holds. Idempotent."""
        children, self._children = list(self._children.values()), {}
        error: BaseException | None = None
        for child in children:   # every child, even if stopping one was interrupted
            try:
                _stop(child)
            except BaseException as exc:
                error = error or exc
            finally:
                if child.sock is not None:
                    child.sock.close()
        if error is not None:
            raise error


def _stop(child: _Child) -> None:
    """SIGKILL by PID, then reaped; this side's zmq socket closed."""
    try:
        if child.peer is not None:
            child.peer.close()
        if child.proc is not None:
            child.proc.kill()
            child.proc.wait()
            if child.proc.stdout is not None:
                child.proc.stdout.close()
    finally:
        if child.client is not None:
            child.client.close()
            child.client = None


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a TCP loopback connection on 127.0.0.1, TCP_NODELAY both."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        mine = socket.create_connection(listener.getsockname())
        try:
            theirs, _ = listener.accept()
        except BaseException:
            mine.close()
            raise
    for s in (mine, theirs):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return mine, theirs


def _spawn(kind: str, fds: list[int], more: tuple[str, ...] | list[str] = (),
           stdout: int | None = None) -> subprocess.Popen:
    """An echoing child: this module, run with --echo (the installed package's)."""
    return subprocess.Popen([sys.executable, "-m", "benchmarks.floors", "--echo", kind,
                             "--parent", str(os.getpid()), *map(str, fds), *more],
                            pass_fds=fds, stdin=subprocess.DEVNULL, stdout=stdout, cwd="/")


def _stream_round_trips(child: _Child, size: int, n: int) -> list[float]:
    sock = child.sock
    assert sock is not None
    sendall, recv_into, clock = sock.sendall, sock.recv_into, time.perf_counter_ns
    payload, view = b"\x5a" * size, memoryview(bytearray(size))
    out = [0.0] * n
    for i in range(n):
        t0 = clock()
        sendall(payload)
        got = 0
        while got < size:
            k = recv_into(view[got:])
            if not k:
                raise RuntimeError(f"the {child.name} echo child hung up")
            got += k
        out[i] = (clock() - t0) / 1000.0
    return out


def _shm_round_trips(peer: ShmPeer, size: int, n: int, spin: float) -> list[float]:
    call, clock, payload = peer.call, time.perf_counter_ns, b"\x5a" * size
    out = [0.0] * n
    for i in range(n):
        t0 = clock()
        call(payload, spin)
        out[i] = (clock() - t0) / 1000.0
    return out


# ---- measuring many -------------------------------------------------------------------
def measure(sizes: tuple[int, ...] | list[int], rounds: int, reps: int,
            names: tuple[str, ...] | list[str] = NAMES,
            warmup: int = BENCH_WARMUP_ROUNDS) -> list[dict[str, Any]]:
    """The floors `names` at every size, `rounds` round trips a repetition each,
    interleaved over `reps` repetitions; p50/p99 of the pooled samples."""
    samples = Series()
    with Echoes(names) as echoes:
        for rep in range(reps):
            order = list(names[rep % len(names):]) + list(names[:rep % len(names)])
            for size in sizes:
                for name in order:
                    samples.add(name, size, echoes.round_trips(name, size, rounds, warmup))
    return summarize(samples)


def measure_one(name: str, size: int, rounds: int, reps: int = 1,
                warmup: int = BENCH_WARMUP_ROUNDS) -> dict[str, Any]:
    """One floor at one size (for callers that want only that)."""
    return measure((size,), rounds, reps, (name,), warmup)[0]


def summarize(samples: Series) -> list[dict[str, Any]]:
    """Rows {"size", "name", "p50_us", "p99_us"}, by size, then in NAMES order
    (the other statistics are in the report's "stats")."""
    rows = []
    for name, size in sorted(samples.reps, key=lambda k: (k[1], NAMES.index(k[0]))):
        got = samples.summary(name, size)
        rows.append({"size": size, "name": name, "p50_us": round(got["p50"], 2),
                     "p99_us": round(got["p99"], 2)})
    return rows


def p50(rows: list[dict[str, Any]], name: str, size: int) -> float:
    """The p50 of floor `name` at `size` among `rows`."""
    return next(r["p50_us"] for r in rows if r["name"] == name and r["size"] == size)


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'size':>6}  {'floor':<12} {'p50':>9} {'p99':>9}")
    for r in rows:
        print(f"{r['size']:>6}  {r['name']:<12} {r['p50_us']:>7.1f}us {r['p99_us']:>7.1f}us")


# ---- the echoing children ---------------------------------------------------------------
def _die_with_parent(parent: int) -> None:
    """SIGTERM us when the measuring process dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:   # it died before prctl took effect
        sys.exit(0)


def _echo_stream(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    buf = bytearray(_STREAM_BYTES)
    view = memoryview(buf)
    recv_into, sendall = sock.recv_into, sock.sendall
    while True:
        n = recv_into(buf)
        if not n:
            return
        sendall(view[:n])


def _child_main(argv: list[str]) -> None:
    kind, parent = argv[0], int(argv[2])
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C: the parent stops us
    if kind == "raw_zmq":
        raw_zmq.serve(argv[3])   # prints READY; echoes until killed
        return
    _echo_stream(int(argv[3]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floors",
                                     description="Round-trip floors between two plain "
                                                 "processes, interleaved.")
    parser.add_argument("--sizes", default="128,4096", help="comma-separated bytes")
    parser.add_argument("--rounds", type=int, default=5000, help="round trips a repetition")
    parser.add_argument("--reps", type=int, default=5, help="repetitions, interleaved")
    parser.add_argument("--json", metavar="FILE", help="also write the rows here")
    args = parser.parse_args(argv)
    sizes = [int(z) for z in args.sizes.split(",")]
    try:
        rows = measure(sizes, args.rounds, args.reps)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(f"round-trip floors ({args.reps} x {args.rounds} round trips each, interleaved)")
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--echo"]:
        _child_main(sys.argv[2:])
    else:
        sys.exit(main())
