"""`splitrack run`: programs as processes on pComponents, launched by the pMonitor."""

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fit_rpc import Op
from helpers import (
    SPLITRACK,
    alive,
    running_rack,
    small_spec,
    wait_gone,
    wait_until,
    write_spec,
)

LINE = 4096

# A program that hammers rack memory and checks every byte against a local model.
HAMMER = textwrap.dedent("""
    import random, sys
    from splitrack.guest import vm
    rng = random.Random(int(sys.argv[1]))
    size = 48 * 4096
    addr = vm.alloc(size)
    model = bytearray(size)
    for i in range(int(sys.argv[2])):
        off = rng.randrange(size - 6000)
        data = rng.randbytes(rng.randrange(1, 6000))
        vm.write(addr + off, data)
        model[off:off + len(data)] = data
        if i % 50 == 0:
            vm.flush(addr, size)
        if i % 10 == 0:
            off = rng.randrange(size - 6000)
            assert vm.read(addr + off, 6000) == model[off:off + 6000], "stale bytes"
    assert vm.read(addr, size) == model, "stale bytes at the end"
    print("ok", vm.counters()["evictions"])
""")


def _tiny_caches(storage):
    spec = small_spec(storage, name="runs")
    for p in spec["pcomponent"]:
        p.update(extcache=16 * LINE, ways=2)
    return spec


@pytest.fixture(scope="module")
def rack_env():
    """A running rack (tiny extCaches) and the environment to reach it by name."""
    with running_rack(_tiny_caches) as rack:
        yield rack, dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)


# Programs start in a scratch directory: `python -c` puts its working directory
# first on sys.path, and the source checkout's packages lack the built extension.
SCRATCH = "/tmp"


def run(env, *args, **kw):
    return subprocess.run([SPLITRACK, "run", "--name", "runs", *args], env=env, cwd=SCRATCH,
                          capture_output=True, text=True, timeout=120, **kw)


def processes(rack, p="p0"):
    with rack.endpoint() as ep:
        return ep.call_args(p, Op.P_PROCESSES)[0]["processes"]


def test_exit_status_and_output_propagate(rack_env):
    rack, env = rack_env
    proc = run(env, "--on", "p1", "--", sys.executable, "-c",
               "import os, sys; print('pc', os.environ['SPLITRACK_PCOMPONENT']); "
               "print('err', file=sys.stderr); sys.exit(7)")
    assert proc.returncode == 7
    assert proc.stdout == "pc p1\n" and proc.stderr == "err\n"


def test_stdin_reaches_the_program(rack_env):
    rack, env = rack_env
    proc = run(env, "--", sys.executable, "-c", "print(input()[::-1])", input="kcar\n")
    assert proc.stdout == "rack\n"


def test_program_is_a_child_of_its_pmonitor(rack_env):
    rack, env = rack_env
    proc = run(env, "--on", "p0", "--", sys.executable, "-c", "import os; print(os.getppid())")
    assert int(proc.stdout) == rack.components["p0"]["pid"]


def test_gpm_places_the_program_when_no_on_is_given(rack_env):
    rack, env = rack_env
    proc = run(env, "--", sys.executable, "-c",
               "import os; print(os.environ['SPLITRACK_PCOMPONENT'])")
    assert proc.returncode == 0 and proc.stdout.strip() in ("p0", "p1")


def test_killed_program_gives_128_plus_signal(rack_env):
    rack, env = rack_env
    proc = run(env, "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)")
    assert proc.returncode == 128 + 9


def test_missing_program_and_bad_pcomponent(rack_env):
    rack, env = rack_env
    proc = run(env, "--", "/nonexistent/program")
    assert proc.returncode == 127 and "No such file" in proc.stderr
    proc = run(env, "--on", "p7", "--", "true")
    assert proc.returncode == 1 and "no pComponent 'p7'" in proc.stderr
    proc = run(env)
    assert proc.returncode == 1 and "no program given" in proc.stderr


