"""Issue 50: where the host is at fault, the student is not charged; "latest" by nbgrader's clock.

Real unix students, nbgrader's exchange layout and the real service (``--jobs 1``), with a short
cell and call limit (3 s) so that a stall longer than a limit costs seconds:

- a worker killed with ``kill -9`` (as the OOM killer kills) while it grades a submission: the
  submission is graded again and its score recorded (it was "not graded" until the student
  submitted again);
- a sandbox stopped (SIGSTOP) by the host for longer than the cell limit, then continued: the
  model answer still scores full marks (it was charged the cell's timeout);
- the service stopped, two attempts of each of ten students left in ``inbound/``, the service
  started: each student's attempts are graded and numbered in the order of their own time, and
  the gradebook and ``submitted/`` hold the later one, whatever order the folders were found in
  (the attempt numbers followed the order of the directory's entries).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import unix_users
from notebooks import wait_in_cell_defining, wait_in_last_cell
from service_course import running_course, sandboxes_of, sleeping, workers_of
from test_service_exchange import ASSIGNMENT, CORRECT, MISTAKE, WAIT, Course, forge_submission

pytestmark = [pytest.mark.e2e, pytest.mark.root]
LIMIT = 3.0  # the cell and call limit of this module's service (seconds)


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    def short_limits(setup: Course) -> None:
        setup.options = ["--cell-timeout", f"{LIMIT:g}", "--call-timeout", f"{LIMIT:g}"]

    with running_course("ak50r", ("steady",), datetime.timedelta(days=1), before_start=short_limits, attempts=0, visibility="full") as setup:
        yield setup


def row_of(course: Course, name: str) -> sqlite3.Row | None:
    with course.db() as db:
        found: sqlite3.Row | None = db.execute("SELECT * FROM submissions WHERE inbound = ?", (name,)).fetchone()
        return found


def settled(course: Course, name: str) -> sqlite3.Row:
    """Submission ``name``'s row once it is out of the queue (the service still running)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert course.service is not None and course.service.poll() is None, course.log.read_text()[-3000:]
        row = row_of(course, name)
        if row is not None and row["state"] not in ("queued", "grading"):
            return row
        time.sleep(0.1)
    raise AssertionError(f"{name} never settled\n{course.log.read_text()[-3000:]}")


def sleeping_sandbox(course: Course, name: str) -> list[int]:
    """Once ``name`` is being graded and its sandbox waits in its cell's ``time.sleep``: the pids."""
    assert course.service is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        row = row_of(course, name)
        assert row is None or row["state"] in ("queued", "grading"), f"graded before the fault: {dict(row)}"
        found = sleeping(sandboxes_of(course.service.pid)) if row is not None and row["state"] == "grading" else []
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{name}'s sandbox never slept\n{course.log.read_text()[-3000:]}")


def test_a_worker_killed_mid_grade_is_graded_again_and_its_score_recorded(course: Course, tmp_path: Path) -> None:
    """Before: "0 / 0, 评分进程被强制终止" on the student's page, no gradebook record, until they submitted again."""
    from nbgrader.api import Gradebook

    student = course.users["steady"]  # type: ignore[attr-defined]
    slow = tmp_path / "attention.ipynb"
    shutil.copy(CORRECT, slow)
    wait_in_last_cell(slow, 2.0)
    name, _secret = forge_submission(course, student, slow, 1)
    sleeping_sandbox(course, name)
    assert course.service is not None
    (worker,) = workers_of(course.service.pid)
    os.kill(worker, signal.SIGKILL)
    row = settled(course, name)
    results = json.loads(row["results"] or "{}")
    assert row["state"] == "delivered" and not results.get("not_graded"), (dict(row), course.log.read_text()[-3000:])
    assert row["score"] == row["max_score"] > 0
    assert [e["retry"] for e in course.events("regrading") if e["id"] == row["id"]] == [1]
    course.wait_recorded()
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, student).score == pytest.approx(row["max_score"])


def test_a_sandbox_stopped_by_the_host_longer_than_the_cell_limit_is_not_charged(course: Course, tmp_path: Path) -> None:
    """SIGSTOP of the sandbox while it runs the cell that defines ``split_heads`` (a second's
    sleep in it), for the cell limit and more, then SIGCONT. Before: that cell timed out, and the
    model answer lost the parts that need split_heads."""
    student = course.users["steady"]  # type: ignore[attr-defined]
    stalled = tmp_path / "attention.ipynb"
    shutil.copy(CORRECT, stalled)
    wait_in_cell_defining(stalled, "split_heads", 1.5)
    name, _secret = forge_submission(course, student, stalled, 2)
    sleeping_sandbox(course, name)
    assert course.service is not None
    stopped = sandboxes_of(course.service.pid)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(LIMIT + 1.5)  # the host's stall: longer than the cell limit
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    row = settled(course, name)
    results = json.loads(row["results"] or "{}")
    assert row["state"] == "delivered" and row["score"] == row["max_score"] > 0, (
        dict(row),
        [(t["name"], t["score"], t["output"][:200]) for t in results.get("tests", []) if t["status"] != "passed"],
    )
    assert results["sandbox"].get("host_stalls", 0) >= 1, results["sandbox"]


@pytest.fixture(scope="module")
def ten() -> Iterator[tuple[str, ...]]:
    with unix_users(*[f"ak50t{n}{os.getpid() % 100000}" for n in range(10)]) as names:
        yield names


def test_after_a_restart_the_latest_attempt_by_its_own_time_counts_and_attempts_run_in_time_order(course: Course, ten: tuple[str, ...]) -> None:
    """Two attempts of each of ten students left in inbound/ while the service is stopped (in
    time order: nbgrader's timestamps and the kernel's), the service started: it finds them in the
    directory's order. Each student's attempts are numbered 1 and 2 in their own time's order,
    the gradebook holds the later one's score and submitted/ its notebook (half of the students
    end with the model answer, half with a catalogued mistake)."""
    from nbgrader.api import Gradebook

    assert course.stop() == 0
    made: dict[str, tuple[str, int, Path]] = {}
    for attempt in (1, 2):
        for index, student in enumerate(ten):
            notebook = (CORRECT, MISTAKE)[(index + attempt) % 2]
            name, _secret = forge_submission(course, student, notebook, 10 * attempt + index)
            made[name] = (student, attempt, notebook)
    course.start()
    rows = {name: settled(course, name) for name in made}
    course.wait_recorded()
    wrong = []
    for name, (student, attempt, _notebook) in made.items():
        row = rows[name]
        if row["state"] != "delivered" or row["attempt"] != attempt:
            wrong.append((student, attempt, row["id"], row["state"], row["attempt"]))
    assert wrong == [], f"attempts not numbered by their own time: {wrong}"
    latest = {student: (name, notebook) for name, (student, attempt, notebook) in made.items() if attempt == 2}
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        recorded = {student: gradebook.find_submission(ASSIGNMENT, student).score for student in ten}
    assert recorded == pytest.approx({student: rows[name]["score"] for student, (name, _notebook) in latest.items()})
    for student, (_name, notebook) in latest.items():
        assert (course.root / "submitted" / student / ASSIGNMENT / "attention.ipynb").read_bytes() == notebook.read_bytes(), student
