"""The server of `splitrack bench tcp`, one program for every mode.

    python -m benchmarks.tcp_server IP     binds (IP, 0) -- IP "nic": the NIC GNM
                                           gives this process on the rack -- prints
                                           "IP PORT", then serves connections one at a time

Run as a plain process it is the "Linux" baseline; run with `splitrack run` its
`socket` is the rack's (a bsdSocketStub), and nothing else differs. What a
connection gets depends on its first byte (the client: tcp_client.py):

    b"E"              echo: answers b"E", then echoes everything (TCP_NODELAY)
    b"T" + <I> size   the server send()s `size` bytes at a time until the client
                      goes away (it measures for as long as it likes, then closes)
    b"R"              the server receives until EOF, then answers b"K" + <Q> the
                      number of bytes it received
    EOF               nothing (a connect() measurement)

The relay floor (relay_floor.py) echoes the b"E" back too, so echo clients
need not know which they talk to.
"""

import socket
import struct
import sys

TX = struct.Struct("<I")    # T: the size of each send()
RX = struct.Struct("<Q")    # R's answer: bytes received


def serve(ip: str) -> None:
    if ip == "nic":   # on the rack: the NIC GNM allocated to this process
        from splitrack.guest.runtime import runtime
        ip = runtime().nic()[0]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ip, 0))
    listener.listen(128)
    print(ip, listener.getsockname()[1], flush=True)
    view = memoryview(bytearray(1 << 20))
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                _serve_one(conn, view)
            except OSError:
                pass   # that client's problem (a reset, a bad request): serve the next


def _serve_one(conn: socket.socket, view: memoryview) -> None:
    cmd = conn.recv(1)
    if cmd == b"E":
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(b"E")
        while n := conn.recv_into(view):
            conn.sendall(view[:n])
    elif cmd == b"T":
        chunk = view[:TX.unpack(recv_exactly(conn, TX.size))[0]]
        while True:   # until the client closes: EPIPE or ECONNRESET end it
            conn.sendall(chunk)
    elif cmd == b"R":
        got = 0
        while n := conn.recv_into(view):
            got += n
        conn.sendall(b"K" + RX.pack(got))


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    """n bytes from conn (ConnectionError if it ends first); the client uses it too."""
    out = b""
    while len(out) < n:
        more = conn.recv(n - len(out))
        if not more:
            raise ConnectionError(f"the peer closed after {len(out)} of {n} bytes")
        out += more
    return out


if __name__ == "__main__":
    try:
        serve(sys.argv[1])
    except (KeyboardInterrupt, BrokenPipeError):
        pass
