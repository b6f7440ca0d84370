"""Issue 50: the host's transient faults are transient, and what a person must fix is named.

Real unix students, nbgrader's real exchange and the real service (``--jobs 1``), one course for the
module (``service_course.running_course``), its gradebook's lock timeout made short
(``c.AttnkitServe.gradebook_timeout = 1``: a "30 s" lock is simulated with a few seconds):

- the gradebook locked (an exclusive SQLite transaction held by another process, as a TA's
  nbgrader command or formgrader holds it) past that timeout: feedback goes on, the recorder
  waits and retries, and every record lands once the lock is released (before: the recorder
  died after SQLite's 5 s and the service exited 2);
- the recorder killed (-9, as the OOM killer does): the service starts it again and what it had
  not recorded is recorded (before: exit 2 in a fraction of a second);
- the course's ``nbgrader_config.py`` broken under a running service, then at a start, then read
  by ``--status``: exit 2 and the message names the file, the line and the error (before: "the
  recorder exited unexpectedly", a traceback with exit 1, ``--status`` crashing);
- a hidden test file with a syntax error: exit 2 at the start naming that file and its line, and
  ``--status`` the same (before: "no hidden test for the grade cells …", naming neither).
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import attnkit
from service_course import running_course
from test_service_exchange import ASSIGNMENT, CORRECT, MISTAKE, WAIT, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]
LOCK_TIMEOUT = 1.0  # the course's c.AttnkitServe.gradebook_timeout in this module


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    with running_course("ak50f", ("first", "second"), datetime.timedelta(days=1), attempts=0, visibility="full") as setup:
        # Read by the recorder before each batch: no restart needed.
        with open(setup.root / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.AttnkitServe.gradebook_timeout = {LOCK_TIMEOUT}\n")
        yield setup


@pytest.fixture
def serving(course: Course) -> Course:
    """The module's course with its service running: started again if a test before stopped it
    (so that each test shows its own fault, failing or not, whatever the one before did)."""
    if course.service is None or course.service.poll() is not None:
        course.service = None
        course.start()
    return course


def until(condition: object, course: Course, what: str) -> None:
    """Poll ``condition()`` until true, while the service runs, for at most WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert course.service is not None and course.service.poll() is None, f"the service stopped while waiting for {what}:\n{course.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what}:\n{course.log.read_text()[-3000:]}"
        time.sleep(0.2)


def gradebook_scores(course: Course) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        return {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}


def unrecorded(course: Course) -> int:
    with course.db() as db:
        return int(db.execute("SELECT COUNT(*) FROM submissions WHERE state = 'delivered' AND recorded = 0").fetchone()[0])


def latest_scores(course: Course) -> dict[str, float]:
    with course.db() as db:
        return {
            r["student"]: r["score"]
            for r in db.execute(
                "SELECT student, score FROM submissions WHERE id IN"
                " (SELECT MAX(id) FROM submissions WHERE state = 'delivered' AND score IS NOT NULL GROUP BY student)"
            )
        }


