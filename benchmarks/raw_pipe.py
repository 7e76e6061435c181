"""The raw os.pipe baseline: an echo over two pipes between two plain processes.

    measure(size, rounds, warmup) -> round-trip times in µs
    python -m benchmarks.raw_pipe --echo RFD WFD     the echoing child

What the pipe shortcut costs before a bsdSocketStub adds anything: blocking
os.read/os.write, one pipe each way, the pipes as large as the shortcut's.
"""

import fcntl
import os
import subprocess
import sys
import time

from splitrack.params import SHORTCUT_PIPE_BYTES


def measure(size: int, rounds: int, warmup: int) -> list[float]:
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
    try:
        for i in range(warmup + rounds):
            t0 = clock()
            os.write(from_parent, payload)
            got = 0
            while got < size:
                got += len(os.read(to_parent, size - got))
            if i >= warmup:
                out.append((clock() - t0) / 1000.0)
    finally:
        os.close(from_parent)   # the child reads EOF and exits
        os.close(to_parent)
        child.wait()
    return out


def _echo(rfd: int, wfd: int) -> None:
    while data := os.read(rfd, 1 << 20):
        os.write(wfd, data)


if __name__ == "__main__":
    _echo(int(sys.argv[2]), int(sys.argv[3]))
