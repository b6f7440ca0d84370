"""Issue 48: no input stops ``attnkit serve``; lateness by the service's clock; turns between students.

Real unix students, nbgrader's real exchange and the real service (``--jobs 1``), as in
test_service_exchange.py. An attacker makes, in their own name and with their own uid, the
folders that stopped the service for the whole class (each one alone did: the service exited,
the row went back to the head of the queue, and every restart took it first and exited again):

- a folder name with a byte that is not UTF-8 (the queue's INSERT raised);
- a ``submission_secret.txt`` that is not UTF-8 (the page's name raised);
- a ``timestamp.txt`` whose zone dateutil cannot read, and one in year 9999 (the recorder raised
  OverflowError and the service exited 2);
- a folder named ``x.ipynb`` beside the notebook, with an empty secret (IsADirectoryError);
- a second file whose name is not UTF-8;
- and a ``timestamp.txt`` written by hand (2020) on a late submission, which made it on time on
  the page and in the gradebook.

After them a classmate submits with nbgrader's own ``submit``: the service is still running, the
classmate's page arrives, each attack's row is ``refused``/``failed`` with its cause or graded as
what it is, and the same holds after a restart. Then a student's burst of slow submissions and a
classmate who comes while the first is graded: the classmate goes next.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from notebooks import wait_in_last_cell
from service_course import running_course
from test_service_exchange import ASSIGNMENT, CORRECT, WAIT, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]
GOOD_STAMP = "2026-12-07 07:00:00.000000 UTC"


class Attacks:
    """The attack folders made, by name (as bytes: one is not UTF-8), and what the service did."""

    def __init__(self, course: Course) -> None:
        self.course = course
        self.made: dict[str, bytes] = {}

    @property
    def inbound(self) -> Path:
        return self.course.exchange / "ch19" / "inbound"

    def make(self, kind: str, user: str, *, name_tail: bytes = b"", files: dict[bytes, bytes] | None = None, folders: tuple[bytes, ...] = ()) -> bytes:
        """A finished folder as ``nbgrader submit`` leaves it, owned by ``user``, with ``files``
        replacing or adding to the usual three; the mode 0777 set last."""
        n = len(self.made)
        name = f"{user}+{ASSIGNMENT}+2026-12-07 07:00:{n:02d}.000000 UTC+".encode() + (name_tail or f"poison{n}".encode())
        folder = os.path.join(bytes(self.inbound), name)
        os.mkdir(folder)
        contents = {b"attention.ipynb": CORRECT.read_bytes(), b"timestamp.txt": GOOD_STAMP.encode(), b"submission_secret.txt": f"{n:0128x}".encode()}
        contents.update(files or {})
        for file_name, data in contents.items():
            with open(os.path.join(folder, file_name), "wb") as handle:
                handle.write(data)
        for sub in folders:
            os.mkdir(os.path.join(folder, sub))
        for path in [folder, *(os.path.join(folder, entry) for entry in os.listdir(folder))]:
            shutil.chown(path, user, user)
        os.chmod(folder, 0o777)
        self.made[kind] = name
        return name

    def make_all(self, attacker: str) -> None:
        """The seven attacks, in this order, by ``attacker`` (test_service_poison_replicas.py makes the same)."""
        self.make("name-not-utf8", attacker, name_tail=b"\xff\xfe-not-utf8")
        self.make("secret-not-utf8", attacker, files={b"submission_secret.txt": b"\xff\xfe\x00secret"})
        self.make("zone-dateutil-cannot-read", attacker, files={b"timestamp.txt": b"2026-12-07 07:00:00.000000 XYZ+99:99"})
        self.make("year-9999", attacker, files={b"timestamp.txt": b"9999-12-31 23:59:59.999999 UTC"})
        self.make("folder-named-ipynb", attacker, files={b"submission_secret.txt": b""}, folders=(b"x.ipynb",))
        self.make("file-name-not-utf8", attacker, files={b"notes-\xff.txt": b"hello"})
        self.make("forged-early-timestamp", attacker, files={b"timestamp.txt": b"2020-01-01 00:00:00.000000 UTC"})

    def row(self, kind: str) -> sqlite3.Row | None:
        from attnkit.service.exchange import inbound_key

        key = inbound_key(os.fsdecode(self.made[kind]))
        with self.course.db() as db:
            found: sqlite3.Row | None = db.execute("SELECT * FROM submissions WHERE inbound = ?", (key,)).fetchone()
            return found


def settled(course: Course, count: int) -> list[sqlite3.Row]:
    """Wait until at least ``count`` rows are out of the queue (delivered, failed or refused)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert course.service is not None and course.service.poll() is None, "the service stopped:\n" + course.log.read_text()[-4000:]
        with course.db() as db:
            rows = db.execute("SELECT * FROM submissions WHERE state IN ('delivered', 'failed', 'refused') ORDER BY id").fetchall()
        if len(rows) >= count:
            return list(rows)
        time.sleep(0.2)
    raise AssertionError(f"only {len(rows)} of {count} settled\n" + course.log.read_text()[-4000:])


