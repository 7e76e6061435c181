"""The echo server of `splitrack bench tcp`, one program for every mode.

    python -m benchmarks.echo_server IP    binds (IP, 0), prints the port, then
                                           echoes every connection, one at a time

Run as a plain process it is the "Linux" baseline; run with `splitrack run` its
`socket` is the rack's (a bsdSocketStub), and nothing else differs.
"""

import socket
import sys


def serve(ip: str) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((ip, 0))
    listener.listen()
    print(listener.getsockname()[1], flush=True)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while n := conn.recv_into(view):
                conn.sendall(view[:n])


if __name__ == "__main__":
    serve(sys.argv[1])
