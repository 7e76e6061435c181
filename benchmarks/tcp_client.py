"""The client side of `splitrack bench tcp`: every measurement, against tcp_server.py.

    echo_rtts(ip, port, size, rounds, warmup) -> round-trip times in µs
    tx(ip, port, size, seconds)               -> the server send()s `size` bytes at a time
                                                 for `seconds`: {"MBps", "bytes", "start",
                                                 "end"}
    rx(ip, port, size, seconds)               -> the client sends them to the server
    connect_times(ip, port, n, seconds)       -> connect() times in µs: n, or more
                                                 until `seconds` have passed
    at(t)                                     sleeps until time.monotonic() == t
    rack_client(rack_run, env, on, addr, plan) a plan run on the rack (pComponent `on`),
                                                 by the launcher: its results

    python -m benchmarks.tcp_client PLAN_JSON  runs a plan -- a list of
        {"kind": "echo"|"tx"|"rx"|"connect"|"at", ...the arguments} --
        and prints one JSON line: the results, in order

The plan form is how a client runs on the rack (`splitrack run`: the pipe and
FIT shortcut modes, and the rack's connect()), one launch for many measurements.
Start and end times are time.monotonic(), comparable between processes (NIC
scaling adds up concurrent clients).
"""

import json
import socket
import subprocess
import sys
import time
from typing import Any

from benchmarks.tcp_server import RX, TX, recv_exactly


def echo_rtts(ip: str, port: int, size: int, rounds: int, warmup: int) -> list[float]:
    """Round trips of `size` bytes, in µs, on one connection (after `warmup` of them)."""
    out = []
    payload = b"\x5a" * size
    buf = bytearray(size)
    clock = time.perf_counter_ns
    with socket.create_connection((ip, port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"E")
        if sock.recv(1) != b"E":
            raise ConnectionError("the server does not echo")
        for i in range(warmup + rounds):
            t0 = clock()
            sock.sendall(payload)
            got = 0
            while got < size:
                n = sock.recv_into(memoryview(buf)[got:])
                if not n:
                    raise ConnectionError("the echo server closed the connection")
                got += n
            if i >= warmup:
                out.append((clock() - t0) / 1000.0)
    return out


def tx(ip: str, port: int, size: int, seconds: float) -> dict[str, float]:
    """The server sends for `seconds`: its send path (where packing acts) is measured.
    This end acknowledges at once (TCP_QUICKACK after every recv): with delayed ACKs,
    a Linux sender's Nagle stalls ~40 ms now and then, and the baseline with it."""
    view = memoryview(bytearray(1 << 20))
    with socket.create_connection((ip, port), timeout=60) as sock:
        quickack = _quickack(sock)
        start = time.monotonic()
        stop = start + seconds
        sock.sendall(b"T" + TX.pack(size))
        got = 0
        while (now := time.monotonic()) < stop:
            n = sock.recv_into(view)
            if not n:
                raise ConnectionError(f"the server closed after {got} bytes")
            got += n
            if quickack:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
    return _rate(got, start, now)


def rx(ip: str, port: int, size: int, seconds: float) -> dict[str, float]:
    """The client sends for `seconds` and the server receives: its receive path is
    measured, up to the server's count of what it received (this end sends each
    chunk at once, TCP_NODELAY: the sender's batching is not what is measured)."""
    chunk = b"\x5a" * size
    with socket.create_connection((ip, port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.monotonic()
        stop = start + seconds
        sock.sendall(b"R")
        while time.monotonic() < stop:
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
        answer = recv_exactly(sock, 1 + RX.size)
        end = time.monotonic()
    if answer[:1] != b"K":
        raise ConnectionError("the server did not say what it received")
    return _rate(RX.unpack(answer[1:])[0], start, end)


def connect_times(ip: str, port: int, n: int, seconds: float = 0.0) -> list[float]:
    """connect() alone, in µs (the socket is made before, closed after); n of them,
    and more until `seconds` have passed (a warm-up)."""
    out: list[float] = []
    clock = time.perf_counter_ns
    end = time.monotonic() + seconds
    while len(out) < n or time.monotonic() < end:
        sock = socket.socket()
        try:
            t0 = clock()
            sock.connect((ip, port))
            out.append((clock() - t0) / 1000.0)
        finally:
            sock.close()
    return out


def _quickack(sock: socket.socket) -> bool:
    """Can this socket turn delayed ACKs off? A rack socket cannot (ENOPROTOOPT): on
    a shortcut there are none, and the tx client on the rack always takes one."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return True
    except OSError:
        return False


def at(t: float) -> None:
    """Concurrent clients start together (NIC scaling)."""
    time.sleep(max(0.0, t - time.monotonic()))


def _rate(total: int, start: float, end: float) -> dict[str, float]:
    return {"MBps": total / 1e6 / (end - start), "bytes": total, "start": start, "end": end}


def run_plan(plan: list[dict[str, Any]]) -> list[Any]:
    kinds = {"echo": echo_rtts, "tx": tx, "rx": rx, "connect": connect_times, "at": at}
    return [kinds[step.pop("kind")](**step) for step in plan]


def rack_client(rack_run: list[str], env: dict[str, str], on: str, addr: tuple[str, int],
                plan: list[dict[str, Any]]) -> list[Any]:
    """tcp_client.py's plan run on the rack (pComponent `on`); its results. rack_run:
    the command `splitrack run --name RACK`."""
    plan = [{**p, "ip": addr[0], "port": addr[1]} for p in plan]
    proc = subprocess.run([*rack_run, "--on", on, "--", sys.executable, "-m",
                           "benchmarks.tcp_client", json.dumps(plan)],
                          env=env, cwd="/", capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"the rack client failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)


if __name__ == "__main__":
    print(json.dumps(run_plan(json.loads(sys.argv[1]))), flush=True)
