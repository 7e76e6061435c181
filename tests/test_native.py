"""Native programs on the rack (native/preload.c, splitrack/guest/interposer.py): C
programs built here from tests/c/ run unmodified with `splitrack run`, and their TCP
and UDP sockets are bsdSocketStubs whose bytes cross n0, in DDIO and in DMA, checked
byte for byte; their poll, select and epoll waits read the rack's pushes
themselves. A fork()ed child's inherited sockets work (through its parent), as a
Python program's do; a static binary is refused at launch; IPv6 is EAFNOSUPPORT; an
address outside the rack is reached through n0's NIC, never from the host's own
stack. Signals: test_native_signals.py. Real tools on the rack: test_native_tools.py;
less common calls, and descriptors' numbers: test_native_copy.py."""

import os
import queue
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from netprogs import n0_network, on_rack, run, run_on_rack

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: not the rack's, not 127.0.0.1
HERE = os.path.dirname(os.path.abspath(__file__))


RACK = "native"   # the name of this module's rack (conftest.py: net)


def linux_checksum(built, nbytes: int) -> str:
    """The echo client's line against the same server as a plain process."""
    with subprocess.Popen([built["echo_server"], "127.0.0.1", "0", "block", "1"],
                          stdout=subprocess.PIPE, text=True) as server:
        port = server.stdout.readline().split()[1]
        line = run([built["echo_client"], "127.0.0.1", port, str(nbytes), "4096"]).stdout
        server.wait(timeout=30)
    return line


@pytest.mark.parametrize("mode,loop", [("ddio", "block"), ("ddio", "poll"),
                                       ("ddio", "epoll"), ("dma", "block"), ("dma", "epoll")])
def test_a_c_echo_server_on_the_rack_echoes_every_byte(net, built, mode, loop):
    """A C server (blocking; poll; epoll) on p0; a client outside the rack, and one on p1
    (no shortcut: through n0 twice), each sends 1 MB and checks every byte back."""
    rack, env = net
    expected = linux_checksum(built, 1_000_000)
    assert expected.startswith("ok 1000000 ")
    before = n0_network(rack)
    with on_rack(env, [built["echo_server"], NIC, "0", loop, "2"], name=RACK,
                 mode=mode) as (server, (port,)):
        outside = run([built["echo_client"], NIC, str(port), "1000000", "4096"])
        assert (outside.returncode, outside.stdout) == (0, expected), outside.stderr
        inside = run_on_rack(env, [built["echo_client"], NIC, str(port), "1000000", "4096"],
                             on="p1", mode=mode, name=RACK, flags=("--no-shortcuts",))
        assert (inside.returncode, inside.stdout) == (0, expected), inside.stderr
        assert server.wait(timeout=30) == 0, server.stderr.read()
    after = n0_network(rack)
    assert after["accepted"] - before["accepted"] >= 2     # the server's, at its skeleton
    assert after["connected"] - before["connected"] >= 1   # p1's client's


@pytest.mark.parametrize("mode,loop", [("ddio", "block"), ("ddio", "poll"), ("dma", "epoll"),
                                       ("dma", "waitall")])
def test_a_c_server_that_reads_less_than_waits_gets_every_byte(net, built, mode, loop):
    """The server reads 1000 bytes a call while up to 100 KB wait: most of those recvs
    are taken in C, without the interpreter (native/fastrecv.h), across extCache lines,
    the ring's wrap and the credits given back; 2 MB, every byte checked. DMA's lines
    are stale until faulted in, so there copies stop short at a line: a MSG_WAITALL
    recv ("waitall") still gets all 1000 bytes each time."""
    rack, env = net
    expected = linux_checksum(built, 2_000_000)
    with on_rack(env, [built["echo_server"], NIC, "0", loop, "1", "1000"], name=RACK,
                 mode=mode) as (server, (port,)):
        got = run([built["echo_client"], NIC, str(port), "2000000", "100000"])
        assert (got.returncode, got.stdout) == (0, expected), got.stderr
        assert server.wait(timeout=30) == 0, server.stderr.read()


