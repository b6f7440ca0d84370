"""The service's database: every submission noticed, its state, and the order of the work.

SQLite in WAL mode in the course folder (``.attnkit-serve/service.db``). A submission is written
here before anything grades it; its state then moves ``queued -> grading -> delivered`` (or
``failed`` with the cause); a folder that is not its claimed student's is ``refused`` and never
graded. Every transition is one transaction, so a ``kill -9`` leaves each row in one state; at
start, ``recover`` puts what was ``grading`` back in the queue (nothing is lost, and a row is
delivered once: ``deliver`` only moves a row that is ``grading``).

Fairness lives in ``claim``: the oldest queued submission of a student who has nothing in
flight, so one student's burst of resubmissions waits behind the other students' work.

This is the default, for one service on one machine. Replicas on several machines share the
same table in PostgreSQL instead (``shared_queue.SharedQueue``: the same methods, with leases);
``shared_queue.open_queue`` picks by the URL.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QUEUED, GRADING, DELIVERED, FAILED, REFUSED = "queued", "grading", "delivered", "failed", "refused"
STATES = (QUEUED, GRADING, DELIVERED, FAILED, REFUSED)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    inbound TEXT NOT NULL UNIQUE,          -- the folder's name in the exchange's inbound/
    student TEXT NOT NULL,                 -- the name the folder claims (proved by its uid, or refused)
    assignment TEXT NOT NULL,
    timestamp TEXT NOT NULL,               -- nbgrader's timestamp.txt
    noticed REAL NOT NULL,                 -- when the service saw the folder complete (time.time())
    state TEXT NOT NULL CHECK (state IN ({", ".join(repr(s) for s in STATES)})),
    cause TEXT NOT NULL DEFAULT '',        -- why failed or refused
    tries INTEGER NOT NULL DEFAULT 0,      -- grading starts (a restart after a crash adds one)
    started REAL,
    finished REAL,
    attempt INTEGER,                       -- the student's n-th delivered submission of the assignment
    shown TEXT NOT NULL DEFAULT '',        -- what the page showed: full, scores, withheld, after-due
    score REAL,
    max_score REAL,
    feedback TEXT NOT NULL DEFAULT '',     -- the page's file name in the exchange's feedback/
    results TEXT,                          -- results.json of the graded submission
    recorded INTEGER NOT NULL DEFAULT 0    -- 1: the gradebook has it (or it does not count there)
);
CREATE INDEX IF NOT EXISTS by_state ON submissions (state, id);
CREATE INDEX IF NOT EXISTS by_student ON submissions (student, assignment, state);
"""


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


