"""Intra-rack shortcuts (splitrack/guest/shortcuts.py): TCP between two programs of the
rack skips the nComponent -- a pipe on one pComponent, FIT between two -- and
neither program can tell, but by the counters (peers that close, die or exit:
test_shortcut_peers.py)."""

import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from helpers import SPLITRACK, running_rack, small_spec, wait_until
from netprogs import (
    ASYNCIO_ECHO,
    ECHO_CLIENT,
    ECHO_SERVER,
    SCRATCH,
    SELECTORS_ECHO,
    SOCKETSERVER_ECHO,
    environ,
    n0_network,
    on_rack,
    run_on_rack,
)
from splitrack.params import SHORTCUT_FIT_WINDOW_BYTES

NIC = "127.0.0.11"


RACK = "sc"   # the name of this module's rack (conftest.py: net)


@pytest.mark.parametrize("client_on, kind", [("p0", "pipe"), ("p1", "fit")])
def test_echo_through_a_shortcut_every_size(net, client_on, kind):
    rack, env = net
    with on_rack(env, ECHO_SERVER, NIC, name=RACK) as (_, (port,)):
        before = n0_network(rack)
        proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "7", on=client_on, name=RACK)
        assert proc.returncode == 0, proc.stderr
        ok, total, local_ip, peer_ip = proc.stdout.split()
        assert ok == "ok" and int(total) > (1 << 20)
        assert local_ip in ("127.0.0.11", "127.0.0.12") and peer_ip == NIC
        after = n0_network(rack)
    assert after[f"shortcuts_{kind}"] == before[f"shortcuts_{kind}"] + 1
    assert after["accepted"] == before["accepted"]   # the nComponent saw no connection


PIECES_SERVER = textwrap.dedent("""
    import os, socket, sys, time
    srv = socket.create_server((sys.argv[1], 0))
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    sent = f"pieces-sent-{srv.getsockname()[1]}"   # the client's word that all 50 are out
    deadline = time.monotonic() + 30
    while not os.path.exists(sent) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.unlink(sent)
    peeked = conn.recv(1 << 16, socket.MSG_PEEK)
    got = conn.recv(1 << 16)
    print(len(peeked), len(got), got == peeked == b"".join(
        bytes([i]) * 100 for i in range(50)), flush=True)
    conn.sendall(b"ok")
""")


@pytest.mark.parametrize("client_on", ["p0", "p1"])
def test_a_recv_takes_all_the_pieces_that_wait(net, client_on):
    """As from a kernel's stream: the 50 sends that wait come in one recv (and one
    MSG_PEEK), not one send at a time -- a FIT shortcut's messages too."""
    rack, env = net
    client = textwrap.dedent("""
        import socket, sys
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        for i in range(50):
            c.sendall(bytes([i]) * 100)
        open(f"pieces-sent-{sys.argv[2]}", "w").close()   # (cwd: both programs')
        print(c.recv(2).decode(), flush=True)
    """)
    with on_rack(env, PIECES_SERVER, NIC, name=RACK) as (server, (port,)):
        proc = run_on_rack(env, client, NIC, str(port), on=client_on, name=RACK)
        assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr
        assert server.stdout.readline().split() == ["5000", "5000", "True"]


MIXED_READER = textwrap.dedent("""
    import hashlib, socket, sys
    srv = socket.create_server((sys.argv[1], 0))
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    total, digest, k = int(sys.argv[2]), hashlib.sha256(), 0
    got, buf = 0, bytearray(1 << 17)
    while got < total:   # reads smaller and larger than the sends, both kinds of recv
        want = (1, 7, 4096, 1 << 17, 3000)[k % 5]
        if k % 2:
            n = conn.recv_into(memoryview(buf)[:want])
            digest.update(buf[:n])
        else:
            n = len(data := conn.recv(want))
            digest.update(data)
        assert n, "early EOF"
        got, k = got + n, k + 1
    conn.settimeout(0.3)
    try:
        conn.recv(10)
        timed_out = False
    except TimeoutError:
        timed_out = True
    conn.sendall(b"t")
    conn.settimeout(30)
    print(digest.hexdigest(), timed_out, conn.recv(10).decode(), flush=True)
""")


