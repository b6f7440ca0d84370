"""Scores back to the LMS: what the gradebook says counts, a durable queue of what is still to be
posted, and the posting (``attnkit lms-sync``, the end of ``attnkit grade --gradebook`` and of
``attnkit merge --gradebook``, and a thread of the on-submit service's recorder).

The score that counts is nbgrader's: the submission's total after its late penalty, over its
maximum (what ``nbgrader export`` reports). Its ``gradingProgress`` says the truth: ``FullyGraded``
once nothing waits for a TA, ``PendingManual`` while a manually graded cell has no points yet (AGS:
"final grade is pending, and it does require human intervention"); its ``activityProgress`` is
``Submitted`` while the due date has not passed (the student may still submit again), then
``Completed``.

The queue is a table in the course's state (``.attnkit-serve/lms-passback.db``, SQLite, one row per
student and assignment): a change in the gradebook replaces the row's wanted score and makes it
``pending``; a post that reaches the LMS makes it ``posted`` with what was posted; an LMS that does
not answer (or answers 429/5xx) leaves it pending with the time of its next try (backing off);
a student the LMS's roster does not have is ``unmatched`` and stays listed until resolved; a
request the LMS refuses is ``refused`` with its reason. Nothing is dropped: every row is printed by
``attnkit lms-sync`` until it is posted, and a restart goes on from the table.

One line item per assignment: looked for among the context's line items by the kit's ``tag`` and
``resourceId`` = the assignment's name before one is created, so that any number of syncs leaves
one column."""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.i18n import _
from attnkit.lms.keys import ensure_key
from attnkit.lms.platform import Platform, Refused, Unavailable
from attnkit.lms.settings import PASSBACK_DATABASE, STATE_FOLDER, Registration, registration_of, student_of_member

PENDING, POSTED, UNMATCHED, REFUSED = "pending", "posted", "unmatched", "refused"
FULLY_GRADED, PENDING_MANUAL = "FullyGraded", "PendingManual"
SUBMITTED, COMPLETED = "Submitted", "Completed"

SCHEMA = """
CREATE TABLE IF NOT EXISTS passbacks (
    student TEXT NOT NULL,
    assignment TEXT NOT NULL,
    score REAL NOT NULL,            -- wanted: nbgrader's total after the late penalty
    maximum REAL NOT NULL,
    grading TEXT NOT NULL,          -- FullyGraded | PendingManual
    activity TEXT NOT NULL,         -- Submitted | Completed
    changed TEXT NOT NULL,          -- when the wanted score last changed (the score's timestamp)
    state TEXT NOT NULL,            -- pending | posted | unmatched | refused
    tries INTEGER NOT NULL DEFAULT 0,
    next_try REAL NOT NULL DEFAULT 0,
    cause TEXT NOT NULL DEFAULT '',
    posted_score REAL,
    posted_grading TEXT,
    posted_at REAL,
    PRIMARY KEY (student, assignment)
)
"""


@dataclass(frozen=True)
class Wanted:
    """What the LMS should hold for one student and assignment."""

    student: str
    assignment: str
    score: float
    maximum: float
    grading: str
    activity: str


def database_of(root: Path) -> Path:
    state = root / STATE_FOLDER
    state.mkdir(mode=0o700, exist_ok=True)
    return state / PASSBACK_DATABASE


@contextmanager
def opened(root: Path) -> Iterator[sqlite3.Connection]:
    path = database_of(root)
    connection = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(SCHEMA)
        yield connection
    finally:
        connection.close()
    os.chmod(path, 0o600)


# -- what the gradebook says --------------------------------------------------------------------
def wanted_scores(gradebook: str, keys: list[tuple[str, str]] | None = None) -> list[Wanted]:
    """The score that counts of every submission in the gradebook (``gradebook``: its URL), or of ``keys``."""
    from nbgrader.api import Gradebook

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    found = []
    chosen = set(keys) if keys is not None else None
    with Gradebook(gradebook) as book:
        for assignment in book.assignments:
            for submission in book.assignment_submissions(assignment.name):
                key = (submission.student.id, assignment.name)
                if chosen is not None and key not in chosen:
                    continue
                penalty = float(submission.late_submission_penalty or 0.0)
                due = assignment.duedate
                found.append(
                    Wanted(
                        student=key[0],
                        assignment=key[1],
                        score=round(max(0.0, float(submission.score) - penalty), 6),
                        maximum=float(submission.max_score),
                        grading=PENDING_MANUAL if submission.needs_manual_grade else FULLY_GRADED,
                        activity=SUBMITTED if due is not None and now < due else COMPLETED,
                    )
                )
    return found


