"""A Python program's calls on a rack socket's descriptor itself, not through the
socket object (splitrack/guest/own_fds.py, through the native interposer), and a
rack socket handed to a program that subprocess starts (splitrack/guest/spawning.py).

Before, each of these reached the socket's bell, the kernel's descriptor that
only says whether the stub has bytes or room: os.sendfile's bytes went nowhere
(asyncio's sock_sendfile hung), os.write's too, os.read found none of the
socket's, FIONREAD counted the bell's, and a program that subprocess gave the
socket as its stdin and stdout read EAGAIN or ECONNRESET (checked: each test here
failed so)."""

import os
import socket
import textwrap

from netprogs import (
    collecting_server,
    connect,
    echo_server,
    n0_network,
    on_rack,
    recv_exactly,
    run_on_rack,
)

OUTSIDE = "127.0.0.2"   # a host of the outside world: reached through n0's NIC

PROGRAM = textwrap.dedent("""
    import asyncio, os, select, socket, sys
    port, path = int(sys.argv[1]), sys.argv[2]
    size = os.path.getsize(path)
    async def main():
        s = socket.create_connection(("127.0.0.2", port))
        s.setblocking(False)
        with open(path, "rb") as f:
            sent = await asyncio.get_running_loop().sock_sendfile(s, f, 0, size // 2,
                                                                  fallback=False)
            assert sent == size // 2 and f.tell() == size // 2, (sent, f.tell())
            f.seek(size // 2)
            while f.tell() < size:   # offset None: from, and past, the position
                try:
                    assert os.sendfile(s.fileno(), f.fileno(), None, size) > 0
                except BlockingIOError:   # (never blocks: a non-blocking socket's)
                    assert select.select([], [s], [], 30)[1], "never writable again"
            assert os.sendfile(s.fileno(), f.fileno(), 0, 0) == 0
        s.close()
        a, b = socket.socketpair()   # a kernel socket: the kernel's sendfile
        with open(path, "rb") as f:
            assert os.sendfile(a.fileno(), f.fileno(), 0, 1000) == 1000
        assert b.recv(2000) == open(path, "rb").read(1000)
        print("ok", size)
    asyncio.run(main())
""")


RACK = "pyfd"   # the name of this module's rack (conftest.py: net)


def test_sendfile_of_a_python_program_crosses_the_rack(net, tmp_path):
    """asyncio's loop.sock_sendfile (which calls os.sendfile) sends every byte of a
    file through n0; os.sendfile with an offset leaves the file's position, without
    one moves it as far as the socket took, and does not wait on a non-blocking
    socket (EAGAIN once the window is full); on a kernel socket it is the kernel's."""
    rack, env = net
    data = os.urandom(3_000_001)
    path = tmp_path / "payload"
    path.write_bytes(data)
    with collecting_server(OUTSIDE) as (port, got):
        before = n0_network(rack)
        done = run_on_rack(env, PROGRAM, str(port), str(path), name=RACK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(len(data))]
    assert bytes(got) == data
    assert n0_network(rack)["connected"] - before["connected"] >= 1   # through n0


