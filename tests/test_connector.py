"""The nComponent's connect() (monitors/connector.py, native/skelconnect.c): N_CONNECT
answered in the data plane, from sockets made before, once its sender holds a grant;
in Python otherwise, with the same answers; grants follow the slices. Real racks, real
programs, real kernel sockets."""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

from fit_rpc import Op
from helpers import wait_until
from native.skelpath import POOL
from netprogs import n0_network, network_rack, on_rack, run_on_rack

NAME = "conn"
OUTSIDE = "127.0.0.5"   # a "remote Linux machine": outside the rack
FULL = {"127.0.0.11": POOL, "127.0.0.12": POOL, "127.0.0.10": POOL}   # n0's pools

# connect argv[2] times to OUTSIDE:argv[1], each connection saying its number.
CONNECTS = textwrap.dedent("""
    import socket, sys
    for i in range(int(sys.argv[2])):
        with socket.create_connection(("127.0.0.5", int(sys.argv[1]))) as s:
            s.sendall(b"%d." % i)
    print("ok", flush=True)
""")

# The same process's raw N_CONNECTs, as a broken or hostile stub might send them,
# after one ordinary connect (which gives it its grant). Prints each call's errno.
RAW = textwrap.dedent("""
    import socket, sys
    from fit_rpc import Op
    from fit_rpc.netpath import pack_connect
    from splitrack.guest.runtime import runtime
    port = int(sys.argv[1])
    socket.create_connection(("127.0.0.5", port)).close()
    rt = runtime()
    good = {"stub": 1, "src": "127.0.0.11", "dst": ["127.0.0.5", port], "timeout": None,
            "buffers": rt.buffers("ddio"), "opts": [], "inbox": rt.inbox.address}
    def variant(**change):
        return pack_connect(dict(good, **change))
    bad_mode = bytearray(variant())
    bad_mode[18] = 9   # (CONNECT's mode byte)
    cases = {
        "short": variant()[:40],
        "long": variant() + b"x",
        "mode": bytes(bad_mode),
        "home": variant(buffers=dict(good["buffers"], home="m9")),
        "sk": variant(sk=7 << 16 | 3),
        "option": variant(opts=[[socket.SOL_SOCKET, socket.SO_PRIORITY, 1]]),
        "ring": variant(buffers=dict(good["buffers"], rbuf=[(1 << 64) - 4096, 8192])),
        "nan": variant(timeout=float("nan")),
        "negative": variant(timeout=-5.0),
        "inbox": variant(inbox=good["inbox"].rsplit("#", 1)[0] + "#1"),
        "rcvbuf": variant(opts=[[socket.SOL_SOCKET, socket.SO_RCVBUF, 65536]]),
    }
    for name, payload in cases.items():
        try:
            rt.call_raw("n0", Op.N_CONNECT, payload)
            print(name, 0, flush=True)
        except OSError as exc:
            print(name, exc.errno, flush=True)
""")


@pytest.fixture(scope="module")
def rack():
    with network_rack(NAME) as rack_env:
        yield rack_env


