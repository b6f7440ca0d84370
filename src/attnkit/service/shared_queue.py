"""The service's queue in PostgreSQL, shared by ``attnkit serve`` replicas on several machines.

The same table, states and methods as ``queue.Queue`` (SQLite, one service), in the schema
``attnkit`` of the course's database (nbgrader's gradebook may live in the same database, in its
own tables), through SQLAlchemy with psycopg 3. What changes with more than one replica:

- **Leases.** ``claim`` moves a row to ``grading`` with the replica's name and ``leased_until``
  (the database's clock, so the replicas' clocks need not agree); a live replica renews its
  leases (``heartbeat``) every third of a lease. A replica killed (``kill -9``, a node lost)
  renews nothing: once its leases expire, the next ``claim`` of any replica puts those rows back
  in the queue in their old place, and they are graded again.
- **No row taken twice.** Candidates are read ``FOR UPDATE SKIP LOCKED`` (a row another replica
  is claiming is skipped, never waited for) and moved with ``WHERE state = 'queued'``.
- **One in flight per student across replicas.** Before taking a student's row a replica takes
  the student's transaction-level advisory lock (``pg_try_advisory_xact_lock``; held, it skips
  the student) and then looks again, in a fresh snapshot, for a row of that student in
  ``grading``: two replicas can never both start one student's work.
- **Delivered once.** ``deliver`` and ``fail`` move only a row that is ``grading`` *by this
  replica*: a replica whose lease expired (stalled, not dead) delivers nothing.
- **Recorded once.** ``recording`` is one transaction holding a database-wide advisory lock:
  one recorder at a time writes the gradebook, and marks its batch recorded in that same
  transaction (``recorded = 0`` checked); a recorder killed half-way releases the lock with its
  connection and its batch is recorded again by whoever takes it next (nbgrader's
  ``update_or_create``: the same single record).
- **Intake once.** ``notice`` inserts the row ``ON CONFLICT DO NOTHING`` and makes the copy
  inside the same transaction: the replica that wins the folder copies it, and nobody can claim
  the row before its copy exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pathlib import Path

from attnkit.service.queue import DELIVERED, FAILED, GRADING, QUEUED, REFUSED, STATES, Queue, Row, is_url

SCHEMA_NAME = "attnkit"
# The advisory locks' first key: ours, apart from any other application's in the database.
LOCK_CLASS = 0x41_4B_34  # "AK4"
SCHEMA_LOCK, RECORDER_LOCK = 1, 2
# Candidate rows read (and locked: other replicas skip them) per free worker: a claim takes one
# row per student, so a student queued twice is skipped within them.
SCAN_PER_WORKER = 4

SCHEMA = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA_NAME}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA_NAME}.submissions (
    id BIGSERIAL PRIMARY KEY,
    inbound TEXT NOT NULL UNIQUE,
    student TEXT NOT NULL,
    assignment TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    noticed DOUBLE PRECISION NOT NULL,
    state TEXT NOT NULL CHECK (state IN ({", ".join(repr(s) for s in STATES)})),
    cause TEXT NOT NULL DEFAULT '',
    tries INTEGER NOT NULL DEFAULT 0,
    started DOUBLE PRECISION,
    finished DOUBLE PRECISION,
    attempt INTEGER,
    shown TEXT NOT NULL DEFAULT '',
    score DOUBLE PRECISION,
    max_score DOUBLE PRECISION,
    feedback TEXT NOT NULL DEFAULT '',
    results TEXT,
    recorded INTEGER NOT NULL DEFAULT 0,
    replica TEXT NOT NULL DEFAULT '',          -- who holds it in grading
    leased_until DOUBLE PRECISION              -- until when (the database's clock, epoch seconds)
)""",
    f"CREATE INDEX IF NOT EXISTS by_state ON {SCHEMA_NAME}.submissions (state, id)",
    f"CREATE INDEX IF NOT EXISTS by_student ON {SCHEMA_NAME}.submissions (student, assignment, state)",
]
NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"


