"""The service's queue, one contract for both databases (issue 52: one queue behind one interface).

Every test here that takes ``queue`` runs twice: on a real SQLite file (``queue.sqlite``, the
default) and on a real PostgreSQL server of the module's own (``queue.postgres``, replicas;
``make postgresql``). They differ only where the databases must (claiming under leases, the
recorder's lock); what a caller sees is the same. Then what only SQLite has to show (a ``kill -9``
mid-transaction, readers not blocked by the writer), and the rule that no SQL about the queue
lives outside ``attnkit.service.queue``.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attnkit.service.queue import DELIVERED, FAILED, GRADING, MAX_TRIES, QUEUED, REFUSED, Queue, open_queue
from attnkit.service.queue.sqlite import SqliteQueue
from postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[2]
MakeQueue = Callable[[str], Queue]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.root)])
def make_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeQueue]:
    """``make_queue(replica)``: a queue on one database per test (each replica its own connection)."""
    if request.param == "sqlite":
        where = str(tmp_path / "service.db")
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        where = server.create_database(f"q{abs(hash(request.node.name)) % 10**9}")
    opened: list[Queue] = []

    def make(replica: str = "r1") -> Queue:
        opened.append(open_queue(where, replica))
        return opened[-1]

    yield make
    for queue in opened:
        queue.close()


def test_states_move_queued_grading_delivered_and_a_row_is_delivered_once(make_queue: MakeQueue) -> None:
    queue = make_queue("r1")
    first = queue.notice("ana+a1+t1+r", "ana", "a1", "t1")
    assert first is not None
    assert queue.notice("ana+a1+t1+r", "ana", "a1", "t1") is None, "a folder is recorded once"
    assert queue.id_of("ana+a1+t1+r") == first and queue.id_of("nobody") is None
    assert queue.waiting("ana") == 1
    (row,) = queue.claim(4)
    assert row.state == GRADING and row.tries == 1 and queue.waiting("ana") == 0
    assert queue.deliver(row.id, {"score": 1}, "h.html", "full", 1.0, 2.0)
    assert not queue.deliver(row.id, {"score": 0}, "h.html", "full", 0.0, 2.0), "delivered twice"
    assert queue.row(row.id).state == DELIVERED and queue.row(row.id).score == 1.0 and queue.row(row.id).attempt == 1
    found = queue.find(row.id)
    assert found is not None and found["feedback"] == "h.html" and queue.find(row.id + 100) is None
    assert queue.refuse("ana+a1+t2+r", "ana", "a1", "t2", "not hers") is not None
    assert queue.counts()[REFUSED] == 1 and queue.counts()[DELIVERED] == 1
    assert [r["inbound"] for r in queue.of_student("ana")] == ["ana+a1+t1+r"], "a refused folder was not hers"
    queue.ping()


def test_a_students_attempts_go_and_are_numbered_by_their_own_time_not_by_when_they_were_found(make_queue: MakeQueue) -> None:
    """Issue 50: after a restart the rescan of inbound/ found a student's folders in the
    directory's order, the later attempt first (the lower id); it was graded first and numbered 1.
    Claimed by ``noticed`` (nbgrader's order), numbered by it, whatever order they were found in;
    one delivered after a later one takes its place and the later one moves up."""
    queue = make_queue("r1")
    later = queue.notice("ana+a1+t2+r", "ana", "a1", "t2", noticed=200.0)
    earlier = queue.notice("ana+a1+t1+r", "ana", "a1", "t1", noticed=100.0)
    assert later is not None and earlier is not None and later < earlier
    assert queue.positions() == {earlier: 1, later: 2}
    (first,) = queue.claim(4)
    assert first.id == earlier
    assert queue.deliver(first.id, {"score": 1}, "p.html", "full", 1.0, 2.0)
    (second,) = queue.claim(4)
    assert second.id == later
    assert queue.deliver(second.id, {"score": 2}, "p.html", "full", 2.0, 2.0)
    assert (queue.row(earlier).attempt, queue.row(later).attempt) == (1, 2)
    # One found only now, though complete before both (its kernel time): the first attempt.
    earliest = queue.notice("ana+a1+t0+r", "ana", "a1", "t0", noticed=50.0)
    assert earliest is not None
    (third,) = queue.claim(4)
    assert queue.deliver(third.id, {"score": 0}, "p.html", "full", 0.0, 2.0)
    assert [queue.row(id).attempt for id in (earliest, earlier, later)] == [1, 2, 3]


def test_an_older_attempt_delivered_while_a_batch_is_recorded_waits_for_the_next_batch(make_queue: MakeQueue) -> None:
    """Issue 50: attempts are delivered in the order of their own time, so after a restart one with
    a lower id (the later attempt, found first) can be delivered while the recorder records the
    batch that read the other: marking "every delivery up to the newest id" marked it recorded
    unseen, and the gradebook kept the older attempt (77 for a model answer). Only what the batch
    saw is marked; the later attempt is the next batch's."""
    queue = make_queue("r1")
    later = queue.notice("ana+x+t2+r", "ana", "x", "t2", noticed=200.0)
    earlier = queue.notice("ana+x+t1+r", "ana", "x", "t1", noticed=100.0)
    assert later is not None and earlier is not None and later < earlier
    (first,) = queue.claim(4)
    assert first.id == earlier and queue.deliver(first.id, {"score": 1}, "p.html", "full", 1.0, 2.0)
    (pair,) = queue.unrecorded_pairs(10)  # the recorder's batch reads its pairs ...
    (second,) = queue.claim(4)
    assert second.id == later and queue.deliver(second.id, {"score": 2}, "p.html", "full", 2.0, 2.0)  # ... the later attempt is delivered ...
    with queue.recording() as ours:
        assert ours
        queue.mark_recorded([(pair["student"], pair["assignment"], int(pair["newest"]))])  # ... and the batch is marked
    assert [int(row["newest"]) for row in queue.unrecorded_pairs(10)] == [later], "the later attempt waits for the next batch"


def test_a_stage_that_raises_leaves_no_row(make_queue: MakeQueue) -> None:
    queue = make_queue("r1")

    def broken() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        queue.notice("a+x+t+r", "a", "x", "t", stage=broken)
    assert queue.id_of("a+x+t+r") is None and queue.counts()[QUEUED] == 0, "a row in the queue always has its copy"
    assert queue.notice("a+x+t+r", "a", "x", "t") is not None, "and the folder can be taken again"


def test_one_in_flight_per_student_and_first_come_first_served_between_students(make_queue: MakeQueue) -> None:
    queue = make_queue("r1")
    for number, (name, student) in enumerate([("a1", "ana"), ("a2", "ana"), ("a3", "ana"), ("b1", "bo"), ("c1", "cy")]):
        queue.notice(name, student, "x", name, noticed=1000.0 + number)
    claimed = queue.claim(5)
    assert [row.inbound for row in claimed] == ["a1", "b1", "c1"], "ana's second waits behind the others"
    assert make_queue("r2").claim(5) == [], "ana has one in flight: her next waits (at every replica)"
    queue.deliver(claimed[0].id, {}, "f", "full", 1.0, 1.0, finished=2000.0)
    assert [row.inbound for row in queue.claim(5)] == ["a2"]


def test_a_students_burst_waits_behind_a_classmate_who_came_while_it_was_graded(make_queue: MakeQueue) -> None:
    """Issue 48: ana queued six submissions at once; bo submitted while her first was being graded.
    When it is delivered, bo's goes next, not ana's older second one (by id it was ana's)."""
    queue = make_queue("r1")
    for n in range(6):
        queue.notice(f"ana{n}", "ana", "x", str(n), noticed=1000.0 + n / 10)
    (first,) = queue.claim(1)
    assert first.inbound == "ana0"
    queue.notice("bo0", "bo", "x", "0", noticed=1005.0)  # while ana0 is graded
    queue.deliver(first.id, {}, "f", "full", 1.0, 1.0, finished=1010.0)
    assert queue.positions() == {queue.id_of("bo0"): 1, **{queue.id_of(f"ana{n}"): n + 1 for n in range(1, 6)}}
    (second,) = queue.claim(1)
    assert second.inbound == "bo0", "bo has waited longer than ana's turn: her last one finished after he came"
    queue.notice("cy0", "cy", "x", "0", noticed=1020.0)
    queue.deliver(second.id, {}, "f", "full", 1.0, 1.0, finished=1030.0)
    order = []
    for _round in range(6):
        (taken,) = queue.claim(1)
        order.append(taken.inbound)
        queue.deliver(taken.id, {}, "f", "full", 1.0, 1.0, finished=1040.0 + _round)
    assert order == ["ana1", "cy0", "ana2", "ana3", "ana4", "ana5"], "ana's next, then cy (who came after ana's turn began), then ana's burst"


def test_a_row_cut_short_too_often_is_failed_not_put_back_at_the_head(make_queue: MakeQueue) -> None:
    """Issue 48: a submission whose grading kills the service went back to the head of the queue at
    every restart and killed it again. After MAX_TRIES starts it is failed, with the cause."""
    queue = make_queue("r1")
    poison = queue.notice("evil", "eve", "x", "t", noticed=1.0)
    queue.notice("fine", "bo", "x", "t", noticed=2.0)
    for attempt in range(MAX_TRIES):
        taken = [row.inbound for row in queue.claim(1)]
        assert taken == ["evil"], (attempt, taken)
        queue = make_queue("r1")  # the service died while grading it; the same replica restarts
        assert queue.recover() == (1 if attempt < MAX_TRIES - 1 else 0)
    assert poison is not None
    gave_up = queue.row(poison)
    assert gave_up.state == FAILED and str(MAX_TRIES) in gave_up.cause
    assert [row.inbound for row in queue.claim(1)] == ["fine"], "the classmate's is next"


def test_what_the_pages_status_and_recorder_read(make_queue: MakeQueue) -> None:
    queue = make_queue("r1")
    ids = [queue.notice(f"ana{n}", "ana", "x", str(n), noticed=100.0 + n) for n in range(3)]
    for score in (3.0, 9.0, 5.0):
        (row,) = queue.claim(1)
        queue.deliver(row.id, {"score": score}, f"p{row.id}.html", "after-due" if score == 9.0 else "full", score, 10.0, finished=200.0 + score)
    assert queue.shown_times("ana", "x", 0.0) == [203.0, 205.0], "pages that showed a score, oldest first"
    best, latest = queue.counted("ana", "x", best=True), queue.counted("ana", "x", best=False)
    assert best is not None and latest is not None and int(best["id"]) == ids[1] and int(latest["id"]) == ids[2]
    assert '"score": 5.0' in latest["results"] and latest["inbound"] == "ana2"
    assert [(r["student"], r["assignment"], int(r["newest"]), int(r["waiting"])) for r in queue.unrecorded_pairs(10)] == [("ana", "x", ids[2], 3)]
    assert queue.unrecorded() == 3
    with queue.recording() as ours:
        assert ours
        queue.mark_recorded([("ana", "x", ids[1])])
    assert queue.unrecorded() == 1
    assert [int(r["id"]) for r in queue.withheld_after_due("x")] == [ids[0], ids[2], ids[1]], "by when each was delivered"
    assert queue.release_shown(ids[1], "released") and not queue.release_shown(ids[1], "released")
    assert queue.withheld_after_due("x") == []
    assert sorted(queue.latencies_since(0.0)) == [103.0, 103.0, 108.0]
    assert queue.finished_since(0.0) == {DELIVERED: 3}
    assert [r["inbound"] for r in queue.latest(2)] == ["ana2", "ana1"]
    assert [r["inbound"] for r in queue.in_state(DELIVERED, limit=2, newest_first=True)] == ["ana2", "ana1"]
    assert [r["inbound"] for r in queue.in_state(DELIVERED, QUEUED)] == ["ana0", "ana1", "ana2"]
    assert "ana0" in queue.known()


def test_the_hint_ladder_counts_the_levels_each_student_saw(make_queue: MakeQueue) -> None:
    """``hints_seen`` (issue 53): per student and assignment, each mistake's highest level on a page
    the student saw (full, or released after the due date); withheld pages and other students',
    assignments' and mistakes' levels do not count."""
    queue = make_queue("r1")
    pages = [  # student, assignment, shown, hints
        ("ana", "x", "full", {"m1": 1}),
        ("ana", "x", "withheld", {"m1": 2}),  # past the attempt limit: not seen
        ("ana", "x", "full", {"m1": 2, "m2": 1}),
        ("ana", "x", "after-due", {"m2": 2}),  # held until the due date: not seen yet
        ("ana", "x", "scores", {"m2": 3}),
        ("ana", "y", "full", {"m1": 3}),  # another assignment
        ("bo", "x", "full", {"m1": 3}),  # another student
        ("ana", "x", "full", None),  # a page without the ladder (hints = "full")
    ]
    ids = []
    for n, (student, assignment, shown, hints) in enumerate(pages):
        queue.notice(f"p{n}", student, assignment, str(n), noticed=float(n))
        (row,) = queue.claim(1)
        assert queue.deliver(row.id, {"score": 1.0}, f"p{n}.html", shown, 1.0, 2.0, finished=100.0 + n, hints=hints)
        ids.append(row.id)
    assert queue.hints_seen("ana", "x") == {"m1": 2, "m2": 1}
    assert queue.hints_seen("bo", "x") == {"m1": 3} and queue.hints_seen("cy", "x") == {}
    assert queue.release_shown(ids[3], "released")
    assert queue.hints_seen("ana", "x") == {"m1": 2, "m2": 2}, "a page released after the due date was seen"
    assert queue.find(ids[0])["hints"] == '{"m1": 1}' and queue.find(ids[7])["hints"] == ""


WRITER = """
import sys, time
from pathlib import Path
from attnkit.service.queue.sqlite import SqliteQueue
queue = SqliteQueue(Path(sys.argv[1]))
for n in range(3):
    queue.notice(f"s{n}+x+t+r", f"s{n}", "x", "t", noticed=float(n))
queue.claim(3)
queue.db.execute("BEGIN IMMEDIATE")
queue.db.execute("UPDATE submissions SET state = 'delivered', score = 99 WHERE inbound = 's0+x+t+r'")
print("in the transaction", flush=True)
time.sleep(60)
"""


def test_sqlite_a_kill_9_mid_transaction_loses_nothing_and_a_restart_requeues_what_was_in_flight(tmp_path: Path) -> None:
    database = tmp_path / "service.db"
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(database)], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "in the transaction"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    queue = SqliteQueue(database)  # the restart
    rows = queue.db.execute("SELECT inbound, state, score FROM submissions ORDER BY id").fetchall()
    assert [(r["inbound"], r["state"], r["score"]) for r in rows] == [(f"s{n}+x+t+r", GRADING, None) for n in range(3)], "the half-done write is gone"
    assert queue.recover() == 3
    assert queue.counts()[QUEUED] == 3
    assert [row.inbound for row in queue.claim(3)] == ["s0+x+t+r", "s1+x+t+r", "s2+x+t+r"], "in their old order"
    assert all(row.tries == 2 for row in (queue.row(n) for n in (1, 2, 3)))


