"""A job's processes on a ring of TCP sockets: the two workloads of `bench placement`.

    python -m benchmarks.placement_ring network|cpu --ip IP --port-base P
                                        [--laps L] [--bytes B] [--iterations I]

Every process of one job runs it (`splitrack job submit --procs N`); the rack
manager gives each SPLITRACK_RANK (i), SPLITRACK_PROCS (N) and SPLITRACK_PLACED
(every rank's pComponent, "p0,p0,p1,..."). Rank i listens on IP:P+i, IP a NIC
of the job's slice, and connects to rank i+1's (mod N): the command line and
its own rank tell each where its neighbour listens, no rendezvous needed.

So that every connection takes the intra-rack shortcut (a pipe between two
processes of one pComponent, a FIT channel between two pComponents:
splitrack/guest/shortcuts.py), a listener is in accept(), reading its inbox, when
its left neighbour connects: rank 0 connects, then accepts; every other rank
accepts, then connects. A connect that finds nobody listening yet
(ECONNREFUSED) is tried again every RETRY_S, for at most CONNECT_WAIT_S.

Then rank 0 sends a token around the ring once (a barrier: every rank is
connected and waiting), and starts its clock (time.monotonic):
- network: L laps of a B-byte message around the ring; each rank forwards
  what it receives, whole, before it reads the next.
- cpu: the start token goes round; each rank forwards it and computes
  placement_cpu.work(I). Then an end token goes round, each rank forwarding it
  once its own work is done: the messages are 2N, the work N x I.
When the last token is back, rank 0 stops its clock and prints one JSON line:
{"workload", "procs", "placed", "seconds", "laps", "bytes", "iterations"}.
Exit 0; a ring that breaks (a peer gone, RING_TIMEOUT_S without a message)
is exit 1 with one line on stderr.
"""

import argparse
import errno
import json
import os
import socket
import sys
import time

from benchmarks.placement_cpu import work

RETRY_S = 0.02          # between two connects to a neighbour not listening yet
CONNECT_WAIT_S = 30.0   # a neighbour not listening after this: the job fails
RING_TIMEOUT_S = 30.0   # no message for this long: the ring is broken
TOKEN = b"t"


def _listen(ip: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ip, port))
    sock.listen(1)
    return sock


def _connect(ip: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect((ip, port))
            return sock
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > deadline:
                raise OSError(errno.ECONNREFUSED, f"nobody listens on {ip}:{port} after "
                                                  f"{CONNECT_WAIT_S:.0f} s") from None
            time.sleep(RETRY_S)


def ring(ip: str, base: int, rank: int, procs: int) -> tuple[socket.socket, socket.socket]:
    """(left, right): the sockets from rank-1 and to rank+1."""
    listener = _listen(ip, base + rank)
    right_port = base + (rank + 1) % procs
    if rank == 0:
        right = _connect(ip, right_port)
        left, _ = listener.accept()
    else:
        left, _ = listener.accept()
        right = _connect(ip, right_port)
    listener.close()
    for sock in (left, right):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(RING_TIMEOUT_S)
    return left, right


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionResetError(errno.ECONNRESET, "the ring's left neighbour closed")
        got += n


def lap(left: socket.socket, right: socket.socket, rank: int, buf: bytearray) -> None:
    """One message around the ring: rank 0 sends it and takes it back, the others
    pass it on."""
    view = memoryview(buf)
    if rank == 0:
        right.sendall(view)
        recv_exactly(left, view)
    else:
        recv_exactly(left, view)
        right.sendall(view)


def run(args: argparse.Namespace, rank: int, procs: int) -> float | None:
    """The workload; rank 0's seconds from the barrier to the last token's return."""
    left, right = ring(args.ip, args.port_base, rank, procs)
    token = bytearray(TOKEN)
    lap(left, right, rank, token)   # the barrier
    start = time.monotonic()
    if args.workload == "network":
        message = bytearray(args.bytes)
        for _ in range(args.laps):
            lap(left, right, rank, message)
    else:
        lap(left, right, rank, token)   # start: each passes it on, then computes
        work(args.iterations)
        lap(left, right, rank, token)   # end: passed on only by a rank that is done
    seconds = time.monotonic() - start
    left.close()
    right.close()
    return seconds if rank == 0 else None


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.placement_ring")
    p.add_argument("workload", choices=("network", "cpu"))
    p.add_argument("--ip", required=True, help="the NIC every rank listens on")
    p.add_argument("--port-base", type=int, required=True, help="rank i listens on this + i")
    p.add_argument("--laps", type=int, default=200, help="network: laps of the message")
    p.add_argument("--bytes", type=int, default=1024, help="network: the message's size")
    p.add_argument("--iterations", type=int, default=2_000_000,
                   help="cpu: placement_cpu.work's iterations, each rank")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    rank, procs = int(os.environ["SPLITRACK_RANK"]), int(os.environ["SPLITRACK_PROCS"])
    if procs < 2:
        print("placement_ring: a ring needs at least 2 processes", file=sys.stderr)
        return 2
    try:
        seconds = run(args, rank, procs)
    except OSError as exc:
        print(f"placement_ring: rank {rank}: {exc}", file=sys.stderr)
        return 1
    if seconds is not None:
        placed = os.environ.get("SPLITRACK_PLACED", "").split(",")
        print(json.dumps({"workload": args.workload, "procs": procs, "placed": placed,
                          "seconds": round(seconds, 6), "laps": args.laps,
                          "bytes": args.bytes, "iterations": args.iterations}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
