"""The queue in PostgreSQL, shared by ``attnkit serve`` replicas on several machines.

The same table, states and queries as every queue (``base.Queue``), in the schema
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

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from attnkit.service.queue.base import ADDED_COLUMNS, CANDIDATES, COLUMNS, INDEXES, TURN, Queue, Row

SCHEMA_NAME = "attnkit"
# The advisory locks' first key: ours, apart from any other application's in the database.
LOCK_CLASS = 0x41_4B_34  # "AK4"
SCHEMA_LOCK, RECORDER_LOCK = 1, 2
# Candidate rows read (and locked: other replicas skip them) per free worker: each student's
# oldest waiting row only, so this bounds the students looked at.
SCAN_PER_WORKER = 4
SPELLED = {"id": "BIGSERIAL PRIMARY KEY", "real": "DOUBLE PRECISION"}
SCHEMA = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA_NAME}",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA_NAME}.submissions ({COLUMNS.format(**SPELLED)})",
    *(f"ALTER TABLE {SCHEMA_NAME}.submissions ADD COLUMN IF NOT EXISTS {name} {kind.format(**SPELLED)}" for name, kind in ADDED_COLUMNS.items()),
    *(index.format(table=f"{SCHEMA_NAME}.submissions") for index in INDEXES),
]
NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"


def engine_url(url: str) -> str:
    """``postgresql://…`` with the driver the kit pins (psycopg 3); SQLAlchemy's default is psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


NETWORK_SECONDS = 5  # how long a replica waits on an unanswering network before its connection counts as lost


def server_network_options() -> str:
    """The server's side of NETWORK_SECONDS (libpq's ``options``): its TCP keepalives and user
    timeout drop the session of a client it no longer hears from, with its locks."""
    seconds = NETWORK_SECONDS
    return f"-c tcp_keepalives_idle={seconds} -c tcp_keepalives_interval=1 -c tcp_keepalives_count={seconds} -c tcp_user_timeout={seconds * 1000}"


def connect_args() -> dict[str, Any]:
    """libpq's settings for the queue's connections: a replica cut off from the database gets its
    error within NETWORK_SECONDS rather than when the kernel gives up on TCP (minutes: a hung
    loop, /health unanswered), and the server drops a cut-off replica's session as soon (TCP
    keepalives and user timeout on its side too), so that the recording lock it held
    (``recording``, a transaction's advisory lock) is free again for the other replicas."""
    seconds = NETWORK_SECONDS
    return {
        "options": f"-c search_path={SCHEMA_NAME} {server_network_options()}",
        "connect_timeout": seconds,
        "keepalives": 1,
        "keepalives_idle": seconds,
        "keepalives_interval": 1,
        "keepalives_count": seconds,
        "tcp_user_timeout": seconds * 1000,
    }


