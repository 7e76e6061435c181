"""The raw os.pipe baseline: an echo over two pipes between two plain processes.

    measure(size, rounds, warmup, kind="pipe") -> round-trip times in µs, measured by
                                     a plain process of its own (as the shortcut's
                                     client is); kind "unix": over a Unix-domain
                                     stream pair instead, the pipe shortcut's own
                                     kernel object (its floor)
    python -m benchmarks.raw_pipe --measure SIZE ROUNDS WARMUP [KIND]   that process
    python -m benchmarks.raw_pipe --echo RFD WFD                 the echoing child

What the pipe shortcut costs before a bsdSocketStub adds anything: one pipe
each way, as large as the shortcut's, non-blocking reads after poll() -- the
shortcut's own way of waiting. (Blocking reads are bimodal here: ~5 us when
the two processes share a core, ~50 us when they do not.) The shortcut itself
is a Unix-domain stream pair, since a socket's one descriptor must select
both readable and writable; its echo costs more than the pipes' (1.2-1.8 x on
one core here: docs/evaluation.md), so the target against raw os.pipe is
reported with it as its floor.
"""

import fcntl
import json
import os
import select
import socket
import subprocess
import sys
import time

from splitrack.params import SHORTCUT_PIPE_BYTES


def measure(size: int, rounds: int, warmup: int, kind: str = "pipe") -> list[float]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.raw_pipe", "--measure", str(size),
                           str(rounds), str(warmup), kind], capture_output=True, text=True,
                          cwd="/", check=True, timeout=600)
    return json.loads(proc.stdout)


def _ends(kind: str) -> tuple[int, int, int, int]:
    """(to_child, from_parent, to_parent, from_child): the child reads to_child and
    writes from_child; the parent writes from_parent and reads to_parent."""
    if kind not in ("pipe", "unix"):
        raise ValueError(f"raw_pipe: kind {kind!r} is not 'pipe' or 'unix'")
    if kind == "unix":   # one stream pair, both ways (as the shortcut: SHORTCUT_PIPE_BYTES)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (parent, child):
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                end.setsockopt(socket.SOL_SOCKET, opt, SHORTCUT_PIPE_BYTES)
        p, c = parent.detach(), child.detach()
        return c, p, p, os.dup(c)
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    for fd in (to_child, to_parent):
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, SHORTCUT_PIPE_BYTES)
        except OSError:
            pass
    return to_child, from_parent, to_parent, from_child


def _measure_here(size: int, rounds: int, warmup: int, kind: str) -> list[float]:
    to_child, from_parent, to_parent, from_child = _ends(kind)
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.raw_pipe", "--echo",
                              str(to_child), str(from_child)],
                             pass_fds=(to_child, from_child), cwd="/")
    os.close(to_child)
    os.close(from_child)
    out, payload, clock = [], b"\x5a" * size, time.perf_counter_ns
    wait = _poller(to_parent)
    try:
        for i in range(warmup + rounds):
            t0 = clock()
            _write_all(from_parent, payload)
            got = 0
            while got < size:
                wait()
                got += len(os.read(to_parent, size - got))
            if i >= warmup:
                out.append((clock() - t0) / 1000.0)
    finally:
        if kind == "unix":   # (one descriptor both ways: its write side ends the echo)
            socket.socket(fileno=os.dup(from_parent)).shutdown(socket.SHUT_WR)
        os.close(from_parent)   # the child reads EOF and exits
        if to_parent != from_parent:
            os.close(to_parent)
        child.wait()
    return out


def _poller(fd: int):
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller.poll


def _write_all(fd: int, data: bytes) -> None:
    """All of data (a stream pair's one descriptor is non-blocking both ways: a write
    may take part, or none until the reader makes room)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


def _echo(rfd: int, wfd: int) -> None:
    wait = _poller(rfd)
    while True:
        wait()
        data = os.read(rfd, 1 << 16)
        if not data:
            return
        _write_all(wfd, data)


if __name__ == "__main__":
    if sys.argv[1] == "--measure":
        print(json.dumps(_measure_here(*map(int, sys.argv[2:5]),
                                       sys.argv[5] if len(sys.argv) > 5 else "pipe")))
    else:
        _echo(int(sys.argv[2]), int(sys.argv[3]))