def gradebook_url(gradebook: str | Path) -> str:
    return gradebook if isinstance(gradebook, str) else f"sqlite:///{Path(gradebook).resolve()}"


# -- the queue ----------------------------------------------------------------------------------
def enqueue(root: Path, wanted: list[Wanted]) -> int:
    """Each wanted score into the queue; a row whose wanted score changed (or is new) becomes
    pending. How many became pending."""
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
    changed = 0
    with opened(root) as db:
        db.execute("BEGIN IMMEDIATE")
        for want in wanted:
            row = db.execute("SELECT * FROM passbacks WHERE student = ? AND assignment = ?", (want.student, want.assignment)).fetchone()
            same = row is not None and (row["score"], row["maximum"], row["grading"], row["activity"]) == (
                want.score,
                want.maximum,
                want.grading,
                want.activity,
            )
            if same and row["state"] != REFUSED:
                continue
            db.execute(
                "INSERT INTO passbacks (student, assignment, score, maximum, grading, activity, changed, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (student, assignment) DO UPDATE SET score = excluded.score, maximum = excluded.maximum, grading = excluded.grading, "
                "activity = excluded.activity, changed = excluded.changed, state = excluded.state, tries = 0, next_try = 0, cause = ''",
                (want.student, want.assignment, want.score, want.maximum, want.grading, want.activity, stamp, PENDING),
            )
            changed += 1
        db.execute("COMMIT")
    return changed