def engine_url(url: str) -> str:
    """``postgresql://…`` with the driver the kit pins (psycopg 3); SQLAlchemy's default is psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class SharedQueue:
    """``queue.Queue``'s methods on a PostgreSQL table shared by replicas (see the module's text)."""

    def __init__(self, url: str, replica: str, lease_seconds: float = 30.0, make_schema: bool = True) -> None:
        from sqlalchemy import create_engine

        if not replica:
            raise ValueError("a shared queue needs a replica name")
        self.url = url
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.renewed = 0.0  # when this replica's leases were last renewed (heartbeat)
        self.expired = 0.0  # when it last gave expired leases back to the queue (claim)
        self.engine = create_engine(engine_url(url), pool_size=2, max_overflow=2, pool_pre_ping=True, connect_args={"options": f"-c search_path={SCHEMA_NAME}"})
        self.recording_db: Any = None
        if not make_schema:  # a reader of a queue its loop has made (the hub's pages, per request)
            return
        with self.transaction() as db:
            # Replicas starting together: CREATE … IF NOT EXISTS is not safe against a concurrent
            # twin in PostgreSQL, so the schema is made under a lock.
            db.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {SCHEMA_LOCK})")
            for statement in SCHEMA:
                db.exec_driver_sql(statement)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """One transaction (READ COMMITTED: each statement sees what others committed before it)."""
        with self.engine.begin() as connection:
            yield connection

    def _run(self, db: Any, sql: str, **params: Any) -> Any:
        from sqlalchemy import text

        return db.execute(text(sql), params)

    def rows(self, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        with self.engine.connect() as db:
            return [dict(row) for row in self._run(db, sql, **params).mappings()]

    def execute(self, sql: str, **params: Any) -> int:
        with self.transaction() as db:
            return int(self._run(db, sql, **params).rowcount)

    def known(self) -> set[str]:
        return {row["inbound"] for row in self.rows("SELECT inbound FROM submissions")}

    def notice(
        self, inbound: str, student: str, assignment: str, timestamp: str, noticed: float | None = None, stage: Callable[[], object] | None = None
    ) -> int | None:
        """Queued, once per folder among all replicas; ``stage`` (the copy) is made by the
        replica whose insert won, before its row can be seen (an exception undoes the row)."""
        with self.transaction() as db:
            found = self._run(
                db,
                "INSERT INTO submissions (inbound, student, assignment, timestamp, noticed, state)"
                " VALUES (:inbound, :student, :assignment, :timestamp, :noticed, :state) ON CONFLICT (inbound) DO NOTHING RETURNING id",
                inbound=inbound,
                student=student,
                assignment=assignment,
                timestamp=timestamp,
                noticed=noticed if noticed is not None else time.time(),
                state=QUEUED,
            ).scalar()
            if found is not None and stage is not None:
                stage()
            return None if found is None else int(found)

    def refuse(self, inbound: str, student: str, assignment: str, timestamp: str, cause: str, noticed: float | None = None) -> int | None:
        now = noticed if noticed is not None else time.time()
        with self.transaction() as db:
            found = self._run(
                db,
                "INSERT INTO submissions (inbound, student, assignment, timestamp, noticed, state, cause, finished, recorded)"
                " VALUES (:inbound, :student, :assignment, :timestamp, :noticed, :state, :cause, :noticed, 1) ON CONFLICT (inbound) DO NOTHING RETURNING id",
                inbound=inbound,
                student=student,
                assignment=assignment,
                timestamp=timestamp,
                noticed=now,
                state=REFUSED,
                cause=cause,
            ).scalar()
            return None if found is None else int(found)

    def recover(self) -> int:
        """This replica's own rows in grading go back to the queue (a restart under the same name,
        as a Kubernetes pod's container keeps its pod's; a clean stop). Others' wait for their lease."""
        return self.execute(
            "UPDATE submissions SET state = :queued, replica = '', leased_until = NULL WHERE state = :grading AND replica = :me",
            queued=QUEUED,
            grading=GRADING,
            me=self.replica,
        )

    def expire(self, db: Any) -> list[int]:
        """Rows whose lease ran out (their replica is gone) back in the queue, in their old place."""
        return [
            int(row[0])
            for row in self._run(
                db,
                f"UPDATE submissions SET state = :queued, replica = '', leased_until = NULL WHERE id IN"
                f" (SELECT id FROM submissions WHERE state = :grading AND leased_until < {NOW} FOR UPDATE SKIP LOCKED) RETURNING id",
                queued=QUEUED,
                grading=GRADING,
            )
        ]

    def claim(self, count: int) -> list[Row]:
        """Up to ``count`` queued rows moved to grading under this replica's lease: the oldest
        first, at most one per student, none of a student with a row in flight anywhere. Three
        statements, whatever ``count``: the claim is on every submission's way."""
        if count <= 0:
            return []
        with self.transaction() as db:
            if time.monotonic() - self.expired >= self.lease_seconds / 3:
                self.expired = time.monotonic()
                self.expire(db)
            # Candidates, locked (another replica's are skipped, never waited for), each with
            # its student's advisory lock tried: held by another replica claiming for that
            # student now, it is skipped too.
            candidates = self._run(
                db,
                f"SELECT s.id, s.student, pg_try_advisory_xact_lock({LOCK_CLASS}, hashtext(s.student)) AS free FROM submissions s"
                " WHERE s.state = :queued AND NOT EXISTS (SELECT 1 FROM submissions g WHERE g.student = s.student AND g.state = :grading)"
                " ORDER BY s.id LIMIT :scan FOR UPDATE OF s SKIP LOCKED",
                queued=QUEUED,
                grading=GRADING,
                scan=max(8, count * SCAN_PER_WORKER),
            ).all()
            students: set[str] = set()
            chosen: list[int] = []
            for id, student, free in candidates:
                if student in students or not free:
                    students.add(student)
                    continue
                students.add(student)
                chosen.append(int(id))
                if len(chosen) == count:
                    break
            if not chosen:
                return []
            # Under the students' locks, in a fresh snapshot (a new statement): a row another
            # replica moved to grading and committed before we took a lock counts here.
            moved = self._run(
                db,
                f"UPDATE submissions s SET state = :grading, tries = s.tries + 1, started = :now, replica = :me, leased_until = {NOW} + :lease"
                " WHERE s.id = ANY(:ids) AND s.state = :queued"
                " AND NOT EXISTS (SELECT 1 FROM submissions g WHERE g.student = s.student AND g.state = :grading) RETURNING s.*",
                grading=GRADING,
                now=time.time(),
                me=self.replica,
                lease=self.lease_seconds,
                ids=chosen,
                queued=QUEUED,
            ).mappings()
            rows = sorted((Row(**{field: found[field] for field in Row.__dataclass_fields__}) for found in moved), key=lambda row: row.id)
        return rows

    def heartbeat(self) -> int:
        """Renew this replica's leases, every third of a lease at most; rows renewed."""
        if time.monotonic() - self.renewed < self.lease_seconds / 3:
            return 0
        self.renewed = time.monotonic()
        return self.execute(
            f"UPDATE submissions SET leased_until = {NOW} + :lease WHERE state = :grading AND replica = :me",
            lease=self.lease_seconds,
            grading=GRADING,
            me=self.replica,
        )

    def attempts(self, student: str, assignment: str, since: float = 0.0) -> int:
        return int(
            self.rows(
                "SELECT COUNT(*) AS n FROM submissions WHERE student = :student AND assignment = :assignment AND state = :delivered"
                " AND finished >= :since AND shown IN ('full', 'scores')",
                student=student,
                assignment=assignment,
                delivered=DELIVERED,
                since=since,
            )[0]["n"]
        )

    def shown_times(self, student: str, assignment: str, since: float) -> list[float]:
        return [
            float(row["finished"])
            for row in self.rows(
                "SELECT finished FROM submissions WHERE student = :student AND assignment = :assignment AND state = :delivered AND finished >= :since"
                " AND shown IN ('full', 'scores') ORDER BY finished",
                student=student,
                assignment=assignment,
                delivered=DELIVERED,
                since=since,
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
        """Grading (by this replica) -> delivered, in one statement; False, and nothing changes,
        otherwise. The attempt's number counts the student's deliveries before it (no other of
        theirs can be delivered meanwhile: one in flight per student)."""
        with self.transaction() as db:
            moved = self._run(
                db,
                "UPDATE submissions s SET state = :delivered, finished = :finished, shown = :shown, score = :score, max_score = :max_score,"
                " feedback = :feedback, results = :results, leased_until = NULL,"
                " attempt = 1 + (SELECT COUNT(*) FROM submissions d WHERE d.student = s.student AND d.assignment = s.assignment AND d.state = :delivered)"
                " WHERE s.id = :id AND s.state = :grading AND s.replica = :me",
                delivered=DELIVERED,
                finished=finished if finished is not None else time.time(),
                shown=shown,
                score=score,
                max_score=max_score,
                feedback=feedback,
                results=json.dumps(results),
                id=id,
                grading=GRADING,
                me=self.replica,
            ).rowcount
            return bool(moved)

    def fail(self, id: int, cause: str) -> None:
        self.execute(
            "UPDATE submissions SET state = :failed, cause = :cause, finished = :now, recorded = 1, leased_until = NULL"
            " WHERE id = :id AND state = :grading AND replica = :me",
            failed=FAILED,
            cause=cause,
            now=time.time(),
            id=id,
            grading=GRADING,
            me=self.replica,
        )

    def row(self, id: int) -> Row:
        (found,) = self.rows("SELECT * FROM submissions WHERE id = :id", id=id)
        return Row(**{field: found[field] for field in Row.__dataclass_fields__})

    def counts(self) -> dict[str, int]:
        counted = dict.fromkeys(STATES, 0)
        for row in self.rows("SELECT state, COUNT(*) AS n FROM submissions GROUP BY state"):
            counted[row["state"]] = int(row["n"])
        return counted

    @contextmanager
    def recording(self) -> Iterator[bool]:
        """One recorder at a time among the replicas: True while this one holds the gradebook's
        lock (a transaction; ``mark_recorded`` commits in it), False when another does."""
        with self.transaction() as db:
            held = bool(self._run(db, f"SELECT pg_try_advisory_xact_lock({LOCK_CLASS}, {RECORDER_LOCK})").scalar())
            self.recording_db = db if held else None
            try:
                yield held
            finally:
                self.recording_db = None

    def mark_recorded(self, pairs: list[tuple[str, str, int]]) -> None:
        """In the recorder's locked transaction (``recording``): these deliveries are in the gradebook."""
        if self.recording_db is None:
            raise RuntimeError("mark_recorded outside recording()")
        for student, assignment, newest in pairs:
            self._run(
                self.recording_db,
                "UPDATE submissions SET recorded = 1 WHERE student = :student AND assignment = :assignment AND state = :delivered"
                " AND id <= :newest AND recorded = 0",
                student=student,
                assignment=assignment,
                delivered=DELIVERED,
                newest=newest,
            )

    def close(self) -> None:
        self.engine.dispose()


def open_queue(where: str | Path, replica: str = "", lease_seconds: float = 30.0, make_schema: bool = True) -> Queue | SharedQueue:
    """The service's queue: the SQLite file at a path (the default, one service), or the shared
    table at a PostgreSQL URL (replicas named ``replica``; ``make_schema``: its tables made if
    missing, under a lock, which a reader of a running service's queue skips)."""
    if is_url(str(where)):
        return SharedQueue(str(where), replica, lease_seconds, make_schema)
    return Queue(Path(where))
