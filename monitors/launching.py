"""The pMonitor's launch socket: `splitrack run`'s programs, started as its children.

`Launching` is the part of PMonitor (pmonitor.py) that runs programs; its state
is the pMonitor's (`children`, `tracked`, `cpus`, the `_launching` lock). It
listens on the Unix socket RUN_DIR/pN.spawn (splitrack/launch.py is the client
side: file descriptors cannot cross ZeroMQ), and a thread per connection does
one launch and nothing else (it touches no FIT socket):

    request  u32 length (little-endian), then JSON {"argv", "env", "cwd", "mode",
             "shortcuts", "packing", "slice"}, with the caller's stdin, stdout and
             stderr attached (SCM_RIGHTS)
    replies  JSON lines: {"pid"} once started, then {"exit": status}; or
             {"error"} if it cannot start (a bad request; with "errno": a slice
             it may not run, a statically linked program, an exec() that failed)

The program is the pMonitor's child in a session of its own, with the rack
runtime's environment (`_runtime_env`: SPLITRACK_*, the drop-in socket module
first on PYTHONPATH, the native interposer preloaded), pinned to the spec's
`cpus` if any, and killed if its pMonitor dies (PR_SET_PDEATHSIG). It is
tracked from its start; its end is released by the pMonitor's tick().
"""

import contextlib
import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import threading
from typing import Any

import psutil

from fit_rpc.transport import CURVE_ENV
from splitrack.native_run import preload_env, refuse_static

_SPAWN_MAX_BYTES = 1 << 20
_DROPIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "splitrack", "guest", "_dropin")   # the sitecustomize.py of rack programs
_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_the_pmonitor() -> None:
    """In a program, between fork and exec: SIGKILL when its launching thread (so
    the pMonitor) dies, as a board that fails takes its processes with it."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Launching:
    """PMonitor's launch socket and the threads that launch its programs."""

    __slots__ = ()   # (its state is the pMonitor's)

    def _start_spawn_server(self) -> socket.socket:
        path = os.path.join(self.run_dir, f"{self.id}.spawn")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)   # a dead pMonitor's (restart); the run directory is ours alone
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(16)
        threading.Thread(target=self._accept_loop, args=(sock,), daemon=True).start()
        return sock

    def _accept_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed: we are stopping
            threading.Thread(target=self._launch, args=(conn,), daemon=True).start()

    def _launch(self, conn: socket.socket) -> None:
        with conn:
            try:
                request, fds = _recv_request(conn)
            except (OSError, ValueError) as exc:
                self.log.warning("bad launch request: %s", exc)
                _send(conn, {"error": f"bad launch request: {exc}"})
                return
            try:
                self._check_slice(request.get("slice"))
                env = self._runtime_env(request)
                refuse_static(request["argv"], env, request.get("cwd"))
                # A session of its own: the caller's terminal is not its controlling
                # terminal, so it may read and write it without job control stopping it.
                with self._launching:
                    proc = subprocess.Popen(
                        request["argv"], stdin=fds[0], stdout=fds[1], stderr=fds[2],
                        cwd=request.get("cwd"), env=env,
                        start_new_session=True, preexec_fn=self._in_child)
                    self.children[proc.pid] = proc
            except (OSError, ValueError, KeyError, TypeError, IndexError,
                    subprocess.SubprocessError) as exc:
                _send(conn, {"error": str(exc), "errno": getattr(exc, "errno", None)})
                return
            finally:
                for fd in fds:
                    os.close(fd)
            self.tracked[proc.pid] = psutil.Process(proc.pid).create_time()
            self.log.info("launched %d: %s", proc.pid, " ".join(request["argv"]))
            _send(conn, {"pid": proc.pid})
            status = proc.wait()
            del self.children[proc.pid]
            try:
                _send(conn, {"exit": status})
            except OSError:
                pass  # the launcher is gone; the process's end is still released by tick()

    def _check_slice(self, name: Any) -> None:
        """A launch must name the slice this pComponent is granted to, or none if free."""
        mine = self.slices.get(self.id)
        if name == mine:
            return
        self.ep.counters.error("slice")
        if name is None:
            why = (f"{self.id} is granted to slice {mine}: a launch there must name it "
                   f"(splitrack job submit --slice {mine})")
        else:
            why = f"{self.id} is {f'granted to slice {mine}' if mine else 'free'}, " \
                  f"not of slice {name}"
        raise PermissionError(errno.EPERM, why)

    def _in_child(self) -> None:
        """Between fork and exec: die with us; run on our CPUs, if the spec says."""
        _die_with_the_pmonitor()
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)

    def _runtime_env(self, request: dict[str, Any]) -> dict[str, str]:
        """The program's environment: the caller's, plus what the rack runtime reads,
        plus the drop-in socket module first on PYTHONPATH (splitrack/guest/rsocket.py),
        plus the native interposer, preloaded (splitrack/native_run.py)."""
        env = dict(request["env"])
        mode = request.get("mode") or self.rack["mode"]
        if mode not in ("dma", "ddio"):
            raise ValueError(f"no data path {mode!r} (dma, ddio)")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_DROPIN, env.get("PYTHONPATH")) if p)
        env.update(preload_env(env))
        shortcuts = self.rack["shortcuts"] and request.get("shortcuts", True)
        env.update(SPLITRACK_PCOMPONENT=self.id, SPLITRACK_RUN_DIR=self.run_dir,
                   SPLITRACK_GLOBAL=self.ep.address_of_global(), SPLITRACK_MODE=mode,
                   SPLITRACK_POLL_US=str(self.rack["poll_us"]),
                   SPLITRACK_LOOPBACK=self.rack["loopback"],
                   SPLITRACK_SHORTCUTS="1" if shortcuts else "0")
        if not request.get("packing", True):
            env["SPLITRACK_PACKING"] = "0"   # else the caller's environment decides
        if CURVE_ENV in os.environ:   # tcp endpoints: the rack's key, which the caller lacks
            env[CURVE_ENV] = os.environ[CURVE_ENV]
        return env


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One JSON launch request (u32 length first) with three fds attached."""
    data, fds, _, _ = socket.recv_fds(conn, _SPAWN_MAX_BYTES, 3)
    try:
        if len(fds) != 3:
            raise ValueError(f"expected 3 file descriptors, got {len(fds)}")
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "little"):
            chunk = conn.recv(_SPAWN_MAX_BYTES)
            if not chunk:
                raise ValueError("launch request cut short")
            data += chunk
        return json.loads(data[4:4 + int.from_bytes(data[:4], "little")]), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")
