"""A rack socket's life across close, exec and fork, as on Linux: a close with
SO_LINGER 0 (or with bytes unread) resets the connection; exec() closes the old
image's sockets, and a new image's sockets outlive the old image's; a non-blocking
connect whose handshake waits; a fork()ed child uses its inherited sockets through
its parent, and a connection the child held last ends with the child
(splitrack/guest/stub.py, handles.py, forked.py)."""

import contextlib
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import SPLITRACK
from netprogs import SCRATCH, run_on_rack

RACK = "api"   # the name of this module's rack (conftest.py: net)


ABORT = textwrap.dedent("""
    import socket, struct, sys
    s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
    s.sendall(b"x" * 10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
""")


UNREAD = textwrap.dedent("""
    import select, socket, sys
    s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
    assert select.select([s], [], [], 10)[0]   # the server's bytes are in; never read
    s.close()
""")


@contextlib.contextmanager
def _with_a_server(env, mode, program, **popen):
    """A server on 127.0.0.5, and `program` (its port as argv[1]) as a plain process
    (mode "linux") or on the rack in `mode`; killed afterwards if it still runs."""
    with socket.create_server(("127.0.0.5", 0)) as server:
        server.settimeout(30)
        cmd = [sys.executable, "-c", program, str(server.getsockname()[1])]
        if mode != "linux":
            cmd = [SPLITRACK, "run", "--name", RACK, "--mode", mode, "--", *cmd]
        proc = subprocess.Popen(cmd, env=env, cwd=SCRATCH, stderr=subprocess.PIPE, text=True,
                                **popen)
        try:
            yield server, proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("mode", ["linux", "ddio", "dma"])
@pytest.mark.parametrize("program", [ABORT, UNREAD], ids=["so_linger_zero", "bytes_unread"])
def test_a_close_that_resets_the_connection(net, mode, program):
    """An abortive close (SO_LINGER on, 0 s), and Linux's close() of a socket with
    received bytes the program never read: the peer outside gets a reset, not EOF."""
    with _with_a_server(net[1], mode, program) as (server, proc):
        conn, _ = server.accept()
        with conn:
            if program == UNREAD:
                conn.sendall(b"y" * 10)
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
            conn.settimeout(10)
            time.sleep(0.5)   # the reset is in before the read: the bytes are dropped
            with pytest.raises(ConnectionResetError):
                while conn.recv(1 << 16):
                    pass


EXEC = textwrap.dedent("""
    import os, socket, sys
    address = ("127.0.0.5", int(sys.argv[1]))
    socket.create_connection(address).sendall(b"old")
    new = ("import socket, sys, time\\n"
           f"socket.create_connection({address!r}).sendall(b'new')\\n"
           "sys.stdin.read()\\n")   # (until the test has looked)
    os.execv(sys.executable, [sys.executable, "-c", new])
""")


@pytest.mark.parametrize("mode", ["linux", "ddio", "dma"])
def test_exec_closes_the_old_images_sockets(net, mode):
    """exec() closes a program's close-on-exec sockets (Python's are): the peer of
    one the old image made sees its end while the new image runs on."""
    with _with_a_server(net[1], mode, EXEC, stdin=subprocess.PIPE) as (server, proc):
        old, _ = server.accept()
        new, _ = server.accept()
        with old, new:
            old.settimeout(10)
            new.settimeout(10)
            assert old.recv(3) == b"old" and new.recv(3) == b"new"
            assert old.recv(1) == b""   # EOF, the new image still running
            assert proc.poll() is None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()


# The old image leaves bytes its peer does not read: its skeleton lingers on, sending.
EXEC_BEHIND = textwrap.dedent("""
    import os, socket, sys
    address = ("127.0.0.5", int(sys.argv[1]))
    old = socket.create_connection(address)
    old.setblocking(False)
    try:
        while True:
            old.send(b"x" * 65536)
    except BlockingIOError:
        pass
    new = ("import socket, sys\\n"
           f"s = socket.create_connection({address!r}); s.sendall(b'new')\\n"
           "sys.stdin.read()\\n")
    os.execv(sys.executable, [sys.executable, "-c", new])
""")


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_new_images_sockets_outlive_the_old_images(net, mode):
    """exec() keeps the pid, and so the process's FIT id: the nComponent closes the
    old image's sockets (as at an exit: what they hold still leaves) and not the
    ones the new image makes meanwhile."""
    with _with_a_server(net[1], mode, EXEC_BEHIND, stdin=subprocess.PIPE) as (server, proc):
        old, _ = server.accept()
        new, _ = server.accept()
        with old, new:
            new.settimeout(10)
            assert new.recv(3) == b"new"
            new.settimeout(1.0)   # ten of the nComponent's ticks: still open, nothing more
            with pytest.raises(TimeoutError):
                new.recv(1)
            assert proc.poll() is None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()


