"""`splitrack top`: rates per link class and per component, from a real rack."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from fit_rpc import Op
from helpers import SPLITRACK, running_rack, small_spec, wait_gone
from splitrack.top import link_class

SCRATCH = "/tmp"   # programs start outside the checkout (see test_run.py)


@pytest.fixture(scope="module")
def rack_env():
    with running_rack(small_spec, prefix="srtop-") as rack:
        yield rack, dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)


def top(env, *args, **kw):
    return subprocess.run([SPLITRACK, "top", *args], env=env, cwd=SCRATCH,
                          capture_output=True, text=True, timeout=60, **kw)


@contextlib.contextmanager
def echoes(rack, src="p0", dst="m0"):
    """src sends ECHOes to dst (PING_PEER, a monitor's own FIT calls) until the with ends."""
    stop, started = threading.Event(), threading.Event()

    def loop():
        with rack.endpoint() as ep:
            while not stop.is_set():
                ep.call_args(src, Op.PING_PEER, {"target": dst, "size": 256, "count": 500})
                started.set()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        assert started.wait(30)
        yield
    finally:
        stop.set()
        thread.join()


def by_id(snap):
    return {c["id"]: c for c in snap["components"]}


def test_link_classes():
    assert link_class("p0", "m0") == link_class("m0", "p0") == "p-m"
    assert link_class("m0", "p0.1234") == "p-m"     # a program's process: its pComponent
    assert link_class("p0", "p0.*") == "p-p"        # ended processes of p0
    assert link_class("n0", "m1") == "n-m" and link_class("s0", "p1.7") == "p-s"
    assert link_class("global", "n0") == "global" and link_class("n0", "s0") == "n-s"
    assert link_class("m0", "cli.42.1") is None and link_class("p0", "cli.*") is None


def test_once_json_shows_the_traffic_of_a_link_and_every_component(rack_env):
    rack, env = rack_env
    with echoes(rack):
        proc = top(env, "--name", "t", "--once", "--json", "--interval", "0.5")
    assert proc.returncode == 0, proc.stderr
    snap = json.loads(proc.stdout)
    assert snap["rack"] == "t" and snap["interval_s"] > 0 and snap["t"] > 0
    links = {row["link"]: row for row in snap["links"]}
    assert list(links)[:6] == ["p-m", "p-n", "n-m", "p-p", "p-s", "global"]
    assert links["p-m"]["msgs_per_s"] > 0 and links["p-m"]["bytes_per_s"] > 0
    comps = by_id(snap)
    assert list(comps) == list(rack.components)
    for cid, c in comps.items():
        assert (c["kind"], c["pid"], c["state"]) == (rack.components[cid]["kind"],
                                                     rack.components[cid]["pid"], "ok")
        assert isinstance(c["cpu_percent"], float) and c["cpu_percent"] >= 0
    assert comps["p0"]["cpu_percent"] > 0   # it sent every ECHO of the interval
    assert comps["n0"]["sockets"] == 0 and comps["n0"]["dram_bytes"] > 0
    assert comps["m0"]["dram_bytes"] == 64 * 2**20
    assert set(comps["p1"]) >= {"extcache_hit_rate", "extcache_misses_per_s",
                                "extcache_evictions_per_s"}


WRITER = textwrap.dedent("""
    import os, sys
    from splitrack.guest import vm
    size = 8 << 20                      # twice p0's extCache: misses and evictions
    addr = vm.alloc(size)
    print("ready", flush=True)
    i = 0
    while not os.path.exists(sys.argv[1]):
        vm.write(addr + i * 4096 % size, b"x" * 64)
        i += 1
""")


def test_a_programs_memory_traffic_counts_as_its_pcomponents(rack_env, tmp_path):
    rack, env = rack_env
    stop = tmp_path / "stop"
    program = subprocess.Popen([SPLITRACK, "run", "--name", "t", "--on", "p0", "--",
                                sys.executable, "-c", WRITER, str(stop)], env=env,
                               cwd=SCRATCH, stdout=subprocess.PIPE, text=True)
    try:
        assert program.stdout.readline() == "ready\n"
        proc = top(env, "--once", "--json", "--interval", "0.5")   # the one rack that is up
    finally:
        stop.touch()
        assert program.wait(timeout=60) == 0
        program.stdout.close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "splitrack: on rack 't', the one that is up\n"
    snap = json.loads(proc.stdout)
    links = {row["link"]: row for row in snap["links"]}
    assert links["p-m"]["msgs_per_s"] > 0   # p0.PID <-> m0: M_MISS, M_WRITEBACK
    p0 = by_id(snap)["p0"]
    assert p0["extcache_misses_per_s"] > 0 and 0 <= p0["extcache_hit_rate"] < 1


def test_once_prints_tables(rack_env):
    rack, env = rack_env
    proc = top(env, "--name", "t", "--once", "--interval", "0.2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("rack 't' at ") and "\x1b" not in proc.stdout
    assert lines[1].split() == ["LINK", "MSGS/S", "BYTES/S"]
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["ID"])
    assert lines[at].split()[:5] == ["ID", "KIND", "PID", "STATE", "CPU"]
    links = [line.split()[0] for line in lines[3:at] if line.split()]
    assert links[:6] == ["p-m", "p-n", "n-m", "p-p", "p-s", "global"]
    rows = {line.split()[0]: line.split() for line in lines[at + 2:]}
    assert list(rows) == list(rack.components)
    for cid, rec in rack.components.items():
        assert rows[cid][1:4] == [rec["kind"], str(rec["pid"]), "ok"]


def test_into_a_pipe_it_prints_a_snapshot_an_interval_until_ctrl_c(rack_env):
    rack, env = rack_env
    child = subprocess.Popen([SPLITRACK, "top", "--name", "t", "--interval", "0.1"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        heads = 0
        while heads < 2:
            line = child.stdout.readline()
            assert line, child.stderr.read()   # (it exited)
            heads += line.startswith("rack 't' at ")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        assert (child.returncode, err) == (0, "")
    finally:
        child.kill()
        child.wait()


def test_a_rack_that_is_not_up_is_one_line(rack_env):
    _, env = rack_env
    for args in (["--once"], ["--once", "--json"], []):
        proc = top(env, "--name", "nope", *args)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == "splitrack: error: rack 'nope' is not up\n"


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan"])
def test_a_bad_interval_is_refused(rack_env, value):
    _, env = rack_env
    proc = top(env, "--once", "--interval", value)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert len(proc.stderr.splitlines()) == 1 and "argument --interval" in proc.stderr


def test_a_dead_component_is_shown_dead():
    with running_rack(lambda storage: small_spec(storage, name="d"), prefix="srtop-") as rack:
        env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
        pid = rack.components["m0"]["pid"]
        os.kill(pid, signal.SIGKILL)
        assert not wait_gone([pid])
        proc = top(env, "--name", "d", "--once", "--json", "--interval", "0.2")
        assert proc.returncode == 0, proc.stderr
        comps = by_id(json.loads(proc.stdout))
        assert comps["m0"] == {"id": "m0", "kind": "m", "pid": pid, "state": "dead",
                               "cpu_percent": None, "dram_used_bytes": None,
                               "dram_bytes": None}
        assert comps["p0"]["state"] == "ok"
        table = top(env, "--name", "d", "--once", "--interval", "0.2")
        assert table.returncode == 0 and "dead" in table.stdout
