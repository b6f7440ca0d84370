"""The after-due release under an attempt limit (issue 48): ``policies.released_at_due``, the rule,
and the two queue methods the service's ``release_after_due`` reads and writes through
(``withheld_after_due``, ``release_shown``), on SQLite and on a real PostgreSQL (``make postgresql``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from postgres import PostgresServer

from attnkit.service.policies import Policy, released_at_due
from attnkit.service.queue import Queue
from attnkit.service.queue.postgres import PostgresQueue
from attnkit.service.queue.sqlite import SqliteQueue

HOUR = 3600.0


def test_the_limit_holds_per_window_counting_what_was_shown_and_released_before() -> None:
    one = Policy(attempts=1, window_hours=1, visibility="after-due")
    # Three in one hour, then one two hours later: the first of each window is released.
    assert released_at_due(one, [(0, "after-due"), (60, "after-due"), (120, "after-due"), (2 * HOUR, "after-due")]) == [None, HOUR, HOUR, None]
    # A page that showed a score before (the policy changed) counts in its window; a withheld or not-graded one does not.
    assert released_at_due(one, [(0, "full"), (10, "withheld"), (20, "not-graded"), (30, "after-due")]) == [None, None, None, HOUR]
    two = Policy(attempts=2, window_hours=1, visibility="after-due")
    assert released_at_due(two, [(0, "after-due"), (1, "after-due"), (2, "after-due"), (HOUR + 0.5, "after-due")]) == [None, None, HOUR, None]
    unlimited = Policy(attempts=0, visibility="after-due")
    assert released_at_due(unlimited, [(t, "after-due") for t in range(9)]) == [None] * 9


def queue_rows(queue: Queue) -> None:
    """ana: a page shown before, two withheld; bo: one withheld; cy: shown only (not listed)."""
    for name, student, shown, finished in [
        ("a0", "ana", "full", 1.0),
        ("a1", "ana", "after-due", 3.0),
        ("a2", "ana", "after-due", 2.0),
        ("b1", "bo", "after-due", 5.0),
        ("c1", "cy", "full", 4.0),
        ("n1", "ana", "not-graded", 2.5),
    ]:
        queue.notice(name, student, "x", name)
        (row,) = queue.claim(1)
        assert queue.deliver(row.id, {}, f"{name}.html", shown, 1.0, 1.0, finished)
    rows = queue.withheld_after_due("x")
    assert [(r["inbound"], r["shown"]) for r in rows] == [("a0", "full"), ("a2", "after-due"), ("a1", "after-due"), ("b1", "after-due")]
    assert rows[1]["feedback"] == "a2.html" and rows[1]["student"] == "ana" and rows[1]["finished"] == 2.0
    assert queue.withheld_after_due("other") == []
    assert queue.release_shown(rows[1]["id"], "released")
    assert not queue.release_shown(rows[1]["id"], "withheld"), "released once"
    assert queue.release_shown(rows[2]["id"], "withheld")
    assert [r["inbound"] for r in queue.withheld_after_due("x")] == ["b1"]


def test_queue_lists_and_releases_once_on_sqlite(tmp_path: Path) -> None:
    queue = SqliteQueue(tmp_path / "service.db")
    try:
        queue_rows(queue)
    finally:
        queue.close()


@pytest.mark.root
def test_queue_lists_and_releases_once_on_postgresql(postgres: PostgresServer) -> None:
    queue = PostgresQueue(postgres.create_database("release48"), "r1")
    try:
        queue_rows(queue)
    finally:
        queue.close()
