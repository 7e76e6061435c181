"""The rack's monitor processes: start them, say why one failed, stop them.

`MonitorProcesses` is the part of Rack (rack.py) that runs `python -m monitors`
once per component; its state is the Rack's: `run` (the RunDir), `name`,
`detach`, `log_level`, `components` (id -> record, which _launch fills in) and
`_children` (id -> Popen: the processes this object started); and it asks the
Rack's curve_keys() whether monitors get the CURVE key file.

    _launch(ids, global_address)  start these monitors at once; return when each has
                                  printed READY <address>, else RackError
    _failure(cid, what)           the message for a monitor that failed: the cause it
                                  logged, else its log's last lines
    _terminate()                  SIGTERM every process of ours, SIGKILL what is left
                                  after MONITOR_STOP_GRACE_S; reap our children

Only the rack's own processes are signalled: those it started and those its run
directory records, each known by PID and create time (a reused PID is not ours).
"""

import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

import psutil

from fit_rpc import GLOBAL_ID
from fit_rpc.transport import CURVE_ENV
from splitrack.logs import LOG_LEVEL_ENV
from splitrack.params import MONITOR_READY_TIMEOUT_S, MONITOR_STOP_GRACE_S, STOP_POLL_S
from splitrack.rack_errors import RackError
from splitrack.rundir import RunRootError, identify

log = logging.getLogger("splitrack")


class MonitorProcesses:
    """Rack's start, failure report and stop of its monitor processes."""

    def _launch(self, ids: list[str], global_address: str | None) -> None:
        """Start these monitors at once and wait until each printed READY."""
        pending = {}
        for cid in ids:
            cmd = [sys.executable, "-m", "monitors", "--run-dir", self.run.path, "--id", cid]
            if global_address:
                cmd += ["--global", global_address]
            if not self.detach:
                cmd += ["--die-with-parent", str(os.getpid())]
            # A process group of its own: a terminal's Ctrl-C reaches only us, and we
            # stop the rack. Not a session of its own: that would also put each
            # monitor in its own scheduler autogroup, which costs ~20% FIT RTT under load.
            env = dict(os.environ, **{LOG_LEVEL_ENV: self.log_level})
            if self.curve_keys() is not None:   # and their programs, through the pMonitors
                env[CURVE_ENV] = self.run.keys_path
            with open(self.run.log_path(cid), "ab") as logf:
                proc = subprocess.Popen(cmd, cwd=self.run.path, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=logf, process_group=0,
                                        env=env)
            log.debug("%s: started %s, pid %d: %s", self.name, cid, proc.pid, " ".join(cmd))
            self._children[cid] = proc
            self.components[cid] = {
                "id": cid, "kind": "global" if cid == GLOBAL_ID else cid[0], "pid": proc.pid,
                "create_time": psutil.Process(proc.pid).create_time(),
                "address": None, "log": self.run.log_path(cid)}
            pending[proc.stdout] = cid
        self._await_ready(pending)

    def _await_ready(self, pending: dict[Any, str]) -> None:
        deadline = time.monotonic() + MONITOR_READY_TIMEOUT_S
        buffers = {cid: b"" for cid in pending.values()}
        with selectors.DefaultSelector() as sel:
            for pipe in pending:
                sel.register(pipe, selectors.EVENT_READ)
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RackError(self._failure(next(iter(pending.values())),
                                                  "did not become ready in time"))
                for key, _ in sel.select(remaining):
                    cid = pending[key.fileobj]
                    chunk = os.read(key.fd, 4096)
                    buffers[cid] += chunk
                    if b"\n" in buffers[cid] or not chunk:
                        line = buffers[cid].split(b"\n", 1)[0].decode(errors="replace")
                        if not line.startswith("READY "):
                            raise RackError(self._failure(cid, "exited during start"))
                        self.components[cid]["address"] = line.split(" ", 1)[1]
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                        del pending[key.fileobj]

    def _failure(self, cid: str, what: str) -> str:
        proc = self._children.get(cid)
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=1)  # its stdout closed: it is exiting
            except subprocess.TimeoutExpired:
                pass
        path = self.run.log_path(cid)
        try:
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        status = f" (exit status {code})" if code is not None else ""
        mark = f" {cid} ERROR "   # the monitor logs the cause first (monitors/core.py);
        #                            the log may hold earlier lives' too: the last is ours
        cause = next((line.split(mark, 1)[1] for line in reversed(lines) if mark in line),
                     None)
        if cause is not None:
            return f"{cid} {what}{status}: {cause} (its log: {path})"
        tail = "\n".join(lines[-8:])
        return f"{cid} {what}{status}; its log ({path}) ends:\n{tail}".rstrip()

    def _terminate(self) -> None:
        """SIGTERM every process of ours, wait, SIGKILL what is left; reap children.
        Ours: those we started, and those the run directory records (a monitor that
        `splitrack restart` started, in another process, is only there)."""
        try:
            recorded = (self.run.read_state() or {}).get("components", [])
        except RunRootError:
            recorded = []
        procs = []
        for rec in [*self.components.values(), *recorded]:
            proc = identify(rec["pid"], rec["create_time"])
            if proc is not None and proc.pid not in {p.pid for p in procs}:
                procs.append(proc)
        log.debug("%s: SIGTERM to pids %s", self.name, [p.pid for p in procs])
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        left = _wait_stopped(procs, MONITOR_STOP_GRACE_S)
        for proc in left:
            log.warning("%s: pid %d did not stop on SIGTERM; killing it", self.name, proc.pid)
            _signal(proc, signal.SIGKILL)
        _wait_stopped(left, MONITOR_STOP_GRACE_S)
        for child in self._children.values():
            if child.stdout and not child.stdout.closed:
                child.stdout.close()
            try:
                child.wait(timeout=MONITOR_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self._children.clear()


def _wait_stopped(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of procs still running after timeout. A zombie has stopped: its parent
    (a foreground `splitrack up`, another process than ours) reaps it."""
    deadline = time.monotonic() + timeout
    while True:
        procs = [p for p in procs if _running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(STOP_POLL_S)


def _running(proc: psutil.Process) -> bool:
    try:   # is_running: the same process (its create time), not a reused PID
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except psutil.NoSuchProcess:
        pass
