"""A job's processes, as the OS sees them: rank runners started, awaited, stopped.

    runner = spawn(run_dir, job, rank, pcomponent, exit_path)   # {"pid", "create_time"}
    status, end_s = await ended(runner, exit_path)              # when it has ended
    await stop(runners, programs)                               # SIGTERM, then SIGKILL

Each rank runs under a runner process (rank.py): the manager's child when it
started it, anyone's child after a restart, so its end is awaited through a
pidfd (readable when the process ends, child or not) on the event loop, and
its status read from its exit file. A runner is known by PID *and* create time
(splitrack.rundir.identify): a recycled PID is never taken for it.

programs(rack_run, pcomponents, key, value) finds the programs themselves: the
descendants of those pComponents' pMonitors whose environment has key=value
(SPLITRACK_JOB=j1, SPLITRACK_SLICE=wc): what SIGKILL must reach, as the
runner cannot forward it.
"""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

import psutil

from splitrack.manager.jobs import Job
from splitrack.params import JOB_STOP_GRACE_S, JOB_STOP_WAIT_S
from splitrack.rundir import RunDir, identify

_children: dict[int, subprocess.Popen] = {}   # runners we started: reaped when they end


def spawn(run_dir: str, job: Job, rank: int, pcomponent: str,
          exit_path: str) -> dict[str, Any]:
    """Start rank `rank` of `job` on `pcomponent`; its runner's identity."""
    cmd = [sys.executable, "-m", "splitrack.manager.rank", run_dir, pcomponent, job.slice,
           exit_path, "--", *job.argv]
    with open(job.stdout, "ab") as out, open(job.stderr, "ab") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=job.cwd, env={**os.environ, **job.rank_env(rank)},
                                start_new_session=True)
    _children[proc.pid] = proc
    return {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time()}


async def ended(runner: dict[str, Any], exit_path: str) -> tuple[int | None, float | None]:
    """Wait until the runner has ended: (its program's status, when), or (None,
    None) if it left no status (it was killed)."""
    await _gone(runner)
    child = _children.pop(runner["pid"], None)
    if child is not None:
        child.wait()   # reap it
    try:
        with open(exit_path) as f:
            done = json.load(f)
        return done["exit"], done["end_s"]
    except (OSError, ValueError, KeyError):
        return None, None


async def _gone(runner: dict[str, Any]) -> None:
    try:
        fd = os.pidfd_open(runner["pid"])
    except ProcessLookupError:
        return
    try:
        if identify(runner["pid"], runner["create_time"]) is None:
            return   # ended (a zombie), or the PID is someone else's now
        loop, done = asyncio.get_running_loop(), asyncio.Event()
        loop.add_reader(fd, done.set)
        try:
            await done.wait()
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


def alive(runner: dict[str, Any]) -> bool:
    return identify(runner["pid"], runner["create_time"]) is not None


def programs(run: RunDir, pcomponents: list[str], key: str, value: str
             ) -> list[psutil.Process]:
    """The processes under these pComponents' pMonitors whose environment has
    key=value."""
    state = run.read_state() or {}
    found = []
    for rec in state.get("components", []):
        monitor = identify(rec["pid"], rec["create_time"]) if rec["id"] in pcomponents else None
        for proc in monitor.children(recursive=True) if monitor else []:
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(key) == value:
                    found.append(proc)
    return found


async def stop(runners: list[dict[str, Any]], find_programs: Any) -> None:
    """SIGTERM each runner (it forwards it to its program); after JOB_STOP_GRACE_S,
    SIGKILL the programs find_programs() still finds, and the runners left after
    JOB_STOP_WAIT_S more."""
    for runner in runners:
        _signal(runner, signal.SIGTERM)
    waits = [asyncio.ensure_future(_gone(r)) for r in runners]
    _, pending = await asyncio.wait(waits, timeout=JOB_STOP_GRACE_S) if waits else ((), ())
    if pending:
        for proc in await asyncio.to_thread(find_programs):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _, pending = await asyncio.wait(pending, timeout=JOB_STOP_WAIT_S)
    for runner, wait in zip(runners, waits, strict=True):
        if wait in pending:
            _signal(runner, signal.SIGKILL)
            wait.cancel()


def _signal(runner: dict[str, Any], sig: int) -> None:
    proc = identify(runner["pid"], runner["create_time"])
    if proc is not None:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
