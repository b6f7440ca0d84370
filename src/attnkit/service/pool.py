"""The engine's warm workers, fed one submission at a time for as long as the service runs.

``attnkit grade`` hands its workers chunks until the class is done, then a ``None`` that ends
them. Here the same workers (``engine.fan_out.FanOut``: the same zygotes, sandboxes, lanes,
stall and death handling, and a "not graded" record for a submission that kills its worker on
its own) are sent one-job chunks as submissions arrive; a worker with nothing to do is parked,
inside its open pytest session (``worker.ChunkFeed.more`` waits on its pipe), so the next
submission of the same assignment starts in a warm session and a warm zygote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from attnkit.boundary.policy import Limits
from attnkit.driver.seed import Seed
from attnkit.engine.fan_out import FanOut, adopt_orphans, WorkerProcess
from attnkit.records import Job, SubmissionRecord


class WarmPool(FanOut):
    """``workers`` warm workers; ``submit`` a job, ``pump`` to read what they sent."""

    def __init__(
        self,
        autograder: Path,
        workers: int,
        limits: Limits,
        hide: list[str],
        on_result: Callable[[Job, SubmissionRecord], None],
        seed: Seed | None,
        on_event: Callable[..., None] | None = None,
    ) -> None:
        """``on_result(job, record)``: ``record`` was computed for that very job (its id is the
        queue row's); ``on_event``: the pool's news for the service's log."""
        super().__init__([], autograder, workers, limits, hide, lambda record: None, seed, on_event=on_event)
        self.on_result = on_result
        self.idle: list[WorkerProcess] = []

    def take(self, job: Job, record: SubmissionRecord) -> None:
        del self.remaining[job.id]
        self.on_result(job, record)

    def start(self) -> None:
        adopt_orphans(True)
        for _slot in range(self.workers):
            self.feed(self.start_worker())

    def feed(self, worker: WorkerProcess) -> None:
        """The next waiting job to ``worker``, else it is parked (never sent the ``None`` that ends it)."""
        while self.work and not any(self.waiting(job) for job in self.work[0]):
            self.work.popleft()
        worker.current, worker.since = None, time.monotonic()
        if not self.work:
            worker.chunk = None
            if worker not in self.idle:
                self.idle.append(worker)
            return
        worker.chunk = [job for job in self.work.popleft() if self.waiting(job)]
        try:
            worker.inbox.send(worker.chunk)
        except OSError:
            pass  # it died: check_health buries it and the job goes back

    def free(self) -> int:
        """How many more jobs could start now."""
        return len(self.idle) - len(self.work)

    def submit(self, job: Job) -> None:
        """``job`` to grade; its ``id`` (the queue row's) must be unique among those in flight."""
        self.remaining[job.id] = job
        self.work.append([job])
        while self.idle and self.work:
            worker = self.idle.pop()
            if worker.outbox in self.pool:
                self.feed(worker)

    def pump(self, ready: list[object]) -> None:
        """Read the workers among ``ready`` (from ``multiprocessing.connection.wait``), then bury
        the stalled or dead ones. A fatal message raises GraderError (grading cannot run)."""
        for connection in ready:
            worker = self.pool.get(connection)
            if worker is not None:
                self.receive(worker)
        self.check_health()

    def connections(self) -> list[object]:
        return list(self.pool)

    def bury(self, worker: WorkerProcess, reason: str) -> None:
        if worker in self.idle:
            self.idle.remove(worker)
        super().bury(worker, reason)
        while len(self.pool) < self.workers:  # always the full pool, work or not
            self.feed(self.start_worker())

    def stop(self) -> None:
        """Every worker told to stop (what it holds goes back to the queue at the next start)."""
        self.shut_down()
