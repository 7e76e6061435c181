"""The rack launcher: start, inspect and stop a rack's monitor processes.

Interface:
    with Rack(spec) as rack:          # start; always stop, even on an exception
                                      # (verbose=True: the monitors log at DEBUG)
        rack.status()                 # [{id, kind, pid, address, state, uptime_s}]
        ep = rack.endpoint()          # a FIT endpoint to call components
    Rack(spec, detach=True).start()   # leave it running (`splitrack up --detach`)
    with Rack.attach("default") as rack:   # an already-running rack, from its run dir;
        ...                           # the with closes our endpoints, the rack runs on
    rack.stop()                       # stop exactly the processes the rack started
    rack.stop(keep_logs="DIR")        # ... and keep a copy of its monitors' logs in DIR

Starting a rack whose name is already up raises RackAlreadyUp (a RackError) and
changes nothing; its message says how to attach instead. Rack(spec) never
attaches by itself: the running rack may have been started from another spec,
and a with-block that starts a rack also stops it, one that attaches never does.

`spec` is whatever load_spec takes (None: the embedded default rack).
Start order: global first (it is the directory), then every other component at
once; each is ready when it has registered and printed READY. A rack that
fails to start is stopped and its run directory removed; the error carries the
failing monitor's last log lines. Monitors of a non-detached rack die with the
process that started them (PR_SET_PDEATHSIG), so a killed test leaks nothing.

Parts: monitor_processes.py starts and stops the monitor processes (a mixin of
Rack's), rack_errors.py defines RackError and RackAlreadyUp.
"""

import json
import logging
import os
import subprocess
import time
import weakref
from typing import Any

import psutil

from fit_rpc import GLOBAL_ID, Endpoint, Op, codec
from fit_rpc.params import FIT_POLL_US
from splitrack import logs
from splitrack.logs import LOG_LEVEL_ENV
from splitrack.monitor_processes import MonitorProcesses
from splitrack.params import HEALTH_TIMEOUT_S, MONITOR_READY_TIMEOUT_S, STOP_POLL_S
from splitrack.rack_errors import RackAlreadyUp, RackError
from splitrack.rundir import SOCKADDR_UN_MAX, RunDir, identify, running
from splitrack.spec import NAME, RackSpec, load_spec

log = logging.getLogger("splitrack")


