"""The raw os.pipe baseline: an echo over two pipes between two plain processes.

    measure(size, rounds, warmup) -> round-trip times in µs, measured by a plain
                                     process of its own (as the shortcut's client is)
    python -m benchmarks.raw_pipe --measure SIZE ROUNDS WARMUP   that process
    python -m benchmarks.raw_pipe --echo RFD WFD                 the echoing child

What the pipe shortcut costs before a bsdSocketStub adds anything: one pipe
each way, as large as the shortcut's, non-blocking reads after poll() -- the
shortcut's own way of waiting. (Blocking reads are bimodal here: ~5 us when
the two processes share a core, ~50 us when they do not.)
"""

import fcntl
import json
import os
import select
import subprocess
import sys
import time

from splitrack.params import SHORTCUT_PIPE_BYTES


def measure(size: int, rounds: int, warmup: int) -> list[float]:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.raw_pipe", "--measure", str(size),
                           str(rounds), str(warmup)], capture_output=True, text=True, cwd="/",
                          check=True, timeout=600)
    return json.loads(proc.stdout)


def _measure_here(size: int, rounds: int, warmup: int) -> list[float]:
    to_child, from_parent = os.pipe()
    to_parent, from_child = os.pipe()
    for fd in (to_child, to_parent):
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, SHORTCUT_PIPE_BYTES)
        except OSError:
            pass
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
            os.write(from_parent, payload)
            got = 0
            while got < size:
                wait()
                got += len(os.read(to_parent, size - got))
            if i >= warmup:
                out.append((clock() - t0) / 1000.0)
    finally:
        os.close(from_parent)   # the child reads EOF and exits
        os.close(to_parent)
        child.wait()
    return out


def _poller(fd: int):
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller.poll


def _echo(rfd: int, wfd: int) -> None:
    wait = _poller(rfd)
    while True:
        wait()
        data = os.read(rfd, 1 << 16)
        if not data:
            return
        os.write(wfd, data)


if __name__ == "__main__":
    if sys.argv[1] == "--measure":
        print(json.dumps(_measure_here(*map(int, sys.argv[2:5]))))
    else:
        _echo(int(sys.argv[2]), int(sys.argv[3]))
