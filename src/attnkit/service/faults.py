"""What stops ``attnkit serve``, what only pauses it, and the pause itself (docs/service.md).

A failure raised on behalf of one folder or one submission is that submission's (refused or
failed). Two kinds are not: the service's own (``is_the_services``: the grader's ``GraderError``,
its database's errors), which stop it with exit 2, and a fault of the host that waiting cures
(``is_transient``: a full disk, a database locked or out of reach), which pauses intake and claims
(``Pause``) until a probe finds it passed.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit.constants import GraderError
from attnkit.service.settings import MIN_FREE_BYTES, PAUSED_FILE, free_bytes

PROBE_SECONDS = 1.0  # while paused: how often the disk's space and the database are looked at again


def database_errors() -> tuple[type[BaseException], ...]:
    """The queue's databases' own errors: the service's failures, never a submission's."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    return (sqlite3.Error, SQLAlchemyError)


DATABASE_ERRORS = database_errors()


def is_transient(error: BaseException) -> bool:
    """A fault of the host that waiting cures, which pauses the service (``Pause``) rather
    than stopping it or failing a submission: a full disk (course, exchange, the service's own
    database: ``database or disk is full``), a database locked past its timeout, and a shared
    queue's PostgreSQL out of reach (its connection refused, reset or timed out)."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(error, (sqlite3.OperationalError, OperationalError)):
        text = str(error).lower()
        if any(word in text for word in ("locked", "busy", "disk is full", "disk i/o", "unable to open")):
            return True
    if isinstance(error, DBAPIError) and (error.connection_invalidated or isinstance(error, (OperationalError, InterfaceError))):
        return "psycopg" in type(error.orig).__module__  # PostgreSQL's connection, not a statement of ours
    return type(error).__module__.startswith("psycopg") and type(error).__name__ in ("OperationalError", "InterfaceError")


def is_the_services(error: BaseException) -> bool:
    """A failure of the service itself, which stops it (exit 2: the grader's ``GraderError``, the
    suite or the sandbox; or its database's), rather than of the one submission it was raised for."""
    return isinstance(error, (GraderError, *DATABASE_ERRORS))


def disk_short(folders: tuple[Path, ...]) -> OSError | None:
    """One of ``folders``' file systems (the course's, the exchange's) with less than MIN_FREE_BYTES
    free, as the error a copy there would meet (ENOSPC, with how much is left where), or None."""
    for folder in folders:
        free = free_bytes(folder)
        if free is not None and free < MIN_FREE_BYTES:
            return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free} bytes free on {folder}; intake resumes at {MIN_FREE_BYTES})")
    return None


class Pause:
    """The service paused by a transient fault: why and since when, the records graded meanwhile
    (delivered at the resume, in order), and whether the start's ``recover`` still waits.
    ``--status`` reads it from ``paused.txt`` in the service's folder."""

    def __init__(self, state: Path, folders: tuple[Path, ...], emit: Callable[..., None]) -> None:
        """``state``: the service's folder; ``folders``: the file systems whose free space is probed."""
        self.state = state
        self.folders = folders
        self.emit = emit
        self.reason: str | None = None  # why, while paused
        self.since = 0.0
        self.probed = 0.0
        self.held: list[tuple[Any, Any]] = []  # (in flight, record) graded while paused, delivered at the resume
        self.must_recover = False  # the start's recover() waits for the resume

    @property
    def active(self) -> bool:
        return self.reason is not None

    def clear_file(self) -> None:
        (self.state / PAUSED_FILE).unlink(missing_ok=True)

    def begin(self, error: BaseException) -> None:
        """A transient fault (``is_transient``): no intake and no claims until ``probe`` finds it
        passed; what the workers have is graded and its record held (``held``). One log line
        (``paused``) per pause, and ``--status`` says it (``paused.txt`` in the service's folder)."""
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        if self.reason is None:
            self.reason, self.since, self.probed = reason, time.monotonic(), time.monotonic()
            self.emit("paused", reason=reason, held=len(self.held))
            try:
                (self.state / PAUSED_FILE).write_text(f"{time.time():.0f} {reason}")
            except OSError:
                pass  # the disk that is full: --status then measures the space itself

    def disk_short(self) -> OSError | None:
        return disk_short(self.folders)

    def probe(self, ping: Callable[[], None], recover: Callable[[], int], deliver: Callable[[Any, Any], None]) -> bool:
        """While paused, every PROBE_SECONDS: enough free space on the course's and the exchange's
        file systems, the database answering (``ping``); then the start's ``recover`` if it waits,
        the held records delivered (``deliver(flight, record)``), ``resumed`` logged. True when the
        service resumed (the caller then takes intake up again)."""
        if self.reason is None or time.monotonic() - self.probed < PROBE_SECONDS:
            return False
        self.probed = time.monotonic()
        if self.disk_short() is not None:
            return False
        try:
            ping()
            if self.must_recover:
                self.emit("requeued", count=recover())
                self.must_recover = False
            while self.held:
                flight, record = self.held[0]
                deliver(flight, record)
                self.held.pop(0)
        except Exception as error:
            if not is_transient(error):
                raise
            return False
        self.emit("resumed", reason=self.reason, seconds=round(time.monotonic() - self.since, 3))
        return True

    def end(self) -> None:
        self.reason = None
        self.clear_file()
