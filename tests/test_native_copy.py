"""A native program's less common socket calls: those that move a socket's bytes other
than send and recv -- sendfile, splice, sendmmsg and recvmmsg (native/preload_copy.c,
probe tests/c/copy_probe.c) and stdio (native/preload_stdio.c, tests/c/stdio_probe.c)
-- FIONREAD, and the receive and send timeouts:

- sendfile, with an offset and without one, sends every byte of a file through n0,
  in DDIO and in DMA, and leaves the offsets as Linux's does; a sendmmsg of three
  messages follows them in order (before, the kernel moved sendfile's bytes into the
  rack descriptor's own socket: the program said they were sent, none arrived);
- a splice into a rack socket is EINVAL, said once on stderr, and takes nothing
  from its pipe;
- recvmmsg (MSG_WAITFORONE) and sendmmsg on a UDP socket on the rack: each datagram
  back whole, to its sender;
- an fdopen()ed stream of a rack socket (fprintf, fgets, fileno, fclose) and dprintf:
  their bytes cross the rack in order, the answer is read back, fclose closes the
  stream's descriptor, and what the stream still buffers at exit() is sent (before,
  glibc's stdio wrote into the rack descriptor's bell: lost);
- a program's stdin and stdout on a rack socket (an inetd-style server dup2()s the
  connection onto them and exec()s it) are streams of the interposer's: fgets and
  printf cross the rack (before, printf's bytes went into the bell: lost);
- ioctl FIONREAD is the stub's count of what a recv would get (a datagram socket:
  the next datagram's size), not the kernel's count of the bell's bytes;
- SO_RCVTIMEO and SO_SNDTIMEO (tests/c/timeo_probe.c) bound a blocking recv and send;
- the descriptors a program gets are numbered as on Linux (tests/c/fd_probe.c).
"""

import os
import socket
import threading

import pytest

from netprogs import collecting_server, n0_network, on_rack, run, run_on_rack

NIC = "127.0.0.11"
OUTSIDE = "127.0.0.2"   # a host of the outside world: reached through n0's NIC


RACK = "copy"   # the name of this module's rack (conftest.py: net)


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_sendfile_and_sendmmsg_send_every_byte_through_the_rack(net, built, tmp_path, mode):
    rack, env = net
    data = os.urandom(3_000_001)   # (not a multiple of a line, nor of the slices)
    path = tmp_path / "payload"
    path.write_bytes(data)
    with collecting_server(OUTSIDE) as (port, got):
        before = n0_network(rack)
        done = run_on_rack(env, [built["copy_probe"], "stream", OUTSIDE, str(port),
                                 str(path)], mode=mode, name=RACK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(len(data) + 6)]
    assert bytes(got) == data + b"abcdef"
    assert n0_network(rack)["connected"] - before["connected"] >= 1   # through n0
    said = [line for line in done.stderr.splitlines() if "splice()" in line]
    assert len(said) == 1 and "EINVAL" in said[0]


def test_recvmmsg_and_sendmmsg_keep_each_datagram_whole(net, built):
    rack, env = net
    datagrams = [b"one", b"", os.urandom(1400)]   # (FIONREAD: the first's size, 3)
    with on_rack(env, [built["copy_probe"], "dgram", NIC], name=RACK) as (probe, (port,)):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.bind((OUTSIDE, 0))
            client.settimeout(30)
            for d in datagrams:
                client.sendto(d, (NIC, port))
            back = [client.recvfrom(4096) for _ in datagrams]
        assert probe.wait(timeout=30) == 0, probe.stderr.read()
        assert probe.stdout.read().split() == ["ok", "3"]
    assert [d for d, _ in back] == datagrams
    assert {addr for _, addr in back} == {(NIC, port)}


def test_stdio_on_a_rack_socket_crosses_the_rack(net, built):
    rack, env = net
    with socket.create_server((OUTSIDE, 0)) as server:
        heard = []

        def answer() -> None:
            conn, _ = server.accept()
            with conn, conn.makefile("rb") as lines:
                heard.extend([lines.readline(), lines.readline()])
                conn.sendall(b"a" * 999 + b"\n")
                heard.extend([lines.readline(), lines.read()])   # then EOF: its exit
        peer = threading.Thread(target=answer, daemon=True)
        peer.start()
        done = run_on_rack(env, [built["stdio_probe"], OUTSIDE, str(server.getsockname()[1])],
                           name=RACK)
        peer.join(timeout=30)
    assert (done.returncode, done.stdout) == (0, "ok 1000\n"), done.stderr
    assert heard == [b"fprintf 42\n", b"dprintf too\n", b"bye\n", b""]


@pytest.mark.parametrize("mode", ["ddio", "dma"])
def test_an_inetd_style_programs_stdio_crosses_the_rack(net, built, mode):
    """fork_server.c exec()s stdio_probe's line filter with the connection on its stdin
    and stdout: 100 lines, each written and read back in capitals."""
    rack, env = net
    argv = [built["fork_server"], NIC, "0", "1", built["stdio_probe"], "filter"]
    with on_rack(env, argv, name=RACK, mode=mode) as (server, (port,)):
        with socket.create_connection((NIC, port), timeout=30) as sock, \
                sock.makefile("rb") as lines:
            for i in range(100):
                sock.sendall(b"line %d of the rack\n" % i)
                assert lines.readline() == b"LINE %d OF THE RACK\n" % i
        assert server.wait(timeout=30) == 0, server.stderr.read()


def test_a_native_programs_receive_and_send_timeouts(net, built):
    """SO_RCVTIMEO and SO_SNDTIMEO set by a C program (tests/c/timeo_probe.c): the
    option reads back as set, a recv past it fails with EAGAIN, and a send past it
    returns what the window took (before, both were ENOPROTOOPT, and the recv waited
    for ever)."""
    rack, env = net
    with socket.create_server((OUTSIDE, 0)) as server:
        held = []
        peer = threading.Thread(target=lambda: held.append(server.accept()), daemon=True)
        peer.start()   # it takes the connection, then neither reads nor sends
        done = run_on_rack(env, [built["timeo_probe"], OUTSIDE,
                                 str(server.getsockname()[1])], name=RACK)
        peer.join(timeout=30)
        for conn, _ in held:
            conn.close()
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def test_a_c_programs_descriptors_are_numbered_as_on_linux(net, built):
    """The descriptors a C program gets on the rack are those Linux gives it (its first
    socket 3, then the next free number...; a fork()ed child's accept() too), the
    rack's own living out of its way: a program that sizes its tables by the
    descriptors it expects (wrk's event loop) works. tests/c/fd_probe.c prints them,
    here and as a plain process."""
    rack, env = net
    linux = run([built["fd_probe"], "127.0.0.1"])
    got = run_on_rack(env, [built["fd_probe"], NIC], name=RACK)
    assert linux.stdout.startswith("epoll 3 tcp 4 ") and got.stdout == linux.stdout, (
        linux.stdout, got.stdout, got.stderr)
