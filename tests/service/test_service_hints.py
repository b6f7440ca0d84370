"""The hint ladder (issue 53), with the real service, a real exchange and real unix students.

Under ``hints = "ladder"`` a student who submits the same mistake again sees the next level of its
hints: 1 (a nudge: which check, which concept, which section), 2 (the misconception explained), 3
(the fix). The level comes from the service's queue (the student's earlier delivered pages of the
assignment and the levels they showed), so it survives a restart and is the student's own: a
classmate's first page of the same mistake shows level 1. The gradebook is the same as under
``full`` (``make grade``'s page, today's): the ladder changes the page, never a score.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Iterator

import pytest

from service_course import running_course
from test_nbgrader_exchange import instructor
from test_service_policies_compose import forge, page_of, rows_until
from test_service_exchange import ASSIGNMENT, BIN, MISTAKE, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]

MISTAKE_ID = "mask_by_multiplying"  # what MISTAKE (examples' wangfang) is diagnosed as


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    with running_course("ak53h", ("climber", "other"), datetime.timedelta(days=1), attempts=0, hints="ladder") as setup:
        yield setup


def levels_on(page: str) -> tuple[int, list[int]]:
    """The level the page says it shows for MISTAKE_ID, and the rungs it holds (their numbers)."""
    box = re.search(rf'<div class="diagnosis" data-diagnosis="{MISTAKE_ID}" data-hint-level="(\d)">(.*?)</div>\s*(?=<div class="diagnosis"|<h2)', page, re.S)
    assert box, page[:4000]
    return int(box.group(1)), [int(n) for n in re.findall(r'data-hint="(\d)"', box.group(2))]


def test_the_same_mistake_climbs_the_ladder_and_a_classmates_starts_at_one(course: Course) -> None:
    """The climber submits the same mistake three times (the service restarted before the third):
    levels 1, 2, 3 in order, each page holding the rungs up to its level; the classmate's first
    page of the same mistake shows level 1; both attempts pages and the TA's class page say which
    level was shown; the gradebook holds what ``attnkit grade`` (``full``) records."""
    from markupsafe import escape

    from attnkit.assignment.folder import discover

    climber, other = course.users["climber"], course.users["other"]  # type: ignore[attr-defined]
    entry = discover()[ASSIGNMENT].mistakes[MISTAKE_ID]
    fix, whole = str(escape(entry["hints"][2])), str(escape(entry["text"]))
    pages = []
    for n in (1, 2, 3):
        if n == 3:  # the ladder is in the queue, not in the service's memory
            assert course.stop() == 0
            course.start()
        name, secret = forge(course, climber, MISTAKE, n)  # what nbgrader submit leaves, owned by the student
        rows_until(course, [name], "state = 'delivered'")
        pages.append(page_of(course, secret).read_text(encoding="utf-8"))  # what fetch_feedback fetches
    seen = [levels_on(page) for page in pages]
    assert seen == [(1, [1]), (2, [1, 2]), (3, [1, 2, 3])], seen
    assert fix not in pages[0] and fix not in pages[1] and fix in pages[2], "the fix only at level 3"
    assert whole not in pages[0], "level 1 is not today's whole explanation"
    name, secret = forge(course, other, MISTAKE, 4)
    rows_until(course, [name], "state = 'delivered'")
    assert levels_on(page_of(course, secret).read_text(encoding="utf-8")) == (1, [1]), "a classmate's ladder is their own"

    # What the queue holds (results and the hints column), and the pages the hub shows from it.
    with course.db() as db:
        rows = [dict(r) for r in db.execute("SELECT * FROM submissions WHERE state = 'delivered' ORDER BY id")]
    assert [(r["student"], json.loads(r["hints"])) for r in rows] == [
        (climber, {MISTAKE_ID: 1}),
        (climber, {MISTAKE_ID: 2}),
        (climber, {MISTAKE_ID: 3}),
        (other, {MISTAKE_ID: 1}),
    ]
    assert [json.loads(r["results"])["hints"] for r in rows] == [{MISTAKE_ID: level} for level in (1, 2, 3, 1)]
    attempts, class_page = hub_pages(course, climber)
    for row, level in zip(rows[:3], (1, 2, 3), strict=True):
        assert re.search(rf'<tr data-attempt="{row["id"]}".*?data-hint-shown="{MISTAKE_ID}:{level}"', attempts, re.S), attempts
    for row, level in zip(rows, (1, 2, 3, 1), strict=True):
        assert re.search(rf'<tr data-attempt="{row["id"]}".*?data-hint-shown="{MISTAKE_ID}:{level}"', class_page, re.S), class_page
    assert [e["hints"] for e in course.events("delivered")] == [{MISTAKE_ID: level} for level in (1, 2, 3, 1)]

    # The gradebook: the same scores as `make grade` (hints "full", today's page) over the same notebooks.
    course.wait_recorded()
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        recorded = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    assert recorded == pytest.approx({climber: rows[2]["score"], other: rows[3]["score"]})
    other_out = course.base / "make-grade"
    instructor(
        course.root,
        str(BIN / "attnkit"),
        "grade",
        "--submitted",
        str(course.root / "submitted"),
        "--out",
        str(other_out / "graded"),
        "--jobs",
        "1",
        "--gradebook",
        str(other_out / "gradebook.db"),
        "--quiet",
    )
    with Gradebook(f"sqlite:///{other_out / 'gradebook.db'}") as gradebook:
        graded = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    assert graded == pytest.approx(recorded)
    full = (other_out / "graded" / "students" / climber / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert f'data-diagnosis="{MISTAKE_ID}"' in full and "data-hint-level" not in full and whole in full, "make grade: today's page"


def hub_pages(course: Course, student: str) -> tuple[str, str]:
    """The student's attempts page and the TA's class page as the hub side renders them, from the
    course's own queue (its database, read as the hub reads it)."""
    from attnkit.assignment.folder import discover
    from attnkit.course.settings import course_config
    from attnkit.service.hub import _ENV, Kit, class_status, student_status
    from attnkit.service.policies import policies_from

    state = course.root / ".attnkit-serve"
    kit = Kit(state, course.exchange / "ch19" / "feedback", discover(), policies_from(course_config(course.root)), frozenset(), {}, 0)
    common = {"html_lang": "zh", "prefix": "/services/attnkit/", "user": {"name": student}}
    attempts = _ENV.get_template("hub_student.html.j2").render(
        status=student_status(kit, student, time.time()), suites=sorted(kit.suites), xsrf="x", ta=False, **common
    )
    class_page = _ENV.get_template("hub_class.html.j2").render(status=class_status(kit), ta=True, **common)
    return attempts, class_page
