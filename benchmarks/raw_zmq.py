"""The raw pyzmq DEALER/ROUTER baseline: what FIT costs before FIT adds anything.

    python -m benchmarks.raw_zmq ADDRESS [N]  a plain ROUTER echo server; prints
                                             READY, echoes (or answers N bytes)
                                             until an empty frame; it dies with its
                                             parent (PR_SET_PDEATHSIG)
    RawClient(address).measure(size, n)      n round trips from this process, RTTs in µs
    measure_in_process(address, size, n, warmup)
                                             the same from a separate plain process,
                                             when the thing compared runs in its own
                                             process too (FIT's caller is a monitor)

Synchronous, one frame each way, as FIT's ZeroMQ transport does.
"""

import array
import ctypes
import os
import signal
import subprocess
import sys
import time

import zmq

_PR_SET_PDEATHSIG = 1


def serve(address: str, reply_bytes: int | None = None) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(address)
    print("READY", flush=True)
    fixed = None if reply_bytes is None else b"\0" * reply_bytes
    while True:
        route, frame = sock.recv_multipart()
        if not frame:
            break
        sock.send_multipart((route, frame if fixed is None else fixed))
    sock.close(0)
    ctx.term()


class RawServer:
    """The server as a plain child process; a context manager."""

    def __init__(self, address: str, reply_bytes: int | None = None):
        self.address = address
        extra = [] if reply_bytes is None else [str(reply_bytes)]
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.raw_zmq", address,
                                      "--parent", str(os.getpid()), *extra],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     cwd="/")  # the installed package, not a checkout's copy
        if self.proc.stdout.readline().strip() != b"READY":
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("raw pyzmq echo server did not start")

    def __enter__(self) -> "RawServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


class RawClient:
    def __init__(self, address: str):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.connect(address)

    def measure(self, size: int, n: int) -> list[float]:
        send, recv, clock = self.sock.send, self.sock.recv, time.perf_counter_ns
        payload = b"\0" * size
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            send(payload)
            recv()
            out[i] = (clock() - t0) / 1000.0
        return out

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def measure_in_process(address: str, size: int, n: int, warmup: int) -> list[float]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.raw_zmq", "--client", address,
                          str(size), str(n), str(warmup)], stdout=subprocess.PIPE, check=True,
                         stdin=subprocess.DEVNULL, cwd="/")
    return list(array.array("d", out.stdout))


def _client_main(address: str, size: int, n: int, warmup: int) -> None:
    client = RawClient(address)
    client.measure(size, warmup)
    samples = array.array("d", client.measure(size, n))
    client.close()
    sys.stdout.buffer.write(samples.tobytes())


def _die_with(parent: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:   # it died before prctl took effect
        sys.exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        _client_main(sys.argv[2], *(int(a) for a in sys.argv[3:6]))
    else:
        if sys.argv[2:3] == ["--parent"]:
            _die_with(int(sys.argv[3]))
            del sys.argv[2:4]
        serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
