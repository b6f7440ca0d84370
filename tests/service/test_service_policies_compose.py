"""Policies that compose (issue 48), with the real service, a real exchange and real unix students.

- ``visibility = "after-due"`` with an attempt limit: the pages withheld until the due date are
  released as ``full`` visibility under the same limit would have shown them at their time: at most
  ``attempts`` full pages per student per window; the others get the limit's page, saying why.
- A submission whose notebook cannot be graded (a symlink: intake reads no link) is "not graded":
  its page says so, it is not an attempt, and the gradebook keeps the student's earlier score
  (``counts = "latest"``), never a 0 in its place.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service_course import running_course
from test_nbgrader_exchange import instructor, nbgrader_utc
from test_service_exchange import ASSIGNMENT, BIN, CORRECT, MISTAKE, WAIT, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]

WINDOW_HOURS = 0.005  # 18 s: two windows within one test (two deliveries take a second or two)


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    policy = {"attempts": 1, "window_hours": WINDOW_HOURS, "visibility": "after-due", "counts": "latest"}
    with running_course("ak48p", ("after", "symlink"), datetime.timedelta(days=1), **policy) as setup:
        yield setup


def forge(course: Course, user: str, notebook: Path | None, n: int) -> tuple[str, str]:
    """What ``nbgrader submit`` leaves in inbound/, owned by ``user``: ``notebook``'s bytes, or (None) a
    symlink to the student's own notebook in their home; its folder name and secret."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    name = f"{user}+{ASSIGNMENT}+{stamp}+issue48x{n}"
    folder = course.exchange / "ch19" / "inbound" / name
    folder.mkdir()
    secret = f"{n:0128x}"
    target = folder / "attention.ipynb"
    if notebook is None:
        target.symlink_to(course.home(user) / ASSIGNMENT / "attention.ipynb")
    else:
        target.write_bytes(notebook.read_bytes())
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(secret)
    for path in (folder, *folder.iterdir()):
        os.chown(path, course_uid(user), course_uid(user), follow_symlinks=False)
    folder.chmod(0o777)
    return name, secret


def course_uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


def page_of(course: Course, secret: str) -> Path:
    from nbgrader.utils import notebook_hash

    return course.exchange / "ch19" / "feedback" / f"{notebook_hash(secret=secret, notebook_id='attention')}.html"


def marks_once_released(course: Course, secret: str) -> dict:
    """The marks beside the page of ``secret``, once they no longer say "after-due" (the service
    writes them in the same pass, just after the row's release), or as they are a minute later."""
    marks_file = page_of(course, secret).with_suffix(".json")
    deadline = time.monotonic() + 60
    while True:
        marks = json.loads(marks_file.read_bytes())
        if marks["shown"] != "after-due" or time.monotonic() > deadline:
            return dict(marks)
        time.sleep(0.2)


def rows_until(course: Course, names: list[str], done: str) -> list[dict]:
    """The rows of ``names`` (in that order) once ``done`` (an SQL condition) holds for each of them."""
    deadline = time.monotonic() + WAIT
    while True:
        with course.db() as db:
            rows = {r["inbound"]: dict(r) for r in db.execute(f"SELECT * FROM submissions WHERE inbound IN ({','.join('?' * len(names))})", names)}
            ready = {r[0] for r in db.execute(f"SELECT inbound FROM submissions WHERE ({done}) AND inbound IN ({','.join('?' * len(names))})", names)}
        if ready == set(names):
            return [rows[name] for name in names]
        assert time.monotonic() < deadline and course.service is not None and course.service.poll() is None, (rows, course.log.read_text()[-3000:])
        time.sleep(0.2)