def rows(root: Path, states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    with opened(root) as db:
        found = [dict(row) for row in db.execute("SELECT * FROM passbacks ORDER BY assignment, student")]
    return [row for row in found if states is None or row["state"] in states]


def _settle(root: Path, row: dict[str, Any], state: str, cause: str = "", delay: float = 0.0) -> None:
    """The row's outcome, unless its wanted score changed meanwhile (then it stays pending for the new one)."""
    with opened(root) as db:
        if state == POSTED:
            db.execute(
                "UPDATE passbacks SET state = ?, cause = '', posted_score = ?, posted_grading = ?, posted_at = ?, tries = tries + 1 "
                "WHERE student = ? AND assignment = ? AND changed = ?",
                (POSTED, row["score"], row["grading"], time.time(), row["student"], row["assignment"], row["changed"]),
            )
        else:
            db.execute(
                "UPDATE passbacks SET state = ?, cause = ?, tries = tries + 1, next_try = ? WHERE student = ? AND assignment = ? AND changed = ?",
                (state, cause, time.time() + delay, row["student"], row["assignment"], row["changed"]),
            )


# -- posting ------------------------------------------------------------------------------------
@dataclass
class Session:
    """One pass over the queue with one client: the roster and the line items read once."""

    registration: Registration
    platform: Platform
    roster: dict[str, str] | None = None  # course student id -> LMS user id
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # assignment -> its line item
    duplicates: dict[str, int] = field(default_factory=dict)

    def user_of(self, student: str) -> str | None:
        if self.roster is None:
            self.roster = {}
            for member in self.platform.members():
                found = student_of_member(member, self.registration.student_id)
                if found and isinstance(member.get("user_id"), str):
                    self.roster.setdefault(found, member["user_id"])
        return self.roster.get(student.lower())

    def line_item(self, assignment: str, maximum: float, create: bool = True) -> dict[str, Any] | None:
        """The assignment's one line item: found by tag and resourceId, created only when none is there."""
        if assignment in self.items:
            item = self.items[assignment]
        else:
            found = self.platform.line_items(assignment)
            if len(found) > 1:
                self.duplicates[assignment] = len(found)  # made by hand, or by an older tool: the first is used
            if found:
                item = found[0]
            elif not create:
                return None
            else:
                item = self.platform.create_line_item(assignment, assignment, maximum)
            self.items[assignment] = item
        if create and float(item.get("scoreMaximum", 0)) != maximum:
            item = item | {"scoreMaximum": maximum}
            self.platform.update_line_item(item)
            self.items[assignment] = item
        return item

    def post(self, row: dict[str, Any]) -> None:
        user = self.user_of(row["student"])
        if user is None:
            raise Unmatched(row["student"])
        item = self.line_item(row["assignment"], float(row["maximum"]))
        assert item is not None
        self.platform.post_score(
            item,
            {
                "userId": user,
                "scoreGiven": float(row["score"]),
                "scoreMaximum": float(row["maximum"]),
                "activityProgress": row["activity"],
                "gradingProgress": row["grading"],
                "timestamp": row["changed"],
            },
        )


class Unmatched(Exception):
    """A student the LMS's roster does not have (never enrolled there, or known by another id)."""


@dataclass
class Outcome:
    posted: int = 0
    waiting: int = 0  # the LMS did not answer: left pending, tried again later
    unmatched: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    cause: str = ""


def drain(root: Path, session: Session, now: float | None = None, respect_delay: bool = False) -> Outcome:
    """Post every pending row (and the unmatched ones again: the roster may have them now). An
    LMS that does not answer stops the pass: the rest wait for the next one."""
    outcome = Outcome()
    due = time.time() if now is None else now
    todo = [row for row in rows(root, (PENDING, UNMATCHED)) if not respect_delay or row["next_try"] <= due]
    for index, row in enumerate(todo):
        try:
            session.post(row)
        except Unmatched:
            _settle(root, row, UNMATCHED, _("学习平台的名单（NRPS）里没有这位学生"))
            outcome.unmatched.append(f"{row['student']}/{row['assignment']}")
        except Refused as error:
            _settle(root, row, REFUSED, str(error))
            outcome.refused.append(f"{row['student']}/{row['assignment']}: {error}")
        except Unavailable as error:
            outcome.cause = str(error)
            later = todo[index:]
            for waiting in later:
                delay = min(session.registration.backoff_max, session.registration.backoff * 2 ** min(int(waiting["tries"]), 16))
                _settle(root, waiting, PENDING, str(error), delay)
            outcome.waiting = len(later)
            return outcome
        else:
            _settle(root, row, POSTED)
            outcome.posted += 1
    return outcome


def session_for(registration: Registration, retries: int | None = None) -> Session:
    ensure_key(registration.key_path)
    return Session(registration, Platform(registration, retries=retries))


# -- the hooks ----------------------------------------------------------------------------------
def after_gradebook(root: Path, gradebook: str | Path, keys: list[tuple[str, str]]) -> Outcome | None:
    """After ``attnkit grade --gradebook`` or ``attnkit merge --gradebook`` recorded ``keys``: their
    scores into the queue and the queue posted (with retries). None: the course has no LMS."""
    registration = registration_of(root)
    if registration is None:
        return None
    enqueue(root, wanted_scores(gradebook_url(gradebook), keys))
    session = session_for(registration)
    try:
        return drain(root, session)
    finally:
        session.platform.close()


class Drainer:
    """The recorder's thread that posts the queue (one per process): the recorder only enqueues, so
    an LMS that is slow or down never holds up a record, let alone a student's feedback. It wakes
    when something is enqueued, and every POLL seconds for the rows whose next try is due (a row
    left pending by a stop is posted after the next start)."""

    POLL = 1.0
    _running: dict[Path, Drainer] = {}
    _lock = threading.Lock()

    def __init__(self, root: Path, registration: Registration) -> None:
        self.root = root
        self.registration = registration
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self.run, name="lms-passback", daemon=True)

    @classmethod
    def ensure(cls, root: Path) -> Drainer | None:
        with cls._lock:
            if root in cls._running:
                return cls._running[root]
            registration = registration_of(root)
            if registration is None:
                return None
            drainer = cls._running[root] = Drainer(root, registration)
            drainer.thread.start()
            return drainer

    def run(self) -> None:
        session = session_for(self.registration, retries=0)
        while True:
            self.wake.wait(self.POLL)
            self.wake.clear()
            try:
                outcome = drain(self.root, session, respect_delay=True)
            except Exception as error:  # whatever it was, the rows stay in the table: said, and tried again
                print(json.dumps({"event": "lms_passback_error", "error": type(error).__name__}), file=sys.stderr, flush=True)
                session = session_for(self.registration, retries=0)
                continue
            if outcome.posted or outcome.waiting or outcome.unmatched or outcome.refused:
                event = {"event": "lms_passback", "posted": outcome.posted, "waiting": outcome.waiting, "unmatched": len(outcome.unmatched)}
                print(json.dumps(event), file=sys.stderr, flush=True)
            if outcome.waiting or outcome.unmatched:
                session.roster = None  # read again next time: an enrolment may come