def test_sigint_is_forwarded_to_the_program(rack_env):
    rack, env = rack_env
    child = subprocess.Popen(
        [SPLITRACK, "run", "--name", "runs", "--", sys.executable, "-c",
         "import time; print('ready', flush=True); time.sleep(60)"],
        env=env, cwd=SCRATCH, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == 128 + signal.SIGINT  # KeyboardInterrupt traceback
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_two_processes_hammer_one_shared_extcache(rack_env):
    rack, env = rack_env
    procs = [subprocess.Popen([SPLITRACK, "run", "--name", "runs", "--on", "p0", "--",
                               sys.executable, "-c", HAMMER, str(seed), "400"],
                              env=env, cwd=SCRATCH, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.startswith("ok ") and int(out.split()[1]) > 100  # evictions happened


def test_crash_mid_write_frees_its_pages_and_spares_the_others(rack_env):
    rack, env = rack_env

    def m0() -> dict:
        with rack.endpoint() as ep:
            return ep.call_args("m0", Op.STATS)[0]["memory"]
    # earlier tests' processes are released, at p0 and then (M_RELEASE) at m0
    wait_until(lambda: not processes(rack) and m0()["processes"] == 0)
    frames_before = m0()["frames_used"]
    crasher = textwrap.dedent("""
        import os
        from splitrack.guest import vm
        addr = vm.alloc(64 * 4096)
        for i in range(64):
            vm.write(addr + i * 4096, b"x" * 4096)
            if i == 40:
                vm.flush(addr, 64 * 4096)
            if i == 50:
                os.kill(os.getpid(), 9)   # dies with dirty lines and a page table at m0
    """)
    survivor = subprocess.Popen([SPLITRACK, "run", "--name", "runs", "--on", "p0", "--",
                                 sys.executable, "-c", HAMMER, "3", "600"],
                                env=env, cwd=SCRATCH, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    crash = run(env, "--on", "p0", "--", sys.executable, "-c", crasher)
    assert crash.returncode == 128 + 9
    out, err = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, err
    wait_until(lambda: not processes(rack) and m0()["processes"] == 0)
    memory = m0()
    with rack.endpoint() as ep:
        p0 = ep.call_args("p0", Op.STATS)[0]["extcache"]
    assert memory["frames_used"] == frames_before and memory["processes"] == 0
    assert p0["released_processes"] >= 2 and p0["processes"] == {}


def test_run_with_no_name_takes_the_one_rack_that_is_up(rack_env):
    rack, env = rack_env   # "runs" is up; "default" is not
    before = sorted(os.listdir(rack.run.root))
    proc = subprocess.run([SPLITRACK, "run", "--", sys.executable, "-c",
                           "import os; print(os.getppid())"], env=env, cwd=SCRATCH,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "splitrack: on rack 'runs', the one that is up\n"
    pmonitors = {rec["pid"] for rec in rack.components.values() if rec["kind"] == "p"}
    assert int(proc.stdout) in pmonitors   # not a throwaway default rack's
    assert sorted(os.listdir(rack.run.root)) == before


def test_run_starts_a_rack_when_none_is_up_and_stops_it(run_root, tmp_path):
    env = dict(os.environ, SPLITRACK_RUN_ROOT=run_root, XDG_DATA_HOME=str(tmp_path / "d"))
    spec = write_spec(tmp_path / "solo.toml", "solo")
    program = ("import os, json; from splitrack import vm; a = vm.alloc(8192); "
               "vm.write(a, b'hi'); "
               "print(json.dumps([os.getppid(), bytes(vm.read(a, 2)).decode()]))")
    proc = subprocess.run([SPLITRACK, "run", "--spec", spec, "--", sys.executable, "-c",
                           program], env=env, cwd=SCRATCH, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    pmonitor, data = json.loads(proc.stdout)
    assert data == "hi"
    assert not wait_gone([pmonitor]) and not alive(pmonitor)
    assert os.listdir(run_root) == [".lock"]


def test_program_reads_the_callers_terminal(run_root, tmp_path):
    """In a terminal, `splitrack run` starts the rack in the terminal's session; the
    program must still read the terminal (job control must not stop it)."""
    import pty

    spec = write_spec(tmp_path / "tty.toml", "tty")
    pid, master = pty.fork()  # the child leads a new session with the pty as terminal
    if pid == 0:
        os.chdir(SCRATCH)
        os.execve(SPLITRACK, [SPLITRACK, "run", "--spec", spec, "--", sys.executable, "-c",
                              "print('got', input('say: '))"],
                  dict(os.environ, SPLITRACK_RUN_ROOT=run_root,
                       XDG_DATA_HOME=str(tmp_path / "d")))
    def read_until(expected, seen=b""):
        deadline = time.monotonic() + 30
        while expected not in seen:
            ready, _, _ = select.select([master], [], [], max(0, deadline - time.monotonic()))
            assert ready, f"no {expected!r} on the terminal; got {seen!r}"
            seen += os.read(master, 1024)
        return seen

    try:
        read_until(b"say: ")
        os.write(master, b"hello\n")
        read_until(b"got hello")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(master)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_program_reads_the_racks_storage_with_splitrack_files(rack_env):
    rack, env = rack_env
    blob = os.urandom(3_500_000)   # several S_READs, the last one short
    with rack.endpoint() as ep:
        home = ep.call_args("global", Op.GSM_LOOKUP, {"path": "in.bin"})[0]["id"]
        ep.call_args(home, Op.S_OPEN, {"path": "in.bin", "create": True, "truncate": True})
        for at in range(0, len(blob), 1 << 20):
            ep.call_args(home, Op.S_WRITE, {"path": "in.bin", "offset": at},
                         blob[at:at + (1 << 20)])
    code = textwrap.dedent("""
        import hashlib, sys
        from splitrack.guest import files
        print(files.size("in.bin"), hashlib.sha256(b"".join(files.chunks("in.bin"))).hexdigest())
        print(files.read("in.bin", 10, 5).hex())
        for bad in ("missing.bin", "../../etc/passwd"):
            try:
                files.read(bad, 0, 1)
            except OSError as exc:
                print(type(exc).__name__)
    """)
    proc = run(env, "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(len(blob)), hashlib.sha256(blob).hexdigest(),
                                   blob[10:15].hex(), "FileNotFoundError", "PermissionError"]


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3") or
                    os.path.realpath("/usr/bin/python3") == os.path.realpath(sys.executable),
                    reason="needs a second Python, one without splitrack (/usr/bin/python3)")
def test_a_python_without_splitrack_is_refused_with_127(rack_env):
    rack, env = rack_env
    proc = run(env, "--", "/usr/bin/python3", "-c", "print('ran on the host network')")
    assert proc.returncode == 127 and proc.stdout == ""
    assert "cannot load the rack's socket module in /usr/bin/python3" in proc.stderr