def connect(path: Path) -> sqlite3.Connection:
    """The database at ``path`` (made if new), in WAL mode: readers (``--status``, the recorder)
    never wait for the writer, and a commit survives a kill of the process at once (``synchronous
    = NORMAL`` keeps it through a process crash; only a power cut can lose the last commits)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    connection.row_factory = sqlite3.Row
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA busy_timeout=30000")
    connection.executescript(SCHEMA)
    return connection


class Queue:
    """The submissions table and its transitions (one writer: the service's main loop)."""

    replica = ""  # one service per course: no leases, no replica names
    url: str

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = str(path)
        self.db = connect(path)

    def rows(self, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        """A read-only query with ``:name`` parameters (the SQL both databases speak)."""
        return list(self.db.execute(sql, params).fetchall())

    def execute(self, sql: str, **params: Any) -> int:
        """One write statement with ``:name`` parameters in a transaction of its own; rows changed."""
        with self.transaction() as db:
            return db.execute(sql, params).rowcount

    def heartbeat(self) -> int:
        """Leases are the shared queue's; here nothing expires."""
        return 0

    @contextmanager
    def recording(self) -> Iterator[bool]:
        """The gradebook's writer for one batch: here the one recorder of the one service."""
        yield True

    def mark_recorded(self, pairs: list[tuple[str, str, int]]) -> None:
        """Each (student, assignment)'s deliveries up to the given id are in the gradebook, in one transaction."""
        with self.transaction() as db:
            for student, assignment, newest in pairs:
                db.execute(
                    "UPDATE submissions SET recorded = 1 WHERE student = ? AND assignment = ? AND state = ? AND id <= ?",
                    (student, assignment, DELIVERED, newest),
                )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE): committed whole or not at all."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def known(self) -> set[str]:
        """The inbound folder names already recorded (whatever their state)."""
        return {row[0] for row in self.db.execute("SELECT inbound FROM submissions")}

    def notice(
        self, inbound: str, student: str, assignment: str, timestamp: str, noticed: float | None = None, stage: Callable[[], object] | None = None
    ) -> int | None:
        """Record a new submission as queued; its id, or None if this folder was recorded before.
        ``stage``: the copy graded, made first (a row in the queue always has its copy)."""
        if stage is not None:
            stage()
        with self.transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO submissions (inbound, student, assignment, timestamp, noticed, state) VALUES (?, ?, ?, ?, ?, ?)",
                (inbound, student, assignment, timestamp, noticed if noticed is not None else time.time(), QUEUED),
            )
            return cursor.lastrowid if cursor.rowcount else None

    def refuse(self, inbound: str, student: str, assignment: str, timestamp: str, cause: str, noticed: float | None = None) -> int | None:
        """Record a folder that is never graded (not its claimed student's), with why."""
        now = noticed if noticed is not None else time.time()
        with self.transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO submissions (inbound, student, assignment, timestamp, noticed, state, cause, finished, recorded)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (inbound, student, assignment, timestamp, now, REFUSED, cause, now),
            )
            return cursor.lastrowid if cursor.rowcount else None

    def recover(self) -> int:
        """At start: what was in flight when the last run ended goes back to the queue (in its
        old place: the order is by id). How many."""
        with self.transaction() as db:
            return db.execute("UPDATE submissions SET state = ? WHERE state = ?", (QUEUED, GRADING)).rowcount

    def claim(self, count: int) -> list[Row]:
        """Up to ``count`` queued submissions moved to grading: the oldest first, at most one per
        student, none of a student who has one in flight."""
        if count <= 0:
            return []
        with self.transaction() as db:
            busy = {row[0] for row in db.execute("SELECT student FROM submissions WHERE state = ?", (GRADING,))}
            chosen: list[sqlite3.Row] = []
            for row in db.execute("SELECT * FROM submissions WHERE state = ? ORDER BY id", (QUEUED,)):
                if row["student"] in busy:
                    continue
                busy.add(row["student"])
                chosen.append(row)
                if len(chosen) == count:
                    break
            now = time.time()
            for row in chosen:
                db.execute("UPDATE submissions SET state = ?, tries = tries + 1, started = ? WHERE id = ?", (GRADING, now, row["id"]))
        return [self.row(row["id"]) for row in chosen]

    def attempts(self, student: str, assignment: str, since: float = 0.0) -> int:
        """The student's delivered submissions of ``assignment`` finished after ``since`` whose
        page was a graded one (full or scores): what the attempt limit counts."""
        return int(
            self.db.execute(
                "SELECT COUNT(*) FROM submissions WHERE student = ? AND assignment = ? AND state = ? AND finished >= ? AND shown IN ('full', 'scores')",
                (student, assignment, DELIVERED, since),
            ).fetchone()[0]
        )

    def shown_times(self, student: str, assignment: str, since: float) -> list[float]:
        """When each graded page of the window was delivered, oldest first (for when the next one comes)."""
        return [
            row[0]
            for row in self.db.execute(
                "SELECT finished FROM submissions WHERE student = ? AND assignment = ? AND state = ? AND finished >= ?"
                " AND shown IN ('full', 'scores') ORDER BY finished",
                (student, assignment, DELIVERED, since),
            )
        ]

    def withheld_after_due(self, assignment: str) -> list[Mapping[str, Any]]:
        """The delivered pages of ``assignment`` of every student with a page withheld until the due
        date (``shown = 'after-due'``), those and the ones that showed a score (they count in the
        attempt limit's windows); ``id, student, inbound, feedback, finished, shown``, by student,
        oldest first (``Service.release_after_due``, ``policies.released_at_due``)."""
        return self.rows(
            "SELECT id, student, inbound, feedback, finished, shown FROM submissions"
            " WHERE assignment = :assignment AND state = :delivered AND shown IN ('after-due', 'full', 'scores', 'released')"
            " AND student IN (SELECT student FROM submissions WHERE assignment = :assignment AND state = :delivered AND shown = 'after-due')"
            " ORDER BY student, finished, id",
            assignment=assignment,
            delivered=DELIVERED,
        )

    def release_shown(self, id: int, shown: str) -> bool:
        """A page withheld until the due date, now ``shown`` (``released``: its full page; ``withheld``:
        the attempt limit's); False if it was not withheld any more (released once, by one replica)."""
        return bool(self.execute("UPDATE submissions SET shown = :shown WHERE id = :id AND shown = 'after-due'", id=id, shown=shown))

    def deliver(self, id: int, results: dict[str, Any], feedback: str, shown: str, score: float, max_score: float, finished: float | None = None) -> bool:
        """Grading -> delivered, with what was delivered; False if the row was not grading (then
        nothing changes: a row is delivered once)."""
        with self.transaction() as db:
            row = db.execute("SELECT student, assignment FROM submissions WHERE id = ? AND state = ?", (id, GRADING)).fetchone()
            if row is None:
                return False
            attempt = (
                1
                + db.execute(
                    "SELECT COUNT(*) FROM submissions WHERE student = ? AND assignment = ? AND state = ?", (row["student"], row["assignment"], DELIVERED)
                ).fetchone()[0]
            )
            db.execute(
                "UPDATE submissions SET state = ?, finished = ?, attempt = ?, shown = ?, score = ?, max_score = ?, feedback = ?, results = ? WHERE id = ?",
                (DELIVERED, finished if finished is not None else time.time(), attempt, shown, score, max_score, feedback, json.dumps(results), id),
            )
            return True

    def fail(self, id: int, cause: str) -> None:
        """Grading -> failed, with the cause (for the TA; the student's page says it too)."""
        with self.transaction() as db:
            db.execute(
                "UPDATE submissions SET state = ?, cause = ?, finished = ?, recorded = 1 WHERE id = ? AND state = ?", (FAILED, cause, time.time(), id, GRADING)
            )

    def row(self, id: int) -> Row:
        found = self.db.execute("SELECT * FROM submissions WHERE id = ?", (id,)).fetchone()
        return Row(**{field: found[field] for field in Row.__dataclass_fields__})

    def counts(self) -> dict[str, int]:
        counted = dict.fromkeys(STATES, 0)
        for state, count in self.db.execute("SELECT state, COUNT(*) FROM submissions GROUP BY state"):
            counted[state] = count
        return counted

    def close(self) -> None:
        self.db.close()


# Where ``attnkit serve --hub``'s HTTP process finds the loop's queue (its SQLite file, or the
# replicas' PostgreSQL URL): set by the loop in that process's environment, never on its command
# line, where a password would show.
QUEUE_AT_VARIABLE = "ATTNKIT_HUB_QUEUE"


def is_url(where: str) -> bool:
    """A database URL (``postgresql://…``) rather than the path of the SQLite file."""
    return "://" in where
