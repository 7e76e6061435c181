"""Shared fixtures: short run roots, storage roots, racks of real processes, and the
C test programs of tests/c/.

Every rack a test starts is a `Rack` context manager (stops its processes even
when the test fails); monitors also die with the pytest process
(PR_SET_PDEATHSIG), so an interrupted run leaks nothing.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

from helpers import attached_vm, running_rack, small_spec, tiny_spec
from netprogs import network_rack
from xcsegments import maker


@pytest.fixture
def run_root(monkeypatch):
    """A short run root (ipc socket paths are limited to 107 bytes)."""
    root = tempfile.mkdtemp(prefix="srt-", dir="/tmp")
    monkeypatch.setenv("SPLITRACK_RUN_ROOT", root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def rack():
    """One running rack shared by a test module (its run root is private)."""
    with running_rack(small_spec) as r:
        yield r


@pytest.fixture(scope="module")
def net(request):
    """(rack, env): a small rack for a network test module, named by its RACK, and the
    environment that reaches it (netprogs.network_rack)."""
    with network_rack(request.module.RACK) as rack_env:
        yield rack_env


@pytest.fixture
def client(rack):
    ep = rack.endpoint()
    yield ep
    ep.close()


@pytest.fixture(scope="module")
def tiny_rack():
    """A rack whose extCaches evict all the time (helpers.tiny_spec), a module's."""
    with running_rack(tiny_spec) as r:
        yield r


@pytest.fixture
def vm(tiny_rack):
    """This test process, attached as a process of tiny_rack's p0."""
    with attached_vm(tiny_rack) as memory:
        yield memory


@pytest.fixture
def new_xc():
    """new_xc(lines=8, ways=2, policy="lru", victims=0) -> an ExtCache on a segment of its
    own in this process (tests/xcsegments.py), closed after the test."""
    with maker() as new:
        yield new


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, str]:
    """tests/c/*.c built with the machine's C compiler, once a run: {name: path}."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on this machine"
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c")
    out, programs = tmp_path_factory.mktemp("c"), {}
    for source in sorted(os.listdir(here)):
        name = source.removesuffix(".c")
        programs[name] = str(out / name)
        subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", programs[name],
                        os.path.join(here, source)], check=True)
    return programs
