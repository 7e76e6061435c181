"""The rack manager: slices, their FIFO queue and their jobs, over one running rack.

    m = Manager(Rack.attach("default"))
    await m.start()                       # recover, then serve the queue
    s = await m.create({"name": "wc", "p": 2, "m": 1, "n": 1})   # s.state: ready | queued
    job = m.submit("wc", {"argv": ["python", "mapper.py"], "procs": 2})
    await m.wait_for(lambda: job.ended, 30)
    await m.delete("wc", force=False)
    await m.close()                       # the record saved; jobs left running

Everything runs on one event loop; the state (slices, queue, jobs) changes only
between awaits, and every change is saved to the record (record.py) and wakes
whoever waits for one (wait_for). Grants and releases run one at a time
(`_lock`), so the queue's order is the order of the grants.

The queue is FlowOS-RM's policy, FIFO: a slice waits until every slice before
it is granted and enough of the pool is free -- a small slice does not pass a
large one at the head, however long that waits (no starvation, at the price
of idle components). The head is tried whenever a slice is deleted, and every
QUEUE_RETRY_S (components freed behind the manager's back).

Refusals raise ApiError (errors.py) with the HTTP status the service answers.
"""

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from fit_rpc import GLOBAL_ID, Op
from splitrack.manager import lifecycle, ranks
from splitrack.manager.errors import ApiError, from_rack
from splitrack.manager.fitlink import FitLink
from splitrack.manager.jobs import Job
from splitrack.manager.record import Record
from splitrack.manager.recover import recover
from splitrack.manager.slices import Slice
from splitrack.params import (
    HISTORY_MAX,
    JOB_STOP_GRACE_S,
    JOB_STOP_WAIT_S,
    QUEUE_RETRY_S,
)
from splitrack.rack import Rack, RackError

log = logging.getLogger("splitrack.manager")
_KINDS = {"p": "pComponents", "m": "mComponents", "n": "nComponents"}


