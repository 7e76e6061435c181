"""Intra-rack shortcuts (splitrack/guest/shortcuts.py): TCP between two programs of the
rack skips the nComponent -- a pipe on one pComponent, FIT between two -- and
neither program can tell, but by the counters."""

import signal
import socket
import subprocess
import sys
import textwrap
import threading

import psutil
import pytest

from helpers import SPLITRACK, running_rack, small_spec, wait_until
from netprogs import (
    ASYNCIO_ECHO,
    ECHO_CLIENT,
    ECHO_SERVER,
    SCRATCH,
    SELECTORS_ECHO,
    SEND_AND_EXIT,
    SOCKETSERVER_ECHO,
    SOURCE,
    environ,
    n0_network,
    network_rack,
    on_rack,
    run_on_rack,
)

NIC = "127.0.0.11"


@pytest.fixture(scope="module")
def net():
    with network_rack("sc") as rack_env:
        yield rack_env


@pytest.mark.parametrize("client_on, kind", [("p0", "pipe"), ("p1", "fit")])
def test_echo_through_a_shortcut_every_size(net, client_on, kind):
    rack, env = net
    with on_rack(env, ECHO_SERVER, NIC, name="sc") as (_, (port,)):
        before = n0_network(rack)
        proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "7", on=client_on, name="sc")
        assert proc.returncode == 0, proc.stderr
        ok, total, local_ip, peer_ip = proc.stdout.split()
        assert ok == "ok" and int(total) > (1 << 20)
        assert local_ip in ("127.0.0.11", "127.0.0.12") and peer_ip == NIC
        after = n0_network(rack)
    assert after[f"shortcuts_{kind}"] == before[f"shortcuts_{kind}"] + 1
    assert after["accepted"] == before["accepted"]   # the nComponent saw no connection


def test_socketserver_serves_pipe_and_fit_clients_at_once(net):
    rack, env = net
    code = textwrap.dedent("""
        import socket, sys, threading
        def one(tag):
            with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as c:
                f = c.makefile("rwb")
                for i in range(200):
                    f.write(f"{tag} {i}\\n".encode()); f.flush()
                    assert f.readline() == f"{tag} {i}\\n".upper().encode()
        threads = [threading.Thread(target=one, args=(t,)) for t in ("a", "b")]
        for t in threads: t.start()
        for t in threads: t.join()
        print("done", flush=True)
    """)
    with on_rack(env, SOCKETSERVER_ECHO, NIC, name="sc") as (_, (port,)):
        procs = [run_on_rack(env, code, NIC, str(port), on=p, name="sc") for p in ("p0", "p1")]
    for proc in procs:
        assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr


def test_no_shortcuts_takes_the_ordinary_path(net):
    rack, env = net
    with on_rack(env, ECHO_SERVER, NIC, name="sc") as (_, (port,)):
        before = n0_network(rack)
        proc = subprocess.run([SPLITRACK, "run", "--name", "sc", "--on", "p0", "--no-shortcuts",
                               "--", sys.executable, "-c", ECHO_CLIENT, NIC, str(port), "3"],
                              env=env, cwd=SCRATCH, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        after = n0_network(rack)
    assert after["shortcuts_pipe"] == before["shortcuts_pipe"]
    assert after["accepted"] == before["accepted"] + 1


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
    with on_rack(env, SOURCE, NIC, "100000", name="sc") as (_, (port, pid)):
        reader = subprocess.Popen([SPLITRACK, "run", "--name", "sc", "--on", reader_on, "--",
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


def test_a_destination_outside_the_rack_is_never_shortcut(net):
    rack, env = net
    outside = socket.create_server(("127.0.0.5", 0))

    def echo_once():
        conn, _ = outside.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=echo_once, daemon=True).start()
    before = n0_network(rack)
    proc = run_on_rack(env, ECHO_CLIENT, "127.0.0.5", str(outside.getsockname()[1]), "5",
                       name="sc")
    outside.close()
    assert proc.returncode == 0, proc.stderr
    after = n0_network(rack)
    assert (after["shortcuts_pipe"], after["shortcuts_fit"]) == \
        (before["shortcuts_pipe"], before["shortcuts_fit"])
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)


@pytest.mark.parametrize("client_on", ["p0", "p1"])
def test_selectors_and_asyncio_servers_see_shortcut_connections(net, client_on):
    rack, env = net
    for server in (SELECTORS_ECHO, ASYNCIO_ECHO):
        with on_rack(env, server, NIC, name="sc") as (_, (port,)):
            proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "11", on=client_on, name="sc")
        assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stderr


@pytest.mark.parametrize("client_on", ["p0", "p1"])
def test_timeouts_and_nonblocking_on_shortcuts(net, client_on):
    rack, env = net
    code = textwrap.dedent("""
        import socket, sys, time
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.2)
        try:
            c.recv(10)
            print("no timeout")
        except TimeoutError:
            print("timeout")
        c.setblocking(False)
        try:
            c.recv(10)
        except BlockingIOError as exc:
            print("wouldblock", exc.errno)
        c.setblocking(True)
        c.sendall(b"abc")
        print(c.recv(3).decode(), flush=True)
    """)
    with on_rack(env, ECHO_SERVER, NIC, name="sc") as (_, (port,)):
        proc = run_on_rack(env, code, NIC, str(port), on=client_on, name="sc")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["timeout", "wouldblock 11", "abc"]


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
    with on_rack(env, GREETER, NIC, name="sc") as (_, (port,)):
        proc = run_on_rack(env, code, NIC, str(port), on=client_on, name="sc")
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stdout + proc.stderr


