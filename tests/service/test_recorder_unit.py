"""``service.recorder`` against its interface, fast (no grading, no nbgrader registration): the copy
it places in ``submitted/``, which attempt it settles without writing, what it waits out and what
stops it for a person, on a real SQLite queue and real files; the recorder as its own process
where that is what is under test. Its whole path into nbgrader's gradebook is
``tests/service/test_service_exchange.py`` and ``test_service_faults.py`` (e2e).
"""

from __future__ import annotations

import datetime
import errno
import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from commands import python_m, start_tool, stop_group

from attnkit.constants import GraderError
from attnkit.service.policies import DEFAULT, Policy
from attnkit.service.queue.sqlite import SqliteQueue
from attnkit.service.recorder import (
    gradebook_timeout,
    is_transient,
    place_submitted,
    record_batch,
    recorder_stopped_reason,
    retry_delay,
)
from attnkit.service.settings import STATE_FOLDER

ASSIGNMENT = "ch19-attention"


def delivered(queue: SqliteQueue, name: str, student: str, noticed: float, score: float | None) -> int:
    """One attempt noticed, claimed and delivered (``score`` None: not graded)."""
    queue.notice(name, student, ASSIGNMENT, str(noticed), noticed=noticed)
    (row,) = queue.claim(1)
    results = {"student_id": student, "assignment": ASSIGNMENT, "score": score}
    assert queue.deliver(row.id, results, "page.html", "full" if score is not None else "not-graded", score, 10.0, finished=noticed + 1)
    return row.id


def test_the_counted_attempt_is_placed_whole_with_the_services_time_never_the_students(tmp_path: Path) -> None:
    staged = tmp_path / "attempts" / "x" / "ana" / ASSIGNMENT
    staged.mkdir(parents=True)
    (staged / "attention.ipynb").write_text("{}")
    (staged / "timestamp.txt").write_text("2001-01-01 00:00:00.000000 UTC")  # the student's own, forged early
    target = tmp_path / "submitted" / "ana" / ASSIGNMENT
    target.mkdir(parents=True)
    (target / "old.ipynb").write_text("an earlier attempt's file")
    noticed = datetime.datetime(2026, 12, 7, 20, 0, 5, tzinfo=datetime.UTC).timestamp()
    place_submitted(tmp_path, staged, "ana", ASSIGNMENT, noticed)
    assert sorted(p.name for p in target.iterdir()) == ["attention.ipynb", "timestamp.txt"], "replaced whole"
    assert (target / "timestamp.txt").read_text().startswith("2026-12-07 20:00:05"), "the service's clock"
    assert sorted(p.name for p in target.parent.iterdir()) == [ASSIGNMENT], "no half-made folder left beside it"


def test_a_batch_settles_what_does_not_count_or_is_recorded_already_without_writing(tmp_path: Path) -> None:
    """A not-graded attempt counts for nothing, and an attempt this process recorded already is not
    written again: both are marked recorded, no copy placed, no gradebook made. Under ``best`` the
    better earlier attempt is the one that counts; under ``latest`` it would be the newer one."""
    queue = SqliteQueue(tmp_path / STATE_FOLDER / "service.db")
    gradebook = tmp_path / "gradebook.db"
    assert record_batch(tmp_path, queue, gradebook, {}, set(), {}) == 0, "nothing waiting"
    delivered(queue, "bo+a+1+r", "bo", 100.0, None)
    best = delivered(queue, "ana+a+1+r", "ana", 100.0, 9.0)
    delivered(queue, "ana+a+2+r", "ana", 200.0, 3.0)
    policies = {ASSIGNMENT: Policy(counts="best")}
    assert record_batch(tmp_path, queue, gradebook, policies, set(), {("ana", ASSIGNMENT): best}) == 3
    assert queue.unrecorded() == 0 and queue.unrecorded_pairs(10) == []
    assert not (tmp_path / "submitted").exists() and not gradebook.exists()
    assert DEFAULT.counts == "latest" and queue.counted("ana", ASSIGNMENT, best=False)["id"] != best  # type: ignore[index]
    queue.close()


def test_what_waiting_cures_is_retried_and_what_a_person_must_fix_is_not() -> None:
    locked = sqlite3.OperationalError("database is locked")
    wrapped = GraderError("nbgrader generate_assignment: (sqlite3.OperationalError) database is locked")
    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise locked
        except sqlite3.OperationalError as cause:
            raise ValueError("nbgrader's InvalidEntry") from cause
    except ValueError as chained:
        nbgrader_wrapped = chained
    for error in (locked, wrapped, full, nbgrader_wrapped):
        assert is_transient(error), error
    for error in (GraderError("nbgrader_config.py, line 3: SyntaxError"), KeyError("grade_id"), ValueError("cells at odds with solutions/")):
        assert not is_transient(error), error
    delays = [retry_delay(failures, timeout=5.0) for failures in range(1, 9)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and max(delays) == 20.0, "doubling, at most four of SQLite's timeouts"


def test_the_gradebook_timeout_is_the_courses_and_a_broken_configuration_is_named(tmp_path: Path) -> None:
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.AttnkitServe.gradebook_timeout = 1.5\n")
    assert gradebook_timeout(tmp_path) == 1.5
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.AttnkitServe.gradebook_timeout = (\n")
    with pytest.raises(GraderError, match="nbgrader_config.py"):
        gradebook_timeout(tmp_path)


def test_the_recorder_process_settles_the_queue_and_stops_on_sigterm_and_an_orphan_never_runs(tmp_path: Path) -> None:
    """``python -m attnkit.service.recorder`` as the service starts it, on a real queue: what waits
    is settled (here a not-graded attempt: marked, nothing written), SIGTERM stops it with exit 0;
    started as the child of another process than the one named, it exits at once without touching
    the queue (a recorder outliving its service would race the next one)."""
    state = tmp_path / STATE_FOLDER
    queue = SqliteQueue(state / "service.db")
    delivered(queue, "bo+a+1+r", "bo", 100.0, None)
    args = [str(tmp_path), str(state / "service.db"), str(tmp_path / "gradebook.db"), "{}"]
    orphan = python_m("attnkit.service.recorder", *args, str(os.getpid() + 1), timeout=120)
    assert orphan.returncode == 0 and queue.unrecorded() == 1, orphan.stderr
    recorder = start_tool([sys.executable, "-m", "attnkit.service.recorder", *args, str(os.getpid()), "r1-recorder"], log=tmp_path / "recorder.log")
    try:
        deadline = time.monotonic() + 60
        while queue.unrecorded() and time.monotonic() < deadline and recorder.poll() is None:
            time.sleep(0.1)
        assert queue.unrecorded() == 0 and recorder.poll() is None, (tmp_path / "recorder.log").read_text()
        recorder.terminate()
        assert recorder.wait(timeout=30) == 0
    finally:
        stop_group(recorder)
    assert recorder_stopped_reason(state) == "" and not (tmp_path / "submitted").exists()
    queue.close()
