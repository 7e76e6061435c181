"""Errors and ends on the network path: a rack program's socket errors carry Linux's
errnos; a connect the kernel cannot finish at once times out, or completes later;
a peer's reset is ECONNRESET on the rack, and afterwards sends fail and closed
sockets are EBADF; a program that only sends hears of a reset before its window
is spent; a killed program's sockets close, and a killed DMA program leaves the
nComponent serving (monitors/nmonitor.py, splitrack/guest/stub.py)."""

import select
import signal
import socket
import textwrap
import threading
import time

import psutil
import pytest

from helpers import wait_until
from netprogs import (
    ECHO_SERVER,
    SOURCE,
    connect,
    n0_network,
    on_rack,
    recv_exactly,
    run_on_rack,
)
from splitrack.params import SOCKET_SEND_BUFFER_BYTES

NIC = "127.0.0.11"


RACK = "net"   # the name of this module's rack (conftest.py: net)


def test_socket_errors_carry_linux_errnos(net):
    rack, env = net
    code = textwrap.dedent("""
        import errno, socket
        def attempt(name, fn):
            try:
                fn()
                print(name, "ok")
            except OSError as exc:
                print(name, type(exc).__name__, exc.errno)
        a = socket.socket(); a.bind(("127.0.0.11", 0)); a.listen()
        port = a.getsockname()[1]
        closed = socket.socket(); closed.bind(("127.0.0.11", 0)); dead = closed.getsockname()[1]
        closed.close()
        attempt("refused", lambda: socket.socket().connect(("127.0.0.11", dead)))
        attempt("inuse", lambda: socket.socket().bind(("127.0.0.11", port)))
        attempt("notavail", lambda: socket.socket().bind(("10.1.2.3", 0)))
        attempt("notconn", lambda: socket.socket().recv(1))
        attempt("notconn_send", lambda: socket.socket().send(b"x"))
        a.settimeout(0.2)
        attempt("timeout", a.accept)
        a.setblocking(False)
        attempt("wouldblock", a.accept)
        print("connect_ex", socket.socket().connect_ex(("127.0.0.11", dead)))
        print("sockopt", a.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) >= 0,
              a.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
        attempt("badopt", lambda: a.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 1))
    """)
    proc = run_on_rack(env, code)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["refused"] == "ConnectionRefusedError 111"
    assert lines["inuse"] == "OSError 98"
    assert lines["notavail"] == "OSError 99"
    assert lines["notconn"] == "OSError 107"
    assert lines["notconn_send"] == "BrokenPipeError 32"   # as Linux's TCP
    assert lines["timeout"] == "TimeoutError None"
    assert lines["wouldblock"] == "BlockingIOError 11"
    assert lines["connect_ex"] == "111"
    assert lines["sockopt"] == "True 0"
    assert lines["badopt"] == "OSError 92"


def test_a_connect_the_kernel_cannot_finish_at_once_times_out_or_completes_later(net):
    """A full accept queue drops SYNs: the nComponent's connect goes on past N_CONNECT's
    answer ({pending}); STUB_CONNECTED ends it, with ETIMEDOUT or once the SYN's
    retransmission gets in (Linux: after 1 s)."""
    rack, env = net
    outside = socket.socket()
    outside.bind(("127.0.0.5", 0))
    outside.listen(0)                                        # one queued connection fills it
    filler = socket.create_connection(outside.getsockname())
    dropped = listen_overflows()
    code = textwrap.dedent("""
        import socket, sys, time
        addr = ("127.0.0.5", int(sys.argv[1]))
        print(0, flush=True)   # on_rack's first line
        s = socket.socket(); s.settimeout(0.3)
        try:
            s.connect(addr)
            print("connected?!", flush=True)
        except TimeoutError as exc:
            print("timeout", exc, flush=True)
        t0 = time.monotonic()
        with socket.create_connection(addr, timeout=20) as c:
            print("connected after", round(time.monotonic() - t0, 1), flush=True)
            c.sendall(b"late")
    """)
    with outside, filler, on_rack(env, code, str(outside.getsockname()[1])) as (proc, _):
        first = proc.stdout.readline().strip()
        wait_until(lambda: listen_overflows() >= dropped + 2)   # each connect's first SYN
        outside.accept()[0].close()   # room for one: the retransmitted SYN gets in
        outside.settimeout(20)
        conn, _ = outside.accept()
        with conn:
            assert recv_exactly(conn, 4) == b"late"
        second = proc.stdout.readline().split()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert first == "timeout timed out"
    assert second[:2] == ["connected", "after"] and float(second[2]) >= 0.5


