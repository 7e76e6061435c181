"""The architecture floor of the rack's socket path, with no splitrack code in it.

    python -m benchmarks.relay_floor IP POLL_US    prints "IP PORT", then relays

Two plain processes play nComponent and process, as a DDIO echo on the rack
does: `near` owns a kernel TCP socket on IP and forwards each received chunk
one-way through one of FIT's rings (native/fitring.c) to `far`, a
benchmarks/shm_peer.py echo, which sends it straight back through the other
ring; `near` writes it to the socket. Both wait as every FIT waiter does: they
spin up to POLL_US (the rack's poll_us; near looks at its kernel socket and
its ring in turn) and then sleep, near in one epoll on the socket and its
eventfd. One shared-memory hop each way between two processes -- and nothing
else. A rack echo can only come close to this, which is why `splitrack bench
tcp` reports it.
"""

import select
import signal
import socket
import sys
import time

from benchmarks.shm_peer import ShmPeer
from native.fitring import spin_yield


def near(ip: str, spin_s: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # so that `far` is stopped too
    with ShmPeer("echo", spin_s) as far:
        listener = socket.create_server((ip, 0))
        print(ip, listener.getsockname()[1], flush=True)
        while True:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                _relay(conn, far, spin_s)


def _relay(conn: socket.socket, far: ShmPeer, spin_s: float) -> None:
    poller = select.epoll()
    bell = far.efds[0]   # rung when far answers while we sleep
    poller.register(bell, select.EPOLLIN)
    poller.register(conn.fileno(), select.EPOLLIN)
    conn.setblocking(False)
    send, peek, consume, clock = far.tx.send, far.rx.peek, far.rx.consume, time.monotonic
    idle_since: float | None = None
    with poller:
        while True:
            busy = False
            while (msg := peek()) is not None:   # far's answers: to the socket
                conn.setblocking(True)
                conn.sendall(msg)
                conn.setblocking(False)
                consume()
                busy = True
            try:
                data = conn.recv(1 << 20)
                if not data:
                    return
                while not send(data):
                    far.tx.wait_space(len(data), bell, 0.0, 10.0)
                busy = True
            except BlockingIOError:
                pass
            if busy:
                idle_since = None
                continue
            now = clock()
            idle_since = idle_since or now
            if now - idle_since < spin_s and spin_yield():
                continue
            if far.waitset.arm():
                poller.poll()
                far.waitset.disarm()
            idle_since = None


if __name__ == "__main__":
    near(sys.argv[1], int(sys.argv[2]) / 1e6 if len(sys.argv) > 2 else 0.0)