@pytest.mark.parametrize("loop", ["poll", "epoll"])
def test_a_c_server_polls_a_fit_shortcut_beside_its_inbox(net, built, loop):
    """A client on p1 reaches the poll()ing server on p0 by a FIT shortcut (no
    nComponent on the way): the server's waits read the shortcut's channel beside
    its inbox (native/preload_wait.c), every byte echoed."""
    rack, env = net
    expected = linux_checksum(built, 1_000_000)
    before = n0_network(rack)
    with on_rack(env, [built["echo_server"], NIC, "0", loop, "1"], name=RACK) as (
            server, (port,)):
        inside = run_on_rack(env, [built["echo_client"], NIC, str(port), "1000000", "4096"],
                             on="p1", name=RACK)
        assert (inside.returncode, inside.stdout) == (0, expected), inside.stderr
        assert server.wait(timeout=30) == 0, server.stderr.read()
    assert n0_network(rack)["accepted"] == before["accepted"]   # a shortcut: n0 not asked


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_c_programs_own_waits_read_its_inbox(net, built, mode):
    """Once a C program waits on a rack socket, its poll, select and epoll waits read
    its inbox themselves (native/preload_wait.c), no inbox thread started for them:
    select times out as Linux's does;
    a descriptor that is always ready does not starve the rack's pushes; a thread
    blocked in read() and another in epoll_wait() each get their bytes; a closed
    descriptor is EBADF; a wait left by siglongjmp leaves the next wait working."""
    rack, env = net
    with on_rack(env, [built["wait_probe"], NIC, "0"], name=RACK, mode=mode) as (
            probe, (port,)):
        said: queue.Queue = queue.Queue()   # its lines, read aside: a step that never
        threading.Thread(target=lambda: [said.put(x) for x in probe.stdout], daemon=True
                         ).start()               # comes fails the test, not hang it

        def line() -> str:
            return said.get(timeout=30)

        with socket.create_connection((NIC, port), timeout=20) as one:
            assert line() == "select 0 left 0 threads +0\n"   # no inbox thread started
            time.sleep(0.3)   # the probe polls beside its always-ready pipe meanwhile
            one.sendall(b"a")
            busy = line().split()
            assert busy[0] == "busy" and int(busy[1]) >= 1, busy
            with socket.create_connection((NIC, port), timeout=20) as two:
                time.sleep(0.2)   # a thread blocks in read() on one, main in epoll_wait()
                one.sendall(b"b")
                time.sleep(0.2)
                two.sendall(b"c")
                assert line() == "threads ok\n"
                assert line() == "ebadf ok\n"
                assert line() == "jumped\n"   # out of a poll by siglongjmp: the next
                two.sendall(b"d")              # wait still reads the inbox
                assert line() == "after the jump ok\n"
        assert probe.wait(timeout=30) == 0, probe.stderr.read()


def test_the_racks_own_waits_in_a_program_are_never_the_programs():
    """A native program's poll and ppoll are the interposer's, which read the program's
    inbox (native/preload_wait.c). The rack's own C code that runs in the program
    (FIT's rings, the heap's pager thread) sleeps by the system call
    (native/kernel_poll.h): none of its modules takes a wait from libc, where the
    interposer would take it for the program's."""
    import importlib
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) on this machine")
    waits = {"poll", "ppoll", "select", "pselect", "epoll_wait", "epoll_pwait", "epoll_pwait2"}
    for name in ("_fitring", "_stubpath", "_extcache", "_rackmem", "_guest"):
        path = importlib.import_module(f"native.{name}").__file__
        out = subprocess.run([nm, "-D", "--undefined-only", path], capture_output=True,
                             text=True, check=True).stdout
        taken = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
        assert not taken & waits, (name, taken & waits)


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_c_udp_echo_keeps_every_datagram_whole(net, built, mode):
    """UDP in C: a server on p0; a connected client on p1 (through n0), then one outside
    the rack; 200 datagrams of 0-9000 bytes each, each echoed whole and in order."""
    rack, env = net
    before = n0_network(rack)
    for client_on in ("p1", None):
        with on_rack(env, [built["udp_echo"], "server", NIC, "0"], name=RACK,
                     mode=mode) as (server, (port,)):
            argv = [built["udp_echo"], "client", NIC, str(port), "200"]
            got = run_on_rack(env, argv, on=client_on, mode=mode, name=RACK,
                              flags=("--no-shortcuts",)) if client_on else \
                run([*argv, OUTSIDE])
            assert got.returncode == 0 and got.stdout.startswith("ok 200 "), got.stderr
            assert server.wait(timeout=30) == 0, server.stderr.read()
    after = n0_network(rack)
    assert after["datagrams_in"] - before["datagrams_in"] >= 600