def start_drainer(root: Path) -> None:
    """The recorder's start: post what a previous run left in the queue (nothing without an LMS)."""
    Drainer.ensure(root)


def enqueue_recorded(root: Path, gradebook: str | Path, keys: list[tuple[str, str]]) -> None:
    """The recorder's one call after a batch is in the gradebook: those scores into the queue, and
    the drainer woken. Nothing without an LMS; never raises into the recorder (the rows are
    enqueued again by ``attnkit lms-sync``, which reads the whole gradebook)."""
    try:
        drainer = Drainer.ensure(root)
        if drainer is None or not keys:
            return
        enqueue(root, wanted_scores(gradebook_url(gradebook), keys))
        drainer.wake.set()
    except Exception as error:
        print(json.dumps({"event": "lms_enqueue_error", "error": type(error).__name__}), file=sys.stderr, flush=True)


# -- attnkit lms-sync ---------------------------------------------------------------------------
def held_by_lms(session: Session, assignments: list[str]) -> dict[tuple[str, str], str]:
    """What the LMS holds now, per (LMS user id, assignment): its score as "given/maximum"."""
    held: dict[tuple[str, str], str] = {}
    for assignment in assignments:
        item = session.line_item(assignment, 0.0, create=False)
        if item is None:
            continue
        for result in session.platform.results(item):
            if result.get("resultScore") is not None:
                held[(str(result.get("userId")), assignment)] = f"{_number(result['resultScore'])}/{_number(result.get('resultMaximum', 1))}"
    return held


def _number(value: object) -> str:
    number = float(value)  # type: ignore[arg-type]
    return str(int(number)) if number == int(number) else f"{number:g}"


def sync(root: Path, gradebook: str | Path, dry_run: bool, out: Any = None) -> int:
    """``attnkit lms-sync``: every score of the gradebook into the queue; per student what the LMS
    holds and what would be posted; then (unless ``dry_run``) the queue posted. Exit status: 0 when
    everything is posted, 1 when some are unmatched, refused or waiting for the LMS."""
    from attnkit.constants import GraderError

    write = out or (lambda text: print(text, flush=True))
    registration = registration_of(root)
    if registration is None:
        raise GraderError(_("这门课没有连接学习平台：nbgrader_config.py 里没有 c.AttnkitLti.issuer（见 docs/lms.md）"))
    from attnkit.commands import tool_environment

    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's Gradebook runs alembic on a new database
    enqueue(root, wanted_scores(gradebook_url(gradebook)))
    session = session_for(registration)
    try:
        table = rows(root)
        reached = True
        try:
            held = held_by_lms(session, sorted({row["assignment"] for row in table}))
            session.user_of("")  # the roster, read once
        except (Unavailable, Refused) as error:
            write(_("学习平台暂时无法访问：{cause}").format(cause=error))
            held, session.roster, reached = {}, None, False
        for row in table:
            user = (session.roster or {}).get(row["student"].lower())
            if not reached:
                holds = _("（无法访问）")
            else:
                holds = held.get((user, row["assignment"]), "—") if user else _("（名单里没有）")
            wants = f"{_number(row['score'])}/{_number(row['maximum'])} {row['grading']}"
            same = holds == f"{_number(row['score'])}/{_number(row['maximum'])}" and row["state"] == POSTED
            action = _("不变") if same else (_("将发送") if user or not reached else _("无法发送：名单里没有"))
            write(f"{row['student']}\t{row['assignment']}\t" + _("平台上：{holds}\t本地：{wants}\t{action}").format(holds=holds, wants=wants, action=action))
        for assignment, count in session.duplicates.items():
            write(_("注意：平台上作业 {assignment} 有 {count} 个带本工具标记的成绩列，只使用第一个").format(assignment=assignment, count=count))
        if dry_run:
            return 0
        outcome = drain(root, session)
    finally:
        session.platform.close()
    write(_("已发送 {posted} 份成绩").format(posted=outcome.posted))
    for key in outcome.unmatched:
        write(_("未发送（学习平台的名单里没有这位学生）：{key}").format(key=key))
    for line in outcome.refused:
        write(_("未发送（平台拒绝）：{line}").format(line=line))
    if outcome.waiting:
        write(_("{count} 份成绩等待重试（平台无法访问：{cause}）；再次运行 attnkit lms-sync 即可").format(count=outcome.waiting, cause=outcome.cause))
    return 1 if outcome.unmatched or outcome.refused or outcome.waiting else 0
