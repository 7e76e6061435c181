"""The socket API on the rack behaves as on Linux: one program, run as a plain process
on the host and as a rack program (through a pipe shortcut, and through the
nComponent in DDIO and in DMA), must print the same lines (splitrack/guest/stub.py)."""

import errno
import subprocess
import sys
import textwrap

import pytest

from netprogs import SCRATCH, full_queue, n0_network, on_rack, run_on_rack

# Each line: a call and what came of it (a value, or the exception's class and errno).
# The listener is the program's own: on the rack a pipe shortcut, or with
# --no-shortcuts a connection through the nComponent, both ends on the rack.
PROBE = textwrap.dedent("""
    import gc, select, socket, struct, sys, threading, time
    def t(name, fn):
        try:
            print(f"{name}: ok {fn()!r}", flush=True)
        except Exception as exc:
            print(f"{name}: {type(exc).__name__} {getattr(exc, 'errno', None)}", flush=True)
    host = sys.argv[1]
    srv = socket.create_server((host, 0))
    port = srv.getsockname()[1]
    fresh = socket.socket
    t("setblocking(2)", lambda: fresh().setblocking(2))
    t("setblocking('x')", lambda: fresh().setblocking("x"))
    t("settimeout(-1)", lambda: fresh().settimeout(-1))
    t("settimeout(nan)", lambda: fresh().settimeout(float("nan")))
    t("settimeout('x')", lambda: fresh().settimeout("x"))
    t("settimeout(True)", lambda: (lambda s: (s.settimeout(True), s.gettimeout())[1])(fresh()))
    t("shutdown unconnected", lambda: fresh().shutdown(socket.SHUT_RDWR))
    t("shutdown(5)", lambda: fresh().shutdown(5))
    t("shutdown('x')", lambda: fresh().shutdown("x"))
    t("send unconnected", lambda: fresh().send(b"x"))
    t("getpeername unconnected", lambda: fresh().getpeername())
    t("connect a listener", lambda: srv.connect((host, port)))
    s = fresh()
    s.setblocking(False)
    t("non-blocking connect", lambda: s.connect((host, port)))
    t("writable", lambda: bool(select.select([], [s], [], 5)[1]))
    t("SO_ERROR", lambda: s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    t("connect again", lambda: s.connect((host, port)))
    t("and again", lambda: s.connect((host, port)))
    t("connect_ex", lambda: s.connect_ex((host, port)))
    dead = fresh(); dead.bind((host, 0)); dead_port = dead.getsockname()[1]; dead.close()
    r = fresh(); r.setblocking(False)
    t("non-blocking refused", lambda: r.connect((host, dead_port)))
    time.sleep(0.2)
    t("refused, readable", lambda: bool(select.select([r], [], [], 5)[0]))
    t("refused, SO_ERROR", lambda: r.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    t("refused, again", lambda: r.connect((host, dead_port)))
    r2 = fresh(); r2.setblocking(False)
    t("connect_ex x3", lambda: [r2.connect_ex((host, dead_port)) for _ in range(3)])
    srv.settimeout(10)
    c, _ = srv.accept()
    c.settimeout(10)
    s.setblocking(True)
    c.sendall(b"hello world")
    time.sleep(0.2)
    t("MSG_PEEK", lambda: s.recv(5, socket.MSG_PEEK))
    t("after the peek", lambda: s.recv(5))
    t("the rest", lambda: s.recv(100))
    t("MSG_DONTWAIT, blocking", lambda: s.recv(10, socket.MSG_DONTWAIT))
    def later():
        time.sleep(0.2); c.sendall(b"abc"); time.sleep(0.2); c.sendall(b"def")
    threading.Thread(target=later).start()
    t("MSG_WAITALL, blocking", lambda: s.recv(6, socket.MSG_WAITALL))
    buf = bytearray(4)
    threading.Thread(target=later).start()
    t("MSG_WAITALL into", lambda: (s.recv_into(buf, 4, socket.MSG_WAITALL), bytes(buf)))
    t("the rest of it", lambda: s.recv(2))
    s.settimeout(0.3)
    t("MSG_DONTWAIT, timeout", lambda: s.recv(10, socket.MSG_DONTWAIT))
    t("sendmsg", lambda: s.sendmsg([b"ab", b"cd"]))
    t("its bytes", lambda: c.recv(10))
    c.sendall(b"xyz")
    time.sleep(0.2)
    t("recvmsg", lambda: s.recvmsg(10)[0])
    f = s.makefile("rwb")
    t("makefile outlives close()", lambda: (s.close(), f.write(b"M"), f.flush(), c.recv(1))[3])
    f.close()
    t("closed with its file", lambda: c.recv(1))
    t("create_connection", lambda: (lambda x: (x.getpeername()[1] == port, x.close(),
                                               srv.accept()[0].close())[0])(
        socket.create_connection((host, port))))
    s = socket.create_connection((host, port), timeout=10)
    c, _ = srv.accept()
    c.settimeout(10)
    d = s.dup()
    t("a dup sends", lambda: (d.send(b"D"), c.recv(1))[1])
    t("a dup's timeout is its own", lambda: (d.settimeout(2.5), s.gettimeout(), d.gettimeout()))
    d.close()
    t("a closed dup: recv", lambda: d.recv(1))
    t("a closed dup: fileno", lambda: d.fileno())
    t("a closed dup: getsockname", lambda: d.getsockname())
    t("a closed dup: setsockopt", lambda: d.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    lost = s.dup()
    del lost   # dropped without close(): its descriptor closes, the connection does not
    gc.collect()
    t("the first after its dup closed", lambda: (s.send(b"E"), c.recv(1))[1])
    e = socket.fromfd(s.fileno(), socket.AF_INET, socket.SOCK_STREAM)
    t("fromfd receives", lambda: (c.send(b"F"), e.recv(1))[1])
    fd = e.detach()
    t("detached: fileno", lambda: e.fileno())
    g = socket.socket(fileno=fd)
    t("socket(fileno=) of it", lambda: (g.send(b"G"), c.recv(1))[1])
    s.close()
    t("the first handle closed: send", lambda: s.send(b"x"))
    t("the others live on", lambda: (g.send(b"H"), c.recv(1), c.send(b"I"), g.recv(1))[1:4:2])
    t("readiness of the one left", lambda: (c.send(b"J"), time.sleep(0.2),
                                            len(select.select([g], [], [], 5)[0]), g.recv(1))[2:])
    t("SO_RCVLOWAT", lambda: (g.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 4),
                              g.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))[1])
    t("SO_RCVLOWAT 0 is 1", lambda: (g.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 0),
                                     g.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))[1])
    t("SO_LINGER, unset", lambda: g.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
    t("SO_LINGER, an int", lambda: g.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 1))
    t("SO_LINGER, set", lambda: (g.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                              struct.pack("ii", 1, 5)),
                                 g.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8),
                                 g.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER))[1:])
    g.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 0, 0))
    RCVTIMEO, tv = socket.SO_RCVTIMEO, lambda sec, usec: struct.pack("qq", sec, usec)
    t("SO_RCVTIMEO, unset", lambda: g.getsockopt(socket.SOL_SOCKET, RCVTIMEO, 16))
    t("SO_RCVTIMEO, an int", lambda: g.setsockopt(socket.SOL_SOCKET, RCVTIMEO, 1))
    t("SO_RCVTIMEO, tv_usec 10**6", lambda: g.setsockopt(socket.SOL_SOCKET, RCVTIMEO,
                                                         tv(0, 10 ** 6)))
    t("SO_RCVTIMEO, set", lambda: (g.setsockopt(socket.SOL_SOCKET, RCVTIMEO, tv(0, 500000)),
                                   g.getsockopt(socket.SOL_SOCKET, RCVTIMEO, 16))[1])
    t("SO_RCVTIMEO: recv gives up", lambda: g.recv(1))
    t("SO_RCVTIMEO, MSG_WAITALL: what came", lambda: (c.send(b"ab"),
                                                      g.recv(10, socket.MSG_WAITALL))[1])
    t("and the socket goes on", lambda: (c.send(b"K"), g.recv(1), g.send(b"L"), c.recv(1))[1::2])
    t("SO_RCVTIMEO, negative: no wait", lambda: (
        g.setsockopt(socket.SOL_SOCKET, RCVTIMEO, tv(-1, 0)),
        g.getsockopt(socket.SOL_SOCKET, RCVTIMEO, 16), g.recv(1))[1:])
    g.setsockopt(socket.SOL_SOCKET, RCVTIMEO, tv(0, 0))
    g.close()
    t("the last closed: EOF", lambda: c.recv(1))
    s = socket.create_connection((host, port), timeout=10)
    c, _ = srv.accept()
    c.settimeout(10)
    new = socket.socket(fileno=s.fileno())   # a hand-over, as ssl does it
    t("handed over", lambda: (s.detach() == new.fileno(), new.send(b"N"), c.recv(1))[::2])
    dropped = new.dup()
    new.close()
    del dropped
    gc.collect()
    t("a dropped last handle closes it", lambda: c.recv(1))
    s = socket.create_connection((host, port), timeout=10)
    c, _ = srv.accept()
    c.settimeout(10)
    d = s.dup()
    again = socket.socket(fileno=s.detach())
    fd = again.detach()   # a descriptor detached twice over: one reference still
    d.close()
    back = socket.socket(fileno=fd)
    t("detached twice, taken back", lambda: (back.send(b"U"), c.recv(1))[1])
    back.close()
    t("and closed", lambda: c.recv(1))
    u = socket.socket()
    v = u.dup()
    u.connect((host, port))
    c, _ = srv.accept()
    t("a dup from before connect", lambda: (v.send(b"V"), c.recv(1), u.close(),
                                            c.send(b"W"), v.recv(1))[1:5:3])
    v.close()
    t("and its EOF", lambda: c.recv(1))
    lone = fresh()
    lone.bind((host, 0))
    lone.listen()
    lone.setsockopt(socket.SOL_SOCKET, RCVTIMEO, tv(0, 500000))
    t("SO_RCVTIMEO: accept gives up", lambda: lone.accept())
    s = socket.create_connection((host, port))
    c, _ = srv.accept()   # (it never reads)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv(0, 500000))
    t("SO_SNDTIMEO: a send gives up, with its count", lambda: s.send(b"x" * (64 << 20)) > 0)
    print("done", flush=True)
""")