@pytest.fixture(scope="module")
def attacked() -> Iterator[tuple[Course, Attacks]]:
    # Due an hour ago: every submission of this module is late by the service's clock.
    with running_course("ak48p", ("attacker", "classmate", "burst"), datetime.timedelta(hours=-1), attempts=0, visibility="full") as course:
        attacks = Attacks(course)
        attacks.make_all(course.users["attacker"])  # type: ignore[attr-defined]
        yield course, attacks


@pytest.fixture(scope="module")
def after_attacks(attacked: tuple[Course, Attacks]) -> tuple[Course, Attacks, str]:
    """The classmate submits after the attacks, with nbgrader's own submit; their page arrives."""
    course, attacks = attacked
    classmate = course.users["classmate"]  # type: ignore[attr-defined]
    page = course.submit(classmate, CORRECT)
    text = course.fetch(classmate, page)
    settled(course, len(attacks.made) + 1)
    return course, attacks, text


def test_the_classmate_is_graded_after_every_poison_folder_and_the_service_runs_on(after_attacks: tuple[Course, Attacks, str]) -> None:
    course, _attacks, page = after_attacks
    assert 'id="score"' in page
    assert course.service is not None and course.service.poll() is None
    assert course.events("stopped") == []


@pytest.mark.parametrize("kind", ["name-not-utf8", "secret-not-utf8", "folder-named-ipynb", "file-name-not-utf8", "zone-dateutil-cannot-read", "year-9999"])
def test_a_poison_folder_is_refused_or_failed_with_its_cause_or_graded_as_what_it_is(after_attacks: tuple[Course, Attacks, str], kind: str) -> None:
    course, attacks, _page = after_attacks
    row = attacks.row(kind)
    assert row is not None, f"{kind}: no row\n{course.log.read_text()[-3000:]}"
    assert row["state"] in ("refused", "failed", "delivered"), (kind, row["state"])
    if row["state"] != "delivered":
        assert row["cause"], f"{kind}: {row['state']} without a cause"
    else:
        assert row["score"] == row["max_score"], "what was graded is the student's own correct notebook"


def test_a_timestamp_the_student_wrote_is_shown_never_used(after_attacks: tuple[Course, Attacks, str]) -> None:
    """A late submission whose timestamp.txt says 2020: graded, and late by the service's clock
    (the due date passed an hour before the module began)."""
    course, attacks, _page = after_attacks
    row = attacks.row("forged-early-timestamp")
    assert row is not None and row["state"] == "delivered", (row and dict(row), course.log.read_text()[-3000:])
    late = json.loads(row["results"]).get("late")
    assert late is not None and late["seconds_late"] > 0, late
    assert not late["timestamp"].startswith("2020"), late


def test_the_gradebook_takes_the_services_time_not_the_students(after_attacks: tuple[Course, Attacks, str]) -> None:
    """The attacker's counted attempt is recorded with the service's time: late in nbgrader's gradebook too."""
    from nbgrader.api import Gradebook

    course, _attacks, _page = after_attacks
    attacker = course.users["attacker"]  # type: ignore[attr-defined]
    course.wait_recorded()
    stamp = (course.root / "submitted" / attacker / ASSIGNMENT / "timestamp.txt").read_text()
    assert not stamp.startswith(("2020", "9999", "2026-12-07 07:00:")), stamp
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(ASSIGNMENT, attacker)
        assert submission.timestamp is not None and submission.timestamp > submission.duedate
        assert submission.total_seconds_late > 0


def test_after_a_restart_the_poison_is_not_taken_again_and_a_classmate_is_graded(after_attacks: tuple[Course, Attacks, str]) -> None:
    course, attacks, _page = after_attacks
    assert course.stop() == 0
    course.start()
    classmate = course.users["classmate"]  # type: ignore[attr-defined]
    page = course.submit(classmate, CORRECT)
    assert 'id="score"' in course.fetch(classmate, page)
    assert course.service is not None and course.service.poll() is None and course.events("stopped")[-1]["reason"] == "signal"
    for kind in attacks.made:
        row = attacks.row(kind)
        assert row is not None and row["state"] != "queued", kind