PENDING = textwrap.dedent("""
    import select, socket, sys, time
    host = sys.argv[1]
    srv = socket.socket(); srv.bind((host, 0)); srv.listen(0)
    fill = []
    for _ in range(4):   # fill the accept queue: the next SYN is dropped, retried in 1 s
        x = socket.socket(); x.settimeout(0.5)
        try:
            x.connect(srv.getsockname()); fill.append(x)
        except OSError:
            pass
    if sys.argv[2:] == ["threaded"]:   # a program that selected before: asyncio's case
        select.select([srv], [], [], 0)
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect(srv.getsockname())
    except BlockingIOError as exc:
        print("connect", exc.errno, flush=True)
    print("writable", bool(select.select([], [s], [], 0.3)[1]))
    print("SO_ERROR", s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    for call in (lambda: s.send(b"x"), lambda: s.recv(1), lambda: s.connect(srv.getsockname())):
        try:
            call()
        except OSError as exc:
            print(type(exc).__name__, exc.errno)
    srv.settimeout(0.5)
    for _ in range(8):   # room: the retried SYN gets in
        try:
            fill.append(srv.accept()[0])
        except OSError:
            pass
    print("writable at last", bool(select.select([], [s], [], 10)[1]))
    print("send", s.send(b"x"), s.getpeername()[0] == host)
""")


@pytest.mark.parametrize("threaded", [False, True], ids=["plain", "threaded"])
def test_a_non_blocking_connect_whose_handshake_waits(net, threaded):
    """A full accept queue: the nComponent's handshake is pending. Not writable, send
    and recv EAGAIN, connect EALREADY; once the SYN gets in, writable and connected.
    (threaded: the program selected on a socket before, so its runtime is threaded.)"""
    _, env = net
    more = ["threaded"] if threaded else []
    linux = subprocess.run([sys.executable, "-c", PENDING, "127.0.0.1", *more], cwd=SCRATCH,
                           capture_output=True, text=True, timeout=60)
    rack = run_on_rack(env, PENDING, "127.0.0.11", *more, name=RACK,
                       flags=("--no-shortcuts",))
    assert linux.returncode == 0 and rack.returncode == 0, (linux.stderr, rack.stderr)
    assert linux.stdout.splitlines() == ["connect 115", "writable False", "SO_ERROR 0",
                                         "BlockingIOError 11", "BlockingIOError 11",
                                         "BlockingIOError 114", "writable at last True",
                                         "send 1 True"]
    assert rack.stdout == linux.stdout


FORK = textwrap.dedent("""
    import os, socket, sys, threading, time
    l = socket.socket(); l.bind(("127.0.0.11", 0)); l.listen()
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
    held, go = threading.Event(), threading.Event()
    def holder():   # a thread of the parent holds c's lock across the fork
        with c._lock:
            held.set(); go.wait()
    threading.Thread(target=holder).start()
    held.wait()
    address = l.getsockname()
    pid = os.fork()
    if pid == 0:   # a child that exits as programs do (atexit runs)
        c.send(b"x")
        d = socket.socket(fileno=os.dup(c.fileno()))   # one more handle of it, made here
        d.send(b"y"); d.close()
        print("child inherited ok", flush=True)
        n = socket.create_connection(address)   # its own: to its parent's listener
        n.sendall(b"new")
        print("child new", type(n).__name__, n.getpeername() == address, flush=True)
        fds = len(os.listdir("/proc/self/fd"))
        for _ in range(50):
            socket.socket().close()
        print("child descriptors", len(os.listdir("/proc/self/fd")) - fds, flush=True)
        c.close()   # its copy's descriptors go; the lock its parent's thread held is not
        print("child closed", flush=True)   # this child's
        sys.exit(0)   # (n closes at its exit)
    go.set()
    os.waitpid(pid, 0)
    print("parent", a.recv(2, socket.MSG_WAITALL), flush=True)   # what the child sent
    c.sendall(b"parent"); print("parent", a.recv(10), flush=True)
    a.sendall(b"back"); print("parent", c.recv(10), flush=True)
    n, _ = l.accept(); print("parent", n.recv(10), n.recv(10), flush=True)   # then EOF
""")