# fileno() is writable exactly while a send would not block: a sender that fills the
# window (its peer does not read) finds it not writable, and writable again once read.
WRITABILITY = textwrap.dedent("""
    import select, socket, sys
    host = sys.argv[1]
    srv = socket.create_server((host, 0))
    s = socket.create_connection(srv.getsockname())
    c, _ = srv.accept()
    s.setblocking(False)
    print("writable at first", bool(select.select([], [s], [], 0)[1]))
    sent, wrong = 0, 0
    for attempt in range(50):   # the rack's buffers fill in steps: until it stays full
        try:
            while True:
                sent += s.send(b"x" * 65536)
        except BlockingIOError:
            pass
        if not select.select([], [s], [], 0.2)[1]:
            break
        try:
            sent += s.send(b"x" * 65536)   # it said writable: a send takes bytes
        except BlockingIOError:
            wrong += 1
    print("full, not writable", attempt < 49, "writable but full", wrong)
    got = 0
    while got < sent:
        got += len(c.recv(1 << 20))
    print("read, writable", bool(select.select([], [s], [], 5)[1]))
""")


# A connect() whose handshake waits (the listener's queue is full) ends at SO_SNDTIMEO
# with EINPROGRESS, as Linux's, and goes on: a second one, blocking, returns once done.
SNDTIMEO_CONNECT = textwrap.dedent("""
    import socket, struct, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 300000))
    print("listening 0", flush=True)
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        print("connect ok", flush=True)
    except OSError as exc:
        print("connect", type(exc).__name__, exc.errno, flush=True)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connect again ok", s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR), flush=True)
""")