def test_after_due_with_an_attempt_limit_releases_one_full_page_per_window(course: Course) -> None:
    """attempts=1 per 18 s window, after-due: three submissions (two in one window, one in the next) are
    withheld until the due date; then the first of each window gets its full page, the other the limit's page."""
    user = course.users["after"]  # type: ignore[attr-defined]
    made: list[tuple[str, str]] = []
    rows: list[dict] = []
    for n in (1, 2, 3):  # one after the other (delivered in this order): two in a window, the third in the next
        if n == 3:
            time.sleep(WINDOW_HOURS * 3600 + 4)
        made.append(forge(course, user, MISTAKE, n))
        rows += rows_until(course, [made[-1][0]], "state = 'delivered'")
    assert [r["shown"] for r in rows] == ["after-due"] * 3
    # The windows, as the rows' delivery times make them (no timing asserted: a precondition).
    window = WINDOW_HOURS * 3600
    assert rows[1]["finished"] - rows[0]["finished"] < window <= rows[2]["finished"] - rows[1]["finished"], rows
    for _name, secret in made:
        page = page_of(course, secret).read_text(encoding="utf-8")
        assert 'id="withheld"' in page and 'id="score"' not in page, page
        marks = json.loads(page_of(course, secret).with_suffix(".json").read_bytes())
        assert marks["shown"] == "after-due" and marks["functions"] == [] and "score" not in marks, "the lab extension marks nothing before the due date"
    passed = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=1)
    instructor(course.root, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(passed)}")
    rows = rows_until(course, [name for name, _secret in made], "shown != 'after-due'")
    pages = [page_of(course, secret).read_text(encoding="utf-8") for _name, secret in made]
    full = [i for i, page in enumerate(pages) if 'data-diagnosis="mask_by_multiplying"' in page and 'id="score"' in page]
    assert full == [0, 2], ("one full page per window: the first of each", [r["shown"] for r in rows])
    assert 'id="withheld"' in pages[1] and 'id="score"' not in pages[1] and "data-diagnosis" not in pages[1]
    assert "上限" in pages[1], "the withheld page says why: the attempt limit"
    assert [r["shown"] for r in rows] == ["released", "withheld", "released"]
    released = {e["id"] for e in course.events("released")}
    assert released == {rows[0]["id"], rows[2]["id"]}
    # The marks beside each page (what the student's JupyterLab shows on the cells) are released with it.
    marks = [marks_once_released(course, secret) for _name, secret in made]
    assert [m["shown"] for m in marks] == ["released", "withheld", "released"], marks
    for released_marks in (marks[0], marks[2]):
        diagnosed = [d["id"] for mark in released_marks["functions"] for d in mark["diagnoses"]]
        assert "mask_by_multiplying" in diagnosed and released_marks["score"] < released_marks["max_score"], released_marks
    assert marks[1]["functions"] == [] and "score" not in marks[1], "past the limit: no diagnosis on the cells either"


def test_a_symlinked_notebook_is_not_graded_and_the_gradebook_keeps_the_earlier_score(course: Course) -> None:
    """A graded submission, then one whose notebook is a symlink: its page says "not graded" (no score),
    and under counts=latest the gradebook still holds the earlier score."""
    from nbgrader.api import Gradebook

    user = course.users["symlink"]  # type: ignore[attr-defined]
    graded_name, _graded_secret = forge(course, user, CORRECT, 11)
    (graded,) = rows_until(course, [graded_name], "state = 'delivered' AND recorded = 1")
    assert graded["score"] == graded["max_score"] > 0
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, user).score == graded["score"]
    name, secret = forge(course, user, None, 12)
    (row,) = rows_until(course, [name], "state = 'delivered' AND recorded = 1")
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, user).score == graded["score"], "the earlier score, not a 0"
    assert (course.root / "submitted" / user / ASSIGNMENT / "attention.ipynb").read_bytes() == CORRECT.read_bytes()
    page = page_of(course, secret).read_text(encoding="utf-8")
    assert 'id="not-graded"' in page and 'id="score"' not in page, page
    assert "ipynb" in page, "the page says why"
    assert row["score"] is None and row["shown"] == "not-graded", "not graded, and not an attempt"
