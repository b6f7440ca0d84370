"""``attnkit serve`` replicas sharing a PostgreSQL queue and gradebook (issue 40), on a real server.

One PostgreSQL server for the module (Debian's, ``make postgresql``; ``tests/support/postgres.py``
starts it with initdb and pg_ctl as an unprivileged user on a free port of 127.0.0.1), a fresh
database per test. First the shared queue itself (``attnkit.service.queue.postgres``): leases, rows
taken once by concurrent replicas, one in flight per student, first come first served, one
recorder at a time. Then two real ``attnkit serve`` processes on one course, a burst of
submissions from real unix students through nbgrader's exchange, one replica killed with
``kill -9`` while it grades: every submission delivered once, recorded once, in nbgrader's
gradebook in the same PostgreSQL (``CourseDirectory.db_url``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres import PostgresServer
from service_course import Replica, shared_queue_course

from attnkit.service.queue import DELIVERED, GRADING, QUEUED
from attnkit.service.queue.postgres import PostgresQueue, engine_url

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WAIT = 300.0  # seconds anything may take on the shared, loaded machine (nothing is timed)

pytestmark = [pytest.mark.root]


@pytest.fixture
def queue_url(postgres: PostgresServer, request: pytest.FixtureRequest) -> str:
    return postgres.create_database(f"q{abs(hash(request.node.name)) % 10**9}")


def test_a_live_lease_is_not_retaken_and_an_expired_one_is(queue_url: str) -> None:
    first, second = PostgresQueue(queue_url, "r1", lease_seconds=2.0), PostgresQueue(queue_url, "r2", lease_seconds=2.0)
    try:
        first.notice("a1", "ana", "x", "t1")
        (taken,) = first.claim(4)
        assert taken.state == GRADING and first.row(taken.id).tries == 1
        assert first.rows("SELECT replica FROM submissions WHERE id = :id", id=taken.id)[0]["replica"] == "r1"
        # r1 lives as the service's loop does (a claim for its idle workers and a heartbeat, a few
        # times a second) for more than two leases: the row stays r1's.
        until = time.monotonic() + 5.0
        while time.monotonic() < until:
            assert first.claim(1) == []
            first.heartbeat()
            assert second.claim(4) == [], "a live lease is never taken"
            time.sleep(0.1)
        # r1 stops renewing (killed): once its lease has run out, r2 takes the row again.
        time.sleep(2.5)
        (again,) = second.claim(4)
        assert again.id == taken.id and again.state == GRADING and again.tries == 2
        assert second.rows("SELECT replica FROM submissions WHERE id = :id", id=taken.id)[0]["replica"] == "r2"
        assert not first.deliver(taken.id, {"score": 1}, "f.html", "full", 1.0, 1.0), "r1 lost its lease: it delivers nothing"
        assert second.deliver(taken.id, {"score": 1}, "f.html", "full", 1.0, 1.0)
        assert not second.deliver(taken.id, {"score": 1}, "f.html", "full", 1.0, 1.0), "delivered once"
        assert second.row(taken.id).state == DELIVERED and second.row(taken.id).attempt == 1
        # A replica restarted under its own name (a pod's container) takes its rows back at once.
        second.notice("b1", "bo", "x", "t1")
        (held,) = second.claim(1)
        again_r2 = PostgresQueue(queue_url, "r2", lease_seconds=60)
        assert again_r2.recover() == 1 and again_r2.row(held.id).state == QUEUED
        again_r2.close()
    finally:
        first.close()
        second.close()


def test_the_hubs_pages_read_the_replicas_shared_queue(queue_url: str, tmp_path: Path) -> None:
    """``attnkit serve --hub`` with replicas: the HTTP side reads the queue the loop hands it (the
    shared PostgreSQL one here): a student's page lists their own submissions only, each with its
    state and place in the queue; the TA's class view counts and orders the same rows."""
    from attnkit.assignment.folder import discover
    from attnkit.service import hub

    queue = PostgresQueue(queue_url, "r1")
    try:
        for inbound, student in [("a1", "ana"), ("b1", "bo"), ("a2", "ana"), ("c1", "cy")]:
            queue.notice(inbound, student, "ch19-attention", inbound)
        (grading,) = queue.claim(1)  # ana's first: being graded; the rest queued in order
        kit = hub.Kit(
            state=tmp_path, feedback=tmp_path, suites=discover(), policies={}, ta_groups=frozenset(), students={}, parent=os.getpid(), queue_at=queue_url
        )
        ana = hub.student_status(kit, "ana", time.time())
        everyone = hub.class_status(kit)
    finally:
        queue.close()
    (assignment,) = [entry for entry in ana["assignments"] if entry["submissions"]]
    mine = [(view["id"], view["student"], view["state"], view["position"]) for view in assignment["submissions"]]
    assert mine == [(grading.id + 2, "ana", QUEUED, 2), (grading.id, "ana", GRADING, None)], mine
    assert everyone["counts"][QUEUED] == 3 and everyone["counts"][GRADING] == 1, everyone["counts"]
    assert [(view["student"], view["position"]) for view in everyone["queue"]] == [("ana", None), ("bo", 1), ("ana", 2), ("cy", 3)]


