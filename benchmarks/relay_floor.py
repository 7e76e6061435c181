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

A connection that starts with b"T" + <I> size (tcp_client.tx; size 1 to
shm_peer.STREAM_MAX) measures the floor of the rack's send path instead: a
third plain process (shm_peer's stream role) copies size bytes at a time
into a ring, packed into messages as the stub packs its held sends; near
copies what waits in the ring into its own buffer (up to BATCH_BYTES, an
nComponent's DRAM ring) and writes that to the socket in one call. The same
three copies as a rack DDIO send (into shared memory, into the nComponent's
DRAM, into the kernel) and the same extra process, with no splitrack code.
A request that is not one ends its connection.
"""

import select
import signal
import socket
import sys
import time

from benchmarks.shm_peer import STREAM, STREAM_MAX, ShmPeer
from native.fitring import spin_yield
from splitrack.params import NCOMPONENT_RING_BYTES

BATCH_BYTES = NCOMPONENT_RING_BYTES   # what near writes to the socket at most at once
REQUEST_TIMEOUT_S = 5.0               # a stream request that has not come by then: dropped


def near(ip: str, spin_s: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # so that `far` is stopped too
    with ShmPeer("echo", spin_s) as far, ShmPeer("stream", spin_s) as source:
        listener = socket.create_server((ip, 0))
        print(ip, listener.getsockname()[1], flush=True)
        while True:
            conn, _ = listener.accept()
            with conn:
                try:
                    if conn.recv(1, socket.MSG_PEEK) == b"T":
                        _stream(conn, source, spin_s)
                    else:
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        _relay(conn, far, spin_s)
                except OSError:   # that client's trouble (a reset, a stalled request)
                    pass


def _stream(conn: socket.socket, source: ShmPeer, spin_s: float) -> None:
    """The source's messages to the socket until the client goes away."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    request = conn.recv(1 + STREAM.size, socket.MSG_WAITALL)[1:]
    conn.settimeout(None)
    if len(request) != STREAM.size or not 0 < STREAM.unpack(request)[0] <= STREAM_MAX:
        return
    source.tx.send(request)
    peek, consume = source.rx.peek, source.rx.consume
    buf = memoryview(bytearray(BATCH_BYTES))
    try:
        while True:
            n = 0
            while (msg := peek()) is not None and n + len(msg) <= BATCH_BYTES:
                buf[n:n + len(msg)] = msg
                n += len(msg)
                consume()
            if n:
                conn.sendall(buf[:n])
            else:
                source.wait(spin_s)
    except OSError:   # the client closed: it has measured
        pass
    source.tx.send(b"stop")
    while True:   # what the source sent before it saw the stop, up to its empty answer
        msg = peek()
        if msg is None:
            source.wait(spin_s)
            continue
        consume()
        if not len(msg):
            return


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
            if now - idle_since < spin_s and spin_yield(now - idle_since):
                continue
            if far.waitset.arm():
                poller.poll()
                far.waitset.disarm()
            idle_since = None


if __name__ == "__main__":
    near(sys.argv[1], int(sys.argv[2]) / 1e6 if len(sys.argv) > 2 else 0.0)
