"""The launcher and the CLI: real racks started, inspected and stopped."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap

import psutil
import pytest

from fit_rpc import Op, header
from helpers import SPLITRACK, alive, small_spec, wait_gone, write_spec
from splitrack import Rack, RackError
from splitrack.rundir import RunDir


def cli(*args, check=True):
    proc = subprocess.run([SPLITRACK, *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"splitrack {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc


def test_up_and_down_leave_no_process_behind(run_root, tmp_path):
    with Rack(small_spec(str(tmp_path / "s"))) as rack:
        pids = {cid: rec["pid"] for cid, rec in rack.components.items()}
        assert set(pids) == {"global", "p0", "p1", "m0", "n0", "s0"}
        assert all(alive(pid) for pid in pids.values())
        assert {c.pid for c in psutil.Process().children()} >= set(pids.values())
        assert all(r["state"] == "ok" for r in rack.status())
    assert not any(alive(pid) for pid in pids.values())
    assert not os.path.exists(rack.run.path)


def test_split_cpus_pins_the_nmonitor_and_the_programs_apart(run_root, tmp_path):
    host = sorted(os.sched_getaffinity(0))
    if len(host) < 2:
        pytest.skip(f"one CPU ({host}): rack.split_cpus has nothing to split")
    with Rack(small_spec(str(tmp_path / "s"), split_cpus=True)) as rack:
        n0 = psutil.Process(rack.components["n0"]["pid"])
        assert {tuple(psutil.Process(t.id).cpu_affinity()) for t in n0.threads()} == {
            tuple(host[:1])}   # every thread of the nMonitor
        assert psutil.Process(rack.components["m0"]["pid"]).cpu_affinity() == host
        out = cli("run", "--name", "t", "--on", "p1", "--", sys.executable, "-c",
                  "import os; print(sorted(os.sched_getaffinity(0)))").stdout
        assert out.strip() == str(host[1:])


def test_context_manager_cleans_up_after_an_exception(run_root, tmp_path):
    pids = []
    with pytest.raises(ZeroDivisionError):
        with Rack(small_spec(str(tmp_path / "s"))) as rack:
            pids = [rec["pid"] for rec in rack.components.values()]
            raise ZeroDivisionError
    assert pids and not any(alive(pid) for pid in pids)
    assert RunDir("t").read_state() is None


def test_second_up_of_the_same_rack_says_already_up(run_root, tmp_path):
    spec = small_spec(str(tmp_path / "s"))
    with Rack(spec) as rack:
        with pytest.raises(RackError, match="'t' is already up"):
            Rack(spec).start()
        assert all(r["state"] == "ok" for r in rack.status())


def test_stale_run_dir_is_cleaned_without_touching_other_processes(run_root, tmp_path):
    spec = small_spec(str(tmp_path / "s"))
    # a stranger that got one of the crashed rack's PIDs must survive: our own child
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    rack = Rack(spec, detach=True).start()
    try:
        for rec in rack.components.values():  # the rack crashes: every process dies
            os.kill(rec["pid"], signal.SIGKILL)
        assert not wait_gone([r["pid"] for r in rack.components.values()])
        segment = os.path.join(RunDir("t").path, "p0.fit")
        assert os.path.exists(segment)         # a crash leaves its rendezvous behind
        state = RunDir("t").read_state()
        state["components"][1]["pid"] = stranger.pid
        RunDir("t").write_state(state)
        with Rack(spec) as again:
            assert all(r["state"] == "ok" for r in again.status())
        assert alive(stranger.pid)
        assert not os.path.exists(segment)     # the new rack's stop removed it again
    finally:
        stranger.kill()
        stranger.wait()
        rack.stop()


def test_monitor_that_fails_to_start_is_reported_and_nothing_leaks(run_root, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    spec = small_spec(str(blocker / "storage"))  # s0 cannot create its root
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(RackError, match=r"s0 exited during start \(exit status 1\)") as info:
        Rack(spec).start()
    assert "storage root" in str(info.value) and "Not a directory" in str(info.value)
    after = {c.pid for c in psutil.Process().children(recursive=True)}
    assert after <= before
    assert os.listdir(os.path.join(run_root, "t")) == ["logs"]   # only what says why


def test_too_long_run_root_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SPLITRACK_RUN_ROOT", str(tmp_path / ("x" * 90)))
    with pytest.raises(RackError, match="too long for Unix sockets"):
        Rack(small_spec(str(tmp_path / "s"))).start()


def test_tcp_endpoints(run_root, tmp_path):
    spec = small_spec(str(tmp_path / "s"), transport="zmq", endpoints="tcp")
    with Rack(spec) as rack:
        assert all(rec["address"].startswith("tcp://127.0.0.1:")
                   for rec in rack.components.values())
        ep = rack.endpoint()
        assert bytes(ep.call("s0", Op.ECHO, b"over tcp")) == b"over tcp"
        args, _ = ep.call_args("p0", Op.PING_PEER, {"target": "m0", "size": 8, "count": 3})
        assert stat.S_IMODE(os.stat(rack.run.keys_path).st_mode) == 0o600
        # a program the rack runs gets the key through its pMonitor
        ran = subprocess.run([SPLITRACK, "run", "--name", "t", "--", sys.executable, "-c",
                              "from splitrack import vm; a = vm.alloc(4096); "
                              "vm.write(a, b'ok'); print(bytes(vm.read(a, 2)).decode())"],
                             cwd="/tmp", capture_output=True, text=True, timeout=60)
        assert ran.stdout == "ok\n", ran.stderr
        # nobody else gets a word: neither without CURVE nor with a key of their own
        import zmq
        ctx = zmq.Context()
        try:
            for curve in (False, True):
                sock = ctx.socket(zmq.DEALER)
                sock.linger = 0
                if curve:
                    public, secret = zmq.curve_keypair()
                    sock.curve_secretkey, sock.curve_publickey = secret, public
                    sock.curve_serverkey = zmq.curve_keypair()[0]   # a guess
                sock.connect(rack.components["s0"]["address"])
                sock.send(header.pack(header.REQUEST, Op.HEALTH, 1, 0))
                assert not sock.poll(1000), f"s0 answered a stranger (curve={curve})"
                sock.close()
        finally:
            ctx.destroy(linger=0)   # (term() would wait on a socket a failed assert left)


def test_monitors_die_with_a_killed_launcher(run_root, tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from helpers import small_spec
        from splitrack import Rack
        rack = Rack(small_spec({str(tmp_path / "s")!r})).start()
        print(" ".join(str(r["pid"]) for r in rack.components.values()), flush=True)
        time.sleep(600)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in launcher.stdout.readline().split()]
        assert len(pids) == 6
        launcher.kill()
        launcher.wait()
        assert not wait_gone(pids)
    finally:
        launcher.kill()
        launcher.wait()
        launcher.stdout.close()


def test_cli_up_detach_status_stats_down(run_root, tmp_path):
    spec_file = write_spec(tmp_path / "rack.toml", "clitest",
                           f'[[scomponent]]\nid = "s0"\nroot = "{tmp_path / "store"}"\n')
    up = cli("up", "--spec", spec_file, "--detach")
    assert "rack 'clitest' is up" in up.stdout
    try:
        again = cli("up", "--spec", spec_file, "--detach", check=False)
        assert again.returncode == 1 and "already up" in again.stderr
        status = json.loads(cli("status", "--name", "clitest", "--json").stdout)
        assert status["up"] and [c["id"] for c in status["components"]] == \
            ["global", "p0", "m0", "s0"]
        assert all(c["state"] == "ok" for c in status["components"])
        pids = [c["pid"] for c in status["components"]]
        table = cli("status", "--spec", spec_file).stdout
        assert "shm://" in table and "p0" in table
        stats = json.loads(cli("stats", "--name", "clitest", "--json").stdout)
        assert stats["global"]["links"]["p0"]["REGISTER"]["rx_msgs"] == 1
        assert "links (counted once, at the sender)" in cli("stats", "--name", "clitest").stdout
        os.kill(pids[2], signal.SIGKILL)  # m0 dies: status says so, exit 2
        assert not wait_gone([pids[2]])
        degraded = cli("status", "--name", "clitest", "--json", check=False)
        assert degraded.returncode == 2
        assert {c["id"]: c["state"] for c in json.loads(degraded.stdout)["components"]}["m0"] \
            == "dead"
    finally:
        down = cli("down", "--name", "clitest")
    assert "stopped" in down.stdout
    assert not any(alive(pid) for pid in pids)
    assert "not up" in cli("down", "--name", "clitest").stdout  # exit 0
    gone = cli("status", "--name", "clitest", check=False)
    assert gone.returncode == 1 and "not up" in gone.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_cli_foreground_up_stops_on_a_signal(run_root, tmp_path, signum):
    spec_file = write_spec(tmp_path / "fg.toml", "fg")
    # as a terminal's foreground job: a suite started in the background (a
    # non-interactive shell's `&`) ignores SIGINT, and exec passes that on
    up = subprocess.Popen([SPLITRACK, "up", "--spec", spec_file], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)
    try:
        assert "is up" in up.stdout.readline()
        pids = [int(line.split()[2]) for line in (up.stdout.readline() for _ in range(4))
                if line.split()[0] in ("global", "p0", "m0")]
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        up.send_signal(signum)
        out, err = up.communicate(timeout=30)
        assert up.returncode == 0, err
        assert "rack 'fg' stopped" in out
        assert not any(alive(pid) for pid in pids)
    finally:
        up.kill()
        up.wait()


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cli_down_stops_a_foreground_up_with_sigterm_alone(run_root, tmp_path):
    # The monitors are the foreground `up`'s children: stopped, they are zombies until
    # it reaps them. `down` (another process) must count them as stopped, not SIGKILL them.
    spec_file = write_spec(tmp_path / "fgdown.toml", "fgdown")
    up = subprocess.Popen([SPLITRACK, "up", "--spec", spec_file], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        assert "is up" in up.stdout.readline()
        down = cli("down", "--name", "fgdown")
        assert "did not stop on SIGTERM" not in down.stderr, down.stderr
        out, err = up.communicate(timeout=30)
        assert up.returncode == 0 and "rack 'fgdown' stopped" in out, err
    finally:
        up.kill()
        up.wait()


def test_cli_errors_are_one_line(run_root, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[rack]\nmode = "warp"\n')
    proc = cli("up", "--spec", str(bad), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"splitrack: error: {bad}: rack.mode: 'warp' is not one of "
                                   "dma, ddio")
    assert "usage" in cli("--help").stdout


@pytest.mark.parametrize("argv, says", [
    (["down", "--name", "../x"], "argument --name: rack name '../x' is not 1-32"),
    (["status", "--name", "Mine"], "argument --name: rack name 'Mine' is not 1-32"),
    (["bench", "tcp", "--sizes", "abc"], "argument --sizes: 'abc' is not a size in bytes"),
    (["bench", "tcp", "--sizes", "128,0"], "argument --sizes: '0' is not a size in bytes"),
    (["bench", "tcp", "--reps", "0"], "argument --reps: '0' is not a whole number >= 1"),
    (["bench", "fit", "--rounds", "-5"], "argument --rounds: '-5' is not a whole number"),
    (["bench", "wordcount", "--json", "/no/such/dir/x.json"],
     "argument --json: /no/such/dir: no such directory"),
    (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
])
def test_cli_refuses_bad_arguments_in_one_line_before_it_starts(run_root, argv, says):
    proc = cli(*argv, check=False)   # `down --name ../x` once deleted a directory outside
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not os.listdir(run_root)   # refused before anything started


def test_cli_a_spec_that_is_not_utf8_is_one_line(run_root, tmp_path):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[rack]\nname = "caf\xe9"\n')
    proc = cli("up", "--spec", str(bad), check=False)
    assert (proc.returncode, proc.stderr) == (1, f"splitrack: error: {bad}: not UTF-8 text "
                                                 "(at byte offset 18)\n")


def test_cli_output_to_a_reader_that_left_is_no_traceback(run_root):
    # `splitrack status | head -2`: Python ignores SIGPIPE, so a write meets EPIPE
    r, w = os.pipe()
    os.close(r)   # the reader is gone
    try:
        proc = subprocess.run([SPLITRACK, "status", "--name", "nope"], stdout=w,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, "")


def test_a_hung_up_monitor_stops_cleanly(run_root, tmp_path):
    """SIGHUP (a closed terminal) stops a monitor like SIGTERM: p0 removes its rendezvous."""
    with Rack(small_spec(str(tmp_path / "s"))) as rack:
        segment = os.path.join(rack.run.path, "p0.fit")
        assert os.path.exists(segment)
        os.kill(rack.components["p0"]["pid"], signal.SIGHUP)
        assert rack._children["p0"].wait(timeout=10) == 0
        assert not os.path.exists(segment)


@pytest.mark.parametrize("what, spec, says", [
    ("memory", '[[mcomponent]]\nid = "m1"\nmemory = "1000TiB"\n',
     "m1 exited during start (exit status 1): [Errno 12] region 'arena' of "
     "1099511627776000 bytes: Cannot allocate memory"),
    ("storage", '[[scomponent]]\nid = "s0"\nroot = "{tmp}/afile"\n',
     "s0 exited during start (exit status 1): [Errno 17] storage root {tmp}/afile: "
     "cannot be a directory: File exists"),
])
def test_up_of_a_monitor_that_cannot_start_says_why_and_keeps_its_log(run_root, tmp_path,
                                                                      what, spec, says):
    (tmp_path / "afile").write_text("")
    spec_file = write_spec(tmp_path / "bad.toml", "cannot", spec.format(tmp=tmp_path))
    try:
        proc = cli("up", "--spec", spec_file, "--detach", check=False)
        cid = says.split()[0]
        log = os.path.join(run_root, "cannot", "logs", f"{cid}.log")
        assert proc.returncode == 1 and proc.stderr == (
            f"splitrack: error: {says.format(tmp=tmp_path)} (its log: {log})\n")
        assert "Traceback" in open(log).read()   # the detail stays in the log, kept
        assert not os.path.exists(os.path.join(run_root, "cannot", "state.json"))
        again = cli("up", "--spec", write_spec(tmp_path / "good.toml", "cannot"), "--detach")
        assert "is up" in again.stdout   # the kept logs do not stand in the way
    finally:
        cli("down", "--name", "cannot", check=False)   # detached: not our children


def test_a_run_root_others_could_tamper_with_is_refused(run_root, tmp_path):
    spec_file = write_spec(tmp_path / "priv.toml", "priv")
    run_dir = os.path.join(run_root, "priv")
    try:
        os.chmod(run_root, 0o755)
        proc = cli("up", "--spec", spec_file, "--detach", check=False)
        assert (proc.returncode, proc.stderr) == (1, f"splitrack: error: {run_root} is open "
                                                     f"to others (mode 0755); `chmod 700 "
                                                     f"{run_root}` if it is yours\n")
        os.chmod(run_root, 0o700)
        if os.getuid() == 0:   # only root can give a directory away
            os.chown(run_root, 4242, -1)
            proc = cli("up", "--spec", spec_file, "--detach", check=False)
            assert proc.returncode == 1 and "belongs to uid 4242" in proc.stderr, proc.stderr
            os.chown(run_root, 0, -1)
        cli("up", "--spec", spec_file, "--detach")
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
        os.chmod(run_dir, 0o750)   # a state file others could have written is not read
        status = cli("status", "--name", "priv", check=False)
        assert status.returncode == 1 and "is open to others" in status.stderr
    finally:   # whatever failed: ours again, and down (detached: not our children)
        os.chown(run_root, os.getuid(), -1)
        for path in (run_root, run_dir):
            if os.path.isdir(path):
                os.chmod(path, 0o700)
        cli("down", "--name", "priv", check=False)
