"""One lateness for a submission wherever it is read (issue 52): the page the on-submit service
places, the page ``attnkit grade`` writes over the same ``submitted/`` and ``nbgrader export``
agree, in a course with its own ``LateSubmissionPlugin`` class (kept beside its
``nbgrader_config.py``, as nbgrader's docs place it), for a late student, a student whose extension
makes them on time and one whose extension leaves them late by less (the penalty clamped to the
score their mistaken notebook earned).

Real unix students submit with ``nbgrader submit``; the service grades and its recorder records;
``nbgrader export`` and ``attnkit grade --gradebook`` run as the course's instructor."""

from __future__ import annotations

import csv
import datetime
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from test_nbgrader_exchange import instructor
from test_service_exchange import ASSIGNMENT, BIN, CORRECT, MISTAKE, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]

# 25 points for each hour (or part of one) a notebook is late, clamped to the notebook's score as
# nbgrader's AssignLatePenalties clamps it.
COURSE_PLUGIN = '''
import math

from nbgrader.plugins import BasePlugin


class PerStartedHour(BasePlugin):
    def late_submission_penalty(self, student_id, score, total_seconds):
        return 25.0 * math.ceil(total_seconds / 3600.0)
'''

EXTENSIONS = {"ontime": datetime.timedelta(days=2), "shorter": datetime.timedelta(minutes=30)}

LATE_LINE = re.compile(r"迟交扣分：([0-9.]+) 分；扣分后的总分（nbgrader 成绩册）：([0-9.]+) / ([0-9.]+)")


def configure(course: Course) -> None:
    """The course's own late rule, the assignment registered and two students' extensions, as a TA sets them in formgrader."""
    (course.root / "course_late.py").write_text(COURSE_PLUGIN)
    with open(course.root / "nbgrader_config.py", "a") as config:
        config.write("\nc.AssignLatePenalties.plugin_class = 'course_late.PerStartedHour'\n")
    users = course.users  # type: ignore[attr-defined]
    grants = {users[role]: extension.total_seconds() for role, extension in EXTENSIONS.items()}
    script = f"""
import datetime, sys
from pathlib import Path
from nbgrader.api import Gradebook
from attnkit.course.gradebook import register_assignments
register_assignments(Path('gradebook.db'), [{ASSIGNMENT!r}])
with Gradebook('sqlite:///' + str(Path('gradebook.db').resolve())) as gradebook:
    for student, seconds in {grants!r}.items():
        gradebook.update_or_create_student(student)
        gradebook.update_or_create_submission({ASSIGNMENT!r}, student, extension=datetime.timedelta(seconds=seconds))
"""
    instructor(course.root, sys.executable, "-c", script)
    instructor(course.root, str(BIN / "attnkit"), "course", "secure")  # the gradebook made above is the grader's alone


@pytest.fixture(scope="module")
def late_course() -> Iterator[Course]:
    from service_course import running_course

    with running_course("ak52", ("late", "ontime", "shorter"), -datetime.timedelta(hours=1), before_start=configure, visibility="full") as setup:
        yield setup


def late_of(page: str) -> tuple[float, float, float] | None:
    found = LATE_LINE.search(page)
    return (float(found[1]), float(found[2]), float(found[3])) if found else None


def test_the_service_page_make_grades_page_and_nbgrader_export_agree(late_course: Course) -> None:
    course = late_course
    users = course.users  # type: ignore[attr-defined]
    answers = {"late": CORRECT, "ontime": CORRECT, "shorter": MISTAKE}
    served = {role: course.fetch(users[role], course.submit(users[role], answers[role])) for role in answers}
    course.wait_recorded()

    instructor(course.root, str(BIN / "nbgrader"), "export", "--to", str(course.root / "export.csv"))
    with open(course.root / "export.csv", encoding="utf-8", newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle) if row["assignment"] == ASSIGNMENT}
    graded = instructor(
        course.root, str(BIN / "attnkit"), "grade", "--submitted", "submitted", "--out", "graded", "--jobs", "1", "--gradebook", "gradebook.db"
    )
    assert graded.returncode == 0, graded.stdout + graded.stderr

    for role, user in users.items():
        row = exported[user]
        penalty, total, maximum = float(row["late_submission_penalty"]), float(row["score"]), float(row["max_score"])
        batch = (course.root / "graded" / "students" / user / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
        if role == "ontime":
            assert penalty == 0.0, row
            assert 'id="late"' not in served[role] and 'id="late"' not in batch, "the extension makes this student on time"
            continue
        assert penalty > 0, (role, row)
        assert late_of(served[role]) == (penalty, total, maximum), (role, row, LATE_LINE.search(served[role]))
        assert late_of(batch) == (penalty, total, maximum), (role, row)

    # The course's own rule and the extension, as written above: due an hour before the start, so the
    # late student is late by one hour and part of another, the shorter extension's by part of one.
    with course.db() as db:
        scores = {row["student"]: float(row["score"]) for row in db.execute("SELECT student, score FROM submissions")}
    assert float(exported[users["late"]]["late_submission_penalty"]) == min(50.0, scores[users["late"]])
    assert float(exported[users["shorter"]]["late_submission_penalty"]) == min(25.0, scores[users["shorter"]])


def test_a_course_plugin_module_beside_the_config_imports_from_any_working_folder(late_course: Course) -> None:
    """``attnkit grade`` runs from ``/`` (ARCHITECTURE.md): the course's plugin module still imports, as under nbgrader."""
    script = (
        "from pathlib import Path; from attnkit.course.lateness import course_late_plugin; "
        f"print(type(course_late_plugin(Path({str(late_course.root)!r}))).__name__)"
    )
    found = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "PerStartedHour", found.stderr
