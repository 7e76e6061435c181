"""UDP through the rack (splitrack/guest/datagram.py, monitors/dgram_skeleton.py): a
rack program's SOCK_DGRAM socket is a bsdSocketStub whose datagrams cross its
nComponent, in DDIO and in DMA, whole and alone. One probe runs as a plain process
and on the rack and must print the same lines; plain processes outside the rack
talk to rack programs on a NIC; n0's counters see every datagram."""

import hashlib
import random
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from helpers import wait_until
from netprogs import n0_network, on_rack, run_on_rack

NIC = "127.0.0.11"

# What a program sees of UDP: every line is the same on Linux and on the rack (the
# rack's 127.0.0.1 is its loopback alias, shown as 127.0.0.1; ports are not printed).
PROBE = textwrap.dedent("""
    import errno, os, select, socket, sys
    def show(what, fn):
        try:
            print(what, fn())
        except OSError as exc:
            print(what, type(exc).__name__, exc.errno)
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    show("type", lambda: (a.type == socket.SOCK_DGRAM, a.getsockopt(socket.SOL_SOCKET,
                                                                     socket.SO_TYPE)))
    show("unbound name", a.getsockname)
    a.bind(("127.0.0.1", 0))
    port = a.getsockname()[1]
    show("bound ip", lambda: a.getsockname()[0])
    show("listen", lambda: a.listen(1))
    show("accept", a.accept)
    show("send unconnected", lambda: b.send(b"x"))
    show("too large", lambda: b.sendto(bytes(65508), ("127.0.0.1", port)))
    show("no peer", a.getpeername)
    d = socket.fromfd(a.fileno(), socket.AF_INET, socket.SOCK_DGRAM)
    b.sendto(b"via a dup", ("127.0.0.1", port))
    show("fromfd", lambda: (d.type == socket.SOCK_DGRAM, d.recv(100)))
    d.close()   # the socket closes with its last descriptor, not this one
    for size in (0, 1, 1000, 4097, 65507):
        data = os.urandom(size)
        b.sendto(data, ("127.0.0.1", port))
        got, addr = a.recvfrom(65536)
        print("size", size, got == data, addr == ("127.0.0.1", b.getsockname()[1]))
    for word in (b"one", b"two", b"three"):
        b.sendto(word, ("127.0.0.1", port))
    a.settimeout(5)
    show("peek", lambda: a.recv(10, socket.MSG_PEEK))
    show("cut", lambda: a.recv(2))
    show("recvmsg", lambda: a.recvmsg(2)[:3])
    buf = bytearray(10)
    show("recv_into", lambda: (a.recvfrom_into(buf)[0], bytes(buf[:5])))
    b.sendto(b"scattered", ("127.0.0.1", port))
    one, two = bytearray(3), bytearray(10)
    show("recvmsg_into", lambda: (a.recvmsg_into([one, two])[:3], bytes(one), bytes(two[:6])))
    show("to port 0", lambda: b.sendto(b"x", ("127.0.0.1", 0)))
    a.setblocking(False)
    show("empty", lambda: a.recv(10))
    a.settimeout(0.2)
    show("timeout", lambda: a.recv(10))
    a.settimeout(5)
    show("readable before", lambda: select.select([a], [a], [], 0)[:2] == ([], [a]))
    b.sendto(b"sel", ("127.0.0.1", port))
    show("readable after", lambda: select.select([a], [], [], 5)[0] == [a])
    show("then", lambda: a.recv(10))
    b.connect(("127.0.0.1", port))
    show("peer", lambda: b.getpeername() == ("127.0.0.1", port))
    show("local", lambda: b.getsockname()[0])
    b.send(b"connected")
    show("connected", lambda: a.recvfrom(100)[0])
    a.sendto(b"reply", b.getsockname())
    b.settimeout(5)
    show("reply", lambda: b.recv(100))
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.sendto(b"stranger", b.getsockname())   # a connected socket hears its peer only
    a.sendto(b"peer again", b.getsockname())
    show("filtered", lambda: b.recv(100))
    b.sendto(b"sendto the peer", ("127.0.0.1", port))   # (allowed once connected)
    show("to the peer", lambda: a.recv(100))
    a.close()   # nobody at the peer's port now: the next call hears the ICMP's error
    b.send(b"into the void")
    show("refused", lambda: b.recv(100))
    b.send(b"again")
    show("error readable", lambda: select.select([b], [], [], 5)[0] == [b])
    show("so_error", lambda: b.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    show("then quiet", lambda: select.select([b], [], [], 0.2)[0])
    b.shutdown(socket.SHUT_WR)
    show("after shut", lambda: b.send(b"z"))
    b.close(); c.close()
    show("closed", lambda: b.send(b"z"))
    print("done")
""")

ECHO = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], 0))
    print(s.getsockname()[1], flush=True)
    while True:
        data, addr = s.recvfrom(65536)
        s.sendto(data, addr)
