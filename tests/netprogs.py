"""Programs the network tests run on the rack (unmodified socket programs), and a
helper that runs one in the background. Each server prints its port first."""

import contextlib
import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

from benchmarks.servers import stop
from fit_rpc import Op
from helpers import SPLITRACK, running_rack, small_spec

SCRATCH = "/tmp"   # programs start outside the checkout (its packages lack the C extensions)

ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 0))
    s.listen()
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        with c:
            while data := c.recv(1 << 20):
                c.sendall(data)
""")

SOCKETSERVER_ECHO = textwrap.dedent("""
    import socketserver, sys
    class Echo(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                self.wfile.write(line.upper())
    with socketserver.ThreadingTCPServer((sys.argv[1], 0), Echo) as srv:
        print(srv.server_address[1], flush=True)
        srv.serve_forever()
""")

SELECTORS_ECHO = textwrap.dedent("""
    import selectors, socket, sys
    sel = selectors.DefaultSelector()
    srv = socket.socket()
    srv.bind((sys.argv[1], 0))
    srv.listen()
    srv.setblocking(False)
    sel.register(srv, selectors.EVENT_READ)
    print(srv.getsockname()[1], flush=True)
    while True:
        for key, _ in sel.select():
            if key.fileobj is srv:
                conn, _ = srv.accept()
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
            else:
                key.fileobj.setblocking(True)
                key.fileobj.sendall(data)
                key.fileobj.setblocking(False)
""")

# Sends argv[2] MiB to whoever connects, then closes; a reader that is slow pushes back.
SOURCE = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket()
    s.bind((sys.argv[1], 0))
    s.listen()
    print(s.getsockname()[1], os.getpid(), flush=True)
    c, _ = s.accept()
    chunk = bytes(range(256)) * 4096
    for _ in range(int(sys.argv[2])):
        c.sendall(chunk)
    c.close()
""")


def _program(code: str | list[str], args: tuple[str, ...]) -> list[str]:
    """Python source run with args, or (a list) a native program's argv."""
    return code if isinstance(code, list) else [sys.executable, "-c", code, *args]


@contextlib.contextmanager
def on_rack(env: dict, code: str | list[str], *args: str, on: str = "p0",
            mode: str | None = None, name: str = "net", flags: tuple[str, ...] = ()
            ) -> Iterator[tuple[subprocess.Popen, list[int]]]:
    """Run `code` (Python source, or a native argv) on the rack in the background
    (`flags`: more `splitrack run` options); yields (process, the numbers on the first
    line it printed: its port, ...; a first word "listening" is skipped). It is stopped
    (SIGTERM, forwarded by `splitrack run`) at the end."""
    cmd = [SPLITRACK, "run", "--name", name, "--on", on, *flags]
    if mode:
        cmd += ["--mode", mode]
    proc = subprocess.Popen([*cmd, "--", *_program(code, args)], env=env,
                            cwd=SCRATCH, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        words = line.split()[1:] if line.startswith("listening ") else line.split()
        if not words or not all(w.isdigit() for w in words):
            proc.terminate()   # forwarded to the program, which holds the pipes too
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"rack program did not start: {line!r} {err}")
        yield proc, [int(w) for w in words]
    finally:
        if proc.poll() is None:
            stop(proc)
        for f in (proc.stdout, proc.stderr):
            f.close()


@contextlib.contextmanager
def full_queue(ip: str) -> Iterator[tuple[socket.socket, list[str]]]:
    """A plain listener on (ip, a free port) whose accept queue is full (backlog 0, one
    connection in it): a SYN to it is dropped, and a connect() waits for its handshake
    until the listener accepts. Yields it and its address as argv words."""
    with socket.socket() as listener:
        listener.bind((ip, 0))
        listener.listen(0)
        with socket.create_connection(listener.getsockname()):
            yield listener, [ip, str(listener.getsockname()[1])]


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """A program on the host (not the rack), to its end."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=SCRATCH)


def run_on_rack(env: dict, code: str | list[str], *args: str, on: str = "p0",
                mode: str | None = None, name: str = "net", timeout: float = 60,
                flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `code` on the rack to its end (`flags`: more `splitrack run` options)."""
    cmd = [SPLITRACK, "run", "--name", name, "--on", on, *flags]
    if mode:
        cmd += ["--mode", mode]
    return subprocess.run([*cmd, "--", *_program(code, args)], env=env,
                          cwd=SCRATCH, capture_output=True, text=True, timeout=timeout)