def test_a_forked_child_of_a_c_program_shares_its_parents_socket(net, built):
    """As for a Python program: the child's copy of a connection works (through its
    parent), a connection it makes is its own and echoes, and its parent's connection
    goes on after it."""
    _, env = net
    with on_rack(env, [built["echo_server"], NIC, "0", "poll", "2"],
                 name=RACK) as (server, (port,)):
        got = run_on_rack(env, [built["fork_probe"], NIC, str(port)], on="p1", name=RACK)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["child send sent", "child fionread 1",
                                       "child socket echoed new", "parent ok"]


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_a_forking_c_server_serves_each_connection_in_a_child(net, built, mode):
    """fork_server.c: accept, fork, the parent closes its copy at once, the child echoes;
    three clients at once (two outside the rack, one on p1), every byte checked."""
    rack, env = net
    expected = linux_checksum(built, 300_000)
    with on_rack(env, [built["fork_server"], NIC, "0", "3"], name=RACK,
                 mode=mode) as (server, (port,)):
        argv = [built["echo_client"], NIC, str(port), "300000", "3000"]
        outside = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for _ in range(2)]
        inside = run_on_rack(env, argv, on="p1", mode=mode, name=RACK,
                             flags=("--no-shortcuts",))
        assert (inside.returncode, inside.stdout) == (0, expected), inside.stderr
        for proc in outside:
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, out) == (0, expected), err
        assert server.wait(timeout=30) == 0, server.stderr.read()


STDIN_TO_STDOUT = "import os\nwhile data := os.read(0, 65536):\n    os.write(1, data)\n"


@pytest.mark.parametrize("mode,program", [("ddio", "cat"), ("dma", "cat"),
                                          ("ddio", "python")])
def test_an_inetd_style_server_hands_each_connection_to_an_exec_ed_program(net, built, mode,
                                                                          program):
    """fork_server.c with a PROGRAM: accept, fork, dup2 the connection onto the child's
    stdin and stdout, exec `cat` or a Python filter (which know nothing of sockets):
    the image they run in takes the rack sockets it inherited back from its parent
    (forked.py), so they echo through the rack -- two clients, every byte checked, n0
    counting them."""
    rack, env = net
    expected = linux_checksum(built, 200_000)
    before = n0_network(rack)
    argv = ["cat"] if program == "cat" else [sys.executable, "-c", STDIN_TO_STDOUT]
    with on_rack(env, [built["fork_server"], NIC, "0", "2", *argv], name=RACK,
                 mode=mode) as (server, (port,)):
        argv = [built["echo_client"], NIC, str(port), "200000", "3000"]
        clients = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for _ in range(2)]
        for proc in clients:
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, out) == (0, expected), err
        assert server.wait(timeout=30) == 0, server.stderr.read()
    after = n0_network(rack)
    assert after["accepted"] - before["accepted"] >= 2


def _read_to_eof(port: int, send: bytes = b"", timeout: float = 20) -> bytes:
    with socket.create_connection((NIC, port), timeout=timeout) as sock:
        sock.sendall(send)
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while data := sock.recv(65536):
            got += data
    return got


def test_an_exec_ed_shell_that_closes_its_socket_descriptors_ends_the_connection(net, built):
    """The image a fork()ed child exec()s gets a handle of its own for each descriptor
    of the connection (stdin's close leaves stdout working), and the handles of the
    descriptors that did not survive exec() are closed: the client sees EOF once the
    shell closed both, while its sleep goes on (were it not, the socket timeout)."""
    _, env = net
    script = "exec 0<&-; echo still-here; exec 1>&-; sleep 5"
    with on_rack(env, [built["fork_server"], NIC, "0", "1", "sh", "-c", script],
                 name=RACK) as (server, (port,)):
        assert _read_to_eof(port, timeout=4) == b"still-here\n"
        assert server.wait(timeout=30) == 0, server.stderr.read()


INETD_PY = textwrap.dedent("""
    import os, socket, sys
    l = socket.socket(); l.bind((sys.argv[1], 0)); l.listen()
    print(l.getsockname()[1], flush=True)
    c, _ = l.accept()
    pid = os.fork()
    if pid == 0:   # Python's os.dup2 is not interposed: the copies keep the connection
        os.dup2(c.fileno(), 0); os.dup2(c.fileno(), 1); c.close()
        os.execvp("cat", ["cat"])
    c.close()
    _, status = os.waitpid(pid, 0)
    sys.exit(status >> 8)
""")


def test_a_python_inetd_that_closes_its_copy_after_dup2_still_hands_over(net, built):
    _, env = net
    data = os.urandom(100_000)
    with on_rack(env, INETD_PY, NIC, name=RACK) as (server, (port,)):
        assert _read_to_eof(port, data) == data
        assert server.wait(timeout=30) == 0, server.stderr.read()


def test_native_programs_launched_at_once_each_get_the_interpreter():
    """The pMonitor launches each program in a thread of its own; two native programs
    launched at once, the first on a fresh pComponent, each asked sysconfig where
    libpython is while its table was half filled (Python 3.11 fills it without a
    lock), and one started with "no shared library" (bench native's iperf3 server,
    exit 127). native_run now asks at import: threads started after it see a whole
    table, in each of five fresh interpreters."""
    probe = textwrap.dedent("""
        import sysconfig, threading
        import splitrack.native_run
        from splitrack.native_run import preload_env
        start, got = threading.Barrier(4), []
        def launch():
            start.wait()
            got.append((sysconfig.get_config_var("LIBDIR"),
                        preload_env({})["SPLITRACK_LIBPYTHON"]))
        threads = [threading.Thread(target=launch) for _ in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        print(sum(d is None or not lib.startswith("/") for d, lib in got))
    """)
    for _ in range(5):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0"


