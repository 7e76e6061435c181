"""A rack's run directory: its FIT rendezvous, logs, spec and state.

Layout of RUN_ROOT/NAME/ (RUN_ROOT = $SPLITRACK_RUN_ROOT or /tmp/splitrack-UID):
    spec.json        the normalized spec the monitors read
    state.json       who was started: per component id, kind, pid, the
                     process's create time, inbox address, log file
    ID.fit           each endpoint's FIT rendezvous (shm transport): components,
                     emulated processes (pN.PID.fit), clients that serve
    ID.sock          each component's FIT inbox (zmq transport, ipc endpoints)
    pN.spawn         pN's launch socket (`splitrack run`)
    logs/ID.log      each component's stderr
    slices.json      the slices global granted (monitors/slices.py), once there is one
    trace/ID-PID.jsonl  what each process recorded of a `splitrack trace`
                     (fit_rpc/tracing.py; the trace removes them)
    curve.key        the rack's CURVE key pair, 0600 (zmq transport, tcp endpoints)
RUN_ROOT/.lock is held (flock) while any rack starts or stops, so two
`splitrack up` of one rack cannot race (one lock file for all racks: nothing
accumulates in RUN_ROOT). RUN_ROOT and every run directory are made 0700; one
that exists already must be a directory of this user that no one else may
enter (RunRootError): the rendezvous in it decide who may join the rack.

Shared memory (FIT rings, extCaches, arenas) is memfds: it has no name and
goes with the last process that maps it, so a crashed rack leaves none behind.

A process is the rack's only if its PID is alive *and* its create time is the
recorded one: a recycled PID is never mistaken for a monitor, so cleaning a
stale run directory (a crashed rack) never touches anyone else's process.
"""

import contextlib
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Iterator
from typing import Any

import psutil

from splitrack.spec import check_name

SOCKADDR_UN_MAX = 107  # bytes of a Unix socket path, including nothing after it


def run_root() -> str:
    return os.environ.get("SPLITRACK_RUN_ROOT") or f"/tmp/splitrack-{os.getuid()}"


class RunDir:
    def __init__(self, name: str, root: str | None = None):
        self.root = root or run_root()
        self.name = check_name(name)   # never a path: `down --name ../x` must not reach out
        self.path = os.path.join(self.root, name)
        self.state_path = os.path.join(self.path, "state.json")
        self.spec_path = os.path.join(self.path, "spec.json")
        self.log_dir = os.path.join(self.path, "logs")
        self.keys_path = os.path.join(self.path, "curve.key")   # tcp endpoints' CURVE keys

    @classmethod
    def at(cls, path: str) -> "RunDir":
        """The RunDir whose directory is `path`."""
        path = os.path.abspath(path)
        return cls(os.path.basename(path), os.path.dirname(path))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with contextlib.suppress(FileExistsError):
            os.makedirs(self.root, mode=0o700)
        check_private(self.root)
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def create(self, spec_json: dict[str, Any]) -> None:
        os.mkdir(self.path, 0o700)   # the root is checked (lock) and this is new
        os.mkdir(self.log_dir, 0o700)
        _write_json(self.spec_path, spec_json)

    def log_path(self, cid: str) -> str:
        return os.path.join(self.log_dir, f"{cid}.log")

    def read_state(self) -> dict[str, Any] | None:
        if os.path.lexists(self.state_path):   # trust no state others could have written
            check_private(self.root)
            check_private(self.path)
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def global_address(self) -> str | None:
        """global's address as the state records it (it moves when global restarts):
        an Endpoint's find_directory."""
        try:
            state = self.read_state()
        except (OSError, RunRootError):
            return None
        return next((c["address"] for c in (state or {}).get("components", [])
                     if c["id"] == "global"), None)

    def write_state(self, state: dict[str, Any]) -> None:
        _write_json(self.state_path, state)

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def remove(self, keep_logs: bool = False) -> None:
        """The run directory; keep_logs: all but logs/ (a rack that failed to start)."""
        if not keep_logs:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for entry in os.listdir(self.path) if os.path.isdir(self.path) else []:
            path = os.path.join(self.path, entry)
            if path == self.log_dir:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


class RunRootError(RuntimeError):
    """A run root or run directory that others could tamper with."""


def check_private(path: str) -> None:
    """RunRootError unless `path` is a directory of ours, closed to everyone else."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise RunRootError(f"{path} is not a directory (a run root must be)")
    if st.st_uid != os.getuid():
        raise RunRootError(f"{path} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if st.st_mode & 0o077:
        raise RunRootError(f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):04o}); "
                           f"`chmod 700 {path}` if it is yours")


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def identify(pid: int, create_time: float) -> psutil.Process | None:
    """The process with this PID if it is still the one started at create_time."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.Error:
        pass
    return None


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
