"""The architecture floor of the rack's socket path, with no splitrack code in it.

    python -m benchmarks.relay_floor DIR IP    prints "IP PORT", then relays

Two plain processes play nComponent and process: `near` owns a kernel TCP
socket on IP and, with one epoll (kernel socket + ZeroMQ's ZMQ_FD), forwards
each received chunk one-way over pyzmq to `far`, which sends it straight back
one-way; `near` writes it to the socket. One ZeroMQ hop each way between two
processes, as a DDIO echo makes -- and nothing else. A rack echo can only
come close to this, which is why `splitrack bench tcp` reports it.
"""

import select
import signal
import socket
import subprocess
import sys

import zmq


def near(run_dir: str, ip: str) -> None:
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)
    inbox.bind(f"ipc://{run_dir}/floor-near.sock")
    out = ctx.socket(zmq.DEALER)
    out.connect(f"ipc://{run_dir}/floor-far.sock")
    far = subprocess.Popen([sys.executable, "-m", "benchmarks.relay_floor", "--far", run_dir])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # so that `far` is stopped too
    listener = socket.create_server((ip, 0))
    print(ip, listener.getsockname()[1], flush=True)
    try:
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _relay(conn, inbox, out)
    finally:
        far.kill()
        far.wait()


def _relay(conn: socket.socket, inbox: zmq.Socket, out: zmq.Socket) -> None:
    poller = select.epoll()
    zfd = inbox.getsockopt(zmq.FD)
    poller.register(zfd, select.EPOLLIN)
    poller.register(conn.fileno(), select.EPOLLIN)
    with conn, poller:
        while True:
            while inbox.getsockopt(zmq.EVENTS) & 1:
                conn.sendall(inbox.recv_multipart()[1])
            for fd, _ in poller.poll():
                if fd == conn.fileno():
                    data = conn.recv(1 << 20)
                    if not data:
                        return
                    out.send(data)


def far(run_dir: str) -> None:
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)
    inbox.bind(f"ipc://{run_dir}/floor-far.sock")
    out = ctx.socket(zmq.DEALER)
    out.connect(f"ipc://{run_dir}/floor-near.sock")
    while True:
        out.send(inbox.recv_multipart()[1])


if __name__ == "__main__":
    if sys.argv[1] == "--far":
        far(sys.argv[2])
    else:
        near(sys.argv[1], sys.argv[2])
