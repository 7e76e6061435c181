"""FlowOS-RM's six lifecycle steps, each timed and recorded.

A slice walks four of them, a job two, in this order:

    attach-device    SLICE_GRANT: global grants free components (and their NICs)
    launch-machine   the slice's storage roots made (slices/NAME/ on every
                     sComponent), its pComponents confirmed up and aware of the grant
    prepare-task     GPM places the job's processes in the slice; its output files made
    launch-task      from the first process's start to the last one's exit
    detach-device    SLICE_RELEASE: the components are free again
    destroy-machine  the slice's processes confirmed gone, its record closed

A STEP is {"name", "start_s", "end_s"}: unix seconds, end_s null while it runs.
A step is recorded once it has begun for good: an attach-device that found the
pool busy (the slice waits in the queue) is not a step, the one that succeeded is.
"""

import contextlib
import time
from collections.abc import Iterator
from typing import Any

SLICE_STEPS = ("attach-device", "launch-machine", "detach-device", "destroy-machine")
JOB_STEPS = ("prepare-task", "launch-task")

Step = dict[str, Any]


def begin(steps: list[Step], name: str, start_s: float | None = None) -> Step:
    """Record step `name` as begun (now, or at start_s); end(step) closes it."""
    step = {"name": name, "start_s": time.time() if start_s is None else start_s,
            "end_s": None}
    steps.append(step)
    return step


def end(step: Step, end_s: float | None = None) -> None:
    step["end_s"] = time.time() if end_s is None else end_s


@contextlib.contextmanager
def timed(steps: list[Step], name: str) -> Iterator[None]:
    """The step spans the with-block; one that raises is not recorded."""
    start = time.time()
    yield
    end(begin(steps, name, start))
