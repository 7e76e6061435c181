"""Per-program resources are freed: a rack that ran many short programs holds what it
held before (the shm transport: links, their descriptors and rendezvous sockets;
global's directory, GNM's memory of NICs, every monitor's per-peer counters)."""

import os
import socket
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from fit_rpc import Op
from helpers import wait_until
from netprogs import echo_server, network_rack, run_on_rack

# 100 in the suite; SPLITRACK_CHURN_PROGRAMS=1000 for the full churn (two at a time:
# ~0.17 s a program)
PROGRAMS = int(os.environ.get("SPLITRACK_CHURN_PROGRAMS", "100"))

# A short program that uses everything a program may hold something of: rack memory,
# a rack socket (a skeleton at n0, pushes to the program's inbox), and exits.
SHORT = textwrap.dedent("""
    import socket, sys
    from splitrack.guest import vm
    addr = vm.alloc(1 << 16)
    vm.write(addr, b"x" * 5000)
    vm.flush(addr, 5000)
    s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
    s.sendall(b"hello")
    assert s.recv(5) == b"hello"
    s.close()
    print("ok")
""")


@pytest.fixture(scope="module")
def res():
    with network_rack("res") as (rack, env):
        yield rack, env


def _state(rack, ep):
    """What a rack holds per peer: n0's descriptors, the run directory's entries, and
    every monitor's per-peer counter lines; global's directory and GNM's NICs."""
    n0 = psutil.Process(rack.components["n0"]["pid"])
    links = {cid: sorted(ep.call_args(cid, Op.STATS)[0]["links"]) for cid in
             ("global", "p0", "m0", "n0")}
    listing = ep.call_args("global", Op.LIST)[0]["components"]
    return {"n0_fds": n0.num_fds(), "run_dir": sorted(os.listdir(rack.run.path)),
            "links": links, "directory": sorted(c["id"] for c in listing)}


def _rss(rack) -> dict[str, int]:
    return {cid: psutil.Process(rec["pid"]).memory_info().rss
            for cid, rec in rack.components.items()}


def _processes(state) -> list[str]:
    """Per-peer counter lines of emulated processes (folded ones, "pN.*", excepted)."""
    return [peer for peers in state["links"].values() for peer in peers
            if "." in peer and peer.startswith("p") and not peer.endswith(".*")]


@pytest.mark.timeout(max(120, PROGRAMS))   # ~0.17 s a program, two at a time
def test_many_short_programs_leave_nothing_behind(res):
    rack, env = res
    with echo_server() as listener:
        port = str(listener.getsockname()[1])
        with rack.endpoint() as ep:
            first = run_on_rack(env, SHORT, port, name="res")   # what every program makes
            assert first.stdout.strip() == "ok", first.stderr
            # an ended program's links close when their sockets hang up: soon after
            wait_until(lambda: not _processes(_state(rack, ep)))
            baseline, shm, rss = _state(rack, ep), set(os.listdir("/dev/shm")), _rss(rack)
            with ThreadPoolExecutor(2) as two:   # (two at a time: 2 cores, half the wait)
                runs = [two.submit(run_on_rack, env, SHORT, port, name="res")
                        for _ in range(PROGRAMS)]
                for done in (run.result() for run in runs):
                    assert done.stdout.strip() == "ok", done.stderr
            wait_until(lambda: _state(rack, ep) == baseline, timeout=15)
        assert set(os.listdir("/dev/shm")) <= shm
        grown = {cid: after - rss[cid] for cid, after in _rss(rack).items()}
        assert all(g < (16 << 20) for g in grown.values()), grown   # nothing per program


CYCLES = 10_000
CHURN = textwrap.dedent("""
    import socket, sys
    for i in range(int(sys.argv[2])):
        s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
        s.close()
    print("ok")
""")


def test_ten_thousand_connect_close_cycles_leave_nothing_behind(res):
    rack, env = res
    listener = socket.create_server(("127.0.0.5", 0), backlog=128)

    def accept_and_close():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept_and_close, daemon=True).start()
    port = str(listener.getsockname()[1])
    try:
        with rack.endpoint() as ep:
            warm = run_on_rack(env, CHURN, port, "100", name="res")   # rings touched once
            assert warm.stdout.strip() == "ok", warm.stderr
            wait_until(lambda: not _processes(_state(rack, ep)))
            baseline, rss, shm = _state(rack, ep), _rss(rack), set(os.listdir("/dev/shm"))
            done = run_on_rack(env, CHURN, port, str(CYCLES), name="res", timeout=300)
            assert done.stdout.strip() == "ok", done.stderr
            wait_until(lambda: _state(rack, ep) == baseline, timeout=15)
            network = ep.call_args("n0", Op.STATS)[0]["network"]
            assert network["skeletons"] == 0 and network["dram_buffers_used"] == 0
        grown = {cid: after - rss[cid] for cid, after in _rss(rack).items()}
        assert all(g < (16 << 20) for g in grown.values()), grown   # nothing per connection
        assert set(os.listdir("/dev/shm")) <= shm
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