def listen_overflows() -> int:
    """SYNs the kernel dropped because an accept queue was full (TcpExt ListenOverflows)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            counters = zip(names.split()[1:], map(int, values.split()[1:]), strict=True)
            return dict(counters)["ListenOverflows"]
    raise AssertionError("no TcpExt in /proc/net/netstat")


def test_peer_reset_is_connection_reset_on_the_rack(net):
    rack, env = net
    code = textwrap.dedent("""
        import socket
        s = socket.socket(); s.bind(("127.0.0.11", 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        c, _ = s.accept()
        assert c.recv(5) == b"hello"
        try:
            while c.recv(100):
                pass
            print("eof")
        except ConnectionResetError as exc:
            print("reset", exc.errno)
    """)
    with on_rack(env, code) as (proc, (port,)):
        sock = connect(port)
        sock.sendall(b"hello")
        time.sleep(0.2)   # let "hello" be read first, so the reset comes after it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        sock.close()      # SO_LINGER 0: the kernel sends RST
        assert proc.stdout.readline().strip() == "reset 104"


def test_killed_program_closes_its_sockets(net):
    rack, env = net
    with on_rack(env, SOURCE, NIC, "100000") as (_, (port, pid)), connect(port) as sock:
        recv_exactly(sock, 1 << 20)
        psutil.Process(pid).send_signal(signal.SIGKILL)
        sock.settimeout(10)
        with pytest.raises((ConnectionResetError, AssertionError)):
            while True:   # the rest in flight, then EOF (AssertionError) or reset
                recv_exactly(sock, 1 << 20)
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)
    assert n0_network(rack)["dram_buffers_used"] == 0


def test_killed_dma_program_leaves_the_ncomponent_serving(net):
    rack, env = net
    with on_rack(env, SOURCE, NIC, "100000", mode="dma") as (_, (port, pid)), \
            connect(port) as sock:
        recv_exactly(sock, 1 << 20)
        psutil.Process(pid).send_signal(signal.SIGKILL)
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)
    with on_rack(env, ECHO_SERVER, NIC, mode="dma") as (_, (port,)), connect(port) as sock:
        sock.sendall(b"still here")
        assert recv_exactly(sock, 10) == b"still here"


def test_after_a_reset_sends_fail_and_closed_sockets_are_ebadf(net):
    rack, env = net
    code = textwrap.dedent("""
        import asyncio, socket, sys
        s = socket.socket(); s.bind(("127.0.0.11", 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        c, _ = s.accept()
        try:
            c.recv(10)
        except ConnectionResetError:
            pass
        for attempt in (lambda: c.send(b"x"), lambda: c.recv(1)):
            try:
                print(repr(attempt()), flush=True)
            except OSError as exc:
                print(type(exc).__name__, exc.errno, flush=True)
        c.close()
        try:
            c.send(b"x")
        except OSError as exc:
            print("closed", exc.errno, flush=True)
        async def client():   # asyncio's client side on a rack socket
            r, w = await asyncio.open_connection("127.0.0.5", int(sys.argv[1]))
            w.write(b"ping")
            await w.drain()
            print((await r.readexactly(4)).decode(), flush=True)
            w.close()
        asyncio.run(client())
    """)
    outside = socket.create_server(("127.0.0.5", 0))

    def pong():
        conn, _ = outside.accept()
        with conn:
            conn.sendall(recv_exactly(conn, 4).replace(b"i", b"o"))

    threading.Thread(target=pong, daemon=True).start()
    with on_rack(env, code, str(outside.getsockname()[1])) as (proc, (port,)):
        sock = connect(port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        sock.close()
        lines = []
        for _ in range(4):
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            assert ready, f"rack program stuck after {lines}"
            lines.append(proc.stdout.readline().strip())
    outside.close()
    assert lines == ["BrokenPipeError 32", "b''", "closed 9", "pong"]


# Sends 128 B at a time, unpacked (each send is a flush and an N_SEND_DMA in DMA mode),
# until a send fails; then prints how many bytes its sends took.
ONLY_SENDS = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    sent = 0
    try:
        while True:
            c.sendall(b"x" * 128)
            sent += 128
    except OSError as exc:
        print(type(exc).__name__, sent, flush=True)
""")


def test_a_program_that_only_sends_hears_of_a_reset_before_its_window_is_spent(net):
    """It never waits on its socket (its window never fills: n0 pulls as it goes), yet
    the reset its skeleton sees reaches it in about STUB_SEND_PUMP_S: its sends fail
    soon after the peer is gone, as a Linux sender's do after the RST, instead of
    filling its whole send ring (1 MiB) into a dead connection first."""
    rack, env = net
    with on_rack(env, ONLY_SENDS, NIC, mode="dma", flags=("--no-packing",)) as \
            (proc, (port,)):
        sock = connect(port)
        received = len(recv_exactly(sock, 16 * 1024))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        sock.close()   # a reset: what n0 sends next is refused
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the sender never heard of the reset"
        kind, sent = proc.stdout.readline().split()
    assert kind in ("ConnectionResetError", "BrokenPipeError")
    assert int(sent) - received < SOCKET_SEND_BUFFER_BYTES // 4, (sent, received)
