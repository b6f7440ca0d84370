"""Each assignment's due date as the gradebook holds it, read again every few seconds by the
service's loop (a due date set or moved while it runs: visibility, lateness, pages released)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from attnkit.service.queue import is_url
from attnkit.service.queue.postgres import gradebook_due_rows

DUE_SECONDS = 5.0  # how often the due dates are read again from the gradebook (a small SQLite read)


def due_dates(gradebook: Path | str) -> dict[str, float]:
    """Each assignment's due date in the gradebook (epoch seconds), as nbgrader's late rule reads
    it; ``gradebook``: its SQLite file, or nbgrader's ``db_url`` (PostgreSQL)."""
    import datetime
    import sqlite3

    rows: list[Any]
    if isinstance(gradebook, str) and is_url(gradebook):
        rows = gradebook_due_rows(gradebook)  # (never waits on another session's lock: the rows read before)
    else:
        gradebook = Path(gradebook)
        if not gradebook.is_file():
            return {}
        with sqlite3.connect(f"file:{gradebook}?mode=ro", uri=True) as db:
            try:
                rows = db.execute("SELECT name, duedate FROM assignment").fetchall()
            except sqlite3.Error:
                return {}
    found: dict[str, float] = {}
    for name, due in rows:
        if due:
            found[name] = datetime.datetime.fromisoformat(str(due)).replace(tzinfo=datetime.UTC).timestamp()
    return found


class DueDates:
    """The gradebook's due dates, read at most every DUE_SECONDS; ``gradebook`` None: none."""

    def __init__(self, gradebook: Path | str | None) -> None:
        self.gradebook = gradebook
        self.dues: dict[str, float] = {}
        self.read = 0.0

    def of(self, assignment: str) -> float | None:
        if self.gradebook is not None and time.monotonic() - self.read > DUE_SECONDS:
            self.dues, self.read = due_dates(self.gradebook), time.monotonic()
        return self.dues.get(assignment)
