"""How long the service keeps its copies of students' attempts (``attempts/``, docs/service.md):
per student and assignment the KEEP_COPIES newest settled ones and whatever may still count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.service import exchange
from attnkit.service.queue import DELIVERED, Queue

KEEP_COPIES = 3  # copies of settled attempts kept per student and assignment (besides what counts)
PRUNE_SECONDS = 60.0  # how often the copies beyond KEEP_COPIES are removed


def copies_to_remove(settled: list[Any], keep: int) -> list[tuple[str, str, str, float]]:
    """Of the settled attempts (``Queue.settled_copies``), those whose copy may go, as
    ``exchange.prune`` takes them: per student and assignment, all but the ``keep`` newest and each
    one that may still count (the latest and the best graded: the recorder copies it into
    submitted/). A copy still queued, grading or holding a page withheld until the due date is
    never settled, so never listed."""
    by_pair: dict[tuple[str, str], list[Any]] = {}
    for row in settled:
        by_pair.setdefault((row["student"], row["assignment"]), []).append(row)
    removable: list[tuple[str, str, str, float]] = []
    for rows in by_pair.values():
        graded = [row for row in rows if row["state"] == DELIVERED and row["score"] is not None]
        latest = max(graded, key=lambda row: (row["noticed"], row["id"]), default=None)
        best = max(graded, key=lambda row: (row["score"], row["noticed"]), default=None)
        counts = {row["id"] for row in (latest, best) if row is not None}
        newest = sorted(rows, key=lambda row: (row["noticed"], row["id"]), reverse=True)
        removable += [(row["inbound"], row["student"], row["assignment"], row["noticed"]) for row in newest[keep:] if row["id"] not in counts]
    return removable


def prune(attempts: Path, queue: Queue, keep: int = KEEP_COPIES) -> list[str]:
    """The copies beyond ``keep`` removed from ``attempts`` (``copies_to_remove`` over the queue's
    settled rows); the names removed."""
    return exchange.prune(attempts, copies_to_remove(queue.settled_copies(), keep), keep=0)