def test_a_static_binary_is_refused_with_the_reason(net, built, tmp_path):
    _, env = net
    cc = shutil.which("cc") or shutil.which("gcc")
    static = tmp_path / "static_client"
    made = run([cc, "-static", "-o", str(static), os.path.join(HERE, "c", "echo_client.c")])
    if made.returncode != 0:
        pytest.skip(f"no static C library here: {made.stderr.strip()[-200:]}")
    got = run_on_rack(env, [str(static), NIC, "1", "1", "1"], name=RACK)
    assert got.returncode == 127
    assert "statically linked" in got.stderr and "host's" in got.stderr


def test_a_c_program_reaches_no_host_address_behind_the_racks_back(net, built):
    """127.0.0.1 on the rack is the rack's loopback: a server on the host's 127.0.0.1 is
    not reached (ECONNREFUSED). An address outside the rack is reached through n0's
    NIC (n0 counts it; the server sees the NIC's address). IPv6: EAFNOSUPPORT."""
    rack, env = net
    with socket.create_server(("127.0.0.1", 0)) as host_only:
        port = host_only.getsockname()[1]
        got = run_on_rack(env, [built["echo_client"], "127.0.0.1", str(port), "10", "10"],
                          name=RACK)
    assert got.returncode == 1 and "connect: Connection refused" in got.stderr
    before = n0_network(rack)
    with subprocess.Popen([built["echo_server"], OUTSIDE, "0", "block", "1"],
                          stdout=subprocess.PIPE, text=True) as outside:
        port = outside.stdout.readline().split()[1]
        got = run_on_rack(env, [built["echo_client"], OUTSIDE, port, "100000", "1000"],
                          name=RACK)
        assert got.returncode == 0, got.stderr
        outside.wait(timeout=30)
    assert n0_network(rack)["connected"] - before["connected"] >= 1
    six = run_on_rack(env, [built["echo_client"], "::1", "9", "1", "1"], name=RACK)
    assert six.returncode == 1
    assert "socket: Address family not supported" in six.stderr   # not the host's IPv6


UVLOOP_ECHO = """
import asyncio, sys, uvloop
async def handle(r, w):
    w.write(await r.readline()); await w.drain(); w.close()
async def main():
    srv = await asyncio.start_server(handle, sys.argv[1], 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()
uvloop.run(main())
"""
UVLOOP_CLIENT = """
import asyncio, sys, uvloop
async def main():
    r, w = await asyncio.open_connection(sys.argv[1], int(sys.argv[2]))
    w.write(b"through libuv\\n"); await w.drain()
    print(await r.readline(), w.get_extra_info("sockname")[0])
    w.close()
uvloop.run(main())
"""


def test_uvloop_programs_sockets_are_the_racks(net):
    """uvloop's libuv calls libc, past the drop-in: the interposer serves it in the
    program's own interpreter. A uvloop server on p0 (its listener a stub that
    create_server detach()es to libuv) answers a client outside and a uvloop client on
    p1, whose own socket libuv made (it leaves from a NIC of n0, not 127.0.0.1); python
    -I, with no drop-in, gets a stub too."""
    rack, env = net
    before = n0_network(rack)
    with on_rack(env, UVLOOP_ECHO, NIC, name=RACK) as (server, (port,)):
        with socket.create_connection((NIC, port), timeout=10) as outside:
            outside.sendall(b"from outside\n")
            assert outside.recv(100) == b"from outside\n"
        got = run_on_rack(env, UVLOOP_CLIENT, NIC, str(port), on="p1", name=RACK,
                          flags=("--no-shortcuts",))
        assert got.returncode == 0, got.stderr
        line, ip = got.stdout.rsplit(" ", 1)
        assert line == "b'through libuv\\n'" and ip.strip() in ("127.0.0.11", "127.0.0.12")
    after = n0_network(rack)
    assert after["accepted"] - before["accepted"] >= 2
    assert after["connected"] - before["connected"] >= 1
    with socket.create_server((OUTSIDE, 0)) as host:
        isolated = run_on_rack(env, ["python3", "-I", "-c", (
            "import socket, sys; c = socket.create_connection(('127.0.0.2', int(sys.argv[1])));"
            "print(c.getsockname()[0])"), str(host.getsockname()[1])], name=RACK)
    assert isolated.returncode == 0, isolated.stderr
    assert isolated.stdout.strip() in ("127.0.0.11", "127.0.0.12")