def test_first_come_first_served_and_one_in_flight_per_student(queue_url: str) -> None:
    queue, other = PostgresQueue(queue_url, "r1"), PostgresQueue(queue_url, "r2")
    try:
        for name, student in [("a1", "ana"), ("a2", "ana"), ("a3", "ana"), ("b1", "bo"), ("c1", "cy")]:
            queue.notice(name, student, "x", name)
        claimed = queue.claim(5)
        assert [row.inbound for row in claimed] == ["a1", "b1", "c1"], "ana's second waits behind the others"
        assert other.claim(5) == [], "ana has one in flight (at r1): her next waits at r2 too"
        assert queue.deliver(claimed[0].id, {}, "f", "full", 1.0, 1.0)
        assert [row.inbound for row in other.claim(5)] == ["a2"]
    finally:
        queue.close()
        other.close()


def test_concurrent_replicas_never_take_one_row_twice_nor_two_of_one_student(queue_url: str) -> None:
    """Four replicas (threads, each with its own connections) claim as fast as they can from 240
    rows of 12 students: each row is taken once, and no student ever has two rows in flight."""
    setup = PostgresQueue(queue_url, "setup")
    for n in range(240):
        setup.notice(f"s{n % 12}+{n}", f"s{n % 12}", "x", str(n))
    setup.close()
    guard = threading.Lock()
    holder: dict[str, str] = {}  # student -> the replica grading them now
    taken: list[tuple[str, int]] = []
    problems: list[str] = []

    def replica(name: str) -> None:
        queue = PostgresQueue(queue_url, name)
        chooser = random.Random(name)
        try:
            idle = 0
            while idle < 20:
                rows = queue.claim(chooser.randint(1, 4))
                idle = 0 if rows else idle + 1
                with guard:
                    for row in rows:
                        taken.append((name, row.id))
                        if row.student in holder:
                            problems.append(f"{row.student} in flight at {holder[row.student]} and {name}")
                        holder[row.student] = name
                time.sleep(chooser.uniform(0, 0.01))
                for row in rows:
                    with guard:
                        holder.pop(row.student, None)  # before the commit: another may take them only after it
                    if not queue.deliver(row.id, {}, "f", "full", 1.0, 1.0):
                        with guard:
                            problems.append(f"{name} could not deliver {row.id}")
                if not rows:
                    time.sleep(0.01)
        except Exception as error:  # reported by the test, not lost in the thread
            problems.append(f"{name}: {error!r}")
        finally:
            queue.close()

    threads = [threading.Thread(target=replica, args=(f"r{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT)
    assert problems == []
    ids = [id for _name, id in taken]
    assert sorted(ids) == list(range(1, 241)), "every row taken exactly once"
    assert len({name for name, _id in taken}) > 1, "the replicas shared the work"
    check = PostgresQueue(queue_url, "check")
    assert check.counts()[DELIVERED] == 240
    check.close()


def test_one_recorder_at_a_time_and_a_batch_marked_once(queue_url: str) -> None:
    first, second = PostgresQueue(queue_url, "r1"), PostgresQueue(queue_url, "r2")
    try:
        first.notice("a1", "ana", "x", "t")
        (row,) = first.claim(1)
        first.deliver(row.id, {}, "f", "full", 1.0, 1.0)
        with first.recording() as ours:
            assert ours
            with second.recording() as theirs:
                assert not theirs, "the gradebook has one writer at a time"
            first.mark_recorded([("ana", "x", row.id)])
        assert first.rows("SELECT recorded FROM submissions WHERE id = :id", id=row.id)[0]["recorded"] == 1
        with second.recording() as theirs:
            assert theirs, "released with its transaction"
    finally:
        first.close()
        second.close()


# -- two `attnkit serve` replicas, a real exchange, real students, kill -9 -----------------------------


@pytest.fixture(scope="module")
def replicas_course(postgres: PostgresServer) -> Iterator[dict]:
    suffix = f"{os.getpid() % 100000}"
    with shared_queue_course(postgres.create_database("course"), [f"ak40b{n}{suffix}" for n in range(3)]) as course:
        yield course


@pytest.mark.e2e
def test_two_replicas_a_kill_9_mid_burst_every_submission_delivered_once_and_recorded_once(replicas_course: dict) -> None:
    from nbgrader.api import Gradebook
    from nbgrader.utils import notebook_hash
    from test_service_exchange import CORRECT, MISTAKE, forge_submission

    course = type("Course", (), {"exchange": replicas_course["exchange"]})()
    root, users, url = replicas_course["root"], replicas_course["users"], replicas_course["url"]
    queue = PostgresQueue(url, "the-test")
    # A submission that keeps its replica busy for a few seconds (a sleeping cell): the one
    # whose replica is killed while grading it, so that a lease is surely left behind.
    slow = replicas_course["base"] / "slow.ipynb"
    notebook = json.loads(CORRECT.read_text(encoding="utf-8"))
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "import time\ntime.sleep(3)\n"})
    slow.write_text(json.dumps(notebook), encoding="utf-8")
    replicas = [Replica(name, root, replicas_course["base"] / f"{name}.log") for name in ("replica-a", "replica-b")]
    lingering: list[int] = []
    try:
        deadline = time.monotonic() + WAIT
        for replica in replicas:
            replica.wait_ready(deadline)
            status, body = replica.get("/health")
            assert json.loads(body)["status"] == "ready" and json.loads(body)["replica"] == replica.name
            assert f'attnkit_serve_replica_info{{replica="{replica.name}"}} 1' in replica.get("/metrics")[1]

        made = [forge_submission(course, users[0], slow, 0)]
        made += [forge_submission(course, users[n % 3], (CORRECT, MISTAKE)[n % 2], n) for n in range(1, 9)]
        names = [name for name, _secret in made]
        # Kill -9 the replica that grades the slow one, while it grades it (the burst under way).
        deadline = time.monotonic() + WAIT
        holder: list[dict] = []
        while not holder:
            holder = queue.rows("SELECT replica FROM submissions WHERE inbound = :name AND state = :grading", name=names[0], grading=GRADING)
            assert time.monotonic() < deadline, [r.log.read_text()[-2000:] for r in replicas]
            time.sleep(0.05)
        (killed,) = [r for r in replicas if r.name == holder[0]["replica"]]
        (survivor,) = [r for r in replicas if r is not killed]
        lingering = killed.children()
        os.kill(killed.process.pid, signal.SIGKILL)
        assert killed.process.wait(timeout=60) == -signal.SIGKILL
        left = {int(r["id"]) for r in queue.rows("SELECT id FROM submissions WHERE state = :grading AND replica = :name", grading=GRADING, name=killed.name)}
        assert left, "the killed replica held a lease"

        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            rows = queue.rows("SELECT * FROM submissions ORDER BY id")
            if len(rows) == len(names) and all(r["state"] == DELIVERED for r in rows):
                break
            assert survivor.process.poll() is None, survivor.log.read_text()[-3000:]
            time.sleep(0.2)
        assert sorted(r["inbound"] for r in rows) == sorted(names) and {r["state"] for r in rows} == {DELIVERED}, survivor.log.read_text()[-3000:]
        for row in rows:
            if row["id"] in left:  # the lease ran out: graded again by the survivor, once
                assert row["tries"] == 2 and row["replica"] == survivor.name, dict(row)
            else:
                assert row["tries"] == 1, dict(row)
        delivered = [e["id"] for r in replicas for e in r.events("delivered")]
        assert sorted(delivered) == sorted(r["id"] for r in rows), "each submission delivered once, by one replica"
        assert survivor.events("delivered") and any(e["id"] in left for e in survivor.events("delivered"))
        for name, secret in made:
            assert (course.exchange / "ch19" / "feedback" / f"{notebook_hash(secret=secret, notebook_id='attention')}.html").is_file(), name

        # The gradebook: every delivery settled once by the recorders (the killed replica's own
        # recorder finishes its batch and stops), one record per student: the latest's score.
        deadline = time.monotonic() + WAIT
        while queue.rows("SELECT COUNT(*) AS n FROM submissions WHERE state = :d AND recorded = 0", d=DELIVERED)[0]["n"] and time.monotonic() < deadline:
            time.sleep(0.5)
        survivor.process.send_signal(signal.SIGTERM)
        assert survivor.process.wait(timeout=300) == 0
        settled = sum(e["count"] for r in replicas for e in r.events("recorded"))
        assert settled == len(names), "each delivery recorded once"
        latest = {}
        for row in rows:
            latest[row["student"]] = row["score"]  # in id order: the last one counts (nbgrader's rule)
        with Gradebook(engine_url(url)) as gradebook:
            submissions = [(s.student.id, s.score) for s in gradebook.assignment_submissions("ch19-attention")]
        assert sorted(student for student, _score in submissions) == sorted(users), "one record per student"
        assert dict(submissions) == pytest.approx(latest)
        status = subprocess.run([str(BIN / "attnkit"), "serve", "--status", "--lang", "en"], cwd=root, capture_output=True, text=True, timeout=120)
        assert f"delivered={len(names)}" in status.stdout and "not yet in the gradebook: 0" in status.stdout, status.stdout + status.stderr
    finally:
        queue.close()
        for replica in replicas:
            if replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait()
        for pid in lingering:  # the killed replica's recorder ends after its batch (its parent died)
            deadline = time.monotonic() + 120
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)


