"""``service.pool.WarmPool`` against its interface, without grading (fast, no e2e).

The service's pool hands one-job chunks to warm workers and never ends a worker for want of work.
Here each worker is the parent's real handle (``engine.fan_out.WorkerProcess``) on real pipes, its
process a real child that only sleeps; what a worker would send back is sent down its real result
pipe with the engine's own message builders (``engine.messages``), and the pool reads it through
``pump``, as the service's loop does. What the real worker does with a chunk (its sandboxes, its
suites) is ``tests/service/test_service_exchange.py``'s.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from attnkit.boundary.policy import Limits
from attnkit.engine import messages
from attnkit.engine.fan_out import WorkerProcess
from attnkit.records import Job
from attnkit.service.pool import WarmPool

CONTEXT = multiprocessing.get_context("fork")
NOTHING: Any = "nothing sent"  # (the pool writes before it returns: a short look suffices)


def job(student: str, number: int) -> Job:
    made = Job(student, "ch19-attention", [], f"fp-{student}-{number}")
    made.id = number  # the queue row's id
    return made


class Worker:
    """One parked worker as the pool holds it: its handle, and the far ends of its pipes (what the
    worker process would read its chunks from and write its messages to)."""

    def __init__(self, pool: WarmPool) -> None:
        task_reader, task_writer = CONTEXT.Pipe(duplex=False)
        result_reader, result_writer = CONTEXT.Pipe(duplex=False)
        self.process = CONTEXT.Process(target=time.sleep, args=(60,), daemon=True)
        self.process.start()
        self.handle = WorkerProcess(self.process, task_writer, result_reader)
        self.tasks, self.results = task_reader, result_writer
        pool.pool[result_reader] = self.handle  # as FanOut.start_worker registers the workers it forks
        pool.feed(self.handle)  # nothing waits yet: parked

    def chunk(self, wait: float = 2.0) -> list[Job] | None:
        """The chunk the pool sent this worker (None: the end of work), or ``NOTHING``."""
        return self.tasks.recv() if self.tasks.poll(wait) else NOTHING

    def send(self, message: dict[str, Any]) -> None:
        self.results.send(message)

    def end(self) -> None:
        self.process.kill()
        self.process.join(5)


@pytest.fixture
def pool(tmp_path: Path) -> Any:
    results: list[tuple[Job, dict[str, Any]]] = []
    events: list[tuple[str, dict[str, Any]]] = []
    made = WarmPool(tmp_path, 1, Limits(), [], lambda done, record: results.append((done, record)), None, on_event=lambda e, **f: events.append((e, f)))
    made.results, made.events = results, events  # type: ignore[attr-defined]
    yield made
    for handle in list(made.pool.values()):
        handle.process.kill()
        handle.process.join(5)


def graded(pool: WarmPool, worker: Worker, done: Job, score: float = 1.0) -> None:
    """``worker`` reports ``done`` as its worker_main does: started, its record, its chunk done."""
    worker.send(messages.started(done.id, done.key))
    worker.send(messages.record(done.id, {"student_id": done.student_id, "assignment": done.assignment, "score": score}))
    worker.send(messages.chunk_done([done.id]))
    while worker.handle.outbox.poll(0.5):
        pool.pump(pool.connections())


def test_a_submission_goes_alone_to_a_parked_worker_and_its_record_to_that_very_job(pool: WarmPool) -> None:
    worker = Worker(pool)
    assert pool.free() == 1 and worker.chunk(0.2) is NOTHING, "parked: never sent the None that ends it"
    first = job("ana", 7)
    pool.submit(first)
    chunk = worker.chunk()
    assert chunk is not None and [(j.id, j.key) for j in chunk] == [(7, first.key)], "one job per chunk"
    assert pool.free() == 0
    graded(pool, worker, first)
    ((done, record),) = pool.results  # type: ignore[attr-defined]
    assert done is first and record["score"] == 1.0
    assert pool.free() == 1 and worker.chunk(0.2) is NOTHING, "parked again, not ended"
    worker.end()


def test_a_second_submission_waits_for_a_free_worker_and_is_fed_when_the_first_is_done(pool: WarmPool) -> None:
    worker = Worker(pool)
    first, second = job("ana", 1), job("bo", 2)
    pool.submit(first)
    pool.submit(second)
    assert [j.id for j in worker.chunk() or []] == [1]
    assert pool.free() == -1, "one waiting beyond the busy worker: the loop claims nothing more"
    graded(pool, worker, first)
    assert [j.id for j in worker.chunk() or []] == [2], "fed the next at its chunk's end"
    graded(pool, worker, second, score=2.0)
    assert [(done.id, record["score"]) for done, record in pool.results] == [(1, 1.0), (2, 2.0)]  # type: ignore[attr-defined]
    worker.end()


def test_a_record_for_a_job_no_longer_in_flight_is_discarded_never_given_to_another(pool: WarmPool) -> None:
    """The same student's next submission (the same key, another id) is in flight; a record the
    worker computed for the earlier one arrives: dropped and said, never the later one's result."""
    worker = Worker(pool)
    later = job("ana", 9)
    pool.submit(later)
    assert [j.id for j in worker.chunk() or []] == [9]
    worker.send(messages.record(8, {"student_id": "ana", "assignment": "ch19-attention", "score": 0.0}))
    assert worker.handle.outbox.poll(2)
    pool.pump(pool.connections())
    assert pool.results == []  # type: ignore[attr-defined]
    assert [event for event, _fields in pool.events if event == "discarded"] == ["discarded"]  # type: ignore[attr-defined]
    assert pool.free() == 0, "the later submission is still in flight on that worker"
    worker.end()


def test_alive_counts_running_workers_and_a_spared_pid_is_kept(pool: WarmPool) -> None:
    worker = Worker(pool)
    assert pool.alive() == 1
    worker.end()
    assert pool.alive() == 0, "a killed worker is not counted: the service's /health says workers 0/1"
    pool.spare(12345)
    assert 12345 in pool.keep, "a spared pid (the recorder, the hub side) is no worker's leftover"
