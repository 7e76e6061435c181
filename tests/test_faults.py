"""Failure containment: kill -9 of one monitor takes only its own work with it.
Each test kills a monitor of a rack of its own, under a program that waits on it,
and checks the errno the program gets, how soon, and that the rest serves on."""

import errno
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fit_rpc import Op
from helpers import SPLITRACK, alive, running_rack, small_spec, wait_until
from netprogs import SCRATCH, echo_server, environ, on_rack

# A rack program: one thread blocked in accept() on n0's NIC, one in recv() on a
# connection to a plain server outside; each prints its errno and when it came.
BLOCKED_ON_N0 = textwrap.dedent("""
    import socket, sys, threading, time
    said = threading.Lock()   # one line at a time: two threads report at once
    def report(what, fn):
        try:
            fn()
            code = 0
        except OSError as exc:
            code = exc.errno
        with said:
            print(what, code, time.time(), flush=True)
    listener = socket.socket()
    listener.bind(("127.0.0.11", 0))
    listener.listen()
    conn = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
    threads = [threading.Thread(target=report, args=("accept", listener.accept)),
               threading.Thread(target=report, args=("recv", lambda: conn.recv(10)))]
    for t in threads:
        t.start()
    print(listener.getsockname()[1], flush=True)
    for t in threads:
        t.join()
    report("connect", lambda: socket.create_connection(("127.0.0.5", int(sys.argv[1]))))
    print("done", flush=True)
""")


def _pid(rack, cid: str) -> int:
    return rack.components[cid]["pid"]


def _recorded_pid(rack, cid: str) -> int:
    """The pid the run directory records for `cid` now (a restart changes it)."""
    return next(c["pid"] for c in rack.run.read_state()["components"] if c["id"] == cid)


def _status(rack) -> tuple[int, dict[str, str]]:
    proc = subprocess.run([SPLITRACK, "status", "--name", rack.name, "--json"],
                          env=environ(rack), capture_output=True, text=True, timeout=60)
    return proc.returncode, {c["id"]: c["state"] for c in json.loads(proc.stdout)["components"]}


