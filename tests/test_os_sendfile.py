"""os.sendfile on a rack socket, in a Python program (splitrack/guest/os_calls.py):
asyncio's loop.sock_sendfile (which calls it) sends every byte of a file through
n0; os.sendfile with an offset leaves the file's position, without one moves it
as far as the socket took, and never blocks (EAGAIN once the window is full); on
a kernel socket it is still the kernel's. (Before,
the bytes went into the rack socket's bell: the program hung, none arrived.)"""

import os
import textwrap

import pytest

from netprogs import collecting_server, n0_network, network_rack, run_on_rack

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


@pytest.fixture(scope="module")
def net():
    with network_rack("ossf") as rack_env:
        yield rack_env


def test_sendfile_of_a_python_program_crosses_the_rack(net, tmp_path):
    rack, env = net
    data = os.urandom(3_000_001)
    path = tmp_path / "payload"
    path.write_bytes(data)
    with collecting_server(OUTSIDE) as (port, got):
        before = n0_network(rack)
        done = run_on_rack(env, PROGRAM, str(port), str(path), name="ossf")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", str(len(data))]
    assert bytes(got) == data
    assert n0_network(rack)["connected"] - before["connected"] >= 1   # through n0