@pytest.mark.parametrize("flags", [("--no-shortcuts",), ()], ids=["ddio", "pipe"])
def test_a_forked_child_uses_its_inherited_sockets_through_its_parent(net, flags):
    """A fork()ed child's inherited socket works (its calls are made at its parent,
    forked.py), even with a lock of it held by a parent's thread across the fork; the
    sockets it makes are its own (its own runtime), from the rack's NIC, and close
    without a descriptor left; its close and its exit leave the parent's connection
    whole."""
    _, env = net
    proc = run_on_rack(env, FORK, name=RACK, timeout=60, flags=flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["child inherited ok", "child new BsdSocketStub True",
                                        "child descriptors 0", "child closed",
                                        "parent b'xy'", "parent b'parent'", "parent b'back'",
                                        "parent b'new' b''"]


# A child that started a process which outlives it (holding what the child could
# pass on, the channel to its parent among it): the connection the child held last
# still ends with the child, not with that process (a `sleep` the program stops).
FORK_OUTLIVED = textwrap.dedent("""
    import os, signal, socket
    l = socket.socket(); l.bind(("127.0.0.11", 0)); l.listen()
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
    pid = os.fork()
    if pid == 0:   # (posix_spawn closes no descriptor: the sleep keeps what it may)
        c.send(str(os.posix_spawnp("sleep", ["sleep", "60"], os.environ)).encode())
        os._exit(0)
    c.close()                    # the child's copy is the last
    os.waitpid(pid, 0)
    a.settimeout(30)
    sleeper = int(a.recv(20))
    try:
        print(a.recv(10), flush=True)   # EOF now, not once the sleep ends
    finally:
        os.kill(sleeper, signal.SIGKILL)
""")


def test_a_connection_a_forked_child_held_last_ends_with_the_child(net):
    _, env = net
    proc = run_on_rack(env, FORK_OUTLIVED, name=RACK, timeout=60, flags=("--no-shortcuts",))
    assert (proc.returncode, proc.stdout) == (0, "b''\n"), proc.stderr


# Two children forked back to back, the second making a socket of its own at once: the
# parent's thread that serves the first may hold the runtime's lock at the second
# fork, which must not leave the child's copy of it held.
FORK_RACE = textwrap.dedent("""
    import os, socket, time
    a = socket.socket(); a.bind(("127.0.0.11", 0)); a.listen()
    stuck = 0
    for _ in range(3):
        first = os.fork()
        if first == 0:
            time.sleep(0.3); os._exit(0)
        second = os.fork()
        if second == 0:
            socket.socket().close(); os._exit(0)
        for _ in range(200):   # 10 s at most
            if os.waitpid(second, os.WNOHANG)[0]:
                break
            time.sleep(0.05)
        else:
            stuck += 1; os.kill(second, 9); os.waitpid(second, 0)
        os.waitpid(first, 0)
    print("stuck", stuck, flush=True)
""")

# More handles of an inherited connection, made in the child; the child closes the one
# it inherited (its parent closed its own): each goes on, as on Linux.
FORK_HANDLES = textwrap.dedent("""
    import os, socket, sys
    l = socket.socket(); l.bind(("127.0.0.11", 0)); l.listen()
    for how in ("dup", "fileno", "fromfd"):
        c = socket.create_connection(l.getsockname()); a, _ = l.accept()
        pid = os.fork()
        if pid == 0:
            s = (c.dup() if how == "dup" else
                 socket.socket(fileno=os.dup(c.fileno())) if how == "fileno" else
                 socket.fromfd(c.fileno(), socket.AF_INET, socket.SOCK_STREAM))
            c.close()
            s.sendall(how.encode()); print(how, s.recv(10), flush=True); s.close()
            os._exit(0)
        c.close()
        print("parent", a.recv(10), flush=True); a.sendall(b"back")
        os.waitpid(pid, 0)
        print("parent", a.recv(10), flush=True)   # EOF: the child's handle was the last
""")


@pytest.mark.parametrize("script, expected", [
    (FORK_RACE, ["stuck 0"]),
    (FORK_HANDLES, ["parent b'dup'", "dup b'back'", "parent b''",
                    "parent b'fileno'", "fileno b'back'", "parent b''",
                    "parent b'fromfd'", "fromfd b'back'", "parent b''"]),
], ids=["two-forks", "handles"])
def test_forked_children_as_linux_has_them(net, script, expected):
    _, env = net
    proc = run_on_rack(env, script, name=RACK, timeout=90, flags=("--no-shortcuts",))
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == sorted(expected)