def environ(rack) -> dict:
    return dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)


@contextlib.contextmanager
def network_rack(name: str) -> Iterator[tuple[Any, dict]]:
    """A small rack named `name` and the environment to reach it: a module's fixture."""
    with running_rack(lambda storage: small_spec(storage, name=name)) as rack:
        yield rack, environ(rack)


def n0_network(rack) -> dict:
    """n0's network counters (STATS)."""
    with rack.endpoint() as ep:
        return ep.call_args("n0", Op.STATS)[0]["network"]

ASYNCIO_ECHO = textwrap.dedent("""
    import asyncio, sys
    async def handle(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
    async def main():
        server = await asyncio.start_server(handle, sys.argv[1], 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()
    asyncio.run(main())
""")

# Sends argv[2] bytes and exits without closing: nothing may be lost on the way out.
SEND_AND_EXIT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)   # the kernel holds little
    c.sendall(bytes(range(256)) * (int(sys.argv[2]) // 256))
    sys.exit(0)
""")

# Many small messages to a peer that does not read for a while: nothing is lost or reset.
SLEEPY_READER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    time.sleep(float(sys.argv[2]))
    total = 0
    while data := c.recv(65536):
        total += len(data)
    print(total, flush=True)
""")

# Several DMA senders at once, each sending and closing at once (socketserver's way).
DMA_BURST = textwrap.dedent("""
    import socket, sys, threading
    def one(port):
        with socket.create_connection((sys.argv[1], port)) as c:
            c.sendall(bytes(range(256)) * (300_000 // 256))
            c.shutdown(socket.SHUT_WR)
    ports = [int(p) for p in sys.argv[2:]]
    threads = [threading.Thread(target=one, args=(p,)) for p in ports]
    for t in threads: t.start()
    for t in threads: t.join()
    print("sent", flush=True)
""")

# Echoes sizes 1 B .. 1 MiB through a server at argv[1]:argv[2], checks every byte,
# half-closes, and prints what it saw: "ok <bytes> <local ip> <peer>".
ECHO_CLIENT = textwrap.dedent("""
    import random, socket, sys
    rng = random.Random(int(sys.argv[3]))
    sizes = [1, 2, 100, 4095, 4096, 65536, 200_001, 1 << 20] + [
        rng.randrange(1, 50_000) for _ in range(40)]
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60) as c:
        total = 0
        for size in sizes:
            data = rng.randbytes(size)
            c.sendall(data)
            got = bytearray()
            while len(got) < size:
                chunk = c.recv(size - len(got))
                assert chunk, "early EOF"
                got += chunk
            assert got == data, f"corrupt echo of {size} bytes"
            total += size
        c.shutdown(socket.SHUT_WR)
        assert c.recv(10) == b"", "no EOF after half-close"
        print("ok", total, c.getsockname()[0], c.getpeername()[0], flush=True)
""")


@contextlib.contextmanager
def echo_server() -> Iterator[socket.socket]:
    """A plain echo server outside the rack (127.0.0.5), one connection at a time,
    in a thread of this process; the listener it yields is closed at the end, which
    ends the thread."""
    listener = socket.create_server(("127.0.0.5", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener
    finally:
        listener.shutdown(socket.SHUT_RDWR)   # wakes the serving thread's accept()
        listener.close()


def connect(port: int, ip: str = "127.0.0.11") -> socket.socket:
    """A plain client of a rack server (TCP_NODELAY), from outside the rack."""
    sock = socket.create_connection((ip, port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(1 << 20, n - len(out)))
        assert chunk, f"EOF after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


@contextlib.contextmanager
def collecting_server(ip: str, timeout: float = 60) -> Iterator[tuple[int, bytearray]]:
    """A plain server on (ip, a free port) that takes one connection and collects
    every byte until EOF: yields (its port, the bytes so far); at the end of the
    block, waits up to `timeout` for that EOF."""
    got = bytearray()
    with socket.create_server((ip, 0)) as server:
        def receive() -> None:
            conn, _ = server.accept()
            with conn:
                while chunk := conn.recv(1 << 16):
                    got.extend(chunk)
        reader = threading.Thread(target=receive, daemon=True)
        reader.start()
        yield server.getsockname()[1], got
        reader.join(timeout=timeout)
        assert not reader.is_alive(), f"no EOF after {len(got)} bytes"