class Manager:
    def __init__(self, rack: Rack):
        self.rack = rack
        self.link = FitLink(rack)
        self.record = Record(rack.run.path)
        self.slices: dict[str, Slice] = {}     # live ones (queued, ready), by name
        self.history: list[Slice] = []         # deleted ones, oldest first
        self.queue: list[str] = []             # names of the queued slices, FIFO
        self.jobs: dict[str, Job] = {}
        self.next_job = 1
        self.counts = Counter(c["kind"] for c in rack.components.values())
        self.storage = [cid for cid, c in rack.components.items() if c["kind"] == "s"]
        self.rack_gone = asyncio.Event()       # set when the rack's run directory went
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    # ---- start, stop, record ---------------------------------------------------------
    async def start(self) -> None:
        """Take the record and what the rack says back (recover.py), then serve the
        queue. RackError if the rack does not answer."""
        try:
            listed = await self.link.call(GLOBAL_ID, Op.SLICE_LIST)
        except OSError as exc:
            raise RackError(f"rack {self.rack.name!r} does not list its slices: {exc}") from None
        got = recover(self.record.load(), listed["slices"])
        self.slices, self.history, self.queue = got.slices, got.history, got.queue
        self.jobs, self.next_job = got.jobs, got.next_job
        for job in self.jobs.values():
            if job.state == "running":
                self._spawn(self._watch(job))
            elif job.state == "queued" and self.slices[job.slice].state == "ready":
                self._spawn(self._run(job))
        async with self._lock:
            for s in got.to_launch:
                with contextlib.suppress(ApiError):   # logged, and the slice closed
                    await self._launch(s)
        self._commit()
        self._spawn(self._serve_queue())

    async def close(self) -> None:
        """Stop serving; the record is saved. Running jobs run on (a restarted serve
        finds them by their runners' PIDs)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._save()
        await asyncio.to_thread(self.link.close)

    def _save(self) -> None:
        self.record.save({
            "slices": [s.record() for s in [*self.history, *self.slices.values()]],
            "queue": self.queue, "jobs": [j.record() for j in self.jobs.values()],
            "next_job": self.next_job})

    def _commit(self) -> None:
        """Save the record and wake whoever waits for a change."""
        self._save()
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Until done() holds (checked after every change), or timeout_s passed."""
        deadline = time.monotonic() + timeout_s
        while not done() and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("rack manager: %s", task.exception(), exc_info=task.exception())

    # ---- slices --------------------------------------------------------------------
    def slice(self, name: str) -> Slice:
        """The live slice `name`, else the last deleted one of that name; 404."""
        found = self.slices.get(name) or next(
            (s for s in reversed(self.history) if s.name == name), None)
        if found is None:
            raise ApiError(404, f"no slice {name!r}")
        return found

    def _live(self, name: str) -> Slice:
        if name not in self.slices:
            raise ApiError(404, f"no slice {name!r}" + (
                " (it was deleted)" if any(s.name == name for s in self.history) else ""))
        return self.slices[name]

    async def create(self, body: dict[str, Any]) -> Slice:
        """A new slice: granted at once (ready) when the queue is empty and the pool
        has enough free, else queued."""
        name = body["name"]
        if name in self.slices:
            raise ApiError(409, f"slice {name!r} exists ({self.slices[name].state})")
        request = {kind: body.get(kind, 0) for kind in _KINDS}
        for kind, asked in request.items():
            if asked > self.counts[kind]:
                raise ApiError(400, f"the rack has only {self.counts[kind]} {_KINDS[kind]}, "
                                    f"{asked} asked")
        s = self.slices[name] = Slice(name, request)
        async with self._lock:
            self.queue.append(name)
            self._commit()
            if self.queue[0] == name:   # FIFO: nobody waits before it
                try:
                    await self._grant(s)
                except ApiError as exc:
                    if exc.status == 503:   # the rack did not answer: no slice after all
                        self.queue.remove(name)
                        del self.slices[name]
                        self._commit()
                    raise
        log.info("slice %s %s", name, "granted: " + " ".join(s.components)
                 if s.state == "ready" else "queued")
        return s

    async def _grant(self, s: Slice) -> bool:
        """attach-device and launch-machine of the queue's head; False if the pool is
        busy. A refusal closes the slice and raises ApiError, so does a failed
        launch-machine (after detach-device); a silent rack raises 503 and leaves
        it queued."""
        try:
            if not await lifecycle.attach_device(self.link, s):
                return False
        except OSError as exc:
            refused = from_rack(exc, f"slice {s.name!r}")
            if refused.status != 503:
                self._close(s, str(refused))
                self._commit()
            raise refused from None
        return await self._launch(s)

    async def _launch(self, s: Slice) -> bool:
        """launch-machine of a granted slice: then it is ready and its queued jobs
        start; if it fails, detach-device, the slice closed, ApiError."""
        try:
            await lifecycle.launch_machine(self.link, s, self.storage)
        except (OSError, ApiError) as exc:
            failed = exc if isinstance(exc, ApiError) else from_rack(exc, "launch-machine")
            log.warning("slice %s: %s", s.name, failed)
            with contextlib.suppress(OSError):
                await lifecycle.detach_device(self.link, s)
            self._close(s, str(failed))
            self._commit()
            raise failed from None
        if s.name in self.queue:
            self.queue.remove(s.name)
        s.state = "ready"
        for job in self._jobs_of(s, "queued"):
            self._spawn(self._run(job))
        self._commit()
        return True

    async def _pump(self) -> None:
        """Grant the queue's slices in order while the pool has room for the head."""
        async with self._lock:
            while self.queue:
                head = self.slices[self.queue[0]]
                try:
                    if not await self._grant(head):
                        return
                except ApiError as exc:
                    log.warning("queued slice %s: %s", head.name, exc)
                    if exc.status == 503:
                        return
                else:
                    log.info("slice %s granted from the queue: %s", head.name,
                             " ".join(head.components))

    async def _serve_queue(self) -> None:
        while True:
            await self._pump()
            if self.rack.run.read_state() is None:
                log.warning("rack %r is down: the rack manager stops", self.rack.name)
                self.rack_gone.set()
                return
            await asyncio.sleep(QUEUE_RETRY_S)

    async def delete(self, name: str, force: bool) -> Slice:
        """A queued slice leaves the queue; a ready one, once its jobs ended (409
        unless force, which stops them), is released and destroyed."""
        s = self._live(name)
        if s.deleting:
            raise ApiError(409, f"slice {name!r} is being deleted")
        async with self._lock:   # a grant under way ends first
            if s.state == "queued":
                self._close(s)
                self._commit()
                log.info("slice %s deleted from the queue", name)
                return s
        unfinished = [j for j in self._jobs_of(s) if not j.ended]
        if unfinished and not force:
            raise ApiError(409, f"slice {name!r} has running jobs "
                                f"({', '.join(j.id for j in unfinished)}); "
                                "?force=true stops them")
        s.deleting = True
        try:
            await self._stop(s, unfinished)
            async with self._lock:
                await lifecycle.detach_device(self.link, s)
                await lifecycle.destroy_machine(self.rack.run, s, lambda: self._close(s))
                self._commit()
        except OSError as exc:
            raise from_rack(exc, f"deleting slice {name!r}") from None
        finally:
            s.deleting = False
        log.info("slice %s deleted", name)
        self._spawn(self._pump())
        return s

    def _close(self, s: Slice, error: str | None = None) -> None:
        """The slice is deleted: out of the queue and into the history; its jobs
        that never ran are stopped."""
        s.state, s.error = "deleted", error
        if s.name in self.queue:
            self.queue.remove(s.name)
        self.slices.pop(s.name, None)
        self.history.append(s)
        for job in self._jobs_of(s, "queued"):
            job.stopping = True
            job.finish([], time.time())
        self._trim()

    def _trim(self) -> None:
        del self.history[:-HISTORY_MAX]
        ended = [j for j in self.jobs.values() if j.ended]
        for job in ended[:max(0, len(ended) - HISTORY_MAX)]:
            del self.jobs[job.id]

    async def rack_components(self) -> dict[str, Any]:
        try:
            listed = await self.link.call(GLOBAL_ID, Op.SLICE_LIST)
        except OSError as exc:
            raise from_rack(exc, "listing the rack") from None
        return {"components": listed["components"]}

    # ---- jobs ----------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        if job_id not in self.jobs:
            raise ApiError(404, f"no job {job_id!r}")
        return self.jobs[job_id]

    def _jobs_of(self, s: Slice, state: str | None = None) -> list[Job]:
        return [self.jobs[j] for j in s.jobs
                if j in self.jobs and state in (None, self.jobs[j].state)]

    def submit(self, name: str, body: dict[str, Any]) -> Job:
        """A job on slice `name`: it runs at once if the slice is ready, else when
        it is granted."""
        s = self._live(name)
        if s.deleting:
            raise ApiError(409, f"slice {name!r} is being deleted")
        cwd = body.get("cwd")
        if cwd is not None and not os.path.isdir(cwd):
            raise ApiError(400, f"cwd: {cwd!r} is not a directory")
        job = Job(f"j{self.next_job}", name, body["argv"], body.get("procs", 1),
                  body.get("placement", "spread"), body.get("hints", {}),
                  body.get("env", {}), cwd)
        self.next_job += 1
        job.stdout, job.stderr = self.record.output_paths(job.id)
        self.jobs[job.id] = job
        s.jobs.append(job.id)
        if s.state == "ready":
            self._spawn(self._run(job))
        self._commit()
        log.info("job %s on slice %s: %s", job.id, name, " ".join(job.argv))
        return job

    async def _run(self, job: Job) -> None:
        """prepare-task, launch-task, and the wait for its end."""
        try:
            if not job.stopping:
                await lifecycle.prepare_task(self.link, job)
            if not job.stopping:
                lifecycle.launch_task(job, self.rack.run.path, self.record.exit_path)
        except OSError as exc:   # GPM refused, or a runner could not be started
            job.error = str(from_rack(exc, "the job cannot start"))
        if not job.runners:
            job.finish([], time.time())
        self._commit()
        if job.runners:
            await self._watch(job)

    async def _watch(self, job: Job) -> None:
        await lifecycle.task_ended(job, self.record.exit_path)
        self._commit()
        log.info("job %s %s: exit %s", job.id, job.state, job.exit)

    async def _stop(self, s: Slice, jobs: list[Job]) -> None:
        """Stop these jobs of slice s (?force=true) and wait until they ended."""
        for job in jobs:
            job.stopping = True
        runners = [r for job in jobs if job.state == "running" for r in job.runners]
        await ranks.stop(runners, lambda: ranks.programs(
            self.rack.run, s.of_kind("p"), "SPLITRACK_SLICE", s.name))
        await self.wait_for(lambda: all(j.ended for j in jobs),
                            JOB_STOP_GRACE_S + JOB_STOP_WAIT_S)

