"""The queue in SQLite: the default, for one service on one machine.

WAL mode in the course folder (``.attnkit-serve/service.db``): readers (``--status``, the hub's
pages, the recorder) never wait for the writer, and a commit survives a kill of the process at
once (``synchronous = NORMAL`` keeps it through a process crash; only a power cut can lose the
last commits). One writer, the service's loop: no leases, no replica names, and the recorder is
the one recorder of the one service.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from attnkit.service.queue.base import ADDED_COLUMNS, CANDIDATES, COLUMNS, INDEXES, TURN, Queue, Row


def connect(path: Path) -> sqlite3.Connection:
    """The database at ``path`` (made if new, its columns brought up to date), in WAL mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    connection.row_factory = sqlite3.Row
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA busy_timeout=30000")
    spelled = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL"}
    connection.execute(f"CREATE TABLE IF NOT EXISTS submissions ({COLUMNS.format(**spelled)})")
    have = {row["name"] for row in connection.execute("PRAGMA table_info(submissions)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:  # a database made by an older release of the kit
            connection.execute(f"ALTER TABLE submissions ADD COLUMN {name} {kind.format(**spelled)}")
    for index in INDEXES:
        connection.execute(index.format(table="submissions"))
    return connection


class SqliteQueue(Queue):
    """The table in one SQLite file (one writer: the service's main loop)."""

    replica = ""  # one service per course
    greatest = "MAX"  # SQLite's scalar max of two values

    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = str(path)
        self.db = connect(path)

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

    def run(self, db: sqlite3.Connection, sql: str, **params: Any) -> int:
        return int(db.execute(sql, params).rowcount)

    def fetch(self, db: sqlite3.Connection, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        return list(db.execute(sql, params).fetchall())

    def rows(self, sql: str, **params: Any) -> list[Mapping[str, Any]]:
        return list(self.db.execute(sql, params).fetchall())

    def insert(self, db: sqlite3.Connection, sql: str, **params: Any) -> int | None:
        cursor = db.execute(sql, params)
        return cursor.lastrowid if cursor.rowcount else None

    def recover(self) -> int:
        """Everything in grading: the one service is restarting, nothing else can hold it."""
        with self.transaction() as db:
            self.give_up(db, "1 = 1")
            return self.run(db, "UPDATE submissions SET state = 'queued' WHERE state = 'grading'")

    def claim(self, count: int) -> list[Row]:
        if count <= 0:
            return []
        with self.transaction() as db:
            chosen = self.fetch(db, CANDIDATES.format(extra="", turn=TURN.format(greatest=self.greatest)), scan=count)
            now = time.time()
            for row in chosen:
                self.run(db, "UPDATE submissions SET state = 'grading', tries = tries + 1, started = :now WHERE id = :id", now=now, id=row["id"])
        return [self.row(int(row["id"])) for row in chosen]

    def recording(self) -> nullcontext[bool]:
        return nullcontext(True)

    def recording_transaction(self) -> Any:
        return self.transaction()

    def close(self) -> None:
        self.db.close()
