"""A worker keeps one pytest session across its chunks: after the first session of a suite (which
learns that its tests are plain and what they will ask), the next chunks of that assignment join
the running session instead of each paying for pytest's configuration and collection."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from attnkit.grading import plugin
from attnkit.grading import sandbox_provider
from attnkit.engine import worker
from attnkit.intake.jobs import find_jobs
from attnkit.boundary.policy import Limits
from attnkit.driver.zygote_handle import Zygote

ROOT = Path(__file__).resolve().parents[2]

from contract import CH19, comparable, write_submission

CATALOGUE = CH19.catalogue()
STUDENTS = {
    "s0_correct": "",
    "s1_no_scale": CATALOGUE.by_id("no_scale").source,
    "s2_raises": "def padding_allowed(lengths, size):\n    raise NotImplementedError()\n",
    "s3_mask_after_softmax": CATALOGUE.by_id("mask_after_softmax").source,
    "s4_correct": "",
    "s5_wrong_answers": "trace_split = (1, 2)\nanswer_growth_factor = 2\n",
}


# The OS threads (/proc/self/task) of this process at each of its forks while ``_counting``: Python
# 3.12 warns "multi-threaded, use of fork() may lead to deadlocks" when there are more than one.
# The test runner's own threads, alive before any of this module's code runs (pytest-xdist's channel
# to its controller, an OS thread of execnet's, when `make test` runs the suite in parallel
# processes), are not counted: they are not the engine's, and `attnkit grade`'s process has none.
# In a plain pytest process there are none; every thread started after this import is counted.
_RUNNER_THREADS = set(os.listdir("/proc/self/task")) - {str(os.getpid())}
_forks: list[int] = []
_counting = [False]
os.register_at_fork(before=lambda: _forks.append(len(set(os.listdir("/proc/self/task")) - _RUNNER_THREADS)) if _counting[0] else None)


def write_class(folder: Path) -> None:
    for student, override in STUDENTS.items():
        write_submission(folder, student, override)


@pytest.mark.e2e
def test_a_worker_grades_its_chunks_in_one_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three chunks of one assignment, sent one after the other: does the worker (a real worker
    process, as the engine starts it) grade the second and third in one session, answer each chunk
    with its records and then its "chunk_done", and give every submission exactly the grade it gets
    with one session per chunk?"""
    submitted = tmp_path / "submitted"
    write_class(submitted)
    jobs = find_jobs(submitted, {CH19.name: CH19}).jobs
    chunks = [jobs[0:2], jobs[2:4], jobs[4:6]]
    sessions = tmp_path / "sessions"
    main = pytest.main

    def counted(*args: Any, **kwargs: Any) -> Any:
        with sessions.open("a") as log:
            log.write("session\n")
        return main(*args, **kwargs)

    # Inherited by the forked worker, as the engine forks it; and a worker that has not seen the
    # suite yet (this process may have graded it in an earlier test).
    monkeypatch.setattr(pytest, "main", counted)
    monkeypatch.setattr(plugin, "_PLAIN_SUITES", set())
    sandbox_provider._plans.clear()
    context = multiprocessing.get_context("fork")
    task_reader, task_writer = context.Pipe(duplex=False)
    result_reader, result_writer = context.Pipe(duplex=False)
    process = context.Process(target=worker.worker_main, args=(task_reader, result_writer, str(ROOT / "autograder"), Limits(), []), daemon=True)
    _forks.clear()
    _counting[0] = True
    try:
        process.start()
    finally:
        _counting[0] = False
    assert _forks == [1], f"threads alive when the worker was forked: {_forks}"  # forked as the engine forks, from one thread
    task_reader.close()
    result_writer.close()
    messages: list[dict] = []

    def drain() -> None:
        while True:
            try:
                messages.append(result_reader.recv())
            except EOFError:
                return

    reader = threading.Thread(target=drain)
    reader.start()
    for chunk in chunks:
        task_writer.send(chunk)
    task_writer.send(None)
    process.join(timeout=300)
    reader.join(timeout=10)
    assert process.exitcode == 0
    kinds = [("record", m["record"]["student_id"]) if "record" in m else ("done", "") for m in messages if "record" in m or "chunk_done" in m]
    assert not [m for m in messages if "chunk_failed" in m or "fatal" in m]
    expected = []
    for chunk in chunks:
        expected += [("record", job.student_id) for job in chunk] + [("done", "")]
    assert kinds == expected
    assert sessions.read_text().count("session") == 2  # the first chunk's, then one for the other two

    monkeypatch.setattr(pytest, "main", main)
    sandbox_provider._plans.clear()
    alone: dict[str, dict] = {}
    zygote = Zygote()
    try:
        for chunk in chunks:
            worker.run_chunk(
                chunk, {CH19.name: CH19}, Limits(), zygote, lambda m: alone.update({m["record"]["student_id"]: m["record"]} if "record" in m else {})
            )
    finally:
        zygote.close()
    sandbox_provider._plans.clear()
    together = {m["record"]["student_id"]: m["record"] for m in messages if "record" in m}
    assert set(together) == set(alone) == set(STUDENTS)
    for student in STUDENTS:
        assert comparable(together[student]) == comparable(alone[student]), student
    assert all(t["status"] == "passed" for t in together["s4_correct"]["tests"])
    assert any(t["status"] == "failed" for t in together["s1_no_scale"]["tests"])
