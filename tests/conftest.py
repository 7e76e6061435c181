"""Shared fixtures: short run roots, storage roots, and racks of real processes.

Every rack a test starts is a `Rack` context manager (stops its processes even
when the test fails); monitors also die with the pytest process
(PR_SET_PDEATHSIG), so an interrupted run leaks nothing.
"""

import os
import shutil
import tempfile

import pytest

from helpers import small_spec
from splitrack import Rack


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
    root = tempfile.mkdtemp(prefix="srm-", dir="/tmp")
    try:
        with Rack(small_spec(os.path.join(root, "storage")), run_root=root) as r:
            yield r
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def client(rack):
    ep = rack.endpoint()
    yield ep
    ep.close()
