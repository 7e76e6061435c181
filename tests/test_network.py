"""The network path: unmodified socket programs on the rack, reached by plain
processes outside it ("remote Linux"), over real kernel sockets on the
nComponent's NICs, in DDIO and DMA modes (monitors/nmonitor.py, splitrack/guest/stub.py)."""

import errno
import hashlib
import random
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import psutil
import pytest

from fit_rpc import Op
from fit_rpc.netpath import DMA_MAP
from helpers import running_rack, small_spec, wait_until
from netprogs import (
    ASYNCIO_ECHO,
    DMA_BURST,
    ECHO_SERVER,
    SCRATCH,
    SELECTORS_ECHO,
    SEND_AND_EXIT,
    SLEEPY_READER,
    SOCKETSERVER_ECHO,
    SOURCE,
    connect,
    environ,
    n0_network,
    on_rack,
    recv_exactly,
    run_on_rack,
)

NIC = "127.0.0.11"


RACK = "net"   # the name of this module's rack (conftest.py: net)


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_echo_every_size_with_checksums(net, mode):
    rack, env = net
    rng = random.Random(4)
    sizes = [1, 2, 127, 128, 4095, 4096, 4097, 65536, 131072, 200_001, 1 << 20]
    sizes += [rng.randrange(1, 70_000) for _ in range(60)]
    with on_rack(env, ECHO_SERVER, NIC, mode=mode) as (_, (port,)), connect(port) as sock:
        sent, got = hashlib.sha256(), hashlib.sha256()
        for size in sizes:
            data = rng.randbytes(size)
            sent.update(data)
            sock.sendall(data)
            got.update(recv_exactly(sock, size))
        assert got.hexdigest() == sent.hexdigest()
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)


def test_dma_goes_through_the_mcomponent_and_ddio_does_not(net):
    rack, env = net

    def dma_bytes() -> int:
        with rack.endpoint() as ep:
            memory = ep.call_args("m0", Op.STATS)[0]["memory"]
        return memory["dma_read_bytes"] + memory["dma_write_bytes"]

    for mode, moved in (("ddio", False), ("dma", True)):
        before = dma_bytes()
        with on_rack(env, ECHO_SERVER, NIC, mode=mode) as (_, (port,)), connect(port) as sock:
            sock.sendall(b"z" * 10_000)
            assert recv_exactly(sock, 10_000) == b"z" * 10_000
        assert (dma_bytes() - before >= 20_000) == moved, mode


def test_http_server_module_serves_urllib_outside_the_rack(net, tmp_path):
    rack, env = net
    body = random.Random(7).randbytes(300_000)
    (tmp_path / "blob.bin").write_bytes(body)
    with socket.socket() as probe:   # a port free on the NIC, for the literal command line
        probe.bind((NIC, 0))
        port = probe.getsockname()[1]
    code = ("import runpy, sys; print(sys.argv[3], flush=True); sys.argv = ['http.server', "
            "'--bind', sys.argv[1], '--directory', sys.argv[2], sys.argv[3]]; "
            "runpy.run_module('http.server', run_name='__main__')")
    with on_rack(env, code, NIC, str(tmp_path), str(port)):
        url = f"http://{NIC}:{port}/blob.bin"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as reply:
                    assert reply.read() == body
                    break
            except (ConnectionRefusedError, urllib.error.URLError):
                assert time.monotonic() < deadline, "http.server did not come up"
                time.sleep(0.05)
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://{NIC}:{port}/nothing-here", timeout=30)
        assert missing.value.code == 404


def test_socketserver_selectors_and_asyncio_servers_serve_several_clients(net):
    rack, env = net
    for program in (SOCKETSERVER_ECHO, SELECTORS_ECHO, ASYNCIO_ECHO):
        with on_rack(env, program, NIC) as (_, (port,)):
            clients = [connect(port) for _ in range(3)]
            for i, sock in enumerate(clients):
                sock.sendall(f"line {i}\n".encode())
            for i, sock in enumerate(clients):
                expected = f"line {i}\n".encode()
                if program is SOCKETSERVER_ECHO:
                    expected = expected.upper()
                assert recv_exactly(sock, len(expected)) == expected
                sock.close()


