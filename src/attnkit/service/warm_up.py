"""The service's warm-up (issue 49): each worker's first chunk is the source notebook of every
assignment, graded and thrown away. A worker's first grading opens its pytest session, plans the
assignment on its source notebook, waits for its zygote and makes the zygote's first fork; the
first student after a start paid that (grading 1.8 s against 0.1-0.3 s). Until these are graded
the service is warming (its readiness, the hub side's ``/health``); submissions are queued
meanwhile and start as workers come free."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from attnkit.assignment.folder import Assignment
from attnkit.intake.jobs import find_jobs
from attnkit.records import Job, SubmissionRecord
from attnkit.report.results_json import results_json
from attnkit.report.store import bounded_feedback
from attnkit.service.pool import WarmPool

WARM_UP_STUDENT = "attnkit-warm-up-"  # the warm-up jobs' student ids (+ the worker's slot), never queued


class WarmUp:
    """The warm-up jobs not yet graded (ids below 0, never a row's): the service is not ready until none."""

    def __init__(self, folder: Path, suites: dict[str, Assignment], digests: dict[tuple[Path, str], str], emit: Callable[..., None]) -> None:
        """``folder``: where the source notebooks are copied (the service's ``warm-up``)."""
        self.folder = folder
        self.suites = suites
        self.digests = digests
        self.emit = emit
        self.warming: dict[int, Job] = {}
        self.since = 0.0
        self.on_ready: Callable[[], None] = lambda: None

    def __bool__(self) -> bool:
        """Still warming."""
        return bool(self.warming)

    def start(self, pool: WarmPool, on_ready: Callable[[], None]) -> None:
        """One job per worker and assignment, given to ``pool`` before its workers start (one
        chunk each as they start); ``on_ready`` once every one is graded."""
        self.on_ready = on_ready
        shutil.rmtree(self.folder, ignore_errors=True)
        for slot in range(pool.workers):
            for name, suite in sorted(self.suites.items()):
                target = self.folder / f"{WARM_UP_STUDENT}{slot}" / name
                target.mkdir(parents=True)
                shutil.copyfile(suite.source, target / suite.notebook)
        self.since = time.monotonic()
        for number, job in enumerate(find_jobs(self.folder, self.suites, None, self.digests).jobs, 1):
            job.id = -number
            self.warming[job.id] = job
            pool.submit(job)
        if not self.warming:
            on_ready()

    def give_up(self) -> None:
        """No room for the copies: started cold rather than not at all."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.warming.clear()

    def owns(self, job: Job) -> bool:
        return self.warming.get(job.id) is job

    def on_record(self, job: Job, record: SubmissionRecord) -> None:
        """A warm-up job graded: its page made as a submission's would be (the parent's first page), then dropped."""
        self.warming.pop(job.id, None)
        try:
            bounded_feedback(results_json(record, self.suites[record["assignment"]]), self.suites[record["assignment"]])
        except Exception as error:  # a warm-up's page: never the service's failure (a student's would say)
            self.emit("warm-up-problem", error=f"{type(error).__name__}: {error}")
        if not self.warming:
            self.on_ready()

    def seconds(self) -> float:
        return round(time.monotonic() - self.since, 3)