class Rack(MonitorProcesses):
    def __init__(self, spec: Any = None, *, name: str | None = None,
                 run_root: str | None = None, detach: bool = False, verbose: bool = False):
        self.spec = spec if isinstance(spec, RackSpec) else load_spec(spec, name=name)
        self.name = self.spec.name
        self.run = RunDir(self.name, run_root)
        self.detach = detach
        # the monitors' logging: DEBUG if verbose, else what $SPLITRACK_LOG_LEVEL says
        self.log_level = "DEBUG" if verbose else os.environ.get(LOG_LEVEL_ENV, "INFO")
        self.components: dict[str, dict[str, Any]] = {}  # id -> state record
        self._children: dict[str, subprocess.Popen] = {}
        self._endpoints: weakref.WeakSet[Endpoint] = weakref.WeakSet()  # closed at stop()
        self._clients = 0
        self.attached = False   # True: found running (attach), not started by us

    # ---- lifecycle -------------------------------------------------------------
    @classmethod
    def attach(cls, name: str = "default", run_root: str | None = None) -> "Rack":
        """The running rack `name`; RackError if it is not up."""
        run = RunDir(name, run_root)
        state = run.read_state()
        if state is None:
            raise RackError(f"rack {name!r} is not up (no state in {run.path})")
        rack = cls.__new__(cls)
        rack.spec = None  # not needed to inspect or stop a running rack
        rack.name, rack.run, rack.detach = name, run, True
        rack.log_level = state.get("log_level", "INFO")
        rack.components = {c["id"]: c for c in state["components"]}
        rack._children, rack._endpoints, rack._clients = {}, weakref.WeakSet(), 0
        rack.attached = True
        return rack

    @classmethod
    def running(cls, run_root: str | None = None) -> list[str]:
        """Names of the racks that are up under the run root (a live process each)."""
        root = RunDir("default", run_root).root
        names = sorted(os.listdir(root)) if os.path.isdir(root) else []
        return [name for name in names if NAME.fullmatch(name) and any(
            identify(c["pid"], c["create_time"])
            for c in (RunDir(name, run_root).read_state() or {}).get("components", []))]

    def start(self) -> "Rack":
        with self.run.lock():
            self._clear_stale()
            self.run.create(self.spec.to_json())
            try:
                self._check_socket_paths()
                if self.curve_keys() is not None:   # tcp endpoints: only key holders talk FIT
                    from fit_rpc.zmq_transport import new_keys

                    new_keys(self.run.keys_path)
                self._launch([GLOBAL_ID], None)
                self._launch(self.spec.ids(), self.components[GLOBAL_ID]["address"])
                self.run.write_state({"name": self.name, "launcher_pid": os.getpid(),
                                      "detached": self.detach, "source": self.spec.source,
                                      "log_level": self.log_level,
                                      "components": list(self.components.values())})
            except BaseException:
                self._terminate()
                self.run.remove(keep_logs=True)   # the next up of this name clears them
                raise
        return self

    def stop(self, keep_logs: str | None = None) -> None:
        """Stop the rack's processes (SIGTERM, then SIGKILL after a grace period)
        and remove its run directory. Safe to call twice. keep_logs: a new or
        empty directory that gets a copy of the logs first (splitrack.logs.keep);
        if that fails, the run directory stays, logs and all."""
        self.close_endpoints()
        with self.run.lock():
            self._terminate()
            if keep_logs is not None:
                try:
                    logs.keep(self.run, keep_logs)
                except OSError as exc:
                    raise RackError(f"rack {self.name!r} stopped, but its logs could not be "
                                    f"kept in {keep_logs} ({exc}); they are still in "
                                    f"{self.run.log_dir}") from None
            self.run.remove()

    def restart(self, cid: str) -> dict[str, Any]:
        """Start the dead monitor `cid` again, in the running rack, as a rebooted board:
        what it held is gone, new work goes to it. global starts it (RESTART) and it
        registers in the dead one's place; the run directory's record then names
        the new process, which this returns. A dead global is started by us, as
        `up` did; it takes the live components from the run directory's record,
        where the others find its new address when the old one fails."""
        rec = self.components.get(cid)
        if rec is None:
            raise RackError(f"no component {cid!r} in rack {self.name!r} "
                            f"(it has {', '.join(self.components)})")
        if identify(rec["pid"], rec["create_time"]):
            raise RackError(f"{cid} is running (pid {rec['pid']}); restart is for a dead one")
        if cid == GLOBAL_ID:   # we start it, as up did; it rebuilds its registry from the state
            with self.run.lock():
                self._launch([GLOBAL_ID], None)
                self._save_state()
            return self.components[GLOBAL_ID]
        with self.run.lock(), self.endpoint() as ep:
            try:
                pid = ep.call_args(GLOBAL_ID, Op.RESTART, {"id": cid})[0]["pid"]
                new = self._registered(ep, cid, pid)
                started = psutil.Process(pid).create_time()
            except (OSError, psutil.Error) as exc:
                raise RackError(f"cannot restart {cid}: {getattr(exc, 'strerror', None) or exc}"
                                ) from None
            rec.update(pid=pid, create_time=started, address=new["address"])
            self._save_state()
        return rec

    def _save_state(self) -> None:
        state = self.run.read_state() or {}
        state["components"] = list(self.components.values())
        self.run.write_state(state)

    def _registered(self, ep: Endpoint, cid: str, pid: int) -> dict[str, Any]:
        """global's record of `cid` once process `pid` has registered as it."""
        deadline = time.monotonic() + MONITOR_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            listed = ep.call_args(GLOBAL_ID, Op.LIST)[0]["components"]
            new = next((c for c in listed if c["id"] == cid and c["pid"] == pid), None)
            if new is not None:
                return new
            if not running(pid):
                raise RackError(self._failure(cid, "exited during its restart"))
            time.sleep(STOP_POLL_S)
        raise RackError(f"{cid} did not register within {MONITOR_READY_TIMEOUT_S:g} s "
                        f"(its log: {self.run.log_path(cid)})")

    def __enter__(self) -> "Rack":
        return self if self.attached else self.start()

    def __exit__(self, *exc: object) -> None:
        if self.attached:   # not ours to stop: only our endpoints go
            self.close_endpoints()
        else:
            self.stop()

    def close_endpoints(self) -> None:
        """Close every endpoint that endpoint() made (stop() does this first)."""
        for ep in list(self._endpoints):
            ep.close()
        self._endpoints.clear()

    # ---- inspection --------------------------------------------------------------
    def alive(self) -> list[str]:
        """Ids of the rack's processes that are still running."""
        return [cid for cid, rec in self.components.items()
                if identify(rec["pid"], rec["create_time"])]

    def status(self) -> list[dict[str, Any]]:
        """Every component with its PID, endpoint and health: ok, unreachable or dead."""
        rows = []
        with self.endpoint() as ep:
            for cid, rec in self.components.items():
                row = {k: rec[k] for k in ("id", "kind", "pid", "address")}
                row.update(state="dead", uptime_s=None)
                if identify(rec["pid"], rec["create_time"]):
                    try:
                        health, _ = ep.call_args(cid, Op.HEALTH, timeout=HEALTH_TIMEOUT_S)
                        row.update(state=health["state"], uptime_s=health["uptime_s"])
                    except OSError:
                        row["state"] = "unreachable"
                rows.append(row)
        return rows

    def stats(self) -> dict[str, dict[str, Any]]:
        """STATS of every live component, by id."""
        out = {}
        with self.endpoint() as ep:
            for cid in self.alive():
                try:
                    out[cid], _ = ep.call_args(cid, Op.STATS, timeout=HEALTH_TIMEOUT_S)
                except OSError as exc:
                    out[cid] = {"id": cid, "error": str(exc)}
        return out

    @property
    def poll_us(self) -> int:
        """How long this rack's FIT waiters spin (rack.poll_us)."""
        try:
            with open(self.run.spec_path) as f:
                return int(json.load(f)["rack"]["poll_us"])
        except (OSError, ValueError, KeyError):
            return FIT_POLL_US

    def endpoint(self, serve: bool = False) -> Endpoint:
        """A FIT endpoint that resolves component ids through `global`.

        serve=True gives it an inbox and registers it (kind "client"), so
        components can call it back; it then must serve while it waits. Closing
        it unregisters it.
        """
        self._clients += 1
        cid = f"cli.{os.getpid()}.{self._clients}"
        bind = None
        directory = self.components[GLOBAL_ID]["address"]
        if serve:
            bind = {"tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{self.run.path}/{cid}.sock",
                    "shm": f"shm://{self.run.path}/{cid}.fit"}[directory.split("://")[0]]
        ep = Endpoint(cid, bind, directory=directory, poll_us=self.poll_us, keys=self.curve_keys())
        ep.find_directory = self.run.global_address
        for peer, rec in self.components.items():  # known already: status works without global
            ep.add_peer(peer, rec["address"])
        if serve:
            ep.call_args(GLOBAL_ID, Op.REGISTER, {"id": cid, "kind": "client",
                                                  "address": ep.address, "pid": os.getpid(),
                                                  "resources": {}})
            ep.at_close(lambda: ep.send(GLOBAL_ID, Op.UNREGISTER, codec.encode({"id": cid}),
                                        timeout=HEALTH_TIMEOUT_S))
        self._endpoints.add(ep)
        return ep

    # ---- internals ------------------------------------------------------------------
    def _clear_stale(self) -> None:
        state = self.run.read_state()
        if state is not None:
            live = [c["id"] for c in state["components"]
                    if identify(c["pid"], c["create_time"])]
            if live:
                raise RackAlreadyUp(self.name, live)
            log.warning("rack %r: removing stale run directory %s (its processes are gone)",
                        self.name, self.run.path)
        if self.run.exists():
            self.run.remove()

    def _check_socket_paths(self) -> None:
        if self.spec.transport == "zmq" and self.spec.endpoints != "ipc":
            return
        longest = os.path.join(self.run.path, "cli.4194304.999.sock")
        if len(longest.encode()) > SOCKADDR_UN_MAX:
            raise RackError(f"run directory {self.run.path} is too long for Unix sockets "
                            f"(at most {SOCKADDR_UN_MAX} bytes a path); set SPLITRACK_RUN_ROOT "
                            "to a shorter directory")

    def curve_keys(self) -> str | None:
        """The CURVE key file, if this rack's FIT endpoints are tcp."""
        if self.spec is not None:   # starting it: what the spec says
            tcp = self.spec.transport == "zmq" and self.spec.endpoints == "tcp"
            return self.run.keys_path if tcp else None
        return self.run.keys_path if os.path.exists(self.run.keys_path) else None


__all__ = ["Rack", "RackAlreadyUp", "RackError"]
