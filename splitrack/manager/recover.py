"""What a restarted `splitrack serve` takes back: the record, checked against the rack.

    state = recover(record.load(), slice_list)   # a Recovered; the manager adopts it

The rack's word decides which slices are granted (SLICE_LIST's "slices"); the
record adds what only the manager knew:

- a slice the record has as ready and the rack lists: ready, with the rack's
  components; one the rack does not list any more: deleted, with the error
  "released while the rack manager was down";
- a slice the rack lists and the record lacks (granted by another FIT client,
  or a record lost): adopted, its request the count of its components of each
  kind, its attach-device step at its granted_at, its launch-machine due;
- queued slices, in the record's order; one that the rack lists (serve stopped
  between its grant and its record) is ready once its launch-machine is done:
  `to_launch` lists them for the manager;
- jobs as recorded: the manager awaits the runners of the running ones again,
  by PID and create time (ranks.py: one that ended while nobody watched left
  its status in its exit file), and starts the queued ones of ready slices.
  Queued jobs of a slice that is gone are stopped.
"""

import time
from dataclasses import dataclass, field
from typing import Any

from splitrack.manager import steps
from splitrack.manager.jobs import Job
from splitrack.manager.slices import Slice


@dataclass
class Recovered:
    slices: dict[str, Slice] = field(default_factory=dict)   # live, by name
    history: list[Slice] = field(default_factory=list)       # deleted
    queue: list[str] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    next_job: int = 1
    to_launch: list[Slice] = field(default_factory=list)     # granted, launch-machine due


def recover(record: dict[str, Any], granted: list[dict[str, Any]]) -> Recovered:
    out = Recovered(jobs={j["id"]: Job.from_record(j) for j in record["jobs"]},
                    next_job=record["next_job"])
    listed = {g["name"]: g for g in granted}
    for s in map(Slice.from_record, record["slices"]):
        grant = listed.pop(s.name, None) if s.state != "deleted" else None
        if grant is not None:
            _granted(out, s, grant)
        elif s.state == "ready":
            s.state, s.error = "deleted", "released while the rack manager was down"
        if s.state == "deleted":
            out.history.append(s)
        else:
            out.slices[s.name] = s
    out.queue = [name for name in record["queue"]
                 if name in out.slices and out.slices[name].state == "queued"
                 and out.slices[name] not in out.to_launch]
    for grant in listed.values():   # granted by someone else
        s = Slice(grant["name"], _counts(grant["components"]), grant["granted_at"])
        _granted(out, s, grant)
        out.slices[s.name] = s
    for job in out.jobs.values():
        if job.state == "queued" and job.slice not in out.slices:
            job.stopping = True
            job.finish([], time.time())
    return out


def _granted(out: Recovered, s: Slice, grant: dict[str, Any]) -> None:
    s.granted(grant)
    if s.state == "queued":   # its grant came, its record did not
        steps.end(steps.begin(s.steps, "attach-device", grant["granted_at"]),
                  grant["granted_at"])
        out.to_launch.append(s)


def _counts(components: list[str]) -> dict[str, int]:
    return {kind: sum(c[0] == kind for c in components) for kind in "pmn"}
