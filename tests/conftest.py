"""Shared fixtures: short run roots, storage roots, and racks of real processes.

Every rack a test starts is a `Rack` context manager (stops its processes even
when the test fails); monitors also die with the pytest process
(PR_SET_PDEATHSIG), so an interrupted run leaks nothing.
"""

import shutil
import tempfile

import pytest

from helpers import running_rack, small_spec


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


@pytest.fixture
def client(rack):
    ep = rack.endpoint()
    yield ep
    ep.close()
