"""The network path's limits: the default rack holds a thousand connections from
one program, each line echoed; past the nComponent's DRAM, connect() is ENOBUFS and
n0's stats name the limit."""

import errno
import socket
import textwrap
import threading
import tomllib
from importlib import resources

from helpers import running_rack, small_spec, wait_until
from netprogs import (
    environ,
    n0_network,
    run_on_rack,
)

NIC = "127.0.0.11"


THOUSAND = textwrap.dedent("""
    import hashlib, sys
    from socket import create_connection
    socks = [create_connection(("127.0.0.5", int(sys.argv[1]))) for _ in range(1000)]
    def line(i, rnd):
        return b"%04d %s\\n" % (i, hashlib.sha256(b"%d-%d" % (i, rnd)).hexdigest().encode())
    ok = 0
    for rnd in range(2):
        for i, s in enumerate(socks):
            s.sendall(line(i, rnd))
        for i, s in enumerate(socks):
            want, got = line(i, rnd), b""
            while len(got) < len(want):
                got += s.recv(len(want) - len(got))
            ok += got == want
    print(ok)
""")


def _echo_many(server: socket.socket, stop: threading.Event) -> None:
    """A plain echo server outside the rack for as many clients as come."""
    import selectors
    sel = selectors.DefaultSelector()
    server.setblocking(False)
    sel.register(server, selectors.EVENT_READ)
    while not stop.is_set():
        for key, _ in sel.select(0.1):
            if key.fileobj is server:
                conn, _ = server.accept()
                conn.setblocking(True)   # echoes are small: a send never waits long
                sel.register(conn, selectors.EVENT_READ)
                continue
            data = key.fileobj.recv(65536)
            if data:
                key.fileobj.sendall(data)
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()
    for key in list(sel.get_map().values()):
        if key.fileobj is not server:
            key.fileobj.close()


def test_the_default_rack_holds_a_thousand_connections_from_one_program(run_root):
    def default_rack(storage):   # the embedded default, with a storage root of its own
        spec = tomllib.loads(resources.files("splitrack").joinpath("default_rack.toml")
                             .read_text())
        spec["rack"]["name"] = "thousand"
        spec["scomponent"][0]["root"] = storage
        return spec

    stop = threading.Event()
    with running_rack(default_rack) as rack, \
            socket.create_server(("127.0.0.5", 0), backlog=1024) as server:
        echo = threading.Thread(target=_echo_many, args=(server, stop))
        echo.start()
        try:
            proc = run_on_rack(environ(rack), THOUSAND, str(server.getsockname()[1]),
                               name="thousand", timeout=300)
        finally:
            stop.set()
            echo.join()
        assert proc.returncode == 0 and proc.stdout == "2000\n", proc.stderr[-2000:]
        network = n0_network(rack)
        assert network["connected"] == 1000 and network["connections_max"] >= 1000
        wait_until(lambda: n0_network(rack)["dram_buffers_used"] == 0)


def test_past_the_ncomponents_dram_connect_is_enobufs_and_stats_name_the_limit(run_root):
    def tiny_dram(storage):   # 1 MiB: eight 128 KiB rings, four connections
        spec = small_spec(storage, name="tinydram")
        spec["ncomponent"][0]["dram"] = "1MiB"
        return spec

    code = textwrap.dedent("""
        import socket, sys
        held = [socket.create_connection(("127.0.0.5", int(sys.argv[1]))) for _ in range(4)]
        try:
            socket.create_connection(("127.0.0.5", int(sys.argv[1])))
        except OSError as exc:
            print(exc.errno, exc.strerror)
    """)
    with running_rack(tiny_dram) as rack, socket.create_server(("127.0.0.5", 0)) as server:
        proc = run_on_rack(environ(rack), code, str(server.getsockname()[1]), name="tinydram")
        assert proc.stdout == f"{errno.ENOBUFS} No buffer space available\n", proc.stderr
        assert n0_network(rack)["connections_max"] == 4