def test_half_close_and_exit_lose_nothing(net):
    rack, env = net
    with on_rack(env, ECHO_SERVER, NIC, mode="dma") as (_, (port,)), connect(port) as sock:
        data = random.Random(5).randbytes(300_000)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)   # the server reads EOF, echoes the rest, closes
        assert recv_exactly(sock, len(data)) == data
        assert sock.recv(1) == b""
    size = 3 << 20
    with on_rack(env, SEND_AND_EXIT, NIC, str(size)) as (_, (port,)), connect(port) as sock:
        received = recv_exactly(sock, size)   # the program exits right after sendall
        assert received == bytes(range(256)) * (size // 256) and sock.recv(1) == b""


def test_only_ncomponents_may_dma(net):
    """Neither the translation (M_DMA_MAP) nor the arena itself (a region granted to
    nComponents only) is anybody else's."""
    rack, env = net
    with rack.endpoint() as ep:
        with pytest.raises(PermissionError):
            ep.call("m0", Op.M_DMA_MAP, DMA_MAP.pack(1, 0, 16, 0))
        with pytest.raises(PermissionError):
            ep.map_region("m0", "arena")
        assert ep.call_args("m0", Op.STATS)[0]["errors"]["region_refused"] >= 1


def test_rack_as_client_leaves_from_its_nic_and_localhost_is_the_racks(net, tmp_path):
    rack, env = net
    outside = socket.create_server(("127.0.0.5", 0))
    peers = []

    def serve_one():
        conn, addr = outside.accept()
        peers.append(addr[0])
        with conn:
            conn.sendall(conn.recv(100)[::-1])

    threading.Thread(target=serve_one, daemon=True).start()
    code = textwrap.dedent("""
        import os, socket, sys, time
        # the rack's own loopback: reachable from the rack as localhost, shown as 127.0.0.1
        lo = socket.socket(); lo.bind(("127.0.0.1", 0)); lo.listen()
        port = lo.getsockname()[1]
        print(port, flush=True)
        with socket.create_connection(("127.0.0.5", int(sys.argv[1])), timeout=10) as c:
            c.sendall(b"stressed")
            print(c.recv(100).decode(), c.getsockname()[0] in ("127.0.0.11", "127.0.0.12"))
        with socket.create_connection(("localhost", port), timeout=10) as c:
            s, peer = lo.accept()
            c.sendall(b"ping")
            print(s.recv(4).decode(), lo.getsockname()[0], peer[0], c.getpeername()[0],
                  flush=True)
        tried, end = sys.argv[2], time.monotonic() + 30   # listening still, until the
        while not os.path.exists(tried) and time.monotonic() < end:   # host has tried
            time.sleep(0.01)
    """)
    tried = tmp_path / "tried"
    with on_rack(env, code, str(outside.getsockname()[1]), str(tried)) as (proc, (port,)):
        with socket.socket() as host:   # the host's 127.0.0.1 is not the rack's
            assert host.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
        tried.touch()
        out, err = proc.communicate(timeout=30)
    outside.close()
    assert proc.returncode == 0, err
    first, second = out.splitlines()
    assert first == "desserts True"
    assert peers and peers[0] in ("127.0.0.11", "127.0.0.12")
    assert second == "ping 127.0.0.1 127.0.0.1 127.0.0.1"


def test_bind_any_listens_on_the_gnm_nic(net):
    rack, env = net
    code = textwrap.dedent("""
        import os, socket
        s = socket.socket(); s.bind(("", 0)); s.listen()
        print(s.getsockname()[1], os.getpid(), int(s.getsockname()[0] == "0.0.0.0"), flush=True)
        c, _ = s.accept(); c.sendall(b"hi"); c.close()
    """)
    with on_rack(env, code) as (_, (port, pid, any_address)):
        assert any_address == 1
        with rack.endpoint() as ep:
            nic = ep.call_args("global", Op.GNM_ALLOCATE, {"process": f"p0.{pid}"})[0]["ip"]
        with connect(port, nic) as sock:
            assert recv_exactly(sock, 2) == b"hi"


def test_slow_reader_pushes_back_and_memory_stays_bounded(net):
    rack, env = net
    n0 = psutil.Process(rack.components["n0"]["pid"])
    rss_start = n0.memory_info().rss
    with on_rack(env, SOURCE, NIC, "256") as (proc, (port, pid)), connect(port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        pattern = bytes(range(256)) * 4096
        total, peak = 0, 0
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while True:
            n = sock.recv_into(view)
            if not n:
                break
            assert buf[:n] == (pattern[total % len(pattern):] + pattern)[:n]
            total += n
            if total < (8 << 20):
                time.sleep(0.002)   # slow at first: the sender must wait on TCP
            if total % (16 << 20) < n:
                peak = max(peak, n0.memory_info().rss)
        assert total == 256 << 20
    assert peak - rss_start < 48 << 20, f"nMonitor grew by {(peak - rss_start) >> 20} MiB"


def test_program_without_the_rack_runtime_is_told(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "from splitrack.guest import rsocket; rsocket.install(); "
         "import socket; socket.socket()"], capture_output=True, text=True, cwd=SCRATCH)
    assert proc.returncode != 0 and "splitrack run" in proc.stderr


def test_a_reader_that_sleeps_loses_nothing(net):
    rack, env = net
    lost = n0_network(rack)["stubs_lost"]
    with on_rack(env, SLEEPY_READER, NIC, "3") as (proc, (port,)), connect(port) as sock:
        for _ in range(20_000):   # 20,000 tiny segments arrive while nobody reads
            sock.send(b"x" * 5)
        sock.shutdown(socket.SHUT_WR)
        assert proc.stdout.readline().strip() == "100000"
    assert n0_network(rack)["stubs_lost"] == lost


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_sender_that_exits_before_its_peer_reads_loses_nothing(net, mode):
    # The program's last megabyte waits in its own send ring when it exits (the
    # skeleton pulls from there as the kernel takes bytes): closing must hand it
    # all to the skeleton before the ring is freed.
    rack, env = net
    size = 1 << 20   # all of it fits in the program's send ring
    with on_rack(env, SEND_AND_EXIT, NIC, str(size), mode=mode) as (proc, (port,)):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.settimeout(30)
        with sock:
            sock.connect((NIC, port))
            assert proc.wait(timeout=60) == 0   # it sent everything and exited unread
            received = recv_exactly(sock, size)
            assert received == bytes(range(256)) * (size // 256) and sock.recv(1) == b""
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)


def test_ddio_reads_evicted_lines_from_the_mcomponent():
    # An extCache smaller than one send ring: most of the ring's lines are evicted
    # (written back) before the skeleton reads them, so dDDIO loads those from m0.
    def spec(storage):
        return {**small_spec(storage, name="tinyxc"),
                "pcomponent": [{"id": "p0", "extcache": "256KiB", "ways": 4}]}

    with running_rack(spec) as rack:
        size = 8 << 20
        with on_rack(environ(rack), SEND_AND_EXIT, NIC, str(size), mode="ddio",
                     name="tinyxc") as (_, (port,)), connect(port) as sock:
            received = recv_exactly(sock, size)
            assert received == bytes(range(256)) * (size // 256)
        counts = n0_network(rack)
        assert counts["ddio_mcomponent_bytes"] > 0
        assert counts["ddio_mcomponent_bytes"] + counts["ddio_extcache_bytes"] >= size


# Receives piece after piece without reading, and after each one writes 1 MiB of its
# memory, evicting every line of a 256 KiB extCache: the pieces' lines, partly written.
UNREAD_PIECES = textwrap.dedent("""
    import select, socket, sys
    from splitrack.guest import vm
    s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    junk = vm.alloc(1 << 20)
    for i in range(int(sys.argv[2])):
        select.select([c], [], [], 30)
        vm.write(junk, bytes([i]) * (1 << 20))
        print("evicted", i, flush=True)
    got = bytearray()
    while chunk := c.recv(1 << 16):
        got += chunk
    print(len(got), bytes(got) == bytes(range(100, 200)) * int(sys.argv[2]),
          flush=True)
""")


def test_ddio_keeps_unread_bytes_of_a_line_it_must_install_again():
    # dDDIO writes a piece into a receive-ring line the extCache evicted meanwhile:
    # the line's other bytes, still unread, come back from m0 (never zeros).
    def spec(storage):
        return {**small_spec(storage, name="tinyrx"),
                "pcomponent": [{"id": "p0", "extcache": "256KiB", "ways": 4}]}

    pieces = 12
    with running_rack(spec) as rack, on_rack(environ(rack), UNREAD_PIECES, NIC, str(pieces),
                                             mode="ddio", name="tinyrx") as (proc, (port,)):
        with connect(port) as sock:
            for i in range(pieces):
                sock.sendall(bytes(range(100, 200)))
                assert proc.stdout.readline() == f"evicted {i}\n"
        assert proc.stdout.readline() == f"{pieces * 100} True\n"
        assert n0_network(rack)["ddio_extcache_bytes"] == pieces * 100


def test_dma_senders_that_close_at_once_lose_nothing(net):
    rack, env = net
    listeners = [socket.create_server(("127.0.0.5", 0)) for _ in range(4)]
    got = [0] * len(listeners)

    def drain(i):
        conn, _ = listeners[i].accept()
        with conn:
            while data := conn.recv(1 << 16):
                got[i] += len(data)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(listeners))]
    for t in threads:
        t.start()
    ports = [str(s.getsockname()[1]) for s in listeners]
    proc = run_on_rack(env, DMA_BURST, "127.0.0.5", *ports, mode="dma")
    for t in threads:
        t.join(timeout=60)
    for s in listeners:
        s.close()
    assert proc.returncode == 0, proc.stderr
    assert got == [300_000 // 256 * 256] * len(listeners)


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_non_blocking_reader_that_polls_without_select_sees_the_bytes(net, mode):
    """A non-blocking recv or accept that finds nothing reads what the skeleton said
    meanwhile before it says EAGAIN: a program that polls (no select, no blocking
    call) sees its connection and its bytes."""
    _, env = net
    code = textwrap.dedent("""
        import socket, time
        def poll(fn):
            t0 = time.time()
            while time.time() - t0 < 10:
                try:
                    return fn()
                except BlockingIOError:
                    time.sleep(0.01)
        srv = socket.socket(); srv.bind(("127.0.0.11", 0)); srv.listen()
        srv.setblocking(False)
        c = socket.create_connection(srv.getsockname())
        a, _ = poll(srv.accept)
        a.sendall(b"x" * 100)
        c.setblocking(False)
        got = b""
        while len(got) < 100:
            got += poll(lambda: c.recv(1000))
        print(len(got))
    """)
    proc = run_on_rack(env, code, mode=mode, flags=("--no-shortcuts",))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["100"]
