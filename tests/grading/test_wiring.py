"""The parent's and the worker's wiring as named objects (issue 27): intake apart from fan-out,
``fan_out.FanOut`` retrying a failed chunk, ``worker.ChunkFeed`` sending one ``chunk_done`` per
chunk over real pipes, and ``plugin.Provider``'s optional methods as defaults. No sandbox: these
are the trusted side's bookkeeping, driven through its own objects."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from attnkit.engine import fan_out
from attnkit.intake import jobs
from attnkit.engine import messages
from attnkit.grading.plugin import GradingPlugin, LocalProvider, Provider, test_result
from attnkit.boundary.policy import Limits
from attnkit.grading.student import LocalBackend, Student
from attnkit.records import Job
from attnkit.engine.worker import ChunkFeed, SubmissionRecords

from contract import CH19


def job(student: str, assignment: str = "ch19") -> Job:
    return Job(student, assignment, [], f"fp-{student}")


def test_intake_is_its_own_module() -> None:
    """Is intake (finding jobs, fingerprints, folder problems) in jobs.py, and fan_out.py left with
    the fan-out only?"""
    for name in ("find_jobs", "grader_digest", "id_problem", "is_renamed", "Skipped", "Intake"):
        assert hasattr(jobs, name), name
        assert not hasattr(fan_out, name), name
    assert hasattr(fan_out, "FanOut") and hasattr(fan_out, "grade_jobs")


def fan_out_of(jobs: list[Job], records: list[dict[str, Any]]) -> fan_out.FanOut:
    """A run's bookkeeping before any worker starts (no process is started by the constructor)."""
    return fan_out.FanOut(jobs, Path("."), 2, Limits(), [], records.append, None)


def test_a_failed_chunk_goes_back_culprit_first() -> None:
    """A chunk that broke on its second submission: is that one retried alone first, then the rest
    together, and are submissions already recorded left out?"""
    jobs = [job("a"), job("b"), job("c"), job("d")]
    records: list[dict[str, Any]] = []
    run = fan_out_of(jobs, records)
    run.work.clear()
    del run.remaining[jobs[3].id]  # recorded before the chunk broke
    broken = fan_out.WorkerProcess(None, None, None, chunk=jobs, current=jobs[1].id)
    run.chunk_failed(broken, "boom")
    assert broken.chunk is None
    assert [[j.key for j in chunk] for chunk in run.work] == [["b/ch19"], ["a/ch19", "c/ch19"]]
    assert records == [] and run.not_graded == []


def test_a_chunk_that_fails_alone_is_recorded_not_graded() -> None:
    """The one submission left in a failed chunk: a "not graded" record with the reason, its key in
    the run's not-graded list, and nothing put back to retry?"""
    records: list[dict[str, Any]] = []
    jobs = [job("a"), job("b"), job("c")]  # a worker's chunk holds the run's own jobs (FanOut.feed)
    run = fan_out_of(jobs, records)
    run.work.clear()
    run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[jobs[0]], current=None), "boom")
    assert run.not_graded == ["a/ch19"] and jobs[0].id not in run.remaining
    assert [r["student_id"] for r in records] == ["a"] and records[0]["not_graded"] == "boom"
    assert records[0]["fingerprint"] == "" and not run.work
    # Died between submissions: every one is retried on its own.
    run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[jobs[1], jobs[2]], current=None), "x")
    assert [[j.key for j in chunk] for chunk in run.work] == [["b/ch19"], ["c/ch19"]]


def test_a_chunks_end_or_record_never_takes_a_later_job_with_the_same_key() -> None:
    """Issue 50: the service submits a student's next submission (the same key) as soon as the last
    one is recorded; that worker's end-of-chunk message, or a stale record, must not count for it."""
    records: list[dict[str, Any]] = []
    first = job("a")
    run = fan_out_of([first], records)
    run.work.clear()
    del run.remaining[first.id]  # recorded
    later = job("a")
    later.id = 2
    run.remaining[later.id] = later  # the student's next submission, given to another worker
    run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[first], current=None), "stale")
    assert records == [] and run.remaining == {later.id: later} and run.not_graded == []
    assert run.waiting(later) and not run.waiting(first)


def test_a_record_is_taken_only_for_the_job_it_names_and_a_stale_one_is_discarded_and_logged() -> None:
    """Issue 50: every message between the parent and a worker names the submission's own id. A
    worker holding a student's second submission sends, over a real pipe, a record computed for
    their first (the same student and assignment; its id no longer waiting), then the second's:
    the first is discarded and logged, never attached to the second; the second's is taken. (The
    engine before issue 50 told jobs apart by student and assignment: it took the first record
    for the second submission.)"""
    context = multiprocessing.get_context("fork")
    result_reader, result_writer = context.Pipe(duplex=False)
    records: list[dict[str, Any]] = []
    events: list[tuple[str, dict[str, Any]]] = []
    first, second = job("a"), job("a")
    run = fan_out.FanOut([first, second], Path("."), 2, Limits(), [], records.append, None, on_event=lambda event, **fields: events.append((event, fields)))
    run.work.clear()
    del run.remaining[first.id]  # recorded (or failed) already
    worker = fan_out.WorkerProcess(None, None, result_reader, chunk=[second])
    first_record = {"student_id": "a", "assignment": "ch19", "fingerprint": first.fingerprint, "tests": []}
    second_record = {"student_id": "a", "assignment": "ch19", "fingerprint": "fp-second", "tests": []}
    result_writer.send(messages.from_worker(messages.started(first.id, first.key), 7))
    result_writer.send(messages.from_worker(messages.record(first.id, first_record), 7))
    for _message in range(2):
        run.receive(worker)
    assert records == [] and run.waiting(second) and worker.current is None
    assert [event for event, _fields in events] == ["discarded", "discarded"]
    assert events[1][1]["job"] == first.id and events[1][1]["holding"] == [second.id] and events[1][1]["kind"] == "record"
    result_writer.send(messages.from_worker(messages.started(second.id, second.key), 7))
    result_writer.send(messages.from_worker(messages.record(second.id, second_record), 7))
    run.receive(worker)
    run.receive(worker)
    assert records == [second_record] and not run.waiting(second) and worker.current == second.id
    # The end of a chunk that is not the one it holds changes nothing either.
    worker.chunk = [second]
    result_writer.send(messages.from_worker(messages.chunk_done([first.id]), 7))
    run.receive(worker)
    assert worker.chunk == [second] and events[-1][0] == "discarded"


