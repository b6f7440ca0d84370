"""``attnkit serve`` with a real nbgrader exchange and real unix students (issue 39).

Three unix users are made for the module (useradd, removed at the end): a student who submits the
model answers, one who submits a catalogued mistake, and a classmate who tries to pass a folder
off as the first one's. The instructor (root) releases the assignment, starts ``attnkit serve``
from the course root; the students run nbgrader's own ``submit`` and ``fetch_feedback``, and what
they fetch must be the kit's page for that very submission. Then: the attempt limit, each
visibility mode, the refused folder, a ``kill -9`` of the service in a burst and its restart, and
the gradebook against ``attnkit grade --gradebook`` over the same notebooks. Nothing is mocked.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import service_events
from test_nbgrader_exchange import as_user, instructor, nbgrader_utc

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ASSIGNMENT = "ch19-attention"
CORRECT = ROOT / "solutions" / ASSIGNMENT / "attention.ipynb"
MISTAKE = ROOT / "examples" / "submitted" / "wangfang" / ASSIGNMENT / "attention.ipynb"  # masks by multiplying
WAIT = 300.0  # seconds a page may take to appear (a shared, loaded machine; no timing is asserted)

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Course:
    """The course folder, the exchange, the students, and the running service."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.exchange = base / "exchange"
        self.root = base / "course"
        self.homes: dict[str, Path] = {}
        self.service: subprocess.Popen | None = None
        self.log = base / "serve.log"
        self.port = free_port()
        self.jobs = 1  # warm workers of the service started next
        self.options: list[str] = []  # more of attnkit serve's options (``--cell-timeout 3``, say)

    def home(self, user: str) -> Path:
        return self.homes[user]

    def policy(self, **entry: object) -> None:
        """The assignment's policy in the course's nbgrader_config.py (read at the service's start)."""
        config = self.root / "nbgrader_config.py"
        text = config.read_text().split("\n# attnkit serve policy\n")[0]
        config.write_text(text + f"\n# attnkit serve policy\nc.AttnkitServe.policies = {{{ASSIGNMENT!r}: {entry!r}}}\n")

    def start(self) -> None:
        """Start the service and wait until it says it has started (its workers warming up)."""
        before = len(self.events("started")) if self.log.is_file() else 0
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        self.service = subprocess.Popen(
            [str(BIN / "attnkit"), "serve", "--jobs", str(self.jobs), "--metrics-port", str(self.port), *self.options],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=open(self.log, "a"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + WAIT
        while len(self.events("started")) == before:
            assert self.service.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.service is not None
        self.service.send_signal(sig)
        code = self.service.wait(timeout=300)
        self.service = None
        return code

    def events(self, kind: str) -> list[dict]:
        return service_events(self.log, kind)

    def db(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.root / ".attnkit-serve" / "service.db")
        connection.row_factory = sqlite3.Row
        return connection

    def wait_recorded(self) -> None:
        """Until the recorder has caught up (no delivery left out of the gradebook), or WAIT passed."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with self.db() as db:
                if db.execute("SELECT COUNT(*) FROM submissions WHERE state = 'delivered' AND recorded = 0").fetchone()[0] == 0:
                    return
            time.sleep(0.5)

    def submit(self, user: str, notebook: Path) -> Path:
        """``nbgrader submit`` of ``notebook`` by ``user``; the path their fetch_feedback writes this submission's page to."""
        home = self.home(user)
        target = home / ASSIGNMENT / "attention.ipynb"
        target.write_bytes(notebook.read_bytes())
        shutil.chown(target, user, user)
        cache = home / ".local" / "share" / "jupyter" / "nbgrader_cache" / "ch19"
        before = set(os.listdir(cache)) if cache.is_dir() else set()
        time.sleep(1.05)  # nbgrader's timestamps have a second's grain in the folder names it compares
        as_user(user, home, str(BIN / "nbgrader"), "submit", ASSIGNMENT)
        (new,) = set(os.listdir(cache)) - before
        timestamp = new.split("+")[2]
        return home / ASSIGNMENT / "feedback" / timestamp / "attention.html"

    def fetch(self, user: str, page: Path) -> str:
        """The student's own ``nbgrader fetch_feedback`` until ``page`` arrives."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            as_user(user, self.home(user), str(BIN / "nbgrader"), "fetch_feedback", ASSIGNMENT)
            if page.is_file():
                return page.read_text(encoding="utf-8")
            time.sleep(0.5)
        raise AssertionError(f"no feedback for {user} at {page}\n{self.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    from service_course import running_course  # it builds on this module's Course: imported once this one is

    with running_course("ak39", ("correct", "mistake", "intruder"), datetime.timedelta(days=1), attempts=2, window_hours=1, visibility="full") as setup:
        yield setup


def test_submit_then_fetch_feedback_brings_the_kits_page_of_that_submission(course: Course) -> None:
    """nbgrader submit, then nbgrader fetch_feedback: the correct student's full marks, the other's diagnosis."""
    correct, mistake = course.users["correct"], course.users["mistake"]  # type: ignore[attr-defined]
    page_correct = course.submit(correct, CORRECT)
    page_mistake = course.submit(mistake, MISTAKE)
    # What docs/service.md says a student sees before fetching: `nbgrader list --cached` (the plain
    # `nbgrader list` lists the released assignments only).
    deadline = time.monotonic() + WAIT
    while True:
        listed = as_user(correct, course.home(correct), str(BIN / "nbgrader"), "list", "--cached")
        if "feedback ready to be fetched" in listed.stdout + listed.stderr:
            break
        assert time.monotonic() < deadline, listed.stdout + listed.stderr
        time.sleep(0.5)
    good = course.fetch(correct, page_correct)
    bad = course.fetch(mistake, page_mistake)
    assert 'id="score"' in good and 'data-diagnosis="' not in good
    assert 'data-diagnosis="mask_by_multiplying"' in bad and 'data-heatmap="causal-student"' in bad
    with course.db() as db:
        rows = {r["student"]: r for r in db.execute("SELECT * FROM submissions")}
    assert rows[correct]["score"] == rows[correct]["max_score"] > 0
    assert 0 <= rows[mistake]["score"] < rows[mistake]["max_score"]
    assert f"{rows[mistake]['score']:g} / {rows[mistake]['max_score']:g}" in bad
    # The page lies where only its owner can name it: the folder cannot be listed by anyone else.
    feedback = course.exchange / "ch19" / "feedback"
    assert oct(feedback.stat().st_mode & 0o777) == oct(0o711)
    listed = as_user(mistake, course.home(mistake), "sh", "-c", f"ls {feedback} 2>&1 || true").stdout
    assert ".html" not in listed
    # nbgrader list finds the page where it looks (its own hash), the same as the one fetched.
    listed = as_user(correct, course.home(correct), str(BIN / "nbgrader"), "list", "--cached")
    assert "feedback already fetched" in listed.stdout + listed.stderr, listed.stderr
    # Prometheus' text format on the local port.
    with urllib.request.urlopen(f"http://127.0.0.1:{course.port}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    assert "attnkit_serve_graded_total 2" in metrics and "attnkit_serve_queue_length 0" in metrics
    assert 'attnkit_serve_latency_seconds_bucket{le="+Inf"} 2' in metrics
    # One structured log line per submission.
    delivered = course.events("delivered")
    assert {e["student"] for e in delivered} >= {correct, mistake} and all({"attempt", "score", "latency", "layer"} <= set(e) for e in delivered)


def test_a_folder_named_after_a_classmate_by_another_uid_is_refused(course: Course) -> None:
    """The intruder writes inbound/<correct student>+...: refused, logged, in --status; the classmate's record untouched."""
    correct, intruder = course.users["correct"], course.users["intruder"]  # type: ignore[attr-defined]
    with course.db() as db:
        before = [tuple(r) for r in db.execute("SELECT * FROM submissions WHERE student = ?", (correct,))]
    name = f"{correct}+{ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC+forged"
    script = (
        f'set -e; d="{course.exchange}/ch19/inbound/{name}"; mkdir "$d"; cp "{course.home(intruder)}/{ASSIGNMENT}/attention.ipynb" "$d/";'
        f' echo "2099-01-01 00:00:00.000000 UTC" > "$d/timestamp.txt"; echo secret > "$d/submission_secret.txt"; chmod 777 "$d"'
    )
    as_user(intruder, course.home(intruder), "sh", "-c", script)
    deadline = time.monotonic() + WAIT
    while not any(e["inbound"] == name for e in course.events("refused")) and time.monotonic() < deadline:
        time.sleep(0.2)
    refused = [e for e in course.events("refused") if e["inbound"] == name]
    assert refused and "uid" in refused[0]["cause"], course.log.read_text()[-2000:]
    status = instructor(course.root, str(BIN / "attnkit"), "serve", "--status", "--lang", "en").stdout
    assert "refused" in status and name in status
    with course.db() as db:
        after = [tuple(r) for r in db.execute("SELECT * FROM submissions WHERE student = ? AND state != 'refused'", (correct,))]
    assert after == before


def test_attempt_limit_withholds_the_page_and_says_when_the_next_comes(course: Course) -> None:
    """attempts=2 per hour: the third graded submission within the hour is graded, recorded, but its page says when."""
    correct = course.users["correct"]  # type: ignore[attr-defined]
    course.fetch(correct, course.submit(correct, MISTAKE))  # the second
    third = course.fetch(correct, course.submit(correct, CORRECT))
    assert 'id="withheld"' in third and 'id="score"' not in third and "data-diagnosis" not in third
    with course.db() as db:
        shown = [r["shown"] for r in db.execute("SELECT shown FROM submissions WHERE student = ? AND state = 'delivered' ORDER BY id", (correct,))]
        scored = db.execute("SELECT score, max_score FROM submissions WHERE student = ? ORDER BY id DESC LIMIT 1", (correct,)).fetchone()
    assert shown == ["full", "full", "withheld"]
    assert scored[0] == scored[1], "graded for the TA all the same"


def test_visibility_scores_and_after_due(course: Course) -> None:
    """``scores``: the total and the parts, no diagnosis or heatmap; ``after-due``: nothing before the due date, the full page after it."""
    mistake = course.users["mistake"]  # type: ignore[attr-defined]
    assert course.stop() == 0
    course.policy(attempts=0, visibility="scores")
    course.start()
    page = course.fetch(mistake, course.submit(mistake, MISTAKE))
    assert 'id="score"' in page and 'id="parts"' in page and "data-diagnosis" not in page and "data-heatmap" not in page
    assert course.stop() == 0
    course.policy(attempts=0, visibility="after-due")
    course.start()
    withheld_at = course.submit(mistake, MISTAKE)
    page = course.fetch(mistake, withheld_at)
    assert 'id="withheld"' in page and 'id="score"' not in page and "data-diagnosis" not in page
    passed = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=1)
    instructor(course.root, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(passed)}")
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        withheld_at.unlink()
        page = course.fetch(mistake, withheld_at)
        if 'data-diagnosis="mask_by_multiplying"' in page:
            break
        time.sleep(1)
    assert 'data-diagnosis="mask_by_multiplying"' in page, "the full page once the due date passed"
    assert 'id="late"' not in page, "submitted before the due date"
    # Submitted after it: the page says so, with nbgrader's late rule (this course: none, 0 points off).
    late = course.fetch(mistake, course.submit(mistake, MISTAKE))
    assert 'id="late"' in late and "迟交扣分：0 分" in late and 'data-diagnosis="mask_by_multiplying"' in late


def forge_submission(course: Course, user: str, notebook: Path, n: int) -> tuple[str, str]:
    """What ``nbgrader submit`` leaves in inbound/, written by root as ``user`` (their uid owns it): its name and secret."""
    stamp = f"2026-12-05 06:{n // 60:02d}:{n % 60:02d}.{n:06d} UTC"
    name = f"{user}+{ASSIGNMENT}+{stamp}+burst{n}"
    folder = course.exchange / "ch19" / "inbound" / name
    folder.mkdir()
    secret = f"{n:0128x}"
    (folder / "attention.ipynb").write_bytes(notebook.read_bytes())
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(secret)
    for path in (folder, *folder.iterdir()):
        shutil.chown(path, user, user)
    folder.chmod(0o777)
    return name, secret


def test_kill_9_in_a_burst_then_restart_delivers_each_once_and_records_each_once(course: Course) -> None:
    """A burst of 8 submissions from two students; the service is killed -9 after the first delivery and started again."""
    from nbgrader.utils import notebook_hash

    correct, mistake = course.users["correct"], course.users["mistake"]  # type: ignore[attr-defined]
    assert course.stop() == 0
    course.policy(attempts=0, visibility="full")
    course.start()
    already = len(course.events("delivered"))
    made = [forge_submission(course, (correct, mistake)[n % 2], (CORRECT, MISTAKE)[n % 2], n) for n in range(8)]
    deadline = time.monotonic() + WAIT
    while len(course.events("delivered")) == already and time.monotonic() < deadline:
        time.sleep(0.05)
    assert course.stop(signal.SIGKILL) == -signal.SIGKILL
    course.start()
    names = [name for name, _secret in made]
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with course.db() as db:
            states = [r["state"] for r in db.execute(f"SELECT state FROM submissions WHERE inbound IN ({','.join('?' * len(names))})", names)]
        if states.count("delivered") == len(names):
            break
        time.sleep(0.2)
    assert states == ["delivered"] * len(names), course.log.read_text()[-3000:]
    for name, secret in made:
        assert (course.exchange / "ch19" / "feedback" / f"{notebook_hash(secret=secret, notebook_id='attention')}.html").is_file(), name
    delivered = [e["id"] for e in course.events("delivered")]
    assert len(delivered) == len(set(delivered)), "a submission delivered twice"
    # The gradebook: one record per student, the latest submission's score, once the recorder caught up.
    course.wait_recorded()
    assert course.stop() == 0
    from nbgrader.api import Gradebook

    with course.db() as db:
        latest = {
            r["student"]: r["score"]
            for r in db.execute(
                "SELECT student, score FROM submissions WHERE state = 'delivered' AND score IS NOT NULL"
                " AND id IN (SELECT MAX(id) FROM submissions WHERE state = 'delivered' GROUP BY student)"
            )
        }
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gradebook:
        recorded = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    assert recorded == pytest.approx(latest)
    # `make grade` over the same notebooks (the course's submitted/, where the service placed them) records the same.
    other = course.base / "make-grade"
    other.mkdir()
    instructor(
        course.root,
        str(BIN / "attnkit"),
        "grade",
        "--submitted",
        str(course.root / "submitted"),
        "--out",
        str(other / "graded"),
        "--jobs",
        "1",
        "--gradebook",
        str(other / "gradebook.db"),
        "--quiet",
    )
    with Gradebook(f"sqlite:///{other / 'gradebook.db'}") as gradebook:
        graded = {s.student.id: s.score for s in gradebook.assignment_submissions(ASSIGNMENT)}
    assert graded == pytest.approx(recorded)