# A socket closed while its handshake goes on (here: SO_SNDTIMEO ended its connect):
# its skeleton closes with it; then it waits to be stopped.
CLOSED_CONNECTING = textwrap.dedent("""
    import socket, struct, sys, time
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 100000))
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        pending = False
    except BlockingIOError:
        pending = True
    s.close()
    print(int(pending), flush=True)   # 1: the handshake was going on at the close
    time.sleep(60)
""")


RACK = "api"   # the name of this module's rack (conftest.py: net)


def _linux() -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, "127.0.0.1"], cwd=SCRATCH,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("flags", [(), ("--no-shortcuts", "--mode", "ddio"),
                                   ("--no-shortcuts", "--mode", "dma")],
                         ids=["pipe", "ddio", "dma"])
def test_the_socket_api_answers_as_linux_does(net, flags):
    _, env = net
    proc = run_on_rack(env, PROBE, "127.0.0.11", name=RACK, timeout=120, flags=flags)
    assert proc.returncode == 0, proc.stderr
    rack = proc.stdout.splitlines()
    linux = _linux()
    assert linux[-1] == "done"
    differ = [f"{a!r:55} {b!r}" for a, b in zip(linux, rack, strict=False) if a != b]
    assert rack == linux, "\n".join(differ)


def test_ipv6_is_refused_and_other_network_sockets_are_named(net):
    """No socket bypasses the rack silently: AF_INET6 is EAFNOSUPPORT, UDP is the
    rack's (datagram.py), and any other network socket (netlink here: a raw one needs
    privileges) is said once on stderr; AF_UNIX, the pComponent's IPC, is not."""
    _, env = net
    code = textwrap.dedent("""
        import socket
        try:
            socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            print("ipv6 made")
        except OSError as exc:
            print("ipv6", type(exc).__name__, exc.errno)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        print("udp", type(udp).__name__, isinstance(udp, socket.socket))
        udp.close()
        for _ in range(2):
            socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE).close()
        socket.socketpair()
        print("netlink made")
    """)
    proc = run_on_rack(env, code, name=RACK, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ipv6 OSError 97", "udp DatagramStub True",
                                        "netlink made"]
    said = [line for line in proc.stderr.splitlines() if line.startswith("splitrack:")]
    assert said == ["splitrack: a AF_NETLINK/SOCK_RAW socket is the host's, not the rack's: "
                    "only TCP and UDP over IPv4 cross the rack (its traffic is not "
                    "emulated)"], proc.stderr


