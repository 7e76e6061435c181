"""The raw pyzmq DEALER/ROUTER baseline: what FIT costs before FIT adds anything.

    python -m benchmarks.raw_zmq ADDRESS [N]  a plain ROUTER echo server; prints
                                             READY, echoes (or answers N bytes)
                                             until an empty frame
    python -m benchmarks.raw_zmq ADDRESS --connect NIC
                                             the connect floor: each request is
                                             "IP PORT"; the server connects a kernel
                                             socket bound to NIC there (non-blocking,
                                             as an nComponent does), then answers
    RawClient(address).measure(size, n)      n round trips from this process, RTTs in µs
    RawClient(address).connects(ip, port, n) n connect-floor round trips, in µs
    measure_in_process(address, size, n, warmup)
                                             the same from a separate plain process,
                                             when the thing compared runs in its own
                                             process too (FIT's caller is a monitor)

Synchronous, one frame each way, as the FIT transport does (BASELINES.md).
The connect floor is one such round trip plus the kernel's connect in the
second process, and nothing else: a rack connect() -- the stub asks, the
nComponent connects -- can only come close to it.
"""

import array
import socket
import subprocess
import sys
import time

import zmq


def serve(address: str, reply_bytes: int | None = None, nic: str | None = None) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(address)
    print("READY", flush=True)
    fixed = None if reply_bytes is None else b"\0" * reply_bytes
    while True:
        route, frame = sock.recv_multipart()
        if not frame:
            break
        conn = None if nic is None else _connect(nic, frame)
        sock.send_multipart((route, frame if fixed is None else fixed))
        if conn is not None:
            conn.close()
    sock.close(0)
    ctx.term()


def _connect(nic: str, frame: bytes) -> socket.socket:
    ip, port = frame.split()
    conn = socket.socket()
    conn.setblocking(False)
    conn.bind((nic, 0))
    conn.connect_ex((ip.decode(), int(port)))
    return conn


class RawServer:
    """The server as a plain child process; a context manager."""

    def __init__(self, address: str, reply_bytes: int | None = None, nic: str | None = None):
        self.address = address
        extra = [] if reply_bytes is None else [str(reply_bytes)]
        extra += [] if nic is None else ["--connect", nic]
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.raw_zmq", address, *extra],
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

    def measure(self, size: int, n: int, payload: bytes | None = None) -> list[float]:
        send, recv, clock = self.sock.send, self.sock.recv, time.perf_counter_ns
        payload = b"\0" * size if payload is None else payload
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            send(payload)
            recv()
            out[i] = (clock() - t0) / 1000.0
        return out

    def connects(self, ip: str, port: int, n: int) -> list[float]:
        """n round trips to a --connect server, each making a connection to ip:port."""
        return self.measure(0, n, f"{ip} {port}".encode())

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


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        _client_main(sys.argv[2], *(int(a) for a in sys.argv[3:6]))
    elif sys.argv[2:3] == ["--connect"]:
        serve(sys.argv[1], nic=sys.argv[3])
    else:
        serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