def test_a_dead_ncomponent_fails_blocked_recv_and_accept_within_2s(run_root, tmp_path):
    with running_rack(lambda s: small_spec(s, name="faultn")) as rack, \
            socket.create_server(("127.0.0.5", 0)) as server:   # outside the rack
        with on_rack(environ(rack), BLOCKED_ON_N0, str(server.getsockname()[1]),
                     on="p1", name="faultn") as (proc, _):
            held, _ = server.accept()   # the program's connection: it sends nothing
            time.sleep(0.3)             # both threads are blocked by now
            killed = time.time()
            os.kill(_pid(rack, "n0"), signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            held.close()
        got = {line.split()[0]: (int(line.split()[1]), float(line.split()[2]))
               for line in out.splitlines() if line.split()[0] in ("accept", "recv",
                                                                   "connect")}
        assert got["recv"][0] == errno.ECONNRESET, (out, err)   # the connection died
        assert got["accept"][0] == errno.ENETDOWN, (out, err)   # its NIC is gone
        assert got["connect"][0] == errno.EHOSTUNREACH, (out, err)   # n0 answers nobody
        assert all(at - killed < 2.0 for _, at in got.values()), (killed, got)
        assert proc.returncode == 0 and "done" in out
        code, states = _status(rack)
        assert code == 2 and states["n0"] == "dead"
        assert all(state == "ok" for cid, state in states.items() if cid != "n0")


def test_a_dead_global_leaves_the_components_serving(run_root, tmp_path):
    with running_rack(lambda s: small_spec(s, name="faultg")) as rack:
        os.kill(_pid(rack, "global"), signal.SIGKILL)
        wait_until(lambda: not alive(_pid(rack, "global")))
        # a program ends on p1: its pMonitor reports the new load to global, and lives
        # (it reports at a tick; the program lives past a few, or its start and end
        # could fall between two and leave nothing to report)
        ran = subprocess.run([SPLITRACK, "run", "--name", "faultg", "--on", "p1", "--",
                              sys.executable, "-c", "import time; time.sleep(0.5); print('ran')"],
                             env=environ(rack),
                             cwd=SCRATCH, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr

        def p1_log() -> str:
            with open(rack.components["p1"]["log"]) as f:
                return f.read()

        wait_until(lambda: "global is unreachable, serving on without it" in p1_log())
        code, states = _status(rack)
        assert code == 2 and states["global"] == "dead"
        assert all(state == "ok" for cid, state in states.items() if cid != "global"), states
        assert "Traceback" not in p1_log()


def test_a_dead_pcomponent_takes_its_programs_and_their_connections_with_it(run_root,
                                                                           tmp_path):
    holder = ("import os, socket, sys, time\n"
              "s = socket.create_connection(('127.0.0.5', int(sys.argv[1])))\n"
              "print(os.getpid(), flush=True)\n"
              "time.sleep(60)")
    with running_rack(lambda s: small_spec(s, name="faultp")) as rack, \
            socket.create_server(("127.0.0.5", 0)) as server:
        server.settimeout(30)
        with on_rack(environ(rack), holder, str(server.getsockname()[1]), on="p0",
                     name="faultp") as (run, (program,)):
            conn, _ = server.accept()
            with conn:
                conn.settimeout(5)
                killed = time.monotonic()
                os.kill(_pid(rack, "p0"), signal.SIGKILL)
                wait_until(lambda: not alive(program), timeout=2)   # SIGKILLed with p0
                assert time.monotonic() - killed < 2.0
                with pytest.raises(ConnectionResetError):   # n0 resets what it held for it
                    conn.recv(10)
                assert time.monotonic() - killed < 2.0
            _, err = run.communicate(timeout=30)
            assert run.returncode == 1 and "p0 stopped while the program ran" in err
        with rack.endpoint() as ep:
            network = ep.call_args("n0", Op.STATS)[0]["network"]
        assert network["skeletons"] == 0 and network["dram_buffers_used"] == 0
        code, states = _status(rack)
        assert code == 2 and states["p0"] == "dead"
        assert all(state == "ok" for cid, state in states.items() if cid != "p0"), states


def test_restart_brings_dead_monitors_back_and_new_work_goes_to_them(run_root, tmp_path):
    with running_rack(lambda s: small_spec(s, name="faultr")) as rack, \
            socket.create_server(("127.0.0.5", 0)) as server:
        for cid in ("n0", "m0", "p1", "s0"):
            os.kill(_pid(rack, cid), signal.SIGKILL)
        env = environ(rack)
        for cid in ("n0", "m0", "p1", "s0"):
            out = subprocess.run([SPLITRACK, "restart", "--name", "faultr", cid], env=env,
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and out.stdout.startswith(f"{cid} restarted: pid "), \
                out.stderr
        code, states = _status(rack)
        assert code == 0 and set(states.values()) == {"ok"}, states
        program = textwrap.dedent("""
            import socket, sys
            from splitrack.guest import files, vm
            s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
            s.sendall(b"through n0")
            a = vm.alloc(8192)
            vm.write(a, b"in m0")
            try:
                files.size("no-such-file")
            except FileNotFoundError:   # s0 answered, with ENOENT
                print(bytes(vm.read(a, 5)).decode(), "and s0")
        """)
        def use_all() -> None:   # a new program on p1 uses n0, m0 and s0
            ran = subprocess.run([SPLITRACK, "run", "--name", "faultr", "--on", "p1", "--",
                                  sys.executable, "-c", program, str(server.getsockname()[1])],
                                 env=env, cwd=SCRATCH, capture_output=True, text=True,
                                 timeout=60)
            assert ran.returncode == 0 and ran.stdout == "in m0 and s0\n", ran.stderr
            conn, _ = server.accept()
            with conn:
                assert conn.recv(100) == b"through n0"

        use_all()
        again = subprocess.run([SPLITRACK, "restart", "--name", "faultr", "n0"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "n0 is running" in again.stderr
        # global too: it takes the live components from the run directory's record, and
        # the others find its new address there when the old one fails
        os.kill(_pid(rack, "global"), signal.SIGKILL)
        for cid in ("global", "n0"):   # n0 after global: a restart by the new global
            if cid == "n0":
                os.kill(_recorded_pid(rack, "n0"), signal.SIGKILL)
            out = subprocess.run([SPLITRACK, "restart", "--name", "faultr", cid], env=env,
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
        code, states = _status(rack)
        assert code == 0 and set(states.values()) == {"ok"}, states
        use_all()
        restarted = [c["pid"] for c in rack.run.read_state()["components"]]
    # this Rack started none of them, but stopping it stops them (the run directory's record)
    assert not [pid for pid in restarted if alive(pid)]


def test_an_ncomponent_maps_a_restarted_boards_memory_anew(run_root, tmp_path):
    """n0 maps p1's extCache (dDDIO) and m0's arena (dDMA): after both are restarted,
    n0 (never restarted) must use the new ones, not the dead boards' segments."""
    echo = textwrap.dedent("""
        import hashlib, os, socket, sys
        data = os.urandom(300_000)
        s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        print(hashlib.sha256(got).digest() == hashlib.sha256(data).digest())
    """)
    with running_rack(lambda s: small_spec(s, name="faultm")) as rack, \
            echo_server() as server:
        env = environ(rack)

        def run(mode):
            return subprocess.run([SPLITRACK, "run", "--name", "faultm", "--on", "p1",
                                   "--mode", mode, "--", sys.executable, "-c", echo,
                                   str(server.getsockname()[1])], env=env, cwd=SCRATCH,
                                  capture_output=True, text=True, timeout=60)

        for mode in ("ddio", "dma"):   # n0 maps p1's extCache and m0's arena now
            assert run(mode).stdout == "True\n"
        for cid in ("p1", "m0"):
            os.kill(_pid(rack, cid), signal.SIGKILL)
            wait_until(lambda cid=cid: not alive(_pid(rack, cid)))
        for cid in ("p1", "m0"):
            subprocess.run([SPLITRACK, "restart", "--name", "faultm", cid], env=env,
                           check=True, capture_output=True, timeout=60)
        for mode in ("ddio", "dma"):
            proc = run(mode)
            assert proc.stdout == "True\n", (mode, proc.stdout, proc.stderr[-1500:])


# Load: a program on p1 streams to a plain sink outside through n0 (DDIO), and
# between sends touches m0 (a flushed write) and s0 (a stat). It prints the first
# error it meets: which call, its errno, and when.
UNDER_LOAD = textwrap.dedent("""
    import socket, sys, time
    from splitrack.guest import files, vm
    page = vm.alloc(4096)
    s = socket.create_connection(("127.0.0.5", int(sys.argv[1])))
    chunk = b"x" * 65536
    print(page, flush=True)   # (on_rack waits for a first line of numbers)
    while True:
        for what, fn in (("send", lambda: s.sendall(chunk)),
                         ("memory", lambda: (vm.write(page, b"y"), vm.flush(page, 1))),
                         ("files", lambda: files.size("load-no-such-file"))):
            try:
                fn()
            except FileNotFoundError:
                pass   # s0 answered
            except OSError as exc:
                print(what, exc.errno, time.time(), flush=True)
                sys.exit(0)
""")


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 7])   # s0, n0, global, p1, m0
def test_seeded_faults_under_load_fail_what_needs_the_dead_one_fast(run_root, tmp_path, seed):
    """Seeded: which monitor dies, and when. A dead global stops nothing the load
    does; a dead n0, m0 or s0 fails the call that needs it within 2 s, with the errno
    Linux gives a dead NIC's connection (ECONNRESET) or an unreachable host
    (EHOSTUNREACH); a dead p1 takes the program with it."""
    rng = random.Random(seed)
    victim = rng.choice(["global", "n0", "m0", "s0", "p1"])
    with running_rack(lambda s: small_spec(s, name=f"load{seed}")) as rack, \
            socket.create_server(("127.0.0.5", 0)) as sink:
        received, ended = [0], []

        def drain():
            conn, _ = sink.accept()
            with conn:
                try:
                    while chunk := conn.recv(1 << 20):
                        received[0] += len(chunk)
                except OSError as exc:   # a dead board's connections are reset
                    ended.append((exc.errno, time.time()))

        threading.Thread(target=drain, daemon=True).start()
        with on_rack(environ(rack), UNDER_LOAD, str(sink.getsockname()[1]), on="p1",
                     name=f"load{seed}") as (proc, _):
            wait_until(lambda: received[0] > 0)   # the load flows
            time.sleep(rng.uniform(0.2, 0.8))      # the seeded moment, under load
            before, killed = received[0], time.time()
            os.kill(_pid(rack, victim), signal.SIGKILL)
            if victim == "global":   # the data path needs no manager: the stream goes on
                wait_until(lambda: received[0] > before + (4 << 20), timeout=2.0)
                assert proc.poll() is None
                return
            out, err = proc.communicate(timeout=30)
        if victim == "p1":
            assert proc.returncode != 0 and "p1 stopped while the program ran" in err
            wait_until(lambda: ended, timeout=2.0)
            (code, at), = ended   # n0 reset the stream, within the 2 s
            assert code == errno.ECONNRESET and at - killed < 2.0
            return
        what, code, at = out.split()[-3:]
        assert (what, int(code)) == {"n0": ("send", errno.ECONNRESET),
                                     "m0": ("memory", errno.EHOSTUNREACH),
                                     "s0": ("files", errno.EHOSTUNREACH)}[victim], out
        assert float(at) - killed < 2.0