def recorder_pid(course: Course) -> int:
    assert course.service is not None
    for task in Path(f"/proc/{course.service.pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                if b"attnkit.service.recorder" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
            except OSError:
                continue
    raise AssertionError("no recorder among the service's children")


def test_a_gradebook_locked_past_its_timeout_is_waited_for_and_every_record_lands(serving: Course) -> None:
    course = serving
    first, second = course.users["first"], course.users["second"]  # type: ignore[attr-defined]
    course.fetch(first, course.submit(first, MISTAKE))  # the gradebook made, the assignment registered
    until(lambda: unrecorded(course) == 0 and (course.root / "gradebook.db").is_file(), course, "first record")
    holder = sqlite3.connect(course.root / "gradebook.db", timeout=30, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # as a TA's nbgrader command holds it, for longer than the recorder's timeout
        retries = len(course.events("gradebook-retry"))
        page = course.fetch(second, course.submit(second, CORRECT))  # feedback goes on meanwhile
        assert 'id="score"' in page
        until(lambda: len(course.events("gradebook-retry")) >= retries + 2, course, "retry of the locked gradebook")
        assert unrecorded(course) >= 1  # held back by the lock, not lost
        assert course.service is not None and course.service.poll() is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    until(lambda: unrecorded(course) == 0, course, "the records after the lock was released")
    assert course.events("gradebook-back")
    assert gradebook_scores(course) == pytest.approx(latest_scores(course))
    assert second in gradebook_scores(course)


def test_a_killed_recorder_is_started_again_and_nothing_is_lost(serving: Course) -> None:
    course = serving
    first = course.users["first"]  # type: ignore[attr-defined]
    killed = recorder_pid(course)
    os.kill(killed, signal.SIGKILL)  # as the OOM killer does
    page = course.fetch(first, course.submit(first, CORRECT))
    assert 'id="score"' in page
    until(lambda: len(course.events("recorder-restarted")) >= 1, course, "recorder restart")
    assert course.events("recorder-died")[-1]["code"] == -signal.SIGKILL
    until(lambda: unrecorded(course) == 0, course, "the records after the restart")
    assert recorder_pid(course) != killed
    assert gradebook_scores(course) == pytest.approx(latest_scores(course))
    assert gradebook_scores(course)[first] == latest_scores(course)[first] > 0


BROKEN_LINE = "c.AttnkitServe.oops = (1,"  # a syntax error: the "(" is never closed


def test_a_configuration_broken_under_a_running_service_at_its_start_and_in_status_is_named(serving: Course) -> None:
    course = serving
    config = course.root / "nbgrader_config.py"
    good = config.read_text()
    line = len(good.splitlines()) + 1
    try:
        config.write_text(good + BROKEN_LINE + "\n")
        # Running: the recorder reads it before its next batch and the service stops, saying where.
        assert course.service is not None
        code = course.service.wait(timeout=WAIT)
        course.service = None
        stopped = course.events("stopped")[-1]["reason"]
        assert code == 2 and str(config) in stopped and f"第 {line} 行" in stopped and "SyntaxError" in stopped, stopped
        # At a start: exit 2, the same words, no traceback.
        started = attnkit("serve", "--jobs", "1", "--lang", "en", cwd=course.root, script=True, timeout=WAIT)
        said = started.stdout + started.stderr
        assert started.returncode == 2 and str(config) in said and f"line {line}" in said and "SyntaxError" in said, said
        assert "Traceback" not in said
        # --status: the queue still, and the same words, exit 2.
        status = attnkit("serve", "--status", "--lang", "en", cwd=course.root, script=True)
        assert status.returncode == 2 and str(config) in status.stdout and f"line {line}" in status.stdout, status.stdout + status.stderr
        assert "delivered=" in status.stdout and "Traceback" not in status.stdout + status.stderr
    finally:
        config.write_text(good)


def test_a_hidden_test_with_a_syntax_error_stops_the_start_naming_file_and_line(course: Course, tmp_path: Path) -> None:
    from test_service_exchange import ROOT

    suite = tmp_path / "autograder"
    shutil.copytree(ROOT / "autograder", suite, ignore=shutil.ignore_patterns("__pycache__"))
    broken = suite / "ch19_attention" / "test_ch19_2_masking.py"
    lines = broken.read_text().splitlines() + ["def oops(:"]  # a syntax error on the last line
    broken.write_text("\n".join(lines) + "\n")
    line = len(lines)
    if course.service is not None:  # (the test before stops it; alone, this one stops it here)
        course.stop()
    started = attnkit("serve", "--jobs", "1", "--lang", "en", "--autograder", suite, cwd=course.root, script=True, timeout=WAIT)
    said = started.stdout + started.stderr
    assert started.returncode == 2 and str(broken) in said and f"line {line}" in said and "SyntaxError" in said, said
    status = attnkit("serve", "--status", "--lang", "en", "--autograder", suite, cwd=course.root, script=True)
    assert status.returncode == 2 and str(broken) in status.stdout and f"line {line}" in status.stdout, status.stdout + status.stderr
    # And with the suite mended, the same course starts and serves again.
    course.start()
    first = course.users["first"]  # type: ignore[attr-defined]
    assert 'id="score"' in course.fetch(first, course.submit(first, CORRECT))