def gradebook_url(url: str, lock_timeout: float) -> str:
    """The URL the recorder gives nbgrader for a PostgreSQL gradebook (``CourseDirectory.db_url``):
    ``engine_url`` with libpq's settings in its query, so that they reach every connection
    nbgrader opens, its ``generate_assignment`` subprocess's included. ``lock_timeout``
    (seconds, ``c.AttnkitServe.gradebook_timeout``): a row or table another session holds (a
    TA's nbgrader command, formgrader) is waited for that long, then the statement fails
    (``LockNotAvailable``) and the recorder retries with backoff, as it does for SQLite's
    ``database is locked``; without it PostgreSQL waits without end, the recorder silent and its
    recording lock held the while. The network settings are the queue's (``connect_args``)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(engine_url(url))
    query = dict(parsed.query)
    given = query.get("options", "")
    own = f"-c lock_timeout={max(1, round(lock_timeout * 1000))} {server_network_options()}"
    query["options"] = f"{given if isinstance(given, str) else ' '.join(given)} {own}".strip()
    for name, value in connect_args().items():
        if name != "options":  # (the queue's search_path is not nbgrader's)
            query.setdefault(name, str(value))
    return parsed.set(query=query).render_as_string(hide_password=False)


READ_LOCK_SECONDS = 0.2  # how long the service's loop waits for a lock on a PostgreSQL gradebook it reads
GRADEBOOK_ENGINES: dict[str, Any] = {}  # the loop's engine per gradebook URL (one for the service's life; a forked worker forgets them)
DUE_ROWS_READ: dict[str, list[tuple[Any, Any]]] = {}  # per gradebook URL, the due dates read last


def gradebook_due_rows(url: str) -> list[tuple[Any, Any]]:
    """nbgrader's assignments and due dates (``name, duedate``) in a PostgreSQL gradebook, read
    by the service's loop every few seconds. The loop also serves every page and ``/health``, so
    it never waits on another session's lock (a TA's ``nbgrader db upgrade``, anything holding
    the table whole): after READ_LOCK_SECONDS, or with the database out of reach, the rows read
    last are used (a late submission stays late). No tables yet (nbgrader makes them at the
    first record): none."""
    from sqlalchemy import create_engine, exc, text

    engine = GRADEBOOK_ENGINES.get(url)
    if engine is None:
        engine = GRADEBOOK_ENGINES[url] = create_engine(gradebook_url(url, READ_LOCK_SECONDS), pool_size=1, pool_pre_ping=True)
    try:
        with engine.connect() as connection:
            rows = [(row[0], row[1]) for row in connection.execute(text("SELECT name, duedate FROM assignment"))]
    except exc.OperationalError:
        return DUE_ROWS_READ.get(url, [])  # locked, or out of reach: what was read last
    except exc.SQLAlchemyError:
        return []  # no gradebook there yet
    DUE_ROWS_READ[url] = rows
    return rows


class PostgresQueue(Queue):
    """The table shared by replicas (see the module's text)."""

    greatest = "GREATEST"

    def __init__(self, url: str, replica: str, lease_seconds: float = 30.0, make_schema: bool = True) -> None:
        from sqlalchemy import create_engine

        if not replica:
            raise ValueError("a shared queue needs a replica name")
        self.url = url
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.renewed = 0.0  # when this replica's leases were last renewed (heartbeat)
        self.expired = 0.0  # when it last gave expired leases back to the queue (claim)
        self.engine = create_engine(engine_url(url), pool_size=2, max_overflow=2, pool_pre_ping=True, connect_args=connect_args())
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

    def run(self, db: Any, sql: str, **params: Any) -> int:
        from sqlalchemy import text

        return int(db.execute(text(sql), params).rowcount)

    def fetch(self, db: Any, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        from sqlalchemy import text

        return [dict(row) for row in db.execute(text(sql), params).mappings()]

    def rows(self, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        with self.engine.connect() as db:
            return self.fetch(db, sql, **params)

    def insert(self, db: Any, sql: str, **params: Any) -> int | None:
        found = self.fetch(db, sql + " RETURNING id", **params)
        return int(found[0]["id"]) if found else None

    def recover(self) -> int:
        """This replica's own rows in grading go back to the queue (a restart under the same name,
        as a Kubernetes pod's container keeps its pod's; a clean stop). Others' wait for their lease."""
        with self.transaction() as db:
            self.give_up(db, "replica = :me", me=self.replica)
            return self.run(
                db,
                "UPDATE submissions SET state = 'queued', replica = '', leased_until = NULL WHERE state = 'grading' AND replica = :me",
                me=self.replica,
            )

    def expire(self, db: Any) -> int:
        """Rows whose lease ran out (their replica is gone) back in the queue, in their old place
        (or failed, after ``MAX_TRIES``: a row that kills replicas is not handed to the next)."""
        lapsed = f"leased_until < {NOW}"
        self.give_up(db, lapsed)
        return self.run(
            db,
            "UPDATE submissions SET state = 'queued', replica = '', leased_until = NULL WHERE id IN"
            f" (SELECT id FROM submissions WHERE state = 'grading' AND {lapsed} FOR UPDATE SKIP LOCKED)",
        )

    def claim(self, count: int) -> list[Row]:
        """Under this replica's lease. Candidates are locked (another replica's are skipped, never
        waited for), each with its student's advisory lock tried: held by another replica claiming
        for that student now, it is skipped too; then moved, in a fresh snapshot, only where no
        row of the student is in grading anywhere. Three statements, whatever ``count``."""
        if count <= 0:
            return []
        with self.transaction() as db:
            if time.monotonic() - self.expired >= self.lease_seconds / 3:
                self.expired = time.monotonic()
                self.expire(db)
            candidates = self.fetch(
                db,
                CANDIDATES.format(extra=f", pg_try_advisory_xact_lock({LOCK_CLASS}, hashtext(s.student)) AS free", turn=TURN.format(greatest=self.greatest))
                + " FOR UPDATE OF s SKIP LOCKED",
                scan=max(8, count * SCAN_PER_WORKER),
            )
            chosen = [int(row["id"]) for row in candidates if row["free"]][:count]
            if not chosen:
                return []
            moved = self.fetch(
                db,
                f"UPDATE submissions s SET state = 'grading', tries = s.tries + 1, started = :now, replica = :me, leased_until = {NOW} + :lease"
                " WHERE s.id = ANY(:ids) AND s.state = 'queued'"
                " AND NOT EXISTS (SELECT 1 FROM submissions g WHERE g.student = s.student AND g.state = 'grading') RETURNING s.*",
                now=time.time(),
                me=self.replica,
                lease=self.lease_seconds,
                ids=chosen,
            )
        by_id = {int(found["id"]): Row.of(found) for found in moved}
        return [by_id[id] for id in chosen if id in by_id]

    def heartbeat(self) -> int:
        """Renew this replica's leases, every third of a lease at most; rows renewed."""
        if time.monotonic() - self.renewed < self.lease_seconds / 3:
            return 0
        self.renewed = time.monotonic()
        with self.transaction() as db:
            return self.run(
                db,
                f"UPDATE submissions SET leased_until = {NOW} + :lease WHERE state = 'grading' AND replica = :me",
                lease=self.lease_seconds,
                me=self.replica,
            )

    @contextmanager
    def recording(self) -> Iterator[bool]:
        """One recorder at a time among the replicas: True while this one holds the gradebook's
        lock (a transaction; ``mark_recorded`` commits in it), False when another does."""
        with self.transaction() as db:
            held = bool(self.fetch(db, f"SELECT pg_try_advisory_xact_lock({LOCK_CLASS}, {RECORDER_LOCK}) AS held")[0]["held"])
            self.recording_db = db if held else None
            try:
                yield held
            finally:
                self.recording_db = None

    def recording_transaction(self) -> nullcontext[Any]:
        if self.recording_db is None:
            raise RuntimeError("mark_recorded outside recording()")
        return nullcontext(self.recording_db)

    def close(self) -> None:
        self.engine.dispose()
