"""The manager's record in the rack's run directory, and the one-serve-per-rack lock.

    RUN_DIR/manager.json    {"slices": [...], "queue": [names], "jobs": [...],
                             "next_job": n}: written atomically (a temporary file,
                             then rename) after every change, read at start
    RUN_DIR/manager.lock    held (flock) by the serve of this rack while it runs
    RUN_DIR/jobs/ID.stdout, ID.stderr    a job's output (every rank's, appended)
    RUN_DIR/jobs/ID.R.exit  rank R's status, written by its runner when it ends

What the rack itself knows (the granted slices: SLICE_LIST) is the rack's to
tell; the record adds what only the manager knows: the queue, the jobs, the
steps. The run directory goes with the rack (`splitrack down`), and so does
all of this.
"""

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Iterator
from typing import Any


class Record:
    def __init__(self, run_dir: str):
        self.rack = os.path.basename(run_dir)
        self.path = os.path.join(run_dir, "manager.json")
        self.lock_path = os.path.join(run_dir, "manager.lock")
        self.jobs_dir = os.path.join(run_dir, "jobs")

    def load(self) -> dict[str, Any]:
        """The record, or an empty one if there is none yet."""
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"slices": [], "queue": [], "jobs": [], "next_job": 1}

    def save(self, record: dict[str, Any]) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while this process serves the rack; OSError(EBUSY) if another does."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with open(self.lock_path) as f:
                    holder = f.read().strip() or "another process"
                raise OSError(errno.EBUSY, f"rack {self.rack!r} is served already "
                                           f"({holder})") from None
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()}".encode())
            yield
        finally:
            os.close(fd)

    def output_paths(self, job_id: str) -> tuple[str, str]:
        os.makedirs(self.jobs_dir, mode=0o700, exist_ok=True)
        base = os.path.join(self.jobs_dir, job_id)
        return f"{base}.stdout", f"{base}.stderr"

    def exit_path(self, job_id: str, rank: int) -> str:
        return os.path.join(self.jobs_dir, f"{job_id}.{rank}.exit")
