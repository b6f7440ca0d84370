"""Issue 50 on two replicas sharing a PostgreSQL queue and gradebook: the host's faults are transient.

One PostgreSQL server for the module (``conftest.postgres``), the replicas' course
(``service_course.shared_queue_course``), two real ``attnkit serve --replica-id`` processes started
once for the module (``service_course.Replica``), real unix students' submissions in nbgrader's
exchange (``forge_submission``: written by root as them):

- one replica's recorder killed (-9, as the OOM killer does): that replica starts it again, both go
  on serving, every delivery is recorded once (before: that replica exited 2 at once);
- nbgrader's gradebook (in the same database) locked by another session past
  ``c.AttnkitServe.gradebook_timeout`` (1 s here; its tables held ``ACCESS EXCLUSIVE`` in an open
  transaction, as a TA's nbgrader command holds the gradebook, for as long as it takes both
  recorders to fail on it and wait): feedback goes on from both replicas, both stay ready, the
  recorders log ``gradebook-retry`` and wait, and once the lock is gone every submission is
  recorded, once (before: PostgreSQL's statements waited on the lock without end, the recorder
  silent and its recording lock held the while);
- one replica cut off from the database (every packet between them dropped, as a network
  partition does: nothing refused, only timeouts notice): it answers ``/health`` with 503
  within the network timeout (``queue.postgres.NETWORK_SECONDS``) and keeps answering it, the
  other goes on serving and recording what arrives meanwhile (the server drops the cut-off
  replica's session, and with it any recording lock it held), and once whole again it is ready
  again; nothing delivered twice;
- the database lost (the server stopped) and back: each replica answers ``/health`` with 503 and
  stops claiming, neither exits, and once the server is back both are ready again and every
  submission made meanwhile is delivered once and recorded (before: each exited with the
  database's error).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres import PARTITIONED, PostgresServer
from service_course import Replica, shared_queue_course

from attnkit.service.queue import DELIVERED
from attnkit.service.queue.postgres import PostgresQueue, engine_url

WAIT = 300.0  # seconds anything may take on the shared, loaded machine (nothing is timed)

pytestmark = [pytest.mark.root, pytest.mark.e2e]


@pytest.fixture(scope="module")
def pair(postgres: PostgresServer) -> Iterator[tuple[dict, list[Replica]]]:
    suffix = f"{os.getpid() % 100000}"
    with shared_queue_course(postgres.create_database("faults"), [f"ak50q{n}{suffix}" for n in range(2)]) as course:
        with open(course["root"] / "nbgrader_config.py", "a") as config:
            config.write("\nc.AttnkitServe.gradebook_timeout = 1\n")  # the recorders' retries capped at 4 s
        # replica-b reaches the queue through the server's second address, which ``partition`` cuts off alone.
        apart = course["url"].replace("@127.0.0.1:", f"@{PARTITIONED}:")
        replicas = [Replica(name, course["root"], course["base"] / f"{name}.log", url) for name, url in (("replica-a", ""), ("replica-b", apart))]
        try:
            deadline = time.monotonic() + WAIT
            for replica in replicas:
                replica.wait_ready(deadline)
            yield course, replicas
        finally:
            for replica in replicas:
                if replica.process.poll() is None:
                    replica.process.kill()
                    replica.process.wait()


def submit(course: dict, user: str, n: int) -> str:
    from test_service_exchange import CORRECT, forge_submission

    exchange = type("Course", (), {"exchange": course["exchange"]})()
    return forge_submission(exchange, user, CORRECT, n)[0]  # type: ignore[arg-type]


def until(condition: object, replicas: list[Replica], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        for replica in replicas:
            assert replica.process.poll() is None, f"{replica.name} stopped while waiting for {what}:\n{replica.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what}:\n" + "\n".join(r.log.read_text()[-2000:] for r in replicas)
        time.sleep(0.2)


def all_delivered_and_recorded(url: str, names: list[str]) -> bool:
    queue = PostgresQueue(url, "the-test", make_schema=False)
    try:
        rows = queue.rows("SELECT state, recorded FROM submissions WHERE inbound = ANY(:names)", names=names)
    finally:
        queue.close()
    return len(rows) == len(names) and all(r["state"] == DELIVERED and r["recorded"] for r in rows)


def recorder_of(replica: Replica) -> int:
    for pid in replica.children():
        try:
            if b"attnkit.service.recorder" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"{replica.name} has no recorder")


def check_gradebook(course: dict) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(engine_url(course["url"])) as gradebook:
        students = [s.student.id for s in gradebook.assignment_submissions("ch19-attention")]
    assert sorted(students) == sorted(set(students)), "one record per student"


def test_a_replicas_killed_recorder_is_started_again_and_every_delivery_is_recorded(pair: tuple[dict, list[Replica]]) -> None:
    course, replicas = pair
    killed = recorder_of(replicas[0])
    os.kill(killed, signal.SIGKILL)
    names = [submit(course, course["users"][n % 2], 100 + n) for n in range(4)]
    until(lambda: bool(replicas[0].events("recorder-restarted")), replicas, "the recorder started again")
    until(lambda: all_delivered_and_recorded(course["url"], names), replicas, "every submission delivered and recorded")
    assert recorder_of(replicas[0]) != killed
    delivered = [e["id"] for r in replicas for e in r.events("delivered")]
    assert len(delivered) == len(set(delivered)), "a submission delivered twice"
    check_gradebook(course)


def delivered_rows(url: str, names: list[str]) -> list[dict]:
    queue = PostgresQueue(url, "the-test", make_schema=False)
    try:
        found = queue.rows("SELECT state, recorded FROM submissions WHERE inbound = ANY(:names) AND state = :state", names=names, state=DELIVERED)
        return [dict(row) for row in found]
    finally:
        queue.close()


def retries(replicas: list[Replica]) -> int:
    return sum(len(r.events("gradebook-retry")) for r in replicas)


def test_a_gradebook_locked_past_its_timeout_is_waited_for_by_both_replicas_and_every_record_lands(pair: tuple[dict, list[Replica]]) -> None:
    import psycopg

    course, replicas = pair
    first = [submit(course, course["users"][0], 300)]  # nbgrader's tables made and the assignment registered first
    until(lambda: all_delivered_and_recorded(course["url"], first), replicas, "a first record")
    before = retries(replicas)
    with psycopg.connect(course["url"]) as holder:  # (a transaction: the locks last until its rollback)
        tables = [row[0] for row in holder.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        assert "submitted_assignment" in tables and "grade" in tables, tables
        holder.execute("LOCK TABLE " + ", ".join(f'public."{name}"' for name in tables) + " IN ACCESS EXCLUSIVE MODE")
        try:
            names = [submit(course, course["users"][n % 2], 310 + n) for n in range(4)]
            until(lambda: len(delivered_rows(course["url"], names)) == len(names), replicas, "feedback while the gradebook is locked")
            # A recorder that waits on the lock in silence never says so: the test fails here on
            # a gradebook without lock_timeout (no retry within the minute, the lock still held).
            deadline = time.monotonic() + 60
            until(lambda: retries(replicas) >= before + 2 or time.monotonic() > deadline, replicas, "retries of the locked gradebook")
            logs = "\n".join(r.log.read_text()[-1500:] for r in replicas)
            assert retries(replicas) >= before + 2, f"no gradebook-retry within 60 s of a locked gradebook:\n{logs}"
            assert not any(row["recorded"] for row in delivered_rows(course["url"], names)), "recorded through the lock"
            assert all(r.get("/health")[0] == 200 for r in replicas), [r.get("/health") for r in replicas]
        finally:
            holder.rollback()
    until(lambda: all_delivered_and_recorded(course["url"], names), replicas, "every record after the lock was released")
    assert any(r.events("gradebook-back") for r in replicas)
    delivered = [e["id"] for r in replicas for e in r.events("delivered")]
    assert len(delivered) == len(set(delivered)), "a submission delivered twice"
    check_gradebook(course)


def test_a_replica_cut_off_from_the_database_answers_503_while_the_other_serves_and_records(pair: tuple[dict, list[Replica]], postgres: PostgresServer) -> None:
    from attnkit.service.queue.postgres import NETWORK_SECONDS

    course, replicas = pair
    serving, cut = replicas
    with postgres.partition():
        # Every /health answered (never the client's timeout: the loop waits on the network for
        # at most NETWORK_SECONDS at a time), and 503 once the replica has noticed.
        deadline = time.monotonic() + WAIT
        answers: list[tuple[int, float]] = []
        while len([code for code, _ in answers if code == 503]) < 3:
            asked = time.monotonic()
            code, body = cut.get("/health")
            answers.append((code, time.monotonic() - asked))
            assert code in (200, 503) and cut.process.poll() is None, (code, body, cut.log.read_text()[-2000:])
            assert time.monotonic() < deadline, answers
            time.sleep(0.2)
        assert json.loads(body)["status"].startswith("paused"), body
        assert max(seconds for code, seconds in answers if code == 503) < 2 * NETWORK_SECONDS + 5, answers
        names = [submit(course, course["users"][n % 2], 400 + n) for n in range(2)]
        until(lambda: all_delivered_and_recorded(course["url"], names), [serving], "the other replica's deliveries and records while one is cut off")
        assert serving.get("/health")[0] == 200
    until(lambda: cut.get("/health")[0] == 200, replicas, "the cut-off replica ready again")
    delivered = [e["id"] for r in replicas for e in r.events("delivered")]
    assert len(delivered) == len(set(delivered)), "a submission delivered twice"
    check_gradebook(course)


def test_replicas_that_lose_the_database_answer_503_and_come_back_with_it(pair: tuple[dict, list[Replica]], postgres: PostgresServer) -> None:
    course, replicas = pair
    postgres.halt()
    try:
        names = [submit(course, course["users"][n % 2], 200 + n) for n in range(2)]  # arrive while the database is gone
        until(lambda: all(r.get("/health")[0] == 503 for r in replicas), replicas, "503 from each replica")
        for replica in replicas:
            status, body = replica.get("/health")
            assert json.loads(body)["status"].startswith("paused"), body
            assert replica.events("paused")
    finally:
        postgres.resume()
    until(lambda: all(r.get("/health")[0] == 200 for r in replicas), replicas, "each replica ready again")
    assert all(r.events("resumed") for r in replicas)
    until(lambda: all_delivered_and_recorded(course["url"], names), replicas, "the submissions made meanwhile delivered and recorded")
    delivered = [e["id"] for r in replicas for e in r.events("delivered")]
    assert len(delivered) == len(set(delivered)), "a submission delivered twice"
    check_gradebook(course)


def test_status_with_its_queue_out_of_reach_answers_promptly_and_names_it(tmp_path: Path) -> None:
    """``attnkit serve --status`` on a replica whose PostgreSQL refuses (nothing on the port) or
    never answers (a listener that accepts nothing: a hung or black-holed server): exit 2 within
    the connect timeout, one line naming the queue (its password hidden) and the driver's cause,
    no traceback (before: a traceback, exit 1)."""
    import socket

    from commands import attnkit
    from postgres import free_port

    from attnkit.service.queue.postgres import NETWORK_SECONDS

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        for port, cause in ((free_port(), "Connection refused"), (silent.getsockname()[1], "timeout")):
            url = f"postgresql://attnkit:secret@127.0.0.1:{port}/course"
            started = time.monotonic()
            result = attnkit("serve", "--status", "--lang", "en", "--queue-url", url, cwd=tmp_path, script=True, timeout=120)
            seconds = time.monotonic() - started
            said = result.stdout + result.stderr
            assert result.returncode == 2 and f"cannot read the queue at postgresql://attnkit:***@127.0.0.1:{port}/course" in said, said
            assert cause in said and "secret" not in said and "Traceback" not in said, said
            assert seconds < NETWORK_SECONDS + 25, f"{seconds:.1f} s"  # the connect timeout, and the CLI's start on a loaded machine
