"""Slices (monitors/slices.py) on a real rack: granted, listed and released over FIT
from a client, placed within by GPM, GMM and GNM, and enforced at the components.

The rack: p0..p3 (p0 and p1 take 2 processes each under "pack"; p3 pins its programs
to one CPU), m0, m1, n0, n1, s0.
Slices, granted by the module's fixture: a = p0 p1 m0 n0, b = p2 n1 (no memory);
p3 and m1 stay free. Programs run through the pMonitor's launcher (run_program)
and print how each attempt ended; the enforcement rests on their kernel-vouched ids.
"""

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from fit_rpc import Op
from helpers import SPLITRACK, alive, running_rack, wait_until
from netprogs import SCRATCH, environ
from splitrack.guest.vm import VirtualMemory

NAME = "slc"
A_NIC, B_NIC = "127.0.0.41", "127.0.0.42"
CPU = min(os.sched_getaffinity(0))   # p3's programs run there alone (spec: cpus)


def _spec(storage: str) -> dict:
    p = [{"id": f"p{i}", "extcache": "1MiB", "ways": 4} for i in range(4)]
    p[0]["cores"] = p[1]["cores"] = 2
    p[3]["cpus"] = [CPU]
    return {"rack": {"name": NAME}, "pcomponent": p,
            "mcomponent": [{"id": f"m{i}", "memory": "16MiB"} for i in range(2)],
            "ncomponent": [{"id": "n0", "nics": [A_NIC]}, {"id": "n1", "nics": [B_NIC]}],
            "scomponent": [{"id": "s0", "root": storage}]}


@pytest.fixture(scope="module")
def rack():
    with running_rack(_spec) as r:
        with r.endpoint() as ep:
            granted = {name: ep.call_args("global", Op.SLICE_GRANT,
                                          {"name": name, **counts})[0]["slice"]
                       for name, counts in (("a", {"p": 2, "m": 1, "n": 1}),
                                            ("b", {"p": 1, "m": 0, "n": 1}))}
        r.granted = granted
        yield r


@pytest.fixture
def client(rack):
    with rack.endpoint() as ep:
        yield ep


def _errno(fn, *args, **kwargs) -> int:
    with pytest.raises(OSError) as caught:
        fn(*args, **kwargs)
    return caught.value.errno


LAUNCH = ("import sys; from splitrack.launch import run_program; "
          "sys.exit(run_program(sys.argv[1], sys.argv[2], sys.argv[4:], "
          "slice=sys.argv[3] or None))")

PRELUDE = textwrap.dedent("""
    import os, socket, sys
    from fit_rpc import Endpoint, Op
    from splitrack.guest import files, vm
    from splitrack.guest.vm import _this
    me = os.getpid()
    ep = _this().ep   # this process's own endpoint, pN.PID

    def attempt(name, fn):
        try:
            print(name, "ok", fn(), flush=True)
        except OSError as exc:
            print(name, type(exc).__name__, exc.errno, flush=True)

    def alloc_at(m):
        return ep.call_args(m, Op.M_ALLOC, {"pid": me, "start": 7 << 40, "length": 4096})[0]
""")