""")


RACK = "udp"   # the name of this module's rack (conftest.py: net)


def _linux() -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_program_sees_udp_as_on_linux(net, mode):
    _, env = net
    proc = run_on_rack(env, PROBE, name=RACK, mode=mode, timeout=120)
    assert proc.returncode == 0, proc.stderr
    linux, rack = _linux(), proc.stdout.splitlines()
    assert linux[-1] == "done"
    differ = [f"{a!r:50} {b!r}" for a, b in zip(linux, rack, strict=False) if a != b]
    assert rack == linux, "\n".join(differ)
    assert "splitrack:" not in proc.stderr   # no warning: the socket is the rack's


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_datagrams_from_outside_cross_the_nic_whole(net, mode):
    """A plain process outside the rack and a rack echo server on the NIC: every
    datagram comes back whole and alone, checksummed, and n0 counted each."""
    rack, env = net
    rng = random.Random(7)
    sizes = [0, 1, 2, 127, 128, 1472, 4095, 4096, 4097, 65507]
    sizes += [rng.randrange(1, 65508) for _ in range(40)]
    before = n0_network(rack)
    with on_rack(env, ECHO, NIC, name=RACK, mode=mode) as (_, (port,)), \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(10)
        sent, got = hashlib.sha256(), hashlib.sha256()
        for size in sizes:
            data = rng.randbytes(size)
            sent.update(data)
            client.sendto(data, (NIC, port))
            echo, addr = client.recvfrom(65536)
            assert len(echo) == size and addr == (NIC, port)
            got.update(echo)
        assert sent.hexdigest() == got.hexdigest()
    after = n0_network(rack)
    assert after["datagrams_in"] - before["datagrams_in"] >= len(sizes)
    assert after["datagrams_out"] - before["datagrams_out"] >= len(sizes)


def test_a_rack_client_reaches_a_rack_server_across_pcomponents(net):
    """Client on p1, server on p0, by the NIC's address; many datagrams in flight."""
    _, env = net
    client = textwrap.dedent("""
        import hashlib, socket, sys
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.settimeout(10)
        c.connect((sys.argv[1], int(sys.argv[2])))
        sent, got = hashlib.sha256(), hashlib.sha256()
        for i in range(0, 400, 20):
            batch = [bytes([i % 251]) * (i * 37 % 9000) for i in range(i, i + 20)]
            for d in batch:
                sent.update(d)
                c.send(d)
            for d in batch:
                got.update(c.recv(65536))
        print(sent.hexdigest() == got.hexdigest())
    """)
    with on_rack(env, ECHO, NIC, name=RACK, on="p0") as (_, (port,)):
        proc = run_on_rack(env, client, NIC, str(port), name=RACK, on="p1", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]


@pytest.mark.parametrize("rcvbuf", [0, 4 << 20])
def test_a_reader_that_does_not_read_loses_what_its_buffers_cannot_hold(net, rcvbuf):
    """Datagrams past what the receive ring holds wait in the kernel socket, whose
    SO_RCVBUF bounds the queue, and the kernel drops the rest, as for a slow reader on
    Linux: with 4 MiB of SO_RCVBUF nothing is lost; what is kept is read whole and in
    order, and the program's sockets are gone with it."""
    rack, env = net
    code = textwrap.dedent("""
        import socket, sys, time
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if int(sys.argv[1]):
            r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[1]))
        r.bind(("127.0.0.1", 0))
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(1200):   # 1200 x 1000 B: more than the 512 KiB receive ring
            s.sendto(i.to_bytes(4, "big") * 250, r.getsockname())
        time.sleep(1)
        r.settimeout(2)   # (what waits in the kernel at n0 comes as the window reopens)
        seen = []
        try:
            while True:
                d = r.recv(2000)
                assert len(d) == 1000 and d == d[:4] * 250
                seen.append(int.from_bytes(d[:4], "big"))
        except TimeoutError:
            pass
        print(len(seen), seen == sorted(seen))
    """)
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)   # earlier tests' are gone
    before = n0_network(rack)
    proc = run_on_rack(env, code, str(rcvbuf), name=RACK, timeout=120)
    assert proc.returncode == 0, proc.stderr
    kept, ordered = proc.stdout.split()
    assert ordered == "True"
    assert (int(kept) == 1200) if rcvbuf else (0 < int(kept) < 1200)
    after = n0_network(rack)
    assert after["datagrams_in"] - before["datagrams_in"] == int(kept)
    assert after["skeletons"] == 0


def test_a_rack_client_leaves_from_its_nic(net):
    """A rack program's datagrams to a plain process outside the rack leave from the
    NIC GNM gave it (the server sees that address, one of n0's), and the answers come
    back."""
    _, env = net
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.5", 0))
    server.settimeout(30)
    client = textwrap.dedent("""
        import socket, sys
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.settimeout(10)
        for i in range(20):
            c.sendto(b"%d" % i * i, (sys.argv[1], int(sys.argv[2])))
            print(c.recv(1000) == b"%d" % i * i, flush=True)
    """)
    seen: list[str] = []

    def serve() -> None:
        for _ in range(20):
            data, addr = server.recvfrom(1000)
            seen.append(addr[0])
            server.sendto(data, addr)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        proc = run_on_rack(env, client, "127.0.0.5", str(server.getsockname()[1]),
                           name=RACK, timeout=60)
    finally:
        thread.join(30)
        server.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"] * 20
    assert len(set(seen)) == 1 and seen[0] in ("127.0.0.11", "127.0.0.12")   # n0's NICs


def test_a_program_that_only_sends_hears_its_skeleton(net):
    """A non-blocking sender that never reads nor waits still gets its send ring back
    (STUB_SENT) and its errors: 3 MB of datagrams all go, and a connected socket's
    sends to a closed port raise ECONNREFUSED, as on Linux (where about every
    other one does)."""
    _, env = net
    code = textwrap.dedent("""
        import socket, time
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
        sent, t0 = 0, time.time()
        while sent < 3000 and time.time() - t0 < 20:
            try:
                s.sendto(bytes(1000), r.getsockname())
                sent += 1
            except BlockingIOError:
                time.sleep(0.001)
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.connect(("127.0.0.1", 9))
        refused = 0
        for _ in range(20):
            try:
                c.send(b"x")
            except ConnectionRefusedError:
                refused += 1
            time.sleep(0.02)
        print(sent, refused > 0)
    """)
    proc = run_on_rack(env, code, name=RACK, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3000", "True"]