@pytest.mark.parametrize("flags", [("--no-shortcuts", "--mode", "ddio"),
                                   ("--no-shortcuts", "--mode", "dma"), ()],
                         ids=["ddio", "dma", "pipe"])
def test_a_full_window_is_not_writable(net, flags):
    _, env = net
    proc = run_on_rack(env, WRITABILITY, "127.0.0.11", name=RACK, timeout=120, flags=flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["writable at first True",
                                        "full, not writable True writable but full 0",
                                        "read, writable True"]


LOWAT = textwrap.dedent("""
    import socket, threading, time
    srv = socket.create_server(("127.0.0.11", 0))
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 4)
    def halves():
        b.send(b"ab"); time.sleep(0.3); b.send(b"cd")
    threading.Thread(target=halves).start()
    t0 = time.monotonic()
    print(a.recv(10), time.monotonic() - t0 >= 0.25)
    b.send(b"efgh")
    print(a.recv(2))   # less than SO_RCVLOWAT asked for: that much is enough
""")


@pytest.mark.parametrize("flags", [("--no-shortcuts",), ()], ids=["ddio", "pipe"])
def test_a_blocking_recv_waits_for_so_rcvlowat_bytes(net, flags):
    """(Not compared with Linux: its own recv hangs here more often than not, two small
    segments below SO_RCVLOWAT never waking it on this kernel.)"""
    _, env = net
    proc = run_on_rack(env, LOWAT, name=RACK, timeout=60, flags=flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["b'abcd' True", "b'ef'"]


# A program's own socket subclass: its attributes are its own (the stub keeps what the
# rack needs of it off the socket: guest/face.py), and accept() makes the stack's class,
# not the program's (the stdlib's does not run the subclass's __init__ either).
SUBCLASS = textwrap.dedent("""
    import socket, sys, threading
    inits = []
    class Server(socket.socket):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inits.append(1)
            self.lock, self.path, self.runtime, self.wake = threading.Lock(), "p", "r", "w"
    srv = Server(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind((sys.argv[1], 0)); srv.listen()
    def client():
        with socket.create_connection((sys.argv[1], srv.getsockname()[1])) as c:
            c.sendall(b"hi")
    threading.Thread(target=client).start()
    conn, _ = srv.accept()
    print(type(conn) is Server, conn.recv(2), len(inits), srv.path, srv.runtime, srv.wake)
""")


@pytest.mark.parametrize("flags", [(), ("--no-shortcuts",)], ids=["pipe", "ddio"])
def test_a_programs_socket_subclass_keeps_its_attributes_and_accepts_as_linux(net, flags):
    _, env = net
    linux = subprocess.run([sys.executable, "-c", SUBCLASS, "127.0.0.1"], cwd=SCRATCH,
                           capture_output=True, text=True, timeout=60)
    rack = run_on_rack(env, SUBCLASS, "127.0.0.11", name=RACK, timeout=60, flags=flags)
    assert linux.returncode == 0 and rack.returncode == 0, (linux.stderr, rack.stderr)
    assert rack.stdout == linux.stdout == "False b'hi' 1 p r w\n"


def test_so_sndtimeo_ends_a_connect_whose_handshake_waits_and_it_goes_on(net):
    """SO_SNDTIMEO on a blocking socket bounds connect() too, as on Linux: to a listener
    outside the rack whose queue is full, EINPROGRESS after it, the handshake going on
    in the nComponent; once the listener has room, a second connect() returns."""
    _, env = net
    with full_queue("127.0.0.2") as (listener, address), \
            on_rack(env, SNDTIMEO_CONNECT, *address, name=RACK) as (program, _):
        assert program.stdout.readline() == f"connect BlockingIOError {errno.EINPROGRESS}\n"
        listener.settimeout(10)
        listener.accept()[0].close()   # room in the queue: the handshake ends
        assert program.stdout.readline() == "connect again ok 0\n"
        assert program.wait(timeout=30) == 0, program.stderr.read()


def test_a_socket_closed_while_its_handshake_goes_on_leaves_no_skeleton(net):
    """close() after a connect that returned before its handshake ended (EINPROGRESS
    at SO_SNDTIMEO; a non-blocking one the same) closes the nComponent's skeleton too,
    as Linux's close ends the handshake: none is left to finish it later into a ring
    that is another socket's by then."""
    rack, env = net
    before = n0_network(rack)["skeletons"]
    with full_queue("127.0.0.2") as (_, address), \
            on_rack(env, CLOSED_CONNECTING, *address, name=RACK) as (_, (pending,)):
        assert pending == 1   # (else this tests nothing)
        assert n0_network(rack)["skeletons"] == before