def test_a_submission_whose_worker_was_killed_is_graded_again_before_it_is_not_graded() -> None:
    """Issue 50: a worker killed by a signal (the OOM killer's) is the host's doing: the submission
    it was on goes back to be graded again, ``Limits.host_retries`` times, before its "not graded"
    record; a session that broke (the submission's own doing) is recorded at once, as before."""
    records: list[dict[str, Any]] = []
    events: list[tuple[str, dict[str, Any]]] = []
    jobs = [job("a"), job("b")]
    run = fan_out.FanOut(jobs, Path("."), 2, Limits(host_retries=2), [], records.append, None, on_event=lambda event, **fields: events.append((event, fields)))
    run.work.clear()
    for attempt in (1, 2):
        run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[jobs[0]], current=jobs[0].id), "killed", by_host=True)
        assert [[j.id for j in chunk] for chunk in run.work] == [[jobs[0].id]] and records == []
        assert events[-1] == ("regrading", {"id": jobs[0].id, "student": "a", "assignment": "ch19", "reason": "killed", "retry": attempt})
        run.work.clear()
    run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[jobs[0]], current=jobs[0].id), "killed", by_host=True)
    assert [r["not_graded"] for r in records] == ["killed"] and not run.work
    run.chunk_failed(fan_out.WorkerProcess(None, None, None, chunk=[jobs[1]], current=jobs[1].id), "session broke")
    assert [r["not_graded"] for r in records] == ["killed", "session broke"] and not run.work


def received(reader: Any) -> list[dict[str, Any]]:
    found = []
    while reader.poll():
        found.append(reader.recv())
    return found


def test_chunk_feed_sends_one_chunk_done_per_chunk() -> None:
    """Over real pipes: does ``more`` report the finished chunk and hand over the next one of the
    same assignment, keep another assignment's chunk (and the end) for ``next``, and does ``failed``
    stay silent for a chunk already reported?"""
    context = multiprocessing.get_context("fork")
    task_reader, task_writer = context.Pipe(duplex=False)
    result_reader, result_writer = context.Pipe(duplex=False)
    feed = ChunkFeed(task_reader, result_writer)
    first, second, other = [job("a")], [job("b")], [job("c", "ch20")]
    for chunk in (first, second, other, None):
        task_writer.send(chunk)
    assert feed.next() == first and not feed.reported
    assert feed.more("ch19") == second and not feed.reported
    assert [messages.kind_of(m) for m in received(result_reader)] == [messages.CHUNK_DONE]
    assert feed.more("ch19") is None and feed.reported
    feed.failed(RuntimeError("after its chunk was done"))  # nothing: the chunk had its chunk_done
    assert [messages.kind_of(m) for m in received(result_reader)] == [messages.CHUNK_DONE]
    assert feed.next() == other and not feed.reported
    feed.failed(RuntimeError("broke"))
    sent = received(result_reader)
    assert [messages.kind_of(m) for m in sent] == [messages.CHUNK_FAILED]
    assert "RuntimeError: broke" in sent[0][messages.CHUNK_FAILED]
    assert feed.next() is None


class Three(Provider):
    """A provider with only the three methods a provider must have."""

    def submission_ids(self) -> list[str]:
        return ["one"]

    def open(self, submission_id: str) -> Student:
        return Student(LocalBackend.from_source("x = 1\n"), api=CH19.functions)

    def close(self, submission_id: str) -> None:
        pass


def test_a_provider_gets_defaults_for_the_optional_methods() -> None:
    """No next chunk, nothing learnt, no scope (unscoped references) unless a provider says so."""
    proxy = Three().open("one")
    for provider in (Three(), LocalProvider(Path("x.py"), api=())):
        assert provider.more() == []
        assert provider.scope_of("test") is None
        provider.learn("one", "test", proxy)
        provider.before_swaps("one", {"ch19-1"})


def test_records_read_the_plugins_own_results() -> None:
    """The plugin fills the very dict ``SubmissionRecords`` takes a submission's results from."""
    records = SubmissionRecords(CH19, lambda message: None)
    plugin = GradingPlugin(Three(), records.results)
    plugin.results.setdefault("one", []).append(test_result("t", "t", "ch19-1", 1.0, 1.0, "passed"))
    assert records.results is plugin.results and [r["status"] for r in records.results["one"]] == ["passed"]
    assert GradingPlugin(Three()).results == {}
