"""Intra-rack shortcuts whose peer closes, is killed or exits (splitrack/guest/shortcuts.py):
EOF or a reset as the kernel's TCP says, first bytes before a close, selectors that see
a dead peer, a FIT sender that exits at once or waits for credit, and closed FIT
connections that leave nothing open (the shortcuts themselves: test_shortcuts.py)."""

import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from helpers import SPLITRACK
from netprogs import (
    SCRATCH,
    SEND_AND_EXIT,
    SOURCE,
    on_rack,
    run_on_rack,
)

NIC = "127.0.0.11"


RACK = "scp"   # the name of this module's rack (conftest.py: net)


@pytest.mark.parametrize("reader_on", ["p0", "p1"])
def test_killed_peer_is_eof_or_reset(net, reader_on):
    rack, env = net
    code = textwrap.dedent("""
        import socket, sys
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
        got = 0
        try:
            while data := c.recv(1 << 20):
                if got < (1 << 20) <= got + len(data):
                    print("flowing", flush=True)
                got += len(data)
            print("eof", got > 0, flush=True)
        except ConnectionResetError:
            print("reset", got > 0, flush=True)
    """)
    with on_rack(env, SOURCE, NIC, "100000", name=RACK) as (_, (port, pid)):
        reader = subprocess.Popen([SPLITRACK, "run", "--name", RACK, "--on", reader_on, "--",
                                   sys.executable, "-c", code, NIC, str(port)], env=env,
                                  cwd=SCRATCH, stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline() == "flowing\n"
            psutil.Process(pid).send_signal(signal.SIGKILL)
            out, _ = reader.communicate(timeout=60)
        finally:
            if reader.poll() is None:
                reader.terminate()   # forwarded to the program by `splitrack run`
                reader.wait(timeout=30)
            reader.stdout.close()
    assert out.split() in (["eof", "True"], ["reset", "True"])


GREETER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        c.sendall(b"HELLO")
        c.close()
""")


@pytest.mark.parametrize("client_on", ["p0", "p1"])
def test_first_bytes_closing_peers_and_select_both_ways(net, client_on):
    rack, env = net
    code = textwrap.dedent("""
        import errno, select, socket, sys
        for i in range(30):   # the greeting comes before connect() has even returned
            c = socket.socket(); c.fileno()   # threaded: an inbox thread takes pushes
            c.connect((sys.argv[1], int(sys.argv[2])))
            assert select.select([], [c], [], 5)[1] == [c], "not writable"
            got = b""
            while len(got) < 5:
                chunk = c.recv(5)
                assert chunk, f"EOF after {got!r} on connection {i}"
                got += chunk
            assert got == b"HELLO", got
            assert c.recv(1) == b""
            try:   # the peer closed: a send may go once, then EPIPE (or a reset)
                for _ in range(50):
                    c.send(b"x" * 1000)
                    select.select([c], [], [], 0.05)
                print("sends never failed", flush=True)
            except (BrokenPipeError, ConnectionResetError):
                pass
            c.close()
        print("ok", flush=True)
    """)
    with on_rack(env, GREETER, NIC, name=RACK) as (_, (port,)):
        proc = run_on_rack(env, code, NIC, str(port), on=client_on, name=RACK)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stdout + proc.stderr


@pytest.mark.parametrize("client_on", ["p0", "p1"])
def test_selectors_see_a_dead_shortcut_peer_and_shutdown_is_eof(net, client_on):
    rack, env = net
    server = textwrap.dedent("""
        import selectors, socket, sys, time
        s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        c, _ = s.accept()
        c.shutdown(socket.SHUT_RDWR)   # the peer reads EOF
        c2, _ = s.accept()
        c2.setblocking(False)
        sel = selectors.DefaultSelector(); sel.register(c2, selectors.EVENT_READ)
        t0 = time.monotonic()
        assert sel.select(10), "no event for a dead peer"
        try:
            print("eof" if c2.recv(10) == b"" else "data", flush=True)
        except ConnectionResetError:
            print("reset", flush=True)
        s.shutdown(socket.SHUT_RDWR)
        try:
            s.accept()
        except OSError as exc:
            print("accept", exc.errno, flush=True)
    """)
    client = textwrap.dedent("""
        import os, socket, sys
        a = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
        print("eof" if a.recv(10) == b"" else "data", flush=True)
        b = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
        os.kill(os.getpid(), 9)
    """)
    with on_rack(env, server, NIC, name=RACK) as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), on=client_on, name=RACK)
        assert done.stdout == "eof\n" and done.returncode == 128 + 9, done.stderr
        assert proc.stdout.readline().strip() in ("eof", "reset")
        assert proc.stdout.readline().strip() == "accept 22"


def test_a_fit_sender_that_exits_at_once_loses_nothing(net):
    rack, env = net
    reader = textwrap.dedent("""
        import socket, sys
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
        got = bytearray()
        while data := c.recv(1 << 20):
            got += data
        print(bytes(got) == bytes(range(256)) * (int(sys.argv[3]) // 256), flush=True)
    """)
    size = 3 << 20   # more than the window: the sender waits for credit, then exits
    with on_rack(env, SEND_AND_EXIT, NIC, str(size), name=RACK) as (_, (port,)):
        proc = run_on_rack(env, reader, NIC, str(port), str(size), on="p1", name=RACK)
    assert proc.returncode == 0 and proc.stdout == "True\n", proc.stderr


def test_a_fit_sender_waiting_for_credit_sees_the_peer_close(net):
    rack, env = net
    closer = textwrap.dedent("""
        import socket, sys
        s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        c, _ = s.accept()
        c.recv(1)
        c.close()   # bytes unread and more coming: the sender's window never reopens
        s.accept()   # alive, as a server is (a dead peer is another test's)
    """)
    sender = textwrap.dedent("""
        import socket, sys
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))   # no timeout
        try:
            c.sendall(b"x" * (8 << 20))
            print("sent", flush=True)
        except (BrokenPipeError, ConnectionResetError) as exc:
            print(type(exc).__name__, flush=True)
    """)
    with on_rack(env, closer, NIC, name=RACK) as (_, (port,)):
        proc = run_on_rack(env, sender, NIC, str(port), on="p1", name=RACK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("BrokenPipeError", "ConnectionResetError")


def test_closed_fit_connections_leave_nothing_open(net):
    """Each FIT connection has a channel of its own; closing either end closes it,
    whoever reads it (a waiting thread, or the inbox thread once the program selects)."""
    rack, env = net
    server = textwrap.dedent("""
        import os, selectors, socket, sys, time
        s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        def serve_one(threaded):
            c, _ = s.accept()
            sel = selectors.DefaultSelector()
            if threaded:
                sel.register(c, selectors.EVENT_READ)
            while not threaded or sel.select():
                data = c.recv(10)
                if not data:
                    break
                c.sendall(data)
            sel.close()
            c.close()
        def fds_within(most):   # closed sockets go a moment later (ZeroMQ's reaper...)
            deadline = time.monotonic() + 10
            while len(os.listdir("/proc/self/fd")) > most and time.monotonic() < deadline:
                time.sleep(0.05)
            return len(os.listdir("/proc/self/fd"))
        for threaded in (False, True):
            if threaded:
                s.fileno()   # from now on the inbox thread reads the channels
            serve_one(threaded)   # the client's process and this one are linked now
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(10):
                serve_one(threaded)
            print(threaded, "leaks" if fds_within(before) > before else "ok", flush=True)
    """)
    client = textwrap.dedent("""
        import socket, sys
        for _ in range(22):
            with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as c:
                c.sendall(b"ping")
                assert c.recv(10) == b"ping"
    """)
    with on_rack(env, server, NIC, name=RACK) as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), on="p1", name=RACK)
        assert done.returncode == 0, done.stderr
        assert [proc.stdout.readline().split() for _ in range(2)] == \
            [["False", "ok"], ["True", "ok"]]