def test_a_listener_that_does_not_read_its_inbox_costs_no_more_than_the_timeout(net):
    rack, env = net
    code = textwrap.dedent("""
        import socket, sys, time
        s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
        print(s.getsockname()[1], flush=True)
        time.sleep(3)   # inline, nobody reads this process's inbox meanwhile
        s.settimeout(1.0)
        n = 0
        try:
            while True:
                s.accept(); n += 1
        except TimeoutError:
            print("accepted", n, flush=True)
    """)
    client = textwrap.dedent("""
        import socket, sys, time
        t0 = time.monotonic()
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5)
        print(round(time.monotonic() - t0, 1), flush=True)
    """)
    with on_rack(env, code, NIC, name="sc") as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), name="sc")
        assert done.returncode == 0, done.stderr
        assert float(done.stdout) < 2.0   # the shortcut gave up; the kernel's backlog took it
        assert proc.stdout.readline().strip() == "accepted 1"   # and no ghost connection


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
    with on_rack(env, server, NIC, name="sc") as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), on=client_on, name="sc")
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
    with on_rack(env, SEND_AND_EXIT, NIC, str(size), name="sc") as (_, (port,)):
        proc = run_on_rack(env, reader, NIC, str(port), str(size), on="p1", name="sc")
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
    with on_rack(env, closer, NIC, name="sc") as (_, (port,)):
        proc = run_on_rack(env, sender, NIC, str(port), on="p1", name="sc")
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
    with on_rack(env, server, NIC, name="sc") as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), on="p1", name="sc")
        assert done.returncode == 0, done.stderr
        assert [proc.stdout.readline().split() for _ in range(2)] == \
            [["False", "ok"], ["True", "ok"]]


def test_a_fit_shortcut_over_tcp_endpoints():
    with running_rack(lambda storage: small_spec(storage, name="sctcp", transport="zmq",
                                                 endpoints="tcp")) \
            as rack:
        env = environ(rack)
        with on_rack(env, ECHO_SERVER, NIC, name="sctcp") as (_, (port,)):
            before = n0_network(rack)
            proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "3", on="p1", name="sctcp")
            assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stderr
            after = n0_network(rack)
    assert after["shortcuts_fit"] == before["shortcuts_fit"] + 1


STREAM_CLIENT = textwrap.dedent("""
    import hashlib, random, socket, sys, threading
    n = int(sys.argv[3])
    data = random.Random(5).randbytes(n)
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=120)
    def send():
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
    sender = threading.Thread(target=send)
    sender.start()
    got, total = hashlib.sha256(), 0
    while chunk := c.recv(1 << 20):
        got.update(chunk)
        total += len(chunk)
    sender.join()
    print("ok" if total == n and got.digest() == hashlib.sha256(data).digest() else
          f"corrupt: {total} of {n} bytes")
""")


@pytest.mark.parametrize("path", ["ddio", "dma", "pipe", "fit"])
def test_a_16_mib_stream_both_ways_arrives_whole_on_every_path(net, path):
    rack, env = net
    size = str(16 << 20)
    mode = path if path in ("ddio", "dma") else None
    counter = "accepted" if mode else f"shortcuts_{path}"   # which path the bytes took
    before = n0_network(rack)[counter]
    with on_rack(env, ECHO_SERVER, NIC, name="sc", mode=mode) as (_, (port,)):
        if mode:   # the client outside the rack: the bytes cross n0 both ways
            proc = subprocess.run([sys.executable, "-c", STREAM_CLIENT, NIC, str(port), size],
                                  cwd=SCRATCH, capture_output=True, text=True, timeout=300)
        else:      # a program of the rack: a pipe on p0, FIT from p1
            proc = run_on_rack(env, STREAM_CLIENT, NIC, str(port), size, name="sc",
                               on="p0" if path == "pipe" else "p1", timeout=300)
    assert proc.stdout == "ok\n", proc.stdout + proc.stderr
    assert n0_network(rack)[counter] == before + 1


def test_a_late_shortcut_answer_is_not_taken_for_the_next_connects(net):
    """A listener's answer that comes after its connector gave up (and went the
    ordinary way) names the attempt it answers: the stub drops it, so it cannot
    pass for the answer to the ordinary connect under way."""
    rack, env = net
    program = textwrap.dedent("""
        import socket
        from fit_rpc import Op, codec
        from fit_rpc.netpath import SK
        s = socket.socket()
        late = memoryview(SK.pack(s._id) + codec.encode({"errno": 111, "until": 12.5}))
        s._pushed(Op.STUB_CONNECTED, late)   # no shortcut connect under way: dropped
        print(s._connected)
        s._attempt = 12.5                    # the attempt it answers: taken
        s._pushed(Op.STUB_CONNECTED, late)
        print(s._connected["errno"])
    """)
    done = run_on_rack(env, program, name="sc")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "111"]
