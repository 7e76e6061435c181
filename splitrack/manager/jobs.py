"""A job: `procs` processes of one program, placed in a slice, run, their exits kept.

    job = Job("j1", "wc", ["python", "mapper.py"], procs=2, placement="pack")
    job.view()                 # the API's JOB
    job.rank_env(i)            # what rank i's environment gains

States: queued (waits for its slice, or for prepare-task) -> running (its
processes launched: `runners` holds each rank's runner process, by PID and
create time, so a restarted manager finds them) -> exited (every rank ended by
itself) or stopped (a DELETE ?force=true stopped it, or it never ran: its
queued slice was deleted). `exits` holds each rank's status, shell style
(128+N: killed by signal N; 127: could not be started; null: unknown, its
runner was killed); `exit` is the first nonzero one in rank order, else 0 (null
if one is unknown, or the job never ran), and null until every rank ended.
`error` says why a job could not start (GPM refused to place it, a runner could
not be started), else None; its exit is then 127, as `splitrack run` says of a
program it cannot start.
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from splitrack.launch import EXIT_CANNOT_RUN
from splitrack.manager.steps import Step

STATES = ("queued", "running", "exited", "stopped")
PLACEMENTS = ("pack", "spread", "auto")
_HIDDEN = ("env", "cwd", "hints", "runners", "stopping")   # kept, not shown


@dataclass
class Job:
    id: str
    slice: str
    argv: list[str]
    procs: int = 1
    placement: str = "spread"
    hints: dict[str, bool] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    submitted_s: float = field(default_factory=time.time)
    state: str = "queued"
    placed: list[str] = field(default_factory=list)
    exit: int | None = None
    exits: list[int | None] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    runners: list[dict[str, Any]] = field(default_factory=list)  # [{"pid", "create_time"}]
    stopping: bool = False      # a DELETE ?force=true is stopping it

    @property
    def ended(self) -> bool:
        return self.state in ("exited", "stopped")

    def view(self) -> dict[str, Any]:
        out = asdict(self)
        for key in _HIDDEN:
            del out[key]
        return out

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "Job":
        return cls(**rec)

    def rank_env(self, rank: int) -> dict[str, str]:
        """Rank `rank`'s environment: the job's env, plus who it is in the job."""
        return {**self.env, "SPLITRACK_JOB": self.id, "SPLITRACK_RANK": str(rank),
                "SPLITRACK_PROCS": str(self.procs), "SPLITRACK_SLICE": self.slice,
                "SPLITRACK_PLACED": ",".join(self.placed)}

    def finish(self, exits: list[int | None], end_s: float) -> None:
        """Every rank has ended: its statuses, the launch-task step closed."""
        self.exits = exits
        nonzero = [e for e in exits if e not in (0, None)]
        self.exit = nonzero[0] if nonzero else None if None in exits or not exits else 0
        if self.error is not None:
            self.exit = EXIT_CANNOT_RUN
        self.state = "stopped" if self.stopping else "exited"
        for step in self.steps:
            if step["end_s"] is None:
                step["end_s"] = end_s
