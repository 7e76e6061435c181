"""The front door: --version, Rack() on a running rack, cp and files.write, logs,
-v, down --keep-logs. Real racks, the CLI as a user runs it."""

import os
import subprocess

import pytest

import splitrack
from helpers import SPLITRACK, alive, running_rack, small_spec
from splitrack import Rack, RackError

NAME = "front"


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