def test_a_students_burst_waits_behind_a_classmate_who_came_while_it_was_graded(after_attacks: tuple[Course, Attacks, str], tmp_path: Path) -> None:
    """Six slow submissions from one student (each waits 2 s in its last cell), then a classmate's:
    the classmate's is graded as soon as the burst's first is done (on the old claim, by id, it
    was graded after all six: 47.9 s against 0.4 s in the issue)."""
    from test_service_exchange import forge_submission

    course, _attacks, _page = after_attacks
    burst, classmate = course.users["burst"], course.users["classmate"]  # type: ignore[attr-defined]
    slow = tmp_path / "attention.ipynb"
    shutil.copy(CORRECT, slow)
    wait_in_last_cell(slow, 2.0)
    before = {e["id"] for e in course.events("delivered")}
    names = [forge_submission(course, burst, slow, 100 + n)[0] for n in range(6)]
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:  # the burst's first is being graded (2 s in its last cell)
        with course.db() as db:
            found = db.execute("SELECT state FROM submissions WHERE inbound = ?", (names[0],)).fetchone()
            if found is not None and found["state"] == "grading":
                break
        time.sleep(0.02)
    else:
        raise AssertionError("the burst's first was never graded\n" + course.log.read_text()[-3000:])
    forge_submission(course, classmate, CORRECT, 200)
    deadline = time.monotonic() + WAIT
    while len([e for e in course.events("delivered") if e["id"] not in before]) < 7 and time.monotonic() < deadline:
        time.sleep(0.2)
    delivered = [e for e in course.events("delivered") if e["id"] not in before]
    order = [e["student"] for e in delivered]
    assert len(order) == 7, order
    assert order.index(classmate) == 1, f"the classmate waited behind the burst: {[(e['student'], e['waited'], e['grading']) for e in delivered]}"
    assert nbformat.read(slow, as_version=4).cells[-1].source.startswith("import time")


def test_two_submissions_of_one_student_apart_each_get_their_own_result(after_attacks: tuple[Course, Attacks, str], tmp_path: Path) -> None:
    """Issue 50: with two warm workers, a student's next submission claimed between a worker's
    record and its end-of-chunk message was delivered as "0 / 0" ungraded, and each later one got
    the previous one's result (the engine told jobs apart by student and assignment only). A
    correct notebook and a mistaken one 0.3 s apart, six times: each row has its own score, and
    the results of the very notebook it was (each one's bytes differ: results.json's digest), and
    no worker's message was about a submission it no longer held (the log's ``discarded``)."""
    import hashlib

    from test_service_exchange import MISTAKE, forge_submission

    course, _attacks, _page = after_attacks
    student = course.users["classmate"]  # type: ignore[attr-defined]
    assert course.stop() == 0
    course.jobs = 2
    course.start()

    def unique(notebook: Path, n: int) -> Path:
        """``notebook`` with a cell of its own (the same grade, bytes no other submission has)."""
        book = nbformat.read(notebook, as_version=4)
        book.cells.append(nbformat.v4.new_code_cell(f"# submission {n}"))
        path = tmp_path / f"{n}.ipynb"
        nbformat.write(book, path)
        return path

    try:
        made: dict[str, bool] = {}  # inbound name -> the notebook was the correct one
        digests: dict[str, str] = {}
        for n in range(6):
            for number, notebook in ((300 + 2 * n, CORRECT), (301 + 2 * n, MISTAKE)):
                copy = unique(notebook, number)
                name = forge_submission(course, student, copy, number)[0]
                made[name], digests[name] = notebook == CORRECT, hashlib.sha256(copy.read_bytes()).hexdigest()
                time.sleep(0.3 if notebook == CORRECT else 1.0)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with course.db() as db:
                rows = {r["inbound"]: r for r in db.execute("SELECT * FROM submissions") if r["inbound"] in made}
            if len(rows) == len(made) and all(r["state"] == "delivered" for r in rows.values()):
                break
            time.sleep(0.3)
        wrong = [
            (name[-8:], row["state"], row["score"], row["max_score"])
            for name, row in rows.items()
            if row["state"] != "delivered"
            or not row["max_score"]
            or (row["score"] == row["max_score"]) != made[name]
            or [notebook["sha256"] for notebook in json.loads(row["results"])["notebooks"]] != [digests[name]]
        ]
        assert wrong == [], f"results on the wrong submission: {wrong}"
        assert course.events("discarded") == []
    finally:
        assert course.stop() == 0
        course.jobs = 1
        course.start()


def test_a_second_service_on_the_course_refuses_naming_the_first(after_attacks: tuple[Course, Attacks, str]) -> None:
    """Issue 49: a second ``attnkit serve`` started silently beside the first. Now it exits 2, naming
    the running one's pid and how to stop it; ``--status`` answers from the database meanwhile."""
    import subprocess

    from test_service_exchange import BIN

    course, _attacks, _page = after_attacks
    assert course.service is not None
    second = subprocess.run(
        [str(BIN / "attnkit"), "serve", "--jobs", "1"], cwd=course.root, capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL
    )
    assert second.returncode == 2, second.stdout + second.stderr
    assert f"pid {course.service.pid}" in second.stderr and "kill -TERM" in second.stderr, second.stderr
    assert course.service.poll() is None, "the first goes on"
    status = subprocess.run([str(BIN / "attnkit"), "serve", "--status", "--lang", "en"], cwd=course.root, capture_output=True, text=True, timeout=WAIT)
    assert status.returncode == 0 and "delivered=" in status.stdout, status.stderr