def test_sqlite_a_reader_is_not_blocked_by_the_writer(tmp_path: Path) -> None:
    queue = SqliteQueue(tmp_path / "service.db")
    assert queue.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    queue.notice("a+x+t+r", "a", "x", "t")
    queue.db.execute("BEGIN IMMEDIATE")
    queue.db.execute("UPDATE submissions SET state = 'grading'")
    # A reader blocked by the writer would raise "database is locked" (rollback journal) here.
    reader = sqlite3.connect(tmp_path / "service.db", timeout=0)
    assert reader.execute("SELECT state FROM submissions").fetchone()[0] == QUEUED, "--status reads the last commit"
    queue.db.execute("COMMIT")


def test_sqlite_a_database_of_an_older_release_gets_the_new_columns(tmp_path: Path) -> None:
    database = tmp_path / "service.db"
    with sqlite3.connect(database) as old:
        old.execute(
            "CREATE TABLE submissions (id INTEGER PRIMARY KEY AUTOINCREMENT, inbound TEXT NOT NULL UNIQUE, student TEXT NOT NULL,"
            " assignment TEXT NOT NULL, timestamp TEXT NOT NULL, noticed REAL NOT NULL, state TEXT NOT NULL, cause TEXT NOT NULL DEFAULT '',"
            " tries INTEGER NOT NULL DEFAULT 0, started REAL, finished REAL, attempt INTEGER, shown TEXT NOT NULL DEFAULT '', score REAL,"
            " max_score REAL, feedback TEXT NOT NULL DEFAULT '', results TEXT, recorded INTEGER NOT NULL DEFAULT 0)"
        )
        old.execute("INSERT INTO submissions (inbound, student, assignment, timestamp, noticed, state) VALUES ('a', 'ana', 'x', 't', 1, 'queued')")
    queue = SqliteQueue(database)
    (row,) = queue.claim(1)
    assert queue.deliver(row.id, {}, "f", "full", 1.0, 1.0)


