"""The on-submit service's database (attnkit.service.queue) on real SQLite files: its states, the
fair order of the work, and what a restart finds after a ``kill -9`` in the middle of a write."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from attnkit.service.queue import DELIVERED, GRADING, QUEUED, REFUSED, Queue


def test_states_move_queued_grading_delivered_and_a_row_is_delivered_once(tmp_path: Path) -> None:
    queue = Queue(tmp_path / "service.db")
    assert queue.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    first = queue.notice("ana+a1+t1+r", "ana", "a1", "t1")
    assert first is not None
    assert queue.notice("ana+a1+t1+r", "ana", "a1", "t1") is None, "a folder is recorded once"
    (row,) = queue.claim(4)
    assert row.state == GRADING and row.tries == 1
    assert queue.deliver(row.id, {"score": 1}, "h.html", "full", 1.0, 2.0)
    assert not queue.deliver(row.id, {"score": 0}, "h.html", "full", 0.0, 2.0), "delivered twice"
    assert queue.row(row.id).state == DELIVERED and queue.row(row.id).score == 1.0 and queue.row(row.id).attempt == 1
    assert queue.refuse("ana+a1+t2+r", "ana", "a1", "t2", "not hers") is not None
    assert queue.counts()[REFUSED] == 1


def test_one_in_flight_per_student_and_first_come_first_served_between_students(tmp_path: Path) -> None:
    queue = Queue(tmp_path / "service.db")
    for name, student in [("a1", "ana"), ("a2", "ana"), ("a3", "ana"), ("b1", "bo"), ("c1", "cy")]:
        queue.notice(name, student, "x", name)
    claimed = queue.claim(5)
    assert [row.inbound for row in claimed] == ["a1", "b1", "c1"], "ana's second waits behind the others"
    assert queue.claim(5) == [], "ana has one in flight: her next waits"
    queue.deliver(claimed[0].id, {}, "f", "full", 1.0, 1.0)
    assert [row.inbound for row in queue.claim(5)] == ["a2"]


WRITER = """
import sys, time
from pathlib import Path
from attnkit.service.queue import Queue
queue = Queue(Path(sys.argv[1]))
for n in range(3):
    queue.notice(f"s{n}+x+t+r", f"s{n}", "x", "t")
queue.claim(3)
queue.db.execute("BEGIN IMMEDIATE")
queue.db.execute("UPDATE submissions SET state = 'delivered', score = 99 WHERE inbound = 's0+x+t+r'")
print("in the transaction", flush=True)
time.sleep(60)
"""


def test_a_kill_9_mid_transaction_loses_nothing_and_a_restart_requeues_what_was_in_flight(tmp_path: Path) -> None:
    database = tmp_path / "service.db"
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(database)], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "in the transaction"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    queue = Queue(database)  # the restart
    rows = queue.db.execute("SELECT inbound, state, score FROM submissions ORDER BY id").fetchall()
    assert [(r["inbound"], r["state"], r["score"]) for r in rows] == [(f"s{n}+x+t+r", GRADING, None) for n in range(3)], "the half-done write is gone"
    assert queue.recover() == 3
    assert queue.counts()[QUEUED] == 3
    assert [row.inbound for row in queue.claim(3)] == ["s0+x+t+r", "s1+x+t+r", "s2+x+t+r"], "in their old order"
    assert all(row.tries == 2 for row in (queue.row(n) for n in (1, 2, 3)))


def test_a_reader_is_not_blocked_by_the_writer(tmp_path: Path) -> None:
    queue = Queue(tmp_path / "service.db")
    queue.notice("a+x+t+r", "a", "x", "t")
    queue.db.execute("BEGIN IMMEDIATE")
    queue.db.execute("UPDATE submissions SET state = 'grading'")
    # A reader blocked by the writer would raise "database is locked" (rollback journal) here.
    reader = sqlite3.connect(tmp_path / "service.db", timeout=0)
    assert reader.execute("SELECT state FROM submissions").fetchone()[0] == QUEUED, "--status reads the last commit"
    queue.db.execute("COMMIT")


def test_the_queue_and_the_gradebook_are_where_the_option_the_environment_or_the_course_says(tmp_path: Path, monkeypatch) -> None:
    """--queue-url, else $ATTNKIT_QUEUE_URL (a Kubernetes Secret), else c.AttnkitServe.queue_url,
    else SQLite in the course; the gradebook from --gradebook, else nbgrader's db_url."""
    from attnkit.service.serve import gradebook_of, queue_url_of

    monkeypatch.delenv("ATTNKIT_QUEUE_URL", raising=False)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    assert queue_url_of(tmp_path) is None and gradebook_of(tmp_path) == tmp_path / "gradebook.db"
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.AttnkitServe.queue_url = 'postgresql://config/q'\nc.CourseDirectory.db_url = 'postgresql+psycopg://config/g'\n"
    )
    assert queue_url_of(tmp_path) == "postgresql://config/q" and gradebook_of(tmp_path) == "postgresql+psycopg://config/g"
    monkeypatch.setenv("ATTNKIT_QUEUE_URL", "postgresql://secret/q")
    assert queue_url_of(tmp_path) == "postgresql://secret/q"
    assert queue_url_of(tmp_path, "postgresql://option/q") == "postgresql://option/q"
    assert gradebook_of(tmp_path, tmp_path / "other.db") == tmp_path / "other.db"
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.db_url = 'sqlite:///book.db'\n")
    assert gradebook_of(tmp_path) == tmp_path / "book.db", "relative to the course, where nbgrader runs"
