"""What each of FlowOS-RM's six steps does on the rack (steps.py names them).

    await attach_device(link, s) -> bool      SLICE_GRANT; False: the pool is busy
    await launch_machine(link, s, storage)    storage roots; pComponents aware
    await prepare_task(link, job)             GPM_PLACE; the output files
    launch_task(job, run_dir, exit_path)      a runner per rank (ranks.py)
    await task_ended(job, exit_path)          the last rank's end closes launch-task
    await detach_device(link, s)              SLICE_RELEASE
    await destroy_machine(run, s, close)      the slice's processes gone; close()

Each records its step in the slice's or job's steps. The manager (manager.py)
decides when to take which, and what a failure means; these only act. FIT
errors come out as the endpoint raises them (OSError subclasses).
"""

import asyncio
import contextlib
import errno
import time
from collections.abc import Callable

import psutil

from fit_rpc import GLOBAL_ID, Op
from splitrack.manager import ranks, steps
from splitrack.manager.errors import ApiError
from splitrack.manager.fitlink import FitLink
from splitrack.manager.jobs import Job
from splitrack.manager.slices import Slice
from splitrack.params import JOB_STOP_WAIT_S, MACHINE_POLL_S, MACHINE_READY_TIMEOUT_S
from splitrack.rundir import RunDir

ExitPath = Callable[[str, int], str]   # (job id, rank) -> where the rank's status goes


async def attach_device(link: FitLink, s: Slice) -> bool:
    start = time.time()
    try:
        grant = await link.call(GLOBAL_ID, Op.SLICE_GRANT, {"name": s.name, **s.request})
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            return False
        raise
    s.granted(grant["slice"])
    steps.end(steps.begin(s.steps, "attach-device", start))
    return True


async def launch_machine(link: FitLink, s: Slice, storage: list[str]) -> None:
    """slices/NAME/ on every sComponent (confined there, the slice's processes find
    their files); each pComponent of the slice up and aware of the grant."""
    with steps.timed(s.steps, "launch-machine"):
        for sid in storage:
            for path in ("slices", f"slices/{s.name}"):
                with contextlib.suppress(FileExistsError):
                    await link.call(sid, Op.S_MKDIR, {"path": path})
        for pid in s.of_kind("p"):
            await _aware(link, pid, s.name)


async def _aware(link: FitLink, pcomponent: str, name: str) -> None:
    """HEALTH of the pComponent until it names the slice (a monitor that reports no
    slice at all is taken at global's word: SLICE_GRANT pushed the table)."""
    deadline = time.monotonic() + MACHINE_READY_TIMEOUT_S
    while (await link.call(pcomponent, Op.HEALTH)).get("slice", name) != name:
        if time.monotonic() > deadline:
            raise ApiError(503, f"{pcomponent} does not know of its grant to slice {name!r} "
                                f"after {MACHINE_READY_TIMEOUT_S:g} s")
        await asyncio.sleep(MACHINE_POLL_S)


async def prepare_task(link: FitLink, job: Job) -> None:
    with steps.timed(job.steps, "prepare-task"):
        placed = await link.call(GLOBAL_ID, Op.GPM_PLACE, {
            "slice": job.slice, "count": job.procs, "placement": job.placement,
            "hints": job.hints})
        job.placed = list(placed.get("ids") or [placed["id"]] * job.procs)
        for path in (job.stdout, job.stderr):
            open(path, "wb").close()


def launch_task(job: Job, run_dir: str, exit_path: ExitPath) -> None:
    """Start every rank's runner; the launch-task step is open until task_ended."""
    steps.begin(job.steps, "launch-task")
    job.state = "running"
    for rank, pcomponent in enumerate(job.placed):
        job.runners.append(ranks.spawn(run_dir, job, rank, pcomponent,
                                       exit_path(job.id, rank)))


async def task_ended(job: Job, exit_path: ExitPath) -> None:
    """Wait for every rank's end; the job gets their statuses."""
    done = await asyncio.gather(*(ranks.ended(runner, exit_path(job.id, rank))
                                  for rank, runner in enumerate(job.runners)))
    job.finish([status for status, _ in done],
               max((end for _, end in done if end is not None), default=time.time()))


async def detach_device(link: FitLink, s: Slice) -> None:
    with steps.timed(s.steps, "detach-device"):
        with contextlib.suppress(FileNotFoundError):   # released already (ENOENT)
            await link.call(GLOBAL_ID, Op.SLICE_RELEASE, {"name": s.name})


async def destroy_machine(run: RunDir, s: Slice, close: Callable[[], None]) -> None:
    """What still runs of the slice (orphans of its jobs' programs) is killed and
    confirmed gone; then close() closes the slice's record."""
    def kill() -> None:
        left = ranks.programs(run, s.of_kind("p"), "SPLITRACK_SLICE", s.name)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=JOB_STOP_WAIT_S)

    with steps.timed(s.steps, "destroy-machine"):
        await asyncio.to_thread(kill)
        close()
