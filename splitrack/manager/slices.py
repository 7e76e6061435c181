"""A slice: a named set of whole components of the rack, granted to one job.

    s = Slice("wc", {"p": 2, "m": 1, "n": 1})   # state "queued" until granted
    s.view()                                    # the API's SLICEVIEW
    Slice.from_record(s.record())               # what the manager's record keeps

States: queued (in the FIFO queue) -> ready (attach-device and launch-machine
done: its components are granted, its jobs may run) -> deleted (detach-device
and destroy-machine done, or taken off the queue). A deleted slice stays in the
record (its steps are history) until HISTORY_MAX newer ones push it out; its
name may be used again at once.

`error` says why a slice ended other than by DELETE (a grant the rack refused
when its turn came, or a slice released behind the manager's back), else None.
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from splitrack.manager.steps import Step

STATES = ("queued", "ready", "deleted")


@dataclass
class Slice:
    name: str
    request: dict[str, int]                  # {"p", "m", "n"}: how many of each kind
    created_s: float = field(default_factory=time.time)
    state: str = "queued"
    components: list[str] = field(default_factory=list)   # ["p0", "p1", "m0", "n0"]
    nics: list[str] = field(default_factory=list)         # its nComponents' NICs
    jobs: list[str] = field(default_factory=list)         # ids, in submission order
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    deleting: bool = field(default=False, compare=False)  # a DELETE is under way (not kept)

    def view(self) -> dict[str, Any]:
        return self.record()

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        del out["deleting"]
        return out

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "Slice":
        return cls(**rec)

    def granted(self, grant: dict[str, Any]) -> None:
        """Take SLICE_GRANT's (or SLICE_LIST's) SLICE: its components and NICs."""
        self.components, self.nics = list(grant["components"]), list(grant.get("nics", []))

    def of_kind(self, kind: str) -> list[str]:
        return [c for c in self.components if c[0] == kind]