# What counts as SQL about the queue's table: a statement naming it.
QUEUE_SQL = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+(\w+\.)?submissions\b", re.IGNORECASE)


def test_no_sql_about_the_queue_outside_its_package() -> None:
    """Issue 52: the table, its schema and every query live in ``attnkit.service.queue``; a caller
    asks it by name (the 22 statements that sat in serve.py, hub.py and recorder.py moved there)."""
    package = ROOT / "src" / "attnkit" / "service" / "queue"
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        if package not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if QUEUE_SQL.search(line)
    ]
    assert offenders == []
    assert QUEUE_SQL.search("rows('SELECT id FROM submissions WHERE 1')"), "the rule can see a statement"


def test_the_copies_kept_are_the_newest_and_what_may_still_count(make_queue: MakeQueue, tmp_path: Path) -> None:
    """Issue 48, bounded storage: settled attempts beyond the newest KEEP lose their copy, except the
    best graded one (it may still count under ``best``) and anything not settled (queued, not yet
    in the gradebook, a page withheld until the due date)."""
    from attnkit.service import exchange
    from attnkit.service.retention import copies_to_remove

    queue = make_queue("r1")
    attempts = tmp_path / "attempts"
    for n, score in enumerate([9.0, 2.0, 3.0, 4.0, 5.0, 6.0]):
        name = f"ana+x+{n}+r"
        (attempts / name / "ana" / "x").mkdir(parents=True)
        queue.notice(name, "ana", "x", str(n), noticed=100.0 + n)
        (row,) = queue.claim(1)
        queue.deliver(row.id, {}, "p.html", "after-due" if n == 1 else "full", score, 10.0, finished=200.0 + n)
    with queue.recording():
        queue.mark_recorded([("ana", "x", 5)])  # the newest (id 6) is not in the gradebook yet
    removed = exchange.prune(attempts, copies_to_remove(queue.settled_copies(), keep=2), keep=0)
    assert removed == ["ana+x+2+r"], "kept: 0 (best), 1 (withheld), 3 and 4 (newest settled), 5 (not recorded)"
    assert sorted(os.listdir(attempts)) == ["ana+x+0+r", "ana+x+1+r", "ana+x+3+r", "ana+x+4+r", "ana+x+5+r"]