def test_a_fit_reader_gets_the_stream_whatever_it_reads_at_a_time(net):
    """A blocking recv on a FIT shortcut takes the next message straight from the
    channel when it fits (fit_path.py: take_next) and the general way when it does
    not: in order, whole, across many windows of credit, and a timeout still ends a
    wait with nothing sent."""
    rack, env = net
    client = textwrap.dedent("""
        import hashlib, socket, sys
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
        digest = hashlib.sha256()
        for i in range(int(sys.argv[3])):
            data = bytes([i % 251]) * (1, 100, 4096, 3000, 70000, 5)[i % 6]
            c.sendall(data)
            digest.update(data)
        assert c.recv(1) == b"t"
        c.sendall(b"end")
        print(digest.hexdigest(), flush=True)
        c.recv(1)   # the reader's close
    """)
    rounds = 600
    total = sum((1, 100, 4096, 3000, 70000, 5)[i % 6] for i in range(rounds))
    with on_rack(env, MIXED_READER, NIC, str(total), name=RACK) as (server, (port,)):
        proc = run_on_rack(env, client, NIC, str(port), str(rounds), on="p1", name=RACK)
        assert proc.returncode == 0, proc.stderr
        assert server.stdout.readline().split() == [proc.stdout.strip(), "True", "end"]
    assert total > 3 * SHORTCUT_FIT_WINDOW_BYTES   # (credit went back many times)


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
    with on_rack(env, SOCKETSERVER_ECHO, NIC, name=RACK) as (_, (port,)):
        procs = [run_on_rack(env, code, NIC, str(port), on=p, name=RACK) for p in ("p0", "p1")]
    for proc in procs:
        assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr


def test_no_shortcuts_takes_the_ordinary_path(net):
    rack, env = net
    with on_rack(env, ECHO_SERVER, NIC, name=RACK) as (_, (port,)):
        before = n0_network(rack)
        proc = subprocess.run([SPLITRACK, "run", "--name", RACK, "--on", "p0", "--no-shortcuts",
                               "--", sys.executable, "-c", ECHO_CLIENT, NIC, str(port), "3"],
                              env=env, cwd=SCRATCH, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        after = n0_network(rack)
    assert after["shortcuts_pipe"] == before["shortcuts_pipe"]
    assert after["accepted"] == before["accepted"] + 1


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
                       name=RACK)
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
        with on_rack(env, server, NIC, name=RACK) as (_, (port,)):
            proc = run_on_rack(env, ECHO_CLIENT, NIC, str(port), "11", on=client_on, name=RACK)
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
    with on_rack(env, ECHO_SERVER, NIC, name=RACK) as (_, (port,)):
        proc = run_on_rack(env, code, NIC, str(port), on=client_on, name=RACK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["timeout", "wouldblock 11", "abc"]


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
    with on_rack(env, code, NIC, name=RACK) as (proc, (port,)):
        done = run_on_rack(env, client, NIC, str(port), name=RACK)
        assert done.returncode == 0, done.stderr
        assert float(done.stdout) < 2.0   # the shortcut gave up; the kernel's backlog took it
        assert proc.stdout.readline().strip() == "accepted 1"   # and no ghost connection


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
    with on_rack(env, ECHO_SERVER, NIC, name=RACK, mode=mode) as (_, (port,)):
        if mode:   # the client outside the rack: the bytes cross n0 both ways
            proc = subprocess.run([sys.executable, "-c", STREAM_CLIENT, NIC, str(port), size],
                                  cwd=SCRATCH, capture_output=True, text=True, timeout=300)
        else:      # a program of the rack: a pipe on p0, FIT from p1
            proc = run_on_rack(env, STREAM_CLIENT, NIC, str(port), size, name=RACK,
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
    done = run_on_rack(env, program, name=RACK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "111"]
