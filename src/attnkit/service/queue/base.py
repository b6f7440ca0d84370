"""The queue's interface: the ``submissions`` table, its schema, its states and every query.

A submission is written here before anything grades it; its state then moves ``queued ->
grading -> delivered`` (or ``failed`` with the cause); a folder that is not its claimed
student's is ``refused`` and never graded. Every transition is one transaction, so a ``kill -9``
leaves each row in one state; at start, ``recover`` puts what was ``grading`` back in the queue
(nothing is lost, and a row is delivered once: ``deliver`` only moves a row that is ``grading``
by this replica).

**A row never stops the service twice.** A row whose grading was cut short ``MAX_TRIES`` times
(the service or its replica died while grading it) is ``failed`` with that cause instead of being
put back: whatever it does to a service, it cannot do it on every restart.

**Fair between students** (``claim``): one submission in flight per student, each student's in
the order of their own time (``noticed``); among the students who have work waiting, the one whose
*turn* is oldest goes first, a turn being the later of
when their oldest waiting submission arrived and when their last one finished. So a student's
burst waits behind every classmate who submitted while their previous one was being graded,
however many older submissions they queued. ``MAX_WAITING`` bounds what one student may have
waiting (the service refuses beyond it, with the reason).

The SQL here is the subset both databases speak (``:name`` parameters); a subclass supplies the
connection, transactions and what only its database can do (claiming under leases and locks,
the recorder's lock, the id of an inserted row).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from attnkit.i18n import _

QUEUED, GRADING, DELIVERED, FAILED, REFUSED = "queued", "grading", "delivered", "failed", "refused"
STATES = (QUEUED, GRADING, DELIVERED, FAILED, REFUSED)
MAX_TRIES = 3  # grading starts cut short by the service's death before a row is failed instead
MAX_WAITING = 20  # submissions one student may have queued at once (beyond: refused)

# The table, once for both databases: ``{id}`` and ``{real}`` are each database's spelling.
COLUMNS = f"""
    id {{id}},
    inbound TEXT NOT NULL UNIQUE,          -- the folder's name in the exchange's inbound/ (validated)
    student TEXT NOT NULL,                 -- the name the folder claims (proved by its uid, or refused)
    assignment TEXT NOT NULL,
    timestamp TEXT NOT NULL,               -- nbgrader's timestamp.txt, as the student wrote it (shown only)
    noticed {{real}} NOT NULL,              -- when the service saw the folder complete (its clock: lateness)
    state TEXT NOT NULL CHECK (state IN ({", ".join(repr(s) for s in STATES)})),
    cause TEXT NOT NULL DEFAULT '',        -- why failed or refused
    tries INTEGER NOT NULL DEFAULT 0,      -- grading starts (a restart after a crash adds one)
    started {{real}},
    finished {{real}},
    attempt INTEGER,                       -- the student's n-th delivered submission of the assignment
    shown TEXT NOT NULL DEFAULT '',        -- what the page showed: full, scores, withheld, after-due, released
    score {{real}},
    max_score {{real}},
    feedback TEXT NOT NULL DEFAULT '',     -- the page's file name in the exchange's feedback/
    results TEXT,                          -- results.json of the graded submission
    recorded INTEGER NOT NULL DEFAULT 0,   -- 1: the gradebook has it (or it does not count there)
    replica TEXT NOT NULL DEFAULT '',      -- who holds it in grading ('' with one service)
    leased_until {{real}},                 -- until when (replicas: the database's clock)
    hints TEXT NOT NULL DEFAULT ''         -- the hint ladder's level the page showed per mistake id, as JSON ('' when none)
"""
# Columns added since the first release of the table: added to an older database at start.
ADDED_COLUMNS = {"replica": "TEXT NOT NULL DEFAULT ''", "leased_until": "{real}", "hints": "TEXT NOT NULL DEFAULT ''"}
INDEXES = [
    "CREATE INDEX IF NOT EXISTS by_state ON {table} (state, id)",
    "CREATE INDEX IF NOT EXISTS by_student ON {table} (student, assignment, state)",
    "CREATE INDEX IF NOT EXISTS by_student_state ON {table} (student, state, id)",
]

# A waiting submission's turn: the later of when it arrived and when its student's last
# submission finished (delivered or failed). ``{greatest}``: each database's two-argument maximum.
TURN = (
    "{greatest}(s.noticed, COALESCE((SELECT MAX(d.finished) FROM submissions d"
    " WHERE d.student = s.student AND d.state IN ('delivered', 'failed')), 0))"
)
# Each student's oldest waiting submission by its own time (``noticed``: nbgrader's order, not the
# order the folders were found in), none of a student with one in flight, in turn order.
CANDIDATES = (
    "SELECT s.id, s.student{extra} FROM submissions s"
    " WHERE s.state = 'queued'"
    " AND s.id = (SELECT q.id FROM submissions q WHERE q.student = s.student AND q.state = 'queued' ORDER BY q.noticed, q.id LIMIT 1)"
    " AND NOT EXISTS (SELECT 1 FROM submissions g WHERE g.student = s.student AND g.state = 'grading')"
    " ORDER BY {turn}, s.id LIMIT :scan"
)


@dataclass(frozen=True)
class Row:
    id: int
    inbound: str
    student: str
    assignment: str
    timestamp: str
    noticed: float
    state: str
    cause: str
    tries: int
    attempt: int | None
    score: float | None
    max_score: float | None

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> Row:
        return cls(**{name: found[name] for name in cls.__dataclass_fields__})


def is_url(where: str) -> bool:
    """A database URL (``postgresql://…``) rather than the path of the SQLite file."""
    return "://" in where


def gave_up_cause() -> str:
    return _("评分服务在评这份提交时中断了 {tries} 次：不再重试（请联系助教）").format(tries=MAX_TRIES)


class Queue(ABC):
    """The submissions table and its transitions; one subclass per database."""

    url: str  # where it is: the SQLite file's path, or the PostgreSQL URL
    replica: str  # this process's name among replicas ('' for the one service of a course)
    greatest: str  # the database's two-argument maximum

    # -- what each database does its own way ---------------------------------------------------
    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """One write transaction, committed whole or not at all; yields the handle ``run`` takes."""

    @abstractmethod
    def run(self, db: Any, sql: str, **params: Any) -> int:
        """One statement in transaction ``db``; rows changed."""

    @abstractmethod
    def fetch(self, db: Any, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        """One query in transaction ``db``; its rows as mappings."""

    @abstractmethod
    def rows(self, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        """One read-only query outside any transaction (this module's queries only)."""

    @abstractmethod
    def insert(self, db: Any, sql: str, **params: Any) -> int | None:
        """An ``INSERT … ON CONFLICT DO NOTHING``: the new row's id, or None when it was there."""

    @abstractmethod
    def claim(self, count: int) -> list[Row]:
        """Up to ``count`` queued submissions moved to grading, in turn order (the module's
        text), at most one per student, none of a student who has one in flight."""

    @abstractmethod
    def recover(self) -> int:
        """At start: what this service was grading when it last ended goes back to the queue (or
        is failed, after ``MAX_TRIES``). How many went back."""

    @abstractmethod
    def recording(self) -> AbstractContextManager[bool]:
        """The gradebook's writer for one batch: True while this process may record."""

    @abstractmethod
    def recording_transaction(self) -> AbstractContextManager[Any]:
        """The transaction ``mark_recorded`` writes in (the recorder's lock's, where there is one)."""

    def heartbeat(self) -> int:
        """Renew this replica's leases (a shared queue's); rows renewed."""
        return 0

    @abstractmethod
    def close(self) -> None: ...

    # -- intake --------------------------------------------------------------------------------
    def known(self) -> set[str]:
        """The inbound folder names already recorded (whatever their state)."""
        return {row["inbound"] for row in self.rows("SELECT inbound FROM submissions")}

    def waiting(self, student: str) -> int:
        """How many submissions ``student`` has queued (not yet graded)."""
        return int(self.rows("SELECT COUNT(*) AS n FROM submissions WHERE student = :student AND state = 'queued'", student=student)[0]["n"])

    def notice(
        self, inbound: str, student: str, assignment: str, timestamp: str, noticed: float | None = None, stage: Callable[[], object] | None = None
    ) -> int | None:
        """Record a new submission as queued; its id, or None if this folder was recorded before.
        ``stage``: the copy graded, made in the same transaction once the row is ours (a row in
        the queue always has its copy; an exception undoes the row)."""
        with self.transaction() as db:
            found = self.insert(
                db,
                "INSERT INTO submissions (inbound, student, assignment, timestamp, noticed, state)"
                " VALUES (:inbound, :student, :assignment, :timestamp, :noticed, 'queued') ON CONFLICT (inbound) DO NOTHING",
                inbound=inbound,
                student=student,
                assignment=assignment,
                timestamp=timestamp,
                noticed=noticed if noticed is not None else time.time(),
            )
            if found is not None and stage is not None:
                stage()
            return found

    def refuse(self, inbound: str, student: str, assignment: str, timestamp: str, cause: str, noticed: float | None = None) -> int | None:
        """Record a folder that is never graded (not its claimed student's, over a cap), with why."""
        now = noticed if noticed is not None else time.time()
        with self.transaction() as db:
            return self.insert(
                db,
                "INSERT INTO submissions (inbound, student, assignment, timestamp, noticed, state, cause, finished, recorded)"
                " VALUES (:inbound, :student, :assignment, :timestamp, :noticed, 'refused', :cause, :noticed, 1) ON CONFLICT (inbound) DO NOTHING",
                inbound=inbound,
                student=student,
                assignment=assignment,
                timestamp=timestamp,
                noticed=now,
                cause=cause,
            )

    # -- grading -------------------------------------------------------------------------------
    def give_up(self, db: Any, where: str, **params: Any) -> int:
        """Rows in grading (those ``where`` selects) cut short ``MAX_TRIES`` times: failed."""
        return self.run(
            db,
            "UPDATE submissions SET state = 'failed', cause = :cause, finished = :now, recorded = 1, leased_until = NULL"
            f" WHERE state = 'grading' AND tries >= :tries AND ({where})",
            cause=gave_up_cause(),
            now=time.time(),
            tries=MAX_TRIES,
            **params,
        )

    def deliver(
        self,
        id: int,
        results: dict[str, Any],
        feedback: str,
        shown: str,
        score: float | None,
        max_score: float,
        finished: float | None = None,
        hints: Mapping[str, int] | None = None,
    ) -> bool:
        """Grading (by this replica) -> delivered, with what was delivered; False if the row was
        not (then nothing changes: a row is delivered once). The attempt's number is its place
        among the student's deliveries of the assignment by their own time (``noticed``, then id),
        as nbgrader orders attempts: one delivered after a later one (found later, after a restart)
        takes its place, and those after it move up one (none can be delivered meanwhile: one in
        flight per student). ``hints``: the hint ladder's level the page showed for each mistake
        (``hints_seen`` reads them)."""
        with self.transaction() as db:
            if not self.run(
                db,
                "UPDATE submissions SET state = 'delivered', finished = :finished, shown = :shown, score = :score, max_score = :max_score,"
                " feedback = :feedback, results = :results, hints = :hints, leased_until = NULL,"
                " attempt = 1 + (SELECT COUNT(*) FROM submissions d WHERE d.student = submissions.student"
                " AND d.assignment = submissions.assignment AND d.state = 'delivered'"
                " AND (d.noticed < submissions.noticed OR (d.noticed = submissions.noticed AND d.id < submissions.id)))"
                " WHERE id = :id AND state = 'grading' AND replica = :me",
                finished=finished if finished is not None else time.time(),
                shown=shown,
                score=score,
                max_score=max_score,
                feedback=feedback,
                results=json.dumps(results),
                hints=json.dumps(dict(hints), sort_keys=True) if hints else "",
                id=id,
                me=self.replica,
            ):
                return False
            (mine,) = self.fetch(db, "SELECT student, assignment, noticed FROM submissions WHERE id = :id", id=id)
            self.run(
                db,
                "UPDATE submissions SET attempt = attempt + 1 WHERE student = :student AND assignment = :assignment AND state = 'delivered'"
                " AND id != :id AND (noticed > :noticed OR (noticed = :noticed AND id > :id))",
                student=mine["student"],
                assignment=mine["assignment"],
                noticed=mine["noticed"],
                id=id,
            )
            return True

    def fail(self, id: int, cause: str) -> bool:
        """Grading (by this replica) -> failed, with the cause (for the TA; the student's page says it too)."""
        with self.transaction() as db:
            return bool(
                self.run(
                    db,
                    "UPDATE submissions SET state = 'failed', cause = :cause, finished = :now, recorded = 1, leased_until = NULL"
                    " WHERE id = :id AND state = 'grading' AND replica = :me",
                    cause=cause,
                    now=time.time(),
                    id=id,
                    me=self.replica,
                )
            )

    # -- reading -------------------------------------------------------------------------------
    def row(self, id: int) -> Row:
        (found,) = self.rows("SELECT * FROM submissions WHERE id = :id", id=id)
        return Row.of(found)

    def find(self, id: int) -> Mapping[str, Any] | None:
        """Submission ``id``, every column, or None."""
        return next(iter(self.rows("SELECT * FROM submissions WHERE id = :id", id=id)), None)

    def id_of(self, inbound: str) -> int | None:
        """The id of the submission noticed as ``inbound``, once it is queued."""
        found = self.rows("SELECT id FROM submissions WHERE inbound = :inbound", inbound=inbound)
        return int(found[0]["id"]) if found else None

    def ping(self) -> None:
        """Raises the database's own error when it cannot be read."""
        self.rows("SELECT 1 AS one FROM submissions LIMIT 1")

    def counts(self) -> dict[str, int]:
        counted = dict.fromkeys(STATES, 0)
        for row in self.rows("SELECT state, COUNT(*) AS n FROM submissions GROUP BY state"):
            counted[row["state"]] = int(row["n"])
        return counted

    def shown_times(self, student: str, assignment: str, since: float) -> list[float]:
        """When each graded page of the window was delivered, oldest first (for when the next one comes)."""
        return [
            float(row["finished"])
            for row in self.rows(
                "SELECT finished FROM submissions WHERE student = :student AND assignment = :assignment AND state = 'delivered'"
                " AND finished >= :since AND shown IN ('full', 'scores') ORDER BY finished",
                student=student,
                assignment=assignment,
                since=since,
            )
        ]

    def hints_seen(self, student: str, assignment: str) -> dict[str, int]:
        """The hint ladder so far (issue 53): for each mistake, the highest level of its hints a page
        of ``student``'s on ``assignment`` has shown them. Only pages they saw count: delivered with
        the diagnosis on it (``full``, or ``released`` after the due date); a page withheld (the
        attempt limit, ``scores``, until the due date) does not climb the ladder."""
        seen: dict[str, int] = {}
        for row in self.rows(
            "SELECT hints FROM submissions WHERE student = :student AND assignment = :assignment AND state = 'delivered'"
            " AND shown IN ('full', 'released') AND hints != ''",
            student=student,
            assignment=assignment,
        ):
            for mistake, level in json.loads(row["hints"]).items():
                seen[mistake] = max(seen.get(mistake, 0), int(level))
        return seen

    def positions(self) -> dict[int, int]:
        """Each queued submission's place (1: next), as ``claim`` would take them with one worker
        at a time: each student's in arrival order, students by turn."""
        order = self.rows(
            f"SELECT s.id, s.student, s.noticed FROM submissions s WHERE s.state = 'queued' ORDER BY {TURN.format(greatest=self.greatest)}, s.id"
        )
        by_student: dict[str, list[tuple[float, int]]] = {}
        for row in order:
            by_student.setdefault(row["student"], []).append((float(row["noticed"]), int(row["id"])))
        for waiting in by_student.values():
            waiting.sort()  # each student's by their own time, as ``claim`` takes them
        places: dict[int, int] = {}
        round_ = 0
        while len(places) < len(order):
            for waiting in by_student.values():
                if round_ < len(waiting):
                    places[waiting[round_][1]] = len(places) + 1
            round_ += 1
        return places

    def of_student(self, student: str) -> list[Mapping[str, Any]]:
        """A student's own submissions (refused folders left out: they were not theirs), newest first."""
        return self.rows("SELECT * FROM submissions WHERE student = :student AND state != 'refused' ORDER BY id DESC", student=student)

    def in_state(self, *states: str, limit: int = 1_000_000, newest_first: bool = False) -> list[Mapping[str, Any]]:
        """Submissions in ``states``, in arrival order (or newest first), at most ``limit``."""
        names = {f"s{index}": state for index, state in enumerate(states)}
        return self.rows(
            f"SELECT * FROM submissions WHERE state IN ({', '.join(':' + name for name in names)})"
            f" ORDER BY id {'DESC' if newest_first else ''} LIMIT :limit",
            limit=limit,
            **names,
        )

    def latest(self, limit: int) -> list[Mapping[str, Any]]:
        """The last ``limit`` submissions noticed, newest first."""
        return self.rows("SELECT * FROM submissions ORDER BY id DESC LIMIT :limit", limit=limit)

    def latencies_since(self, since: float) -> list[float]:
        """From noticed to delivered, for each delivery since ``since``."""
        return [
            float(row["latency"])
            for row in self.rows("SELECT finished - noticed AS latency FROM submissions WHERE state = 'delivered' AND finished >= :since", since=since)
        ]

    def grading_spans_since(self, since: float) -> list[tuple[float, float]]:
        """(claimed, finished) of each delivery since ``since``: when a worker had it, when its page was placed."""
        return [
            (float(row["started"]), float(row["finished"]))
            for row in self.rows(
                "SELECT started, finished FROM submissions WHERE state = 'delivered' AND finished >= :since AND started IS NOT NULL AND finished >= started",
                since=since,
            )
        ]

    def finished_since(self, since: float) -> dict[str, int]:
        """How many submissions ended in each state since ``since``."""
        return {
            row["state"]: int(row["n"])
            for row in self.rows("SELECT state, COUNT(*) AS n FROM submissions WHERE finished >= :since GROUP BY state", since=since)
        }

    def unrecorded(self) -> int:
        """Deliveries the gradebook does not have yet."""
        return int(self.rows("SELECT COUNT(*) AS n FROM submissions WHERE state = 'delivered' AND recorded = 0")[0]["n"])

    # -- pages withheld until the due date -------------------------------------------------------
    def withheld_after_due(self, assignment: str) -> list[Mapping[str, Any]]:
        """The delivered pages of ``assignment`` of every student with a page withheld until the due
        date (``shown = 'after-due'``), those and the ones that showed a score (they count in the
        attempt limit's windows); ``id, student, inbound, feedback, finished, shown``, by student,
        oldest first (``Delivery.release_after_due``, ``policies.released_at_due``)."""
        return self.rows(
            "SELECT id, student, inbound, feedback, finished, shown FROM submissions"
            " WHERE assignment = :assignment AND state = 'delivered' AND shown IN ('after-due', 'full', 'scores', 'released')"
            " AND student IN (SELECT student FROM submissions WHERE assignment = :assignment AND state = 'delivered' AND shown = 'after-due')"
            " ORDER BY student, finished, id",
            assignment=assignment,
        )

    def release_shown(self, id: int, shown: str) -> bool:
        """A page withheld until the due date, now ``shown`` (``released``: its full page; ``withheld``:
        the attempt limit's); False if it was not withheld any more (released once, by one replica)."""
        with self.transaction() as db:
            return bool(self.run(db, "UPDATE submissions SET shown = :shown WHERE id = :id AND shown = 'after-due'", id=id, shown=shown))

    def settled_copies(self) -> list[Mapping[str, Any]]:
        """Submissions whose copy nothing will read again unless it counts: delivered or failed,
        settled in the gradebook, no page held back for the due date; ``id, inbound, student,
        assignment, noticed, state, score`` (``retention.copies_to_remove`` keeps what counts)."""
        return self.rows(
            "SELECT id, inbound, student, assignment, noticed, state, score FROM submissions"
            " WHERE state IN ('delivered', 'failed') AND recorded = 1 AND shown != 'after-due' ORDER BY id"
        )

    # -- the recorder --------------------------------------------------------------------------
    def unrecorded_pairs(self, limit: int) -> list[Mapping[str, Any]]:
        """Up to ``limit`` (student, assignment) pairs with deliveries not yet in the gradebook,
        oldest first: ``student``, ``assignment``, ``newest`` (id), ``waiting`` (how many). The
        deliveries seen here are the ones the next ``mark_recorded`` of a pair may mark: a student's
        attempts are delivered in the order of their own time, not of their ids (an older one found
        after a restart has the higher id), so an attempt with a lower id delivered after this read
        must wait for the batch that chooses what counts with it in sight."""
        pairs = self.rows(
            "SELECT student, assignment, MAX(id) AS newest, COUNT(*) AS waiting FROM submissions WHERE state = 'delivered' AND recorded = 0"
            " GROUP BY student, assignment ORDER BY MIN(id) LIMIT :limit",
            limit=limit,
        )
        self.seen_unrecorded: dict[tuple[str, str], list[int]] = {}
        for row in self.rows("SELECT id, student, assignment FROM submissions WHERE state = 'delivered' AND recorded = 0"):
            self.seen_unrecorded.setdefault((row["student"], row["assignment"]), []).append(int(row["id"]))
        return pairs

    def counted(self, student: str, assignment: str, best: bool) -> Mapping[str, Any] | None:
        """The delivered, graded submission that counts for ``student`` on ``assignment``: the
        latest by the service's clock (nbgrader's rule: when each was complete, whatever order the
        folders were noticed in), or the best score (``best``); its ``id``, ``inbound``, ``noticed``
        and ``results``."""
        order = "score DESC, noticed DESC, id DESC" if best else "noticed DESC, id DESC"
        found = self.rows(
            "SELECT id, inbound, noticed, results FROM submissions WHERE student = :student AND assignment = :assignment AND state = 'delivered'"
            f" AND score IS NOT NULL ORDER BY {order} LIMIT 1",
            student=student,
            assignment=assignment,
        )
        return found[0] if found else None

    def mark_recorded(self, pairs: list[tuple[str, str, int]]) -> None:
        """Each (student, assignment)'s deliveries up to the given id are in the gradebook, in one
        transaction (the recorder's lock's, with replicas); of a pair the last ``unrecorded_pairs``
        saw, only the deliveries it saw (one delivered since was not in sight of the batch)."""
        seen = getattr(self, "seen_unrecorded", {})
        with self.recording_transaction() as db:
            for student, assignment, newest in pairs:
                ids = seen.get((student, assignment))
                within = f" AND id IN ({', '.join(str(int(id)) for id in ids)})" if ids else ""
                self.run(
                    db,
                    "UPDATE submissions SET recorded = 1 WHERE student = :student AND assignment = :assignment AND state = 'delivered'"
                    f" AND id <= :newest AND recorded = 0{within}",
                    student=student,
                    assignment=assignment,
                    newest=newest,
                )

