"""The service's queue: every submission noticed, its state, and the order of the work.

One interface (``base.Queue``) that owns the ``submissions`` table, its schema and every query
about it; two databases behind it, which differ only where they must:

- ``sqlite.SqliteQueue``: the default, one service on one machine (WAL, in the course's
  ``.attnkit-serve/service.db``);
- ``postgres.PostgresQueue``: replicas on several machines sharing one table (leases, ``FOR
  UPDATE SKIP LOCKED``, advisory locks: how a row is claimed, kept and recorded).

``open_queue`` picks one by where the queue is (a path or a ``postgresql://`` URL). No module
outside this package writes SQL about the queue (``tests/service/test_queue_contract.py`` runs
the same contract against both, and checks that rule).
"""

from __future__ import annotations

from pathlib import Path

from attnkit.service.queue.base import (
    DELIVERED,
    FAILED,
    GRADING,
    MAX_TRIES,
    MAX_WAITING,
    QUEUED,
    REFUSED,
    STATES,
    Queue,
    Row,
    is_url,
)

# Where ``attnkit serve --hub``'s HTTP process finds the loop's queue (its SQLite file, or the
# replicas' PostgreSQL URL): set by the loop in that process's environment, never on its command
# line, where a password would show.
QUEUE_AT_VARIABLE = "ATTNKIT_HUB_QUEUE"


def open_queue(where: str | Path, replica: str = "", lease_seconds: float = 30.0, make_schema: bool = True) -> Queue:
    """The service's queue: the SQLite file at a path (the default, one service), or the shared
    table at a PostgreSQL URL (replicas named ``replica``; ``make_schema``: its tables made if
    missing, under a lock, which a reader of a running service's queue skips)."""
    if is_url(str(where)):
        from attnkit.service.queue.postgres import PostgresQueue

        return PostgresQueue(str(where), replica, lease_seconds, make_schema)
    from attnkit.service.queue.sqlite import SqliteQueue

    return SqliteQueue(Path(where))


__all__ = [
    "DELIVERED",
    "FAILED",
    "GRADING",
    "MAX_TRIES",
    "MAX_WAITING",
    "QUEUED",
    "QUEUE_AT_VARIABLE",
    "REFUSED",
    "STATES",
    "Queue",
    "Row",
    "is_url",
    "open_queue",
]