CALLS = textwrap.dedent("""
    import ctypes, errno, fcntl, os, select, signal, socket, struct, subprocess, sys, termios
    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]
    class Msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                    ("iov", ctypes.POINTER(Iovec)), ("iovlen", ctypes.c_size_t),
                    ("control", ctypes.c_char_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    class Mmsghdr(ctypes.Structure):   # struct mmsghdr (64 bytes)
        _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]
    def sendmmsg(sock, fds):   # one byte a message, fds[i]: the descriptors it passes
        v, iov = (Mmsghdr * len(fds))(), Iovec(b"m", 1)
        for m, passed in zip(v, fds):
            m.hdr.iov, m.hdr.iovlen = ctypes.pointer(iov), 1
            if passed:
                m.hdr.control = struct.pack("@Nii", socket.CMSG_LEN(4), socket.SOL_SOCKET,
                                            socket.SCM_RIGHTS) + struct.pack("@i4x", *passed)
                m.hdr.controllen = socket.CMSG_SPACE(4)
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.sendmmsg(sock.fileno(), v, len(fds), 0), ctypes.get_errno()
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    fd = s.fileno()

    def echoed(n):   # wait until the echo of n bytes is all there
        while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0" * 4))[0] < n:
            select.select([s], [], [], 30)
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0" * 4))[0]

    assert os.write(fd, b"written") == 7
    assert echoed(7) == 7
    assert os.read(fd, 100) == b"written"                # blocking: no timeout
    assert os.writev(fd, [b"vec", b"tor"]) == 6
    echoed(6)
    a, b = bytearray(2), bytearray(10)
    assert os.readv(fd, [a, b]) == 6 and a + b[:4] == b"vector"
    with open(fd, "r+b", buffering=0, closefd=False) as f:   # io.FileIO
        f.write(b"file")
        echoed(4)
        assert f.read(4) == b"file"
    s.settimeout(5)   # a timeout: CPython's descriptor is non-blocking
    try:
        os.read(fd, 10)
        raise AssertionError("os.read waited")
    except BlockingIOError:
        pass
    s.settimeout(None)
    pid = os.fork()
    if pid == 0:   # a fork()ed child cannot pass the socket on: said, not lost
        try:
            subprocess.Popen(["true"], stdin=s)
            os._exit(1)
        except OSError as exc:
            os._exit(0 if exc.errno == errno.EOPNOTSUPP else 2)
    assert os.waitpid(pid, 0)[1] == 0
    here, there = socket.socketpair()   # SCM_RIGHTS would hand over the bell: refused
    try:
        socket.send_fds(here, [b"x"], [fd])
        raise AssertionError("a rack socket passed")
    except OSError as exc:
        assert exc.errno == errno.EOPNOTSUPP, exc
    assert socket.send_fds(here, [b"x"], [there.fileno()]) == 1   # a kernel socket: passes
    assert sendmmsg(here, [[fd]]) == (-1, errno.EOPNOTSUPP)   # sendmmsg's messages too
    assert sendmmsg(here, [[], [fd], []])[0] == 1   # those before it go
    assert sendmmsg(here, [[there.fileno()], []])[0] == 2
    got, passed = b"", []
    while len(got) < 4 and select.select([there], [], [], 10)[0]:
        data, fds, _, _ = socket.recv_fds(there, 16, 4)   # what went: b"x" and a
        got, passed = got + data, passed + fds            # descriptor, b"m", b"mm" and one
    assert (got, len(passed)) == (b"xmmm", 2), (got, passed)
    for received in passed:
        os.close(received)
    copy = os.dup2(fd, 50)   # one more reference: the connection outlives s
    s.close()
    assert os.write(copy, b"dup2") == 4
    assert os.read(copy, 4) == b"dup2"
    os.close(copy)
    srv = socket.create_server(("127.0.0.11", 0))   # both ends here: a pipe shortcut
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    assert os.write(a.fileno(), b"shortcut") == 8
    assert os.read(b.fileno(), 8) == b"shortcut"   # (blocking, as b has no timeout)
    def interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:   # an interrupt in a blocking os.read is the program's, not an error
        os.read(b.fileno(), 8)
        raise AssertionError("os.read returned")
    except KeyboardInterrupt:
        pass
    print("ok", flush=True)
""")


def test_calls_on_the_descriptor_reach_the_socket(net):
    """os.write, os.read, os.writev, os.readv, io.FileIO over the descriptor and
    ioctl(FIONREAD) are the socket's; a handle with a timeout has a non-blocking
    descriptor, as CPython's; an os.dup2 copy is a reference of its own; a pipe
    shortcut's descriptor too; a KeyboardInterrupt in a blocking os.read is raised
    there. A fork()ed child's Popen of an inherited socket is EOPNOTSUPP (it passes
    one fork only), and so is passing it to another process (SCM_RIGHTS)."""
    rack, env = net
    with echo_server() as listener:
        ip, port = listener.getsockname()
        done = run_on_rack(env, CALLS, ip, str(port), name=RACK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


SPAWNER = textwrap.dedent("""
    import os, socket, subprocess, sys
    children = {
        "native": (["tr", "a-z", "A-Z"], {}),
        "python": ([sys.executable, "-c",
                    "import sys; sys.stdout.write(sys.stdin.read().upper())"], {}),
        "shell": ("tr a-z A-Z", {"shell": True}),   # the shell's child takes them
    }
    srv = socket.create_server(("127.0.0.11", 0))
    print(srv.getsockname()[1], flush=True)
    for argv, kw in children.values():
        conn, _ = srv.accept()
        child = subprocess.Popen(argv, stdin=conn, stdout=conn, **kw)
        conn.close()   # the child's descriptors keep the connection
        assert child.wait(timeout=60) == 0
    conn, _ = srv.accept()
    os.dup2(conn.fileno(), 0)   # its stdin, left to the child as it is
    child = subprocess.Popen(["tr", "a-z", "A-Z"], stdout=conn)
    conn.close()
    os.close(0)
    assert child.wait(timeout=60) == 0
    print("done", flush=True)
""")


def test_a_program_subprocess_starts_has_the_socket(net):
    """Popen(stdin=conn, stdout=conn): an inetd-style server in Python. The program it
    starts (native, Python, or a shell's child) reads and writes the connection,
    which stays open after the server closes its own socket, and ends at the
    program's exit (EOF for the client). Also a stdin that os.dup2() put there and
    Popen leaves as it is."""
    rack, env = net
    with on_rack(env, SPAWNER, name=RACK) as (proc, (port,)):
        for name in ("native", "python", "shell", "inherited stdin"):
            with connect(port) as client:
                text = f"hello from the {name} client\n".encode()
                client.sendall(text)
                client.shutdown(socket.SHUT_WR)
                assert recv_exactly(client, len(text)) == text.upper(), name
                assert client.recv(10) == b"", f"{name}: no EOF at the program's end"
        assert proc.stdout.readline().split() == ["done"], proc.stderr.read()
