"""The front door: --version, Rack() on a running rack, cp and files.write, logs,
-v, down --keep-logs. Real racks, the CLI as a user runs it."""

import os
import re
import select
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import splitrack
from fit_rpc.params import FIT_MAX_PAYLOAD_BYTES
from helpers import SPLITRACK, alive, running_rack, small_spec, write_spec
from splitrack import Rack, RackError
from splitrack.rundir import RunDir

NAME = "front"
ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def front():
    """A running rack named `front` in a private run root, and the environment to
    reach it with the CLI."""
    with running_rack(lambda storage: small_spec(storage, name=NAME), prefix="srf-") as rack:
        yield rack, dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)


def cli(env, *args, check=True, **kw):
    proc = subprocess.run([SPLITRACK, *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd="/tmp", **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"splitrack {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc


def test_version():
    proc = cli(os.environ, "--version")
    assert proc.stdout == f"splitrack {splitrack.__version__}\n"
    assert splitrack.__version__[0].isdigit()


def test_rack_on_a_running_rack_says_how_to_attach(front):
    rack, _ = front
    spec = small_spec(os.path.join(rack.run.root, "storage"), name=NAME)
    with pytest.raises(RackError) as info:
        with Rack(spec, run_root=rack.run.root):
            pytest.fail("a second rack of the same name started")
    assert str(info.value).startswith(f"rack '{NAME}' is already up (global, p0, ")
    assert f'Rack.attach("{NAME}")' in str(info.value) and "\n" not in str(info.value)
    with Rack.attach(NAME, run_root=rack.run.root) as attached:   # as the message says
        assert all(r["state"] == "ok" for r in attached.status())
    assert all(alive(pid) for pid in (r["pid"] for r in rack.components.values()))
    assert all(r["state"] == "ok" for r in rack.status())   # attach's exit stopped nothing


def test_cli_up_of_a_running_rack_speaks_cli(front, tmp_path):
    _, env = front
    again = cli(dict(env, XDG_DATA_HOME=str(tmp_path)), "up", "--name", NAME, "--detach",
                check=False)
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert "is already up" in again.stderr and f"splitrack down --name {NAME}" in again.stderr
    assert "Rack.attach" not in again.stderr


def test_cp_both_ways_in_chunks(front, tmp_path):
    rack, env = front
    blob = os.urandom(2 * FIT_MAX_PAYLOAD_BYTES + 12345)   # more than one FIT payload
    (tmp_path / "in.bin").write_bytes(blob)
    up = cli(env, "cp", "--name", NAME, str(tmp_path / "in.bin"), "s0:cp.bin")
    assert up.stdout == f"{tmp_path / 'in.bin'} -> s0:cp.bin ({len(blob)} bytes)\n"
    stored = os.path.join(rack.run.root, "storage", "cp.bin")
    with open(stored, "rb") as f:
        assert f.read() == blob
    cli(env, "cp", "s0:cp.bin", str(tmp_path / "out.bin"))   # the one rack that is up
    assert (tmp_path / "out.bin").read_bytes() == blob
    cli(env, "cp", "--name", NAME, "s0:cp.bin", str(tmp_path))   # into a directory
    assert (tmp_path / "cp.bin").read_bytes() == blob
    (tmp_path / "small").write_bytes(b"short")   # an upload replaces the whole file
    cli(env, "cp", "--name", NAME, str(tmp_path / "small"), "s0:cp.bin")
    with open(stored, "rb") as f:
        assert f.read() == b"short"


@pytest.mark.parametrize("args, words", [
    (("LOCAL", "s0:../escape.bin"), "s0:../escape.bin: path '../escape.bin' is outside the "
                                    "storage root"),
    (("s0:../../etc/passwd", "OUT"), "path '../../etc/passwd' is outside the storage root"),
    (("LOCAL", "s0:/etc/x"), "is outside the storage root"),
    (("s0:no-such", "OUT"), "s0:no-such: no such file"),
    (("LOCAL", "s7:x"), "no sComponent 's7' in rack 'front' (it has s0)"),
])
def test_cp_refusals_are_one_line(front, tmp_path, args, words):
    rack, env = front
    (tmp_path / "LOCAL").write_bytes(b"x")
    args = [str(tmp_path / a) if a in ("LOCAL", "OUT") else a for a in args]
    proc = cli(env, "cp", "--name", NAME, *args, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("splitrack: error: "), proc.stderr
    assert words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "OUT").exists()
    assert not os.path.exists(os.path.join(rack.run.root, "escape.bin"))


def test_cp_needs_one_side_on_the_rack(front):
    _, env = front
    proc = cli(env, "cp", "a", "b", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "one of SRC and DST is sN:PATH" in proc.stderr


def test_files_write_from_a_program_on_the_rack(front, tmp_path):
    rack, env = front
    code = textwrap.dedent(f"""
        import os
        from splitrack.guest import files
        blob = os.urandom({2 * FIT_MAX_PAYLOAD_BYTES + 7})
        assert files.write("prog.bin", blob) == len(blob)
        assert b"".join(files.chunks("prog.bin")) == blob
        files.write("prog.bin", b"XY", offset=len(blob) + 2)   # pwrite: a hole, zeros
        assert files.size("prog.bin") == len(blob) + 4
        files.truncate("prog.bin", 3)
        print(files.read("prog.bin", 0, 10) == blob[:3])
        try:
            files.write("../out.bin", b"x")
        except PermissionError:
            print("refused")
    """)
    proc = cli(env, "run", "--name", NAME, "--", sys.executable, "-c", code)
    assert proc.stdout == "True\nrefused\n", proc.stderr
    assert not os.path.exists(os.path.join(rack.run.root, "out.bin"))


def test_the_files_example_of_docs_rack_md_runs(front, tmp_path):
    _, env = front
    with open(os.path.join(ROOT, "docs", "rack.md")) as f:
        text = f.read()
    code = re.search(r"```python\n(from splitrack import files\n.*?)```", text, re.S)[1]
    (tmp_path / "example.py").write_text(code)
    proc = cli(env, "run", "--name", NAME, "--", sys.executable, str(tmp_path / "example.py"))
    assert proc.stdout == "hello, split kernel\n", proc.stderr
    cli(env, "cp", "--name", NAME, "s0:notes.txt", str(tmp_path / "notes.txt"))
    assert (tmp_path / "notes.txt").read_bytes() == b"hello"


def test_logs_all_and_one(front):
    _, env = front
    every = cli(env, "logs", "--name", NAME).stdout
    for cid in ("global", "p0", "p1", "m0", "n0", "s0"):
        assert f" {cid} INFO serving at " in every
    stamps = [line[:23] for line in every.splitlines() if line[:4].isdigit()]
    assert stamps == sorted(stamps)   # merged in time order
    assert " DEBUG " not in every     # not a -v rack
    one = cli(env, "logs", "s0").stdout   # the one rack that is up
    assert " s0 INFO serving at " in one
    assert all(" s0 " in line for line in one.splitlines() if line[:4].isdigit())
    bad = cli(env, "logs", "--name", NAME, "x9", check=False)
    assert bad.returncode == 1 and bad.stderr == (
        f"splitrack: error: no component 'x9' in rack '{NAME}' "
        "(its logs: global, p0, p1, m0, n0, s0)\n")


def test_logs_of_a_rack_that_is_not_up(run_root):
    proc = cli(dict(os.environ), "logs", "--name", "nothere", check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "rack 'nothere' has no logs" in proc.stderr


def test_verbose_rack_follow_and_keep_logs(run_root, tmp_path):
    env = dict(os.environ)
    spec = write_spec(tmp_path / "v.toml", "verb",
                      f'[[scomponent]]\nid = "s0"\nroot = "{tmp_path / "store"}"\n')
    up = cli(env, "up", "--spec", spec, "--detach", "-v")
    assert "splitrack: verb: started s0, pid" in up.stderr   # the CLI's own DEBUG lines
    follower = None
    try:
        logs = cli(env, "logs", "--name", "verb").stdout
        assert " s0 DEBUG registering with global" in logs
        assert " global DEBUG REGISTER from s0, " in logs   # a line a request served
        follower = subprocess.Popen([SPLITRACK, "logs", "--name", "verb", "-f", "s0"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=_default_signals)
        assert b" s0 INFO serving at " in _read_until(follower, b" s0 INFO serving at ")
        (tmp_path / "f").write_bytes(b"followed")
        cli(env, "cp", "--name", "verb", str(tmp_path / "f"), "s0:f")   # s0 logs it (DEBUG)
        assert b"s0 DEBUG s_write {'path': 'f', 'offset': 0} (+8 bytes)" in \
            _read_until(follower, b"s_write")
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=30)
        assert follower.returncode == 0 and err == b""   # Ctrl-C ends -f: no traceback
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "x").write_text("")
        refused = cli(env, "down", "--name", "verb", "--keep-logs", str(tmp_path / "full"),
                      check=False)
        assert refused.returncode == 1 and "is not empty; nothing stopped" in refused.stderr
        down = cli(env, "down", "--name", "verb", "--keep-logs")
    finally:
        if follower is not None:
            follower.kill()
            follower.communicate()
        if RunDir("verb").read_state() is not None:
            Rack.attach("verb").stop()
    kept = down.stdout.split("its logs are in ")[1].strip()
    assert kept.startswith(os.path.join(run_root, "logs.kept", "verb-"))
    assert stat.S_IMODE(os.stat(os.path.dirname(kept)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o700
    assert sorted(os.listdir(kept)) == ["global.log", "m0.log", "p0.log", "s0.log"]
    with open(os.path.join(kept, "s0.log")) as f:
        s0 = f.read()
    assert " s0 DEBUG s_write " in s0 and " s0 INFO stopping" in s0
    assert not os.path.exists(RunDir("verb").path)
    assert cli(env, "logs", "--name", "verb", check=False).returncode == 1


def test_down_keep_logs_to_a_directory_and_without(run_root, tmp_path):
    env = dict(os.environ)
    spec = write_spec(tmp_path / "k.toml", "keep")
    try:
        cli(env, "up", "--spec", spec, "--detach")
        down = cli(env, "down", "--name", "keep", "--keep-logs", str(tmp_path / "kept"))
        assert down.stdout.endswith(f"its logs are in {tmp_path / 'kept'}\n")
        assert sorted(os.listdir(tmp_path / "kept")) == ["global.log", "m0.log", "p0.log"]
        assert " p0 INFO serving at " in (tmp_path / "kept" / "p0.log").read_text()
        cli(env, "up", "--spec", spec, "--detach")
        down = cli(env, "down", "--name", "keep")
        assert "its logs went with its run directory" in down.stdout
        assert not os.path.exists(os.path.join(run_root, "logs.kept"))
    finally:
        if RunDir("keep").read_state() is not None:
            Rack.attach("keep").stop()


def test_run_v_keeps_the_logs_of_the_rack_it_started(run_root, tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    proc = cli(env, "run", "--name", "vrun", "-v", "--", sys.executable, "-c", "print('ran')")
    assert proc.stdout == "ran\n"
    assert "splitrack: vrun: started p0, pid" in proc.stderr
    kept = proc.stderr.split("splitrack: the monitors' logs are in ")[1].strip()
    with open(os.path.join(kept, "p0.log")) as f:
        assert " p0 DEBUG registering with global" in f.read()
    assert not os.path.exists(RunDir("vrun").path) and not Rack.running()


def test_foreground_up_v_keeps_the_logs_when_it_stops(run_root, tmp_path):
    spec = write_spec(tmp_path / "fg.toml", "fgv")
    up = subprocess.Popen([SPLITRACK, "up", "--spec", spec, "-v"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, preexec_fn=_default_signals)
    try:
        assert b"rack 'fgv' is up" in _read_until(up, b"is up")
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=30)
        assert up.returncode == 0, err
    finally:
        up.kill()
        up.communicate()
    kept = out.decode().split("rack 'fgv' stopped; its logs are in ")[1].strip()
    with open(os.path.join(kept, "m0.log")) as f:
        assert " m0 DEBUG registering with global" in f.read()


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_until(proc, marker: bytes, timeout: float = 30.0) -> bytes:
    """proc's stdout until `marker` shows (a failure after `timeout`)."""
    seen, deadline = b"", time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([proc.stdout], [], [], left)[0], seen
        chunk = os.read(proc.stdout.fileno(), 65536)
        assert chunk, f"the follower ended: {seen!r}"
        seen += chunk
    return seen