def _run(rack, on: str, slice_: str | None, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` on pComponent `on`, launched in slice `slice_` (None: none)."""
    return subprocess.run([sys.executable, "-c", LAUNCH, rack.run.path, on, slice_ or "",
                           sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args],
                          env=environ(rack), cwd=SCRATCH, capture_output=True, text=True,
                          timeout=60)


def _results(ran: subprocess.CompletedProcess) -> dict[str, str]:
    assert ran.returncode == 0, ran.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in ran.stdout.splitlines()}


def test_grant_list_release_over_fit_and_their_errors(rack, client):
    a, b = rack.granted["a"], rack.granted["b"]
    assert a["components"] == ["p0", "p1", "m0", "n0"] and a["nics"] == [A_NIC]
    assert b["components"] == ["p2", "n1"] and b["nics"] == [B_NIC]
    assert isinstance(a["granted_at"], float)
    call = client.call_args
    assert _errno(call, "global", Op.SLICE_GRANT, {"name": "c", "p": 5, "m": 0, "n": 0}) == \
        errno.E2BIG
    assert _errno(call, "global", Op.SLICE_GRANT, {"name": "a", "p": 1, "m": 0, "n": 0}) == \
        errno.EEXIST
    with pytest.raises(OSError, match="only 1 of 2 pComponents free") as busy:
        call("global", Op.SLICE_GRANT, {"name": "c", "p": 2, "m": 0, "n": 0})
    assert busy.value.errno == errno.EBUSY
    for bad in ({"name": "C", "p": 1, "m": 0, "n": 0}, {"name": "c", "p": 0, "m": 0, "n": 0},
                {"name": "c", "p": 1, "m": -1, "n": 0}, {"name": "c", "p": 1}):
        assert _errno(call, "global", Op.SLICE_GRANT, bad) == errno.EINVAL, bad
    assert _errno(call, "global", Op.SLICE_RELEASE, {"name": "zz"}) == errno.ENOENT
    c = call("global", Op.SLICE_GRANT, {"name": "c", "p": 1, "m": 1, "n": 0})[0]["slice"]
    assert c["components"] == ["p3", "m1"]
    listed = call("global", Op.SLICE_LIST)[0]
    assert [s["name"] for s in listed["slices"]] == ["a", "b", "c"]
    assert {x["id"]: x["slice"] for x in listed["components"]} == {
        "p0": "a", "p1": "a", "p2": "b", "p3": "c", "m0": "a", "m1": "c",
        "n0": "a", "n1": "b", "s0": None}
    assert call("global", Op.SLICE_RELEASE, {"name": "c"})[0]["slice"] == c
    assert [s["name"] for s in call("global", Op.SLICE_LIST)[0]["slices"]] == ["a", "b"]


def test_gpm_places_within_the_slice_by_policy(rack, client):
    def place(**args) -> list[str]:
        return client.call_args("global", Op.GPM_PLACE, args)[0]["ids"]

    loads = {c["id"]: c["load"]["processes"]
             for c in client.call_args("global", Op.LIST)[0]["components"] if c["kind"] == "p"}
    assert loads["p0"] == loads["p1"] == 0   # nothing placed in slice a yet
    # pack: as few pComponents as fit, 2 processes each (their `cores`)
    assert place(slice="a", count=4, placement="auto", hints={"network": True}) == \
        ["p0", "p0", "p1", "p1"]
    # spread: one on each, round-robin past them
    assert place(slice="a", count=3, placement="spread") == ["p0", "p1", "p0"]
    assert place(slice="a", count=2, placement="auto",
                 hints={"network": True, "cpu": True}) == ["p1", "p0"]   # spread
    assert place(slice="b", count=2, placement="pack") == ["p2", "p2"]
    assert client.call_args("global", Op.GPM_PLACE)[0] == {"id": "p3", "ids": ["p3"]}  # free
    assert _errno(place, slice="zz") == errno.ENOENT
    assert _errno(place, slice="a", placement="wide") == errno.EINVAL
    assert _errno(place, slice="a", count=0) == errno.EINVAL


def test_a_program_of_slice_a_reaches_only_what_slice_a_has(rack, tmp_path):
    secret = os.path.join(rack.spec.components[-1]["root"], "slices", "b", "secret")
    os.makedirs(os.path.dirname(secret), exist_ok=True)
    with open(secret, "w") as f:
        f.write("b's")
    with socket.create_server(("127.0.0.5", 0)) as outside:
        ran = _run(rack, "p0", "a", """
            a = vm.alloc(8192)                       # GMM: slice a's m0
            vm.write(a, b"in m0")
            vm.flush(a, 8192)
            attempt("home", lambda: bytes(vm.read(a, 5)).decode())
            attempt("m1", lambda: alloc_at("m1"))    # free: not slice a's
            attempt("m0", lambda: alloc_at("m0"))
            attempt("bind_b", lambda: socket.socket().bind((sys.argv[2], 0)))
            attempt("bind_a", lambda: socket.socket().bind((sys.argv[1], 0)))
            attempt("nic", lambda: socket.create_connection(
                ("127.0.0.5", int(sys.argv[3]))).getsockname()[0])
            attempt("write", lambda: files.write("out.txt", b"from a"))
            attempt("escape", lambda: files.read("../b/secret", 0, 10))
            attempt("place", lambda: set(ep.call_args(   # its own slice, whatever it asks
                "global", Op.GPM_PLACE, {"slice": "b", "count": 4})[0]["ids"]) <= {"p0", "p1"})
            # the same program as a client: still slice a's process
            cli = Endpoint(f"cli.{me}.7", None, directory=os.environ["SPLITRACK_GLOBAL"])
            attempt("release_b", lambda: cli.call_args("global", Op.SLICE_RELEASE, {"name": "b"}))
            for name, path in (("cli_root", "out.txt"), ("cli_b", "slices/b/secret")):
                attempt(name, lambda: bytes(cli.call_args(
                    "s0", Op.S_READ, {"path": path, "offset": 0, "length": 6})[1]))
        """, A_NIC, B_NIC, str(outside.getsockname()[1]))
    got = _results(ran)
    assert got == {"home": "ok in m0", "m1": "PermissionError 1", "m0": "ok {}",
                   "bind_b": f"OSError {errno.EADDRNOTAVAIL}", "bind_a": "ok None",
                   "nic": f"ok {A_NIC}", "write": "ok 6", "escape": "PermissionError 13",
                   "place": "ok True", "release_b": "PermissionError 1",
                   "cli_root": "ok b'from a'", "cli_b": "FileNotFoundError 2"}, ran.stderr
    with open(os.path.join(os.path.dirname(secret), "..", "a", "out.txt")) as f:
        assert f.read() == "from a"
    with rack.endpoint() as ep:
        assert ep.call_args("m1", Op.STATS)[0]["errors"]["slice"] >= 1
        assert ep.call_args("n1", Op.STATS)[0]["errors"]["slice"] >= 1


def test_programs_of_slice_b_and_free_ones_keep_to_theirs(rack):
    b = _results(_run(rack, "p2", "b", """
        attempt("gmm", lambda: vm.alloc(4096))        # slice b has no mComponent
        attempt("m0", lambda: alloc_at("m0"))
    """))
    assert b == {"gmm": f"OSError {errno.ENODEV}", "m0": "PermissionError 1"}
    free = _results(_run(rack, "p3", None, """
        attempt("gmm", lambda: vm.alloc(4096) > 0)    # the free m1
        attempt("m0", lambda: alloc_at("m0"))
        attempt("a_files", lambda: files.size("slices/a/out.txt"))
        attempt("bind", lambda: socket.socket().bind((sys.argv[1], 0)))
        attempt("cpus", lambda: sorted(os.sched_getaffinity(0)))
    """, A_NIC))
    assert free == {"gmm": "ok True", "m0": "PermissionError 1",
                    "a_files": "PermissionError 13", "bind": f"OSError {errno.EADDRNOTAVAIL}",
                    "cpus": f"ok [{CPU}]"}


def test_a_sliced_pcomponent_launches_only_with_its_slice(rack):
    code = "print('ran')"
    refused = _run(rack, "p0", None, code)
    assert refused.returncode == 127 and "p0 is granted to slice a" in refused.stderr
    assert "splitrack job submit --slice a" in refused.stderr
    other = _run(rack, "p0", "b", code)
    assert other.returncode == 127 and "granted to slice a, not of slice b" in other.stderr
    free = _run(rack, "p3", "a", code)
    assert free.returncode == 127 and "p3 is free, not of slice a" in free.stderr
    assert _run(rack, "p0", "a", code).stdout == "ran\n"
    with pytest.raises(PermissionError, match="granted to slice a"):
        VirtualMemory.attach(rack, "p1")   # a process of no slice, not launched by p1
    VirtualMemory.attach(rack, "p3").close()


def test_a_restarted_global_still_knows_the_slices(rack):
    pid = rack.components["global"]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid))
    out = subprocess.run([SPLITRACK, "restart", "--name", NAME, "global"], env=environ(rack),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with rack.endpoint() as ep:
        listed = ep.call_args("global", Op.SLICE_LIST)[0]
        assert listed["slices"] == list(rack.granted.values())
        assert ep.call_args("global", Op.GPM_PLACE, {"slice": "b"})[0]["id"] == "p2"
        assert _errno(ep.call_args, "global", Op.SLICE_GRANT,
                      {"name": "a", "p": 1, "m": 0, "n": 0}) == errno.EEXIST
