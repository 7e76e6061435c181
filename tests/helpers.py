"""Helpers shared by the tests (importable as `helpers`)."""

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psutil

from fit_rpc import Op
from splitrack import Rack

SPLITRACK = os.path.join(os.path.dirname(sys.executable), "splitrack")


def small_spec(storage: str, name: str = "t", **rack) -> dict:
    """A rack like the default one, with its storage under `storage`; its FIT waiters
    spin $SPLITRACK_TEST_POLL_US µs if that is set (0: the suite without spinning)."""
    if "SPLITRACK_TEST_POLL_US" in os.environ:
        rack.setdefault("poll_us", int(os.environ["SPLITRACK_TEST_POLL_US"]))
    return {
        "rack": {"name": name, **rack},
        "pcomponent": [{"id": "p0", "extcache": "4MiB", "ways": 8},
                       {"id": "p1", "extcache": "4MiB", "ways": 8}],
        "mcomponent": [{"id": "m0", "memory": "64MiB"}],
        "ncomponent": [{"id": "n0", "nics": ["127.0.0.11", "127.0.0.12"]}],
        "scomponent": [{"id": "s0", "root": storage}],
    }


def alive(pid: int) -> bool:
    """Whether `pid` is a running (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1][0] != "Z"


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until these processes are gone; returns the PIDs still alive at the timeout."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in left]


@contextlib.contextmanager
def running_rack(make_spec, prefix: str = "srm-") -> Iterator[Rack]:
    """A rack of make_spec(storage_dir), in a private short run root, always stopped."""
    root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    try:
        with Rack(make_spec(os.path.join(root, "storage")), run_root=root) as rack:
            yield rack
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def attached_vm(rack: Rack, pcomponent: str = "p0") -> Iterator[Any]:
    """This process's rack memory on `pcomponent`, as a program's; its regions freed
    and it closed afterwards. (splitrack.guest.vm imported here: this module is
    imported by programs that cannot load the C extensions.)"""
    from splitrack.guest.vm import VirtualMemory
    memory = VirtualMemory.attach(rack, pcomponent)
    try:
        yield memory
    finally:
        for start, _, _ in memory.regions():
            memory.free(start)
        memory.close()


def write_spec(path, name: str, extra: str = "") -> str:
    """A minimal spec file (p0 and m0) named `name`, plus `extra` TOML."""
    path.write_text(f'[rack]\nname = "{name}"\n'
                    '[[pcomponent]]\nid = "p0"\nextcache = "1MiB"\nways = 4\n'
                    '[[mcomponent]]\nid = "m0"\nmemory = "16MiB"\n' + extra)
    return str(path)


def wait_until(condition, timeout: float = 10.0) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def take(ring) -> bytes | None:
    """The next message of a FIT ring (native.fitring.Ring), copied and consumed."""
    view = ring.peek()
    if view is None:
        return None
    data = bytes(view)
    ring.consume()
    return data


def fit_link(cap: int = 64 * 1024) -> SimpleNamespace:
    """Both ends of one FIT link, mapped in this process as its two processes map them:
    the caller's `out` (its requests) and `back` (the replies to it), the callee's `rx`
    (those requests) and `reply` (its replies), and each side's bell (`caller`,
    `callee`)."""
    # (imported here: scripts that run in the checkout, whose native/ is not built,
    # import helpers too)
    from native.fitring import Bell, Segment

    seg, fd = Segment.create(cap)
    other = Segment.open(fd)
    os.close(fd)
    caller, callee = Bell(), Bell()
    caller_word, callee_word = Bell.peer_word(caller.page_fd), Bell.peer_word(callee.page_fd)
    return SimpleNamespace(
        out=seg.ring(0, callee_word.ptr, callee.efd, callee_word),
        back=seg.ring(1, None, callee.efd),
        rx=other.ring(0, None, caller.efd),
        reply=other.ring(1, caller_word.ptr, caller.efd, caller_word),
        caller=caller, callee=callee)


def tiny_spec(storage, name="vm", **rack):
    """A rack whose extCaches hold 8 lines in 4 sets (of 4 KiB lines): evictions all
    the time; two mComponents of 8 MiB."""
    spec = small_spec(storage, name=name, **rack)
    for p in spec["pcomponent"]:
        p.update(extcache=8 * 4096, ways=2)
    spec["mcomponent"] = [{"id": "m0", "memory": "8MiB"}, {"id": "m1", "memory": "8MiB"}]
    return spec


def mstats(rack, m="m0"):
    """An mComponent's STATS."""
    with rack.endpoint() as ep:
        return ep.call_args(m, Op.STATS)[0]