@pytest.mark.e2e
def test_two_replicas_a_worker_killed_mid_grade_its_submission_graded_again_and_recorded(replicas_course: dict) -> None:
    """Issue 50, on the shared queue: the worker grading a submission at one of two replicas is
    killed with ``kill -9`` (as the OOM killer kills); that replica grades it again on its new
    worker, under its own lease (one try, no takeover), delivers it once with its full score, and
    its score is what nbgrader's gradebook in PostgreSQL holds. Before: "not graded" for good."""
    from nbgrader.api import Gradebook
    from service_course import sandboxes_of, sleeping, workers_of
    from test_service_exchange import CORRECT, forge_submission

    course = type("Course", (), {"exchange": replicas_course["exchange"]})()
    root, users, url = replicas_course["root"], replicas_course["users"], replicas_course["url"]
    student = users[2]
    queue = PostgresQueue(url, "the-test")
    slow = replicas_course["base"] / "slow-killed.ipynb"
    notebook = json.loads(CORRECT.read_text(encoding="utf-8"))
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "import time\ntime.sleep(2)\n"})
    slow.write_text(json.dumps(notebook), encoding="utf-8")
    replicas = [Replica(name, root, replicas_course["base"] / f"{name}.log") for name in ("replica-c", "replica-d")]
    try:
        deadline = time.monotonic() + WAIT
        for replica in replicas:
            replica.wait_ready(deadline)
        name, _secret = forge_submission(course, student, slow, 90)
        holder: Replica | None = None
        while holder is None:  # the replica grading it, once its sandbox sleeps in the last cell
            found = queue.rows("SELECT replica FROM submissions WHERE inbound = :name AND state = :grading", name=name, grading=GRADING)
            grading = [r for r in replicas if found and r.name == found[0]["replica"]]
            if grading and sleeping(sandboxes_of(grading[0].process.pid)):
                holder = grading[0]
            assert time.monotonic() < deadline, [r.log.read_text()[-2000:] for r in replicas]
            time.sleep(0.02)
        (worker,) = workers_of(holder.process.pid)
        os.kill(worker, signal.SIGKILL)
        while True:
            (row,) = queue.rows("SELECT * FROM submissions WHERE inbound = :name", name=name)
            if row["state"] == DELIVERED and row["recorded"]:
                break
            assert row["state"] in (QUEUED, GRADING, DELIVERED) and time.monotonic() < deadline, (dict(row), holder.log.read_text()[-3000:])
            time.sleep(0.2)
        results = json.loads(row["results"])
        assert not results.get("not_graded") and row["score"] == row["max_score"] > 0, (dict(row), holder.log.read_text()[-3000:])
        assert row["tries"] == 1 and row["replica"] == holder.name, dict(row)
        assert [e["retry"] for e in holder.events("regrading") if e["id"] == row["id"]] == [1]
        assert [e["id"] for r in replicas for e in r.events("delivered")].count(row["id"]) == 1
        with Gradebook(engine_url(url)) as gradebook:
            assert gradebook.find_submission("ch19-attention", student).score == pytest.approx(row["max_score"])
    finally:
        queue.close()
        for replica in replicas:
            replica.kill(signal.SIGTERM)