class Outside:
    """A plain server outside the rack that keeps what each connection sent."""

    def __init__(self) -> None:
        self.sock = socket.create_server((OUTSIDE, 0), backlog=128)
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(4096):
                    data += chunk
                self.got.append(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def outside():
    server = Outside()
    yield server
    server.close()


def _stats(rack) -> dict:
    with rack.endpoint() as ep:
        return ep.call_args("n0", Op.STATS)[0]


def _sent_connects(stats: dict) -> int:
    """N_CONNECTs n0 counted from processes (a finished process's fold into pN.*)."""
    return sum(ops.get("N_CONNECT", {}).get("rx_msgs", 0)
               for peer, ops in stats["links"].items() if peer.startswith("p"))


def test_the_data_plane_connects_and_the_bytes_flow(rack, outside):
    rack, env = rack
    before, plane = _stats(rack), n0_network(rack)["plane"]
    proc = run_on_rack(env, CONNECTS, str(outside.port), "40", name=NAME)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    wait_until(lambda: len(outside.got) == 40)
    assert sorted(outside.got) == sorted(b"%d." % i for i in range(40))
    after = n0_network(rack)
    # the first connect of a process is Python's (it gives the grant); the rest are C's
    assert after["plane"]["connects"] - plane["connects"] >= 39
    assert _sent_connects(_stats(rack)) - _sent_connects(before) == 40   # all counted
    if os.geteuid() == 0:   # each answered with n0's CPU held from connect to reply
        assert after["plane"]["connect_hold"] == "on"
        assert after["plane"]["connects_held"] - plane["connects_held"] >= 39
    wait_until(lambda: n0_network(rack)["skeletons"] == 0)


# Under setpriv (no CAP_SYS_NICE): a rack whose program connects 20 times to a plain
# server; prints what the program said and n0's plane counters.
UNHELD = textwrap.dedent("""
    import json, socket, sys, threading
    sys.path.insert(0, sys.argv[1])
    from netprogs import n0_network, network_rack, run_on_rack
    from test_connector import CONNECTS, Outside
    server = Outside()
    with network_rack("unheld") as (rack, env):
        proc = run_on_rack(env, CONNECTS, str(server.port), "20", name="unheld")
        print(json.dumps({"out": proc.stdout, "err": proc.stderr[-2000:],
                          "plane": n0_network(rack)["plane"]}))
""")


def test_without_cap_sys_nice_connects_go_on_without_holding_the_cpu():
    """skelconnect.h: the first refusal of SCHED_FIFO turns holding off, and says why."""
    if not shutil.which("setpriv"):
        pytest.skip("no setpriv (util-linux) to start a rack without CAP_SYS_NICE")
    tests = os.path.dirname(os.path.abspath(__file__))
    # cwd: `python -c` imports from its working directory first, and the checkout's
    # native/ holds no built C when splitrack is installed with `pip install .`
    with tempfile.TemporaryDirectory(prefix="srt-", dir="/tmp") as root:   # (short: ipc paths)
        proc = subprocess.run(["setpriv", "--bounding-set", "-sys_nice", sys.executable, "-c",
                               UNHELD, tests], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, SPLITRACK_RUN_ROOT=root), cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["out"] == "ok\n", got["err"]
    plane = got["plane"]
    assert plane["connects"] >= 19 and plane["connects_held"] == 0
    assert plane["connect_hold"] == f"off: {os.strerror(errno.EPERM)}"


def test_a_refused_connect_is_the_kernels_errno_from_c_and_from_python(rack):
    rack, env = rack
    with socket.socket() as closed:
        closed.bind((OUTSIDE, 0))   # a port nobody listens on
        port = closed.getsockname()[1]
        code = textwrap.dedent("""
            import socket, sys
            for _ in range(int(sys.argv[2])):
                print(socket.socket().connect_ex(("127.0.0.5", int(sys.argv[1]))), flush=True)
        """)
        failed = n0_network(rack)["plane"]["connects_failed"]
        errors = _stats(rack)["errors"].get("service_error", 0)
        proc = run_on_rack(env, code, str(port), "300", name=NAME)
    refused = f"{errno.ECONNREFUSED}\n"
    assert proc.returncode == 0 and proc.stdout == refused * 300, proc.stderr
    assert n0_network(rack)["plane"]["connects_failed"] - failed >= 299
    assert _stats(rack)["errors"]["service_error"] - errors == 300
    # each failed connect closed a pooled socket, and the plane made another
    assert n0_network(rack)["pooled"] == FULL


def test_options_set_before_connect_are_the_kernel_sockets(rack, outside):
    rack, env = rack
    code = textwrap.dedent("""
        import socket, sys
        addr = ("127.0.0.5", int(sys.argv[1]))
        socket.create_connection(addr).close()   # the grant: the next is C's
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect(addr)
        print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
              s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), flush=True)
    """)
    plane = n0_network(rack)["plane"]["connects"]
    proc = run_on_rack(env, code, str(outside.port), name=NAME)
    with socket.socket() as linux:   # what Linux answers for the same
        linux.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        want = f"{linux.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)} 1\n"
    assert proc.returncode == 0 and proc.stdout == want, proc.stderr
    assert n0_network(rack)["plane"]["connects"] > plane


def test_malformed_and_forged_requests_get_pythons_errors(rack, outside):
    rack, env = rack
    proc = run_on_rack(env, RAW, str(outside.port), name=NAME)
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split() for line in proc.stdout.splitlines())
    assert got == {"short": str(errno.EBADMSG), "long": str(errno.EINVAL),
                   "mode": str(errno.EINVAL), "home": str(errno.EINVAL),
                   "sk": str(errno.EBADF), "option": str(errno.ENOPROTOOPT),
                   "ring": str(errno.EINVAL), "nan": str(errno.EINVAL),
                   "negative": str(errno.EINVAL), "inbox": str(errno.EPERM),
                   "rcvbuf": "0"}, proc.stderr
    assert run_on_rack(env, CONNECTS, str(outside.port), "3", name=NAME).stdout == "ok\n"


def test_a_grant_follows_the_slices(rack, outside, tmp_path):
    """A free process on p1 connects through n0 (its grant), then n0 is granted to a
    slice: its next connect is EPERM, from Python, until the slice is released."""
    rack, env = rack
    go = tmp_path / "go"
    code = textwrap.dedent("""
        import os, socket, sys, time
        addr, go = ("127.0.0.5", int(sys.argv[1])), sys.argv[2]
        def attempt():
            try:
                socket.create_connection(addr).close()
                return "ok"
            except OSError as exc:
                return str(exc.errno)
        print(attempt(), attempt(), flush=True)
        for step in ("1", "2"):
            while not os.path.exists(go + step):
                time.sleep(0.02)
            print(attempt(), flush=True)
    """)
    with on_rack(env, "print(0, flush=True)\n" + code, str(outside.port), str(go), on="p1",
                 name=NAME) as (proc, _):
        assert proc.stdout.readline() == "ok ok\n"
        with rack.endpoint() as ep:
            ep.call_args("global", Op.SLICE_GRANT, {"name": "x", "p": 1, "m": 0, "n": 1})
            try:
                refused = _stats(rack)["errors"].get("slice", 0)
                (tmp_path / "go1").touch()
                assert proc.stdout.readline() == f"{errno.EPERM}\n"
                assert _stats(rack)["errors"]["slice"] == refused + 1
            finally:
                ep.call_args("global", Op.SLICE_RELEASE, {"name": "x"})
        (tmp_path / "go2").touch()
        assert proc.stdout.readline() == "ok\n"
        assert proc.wait(timeout=30) == 0


def test_the_pools_are_full_again_after_a_burst(rack, outside):
    rack, env = rack
    proc = run_on_rack(env, CONNECTS, str(outside.port), "30", name=NAME)
    assert proc.returncode == 0, proc.stderr
    assert n0_network(rack)["pooled"] == FULL   # (the plane replaces what it takes)
