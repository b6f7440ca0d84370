"""Issue 50 on two replicas sharing a PostgreSQL queue and gradebook: the host's faults are transient.

One PostgreSQL server for the module (``conftest.postgres``), the replicas' course
(``service_course.shared_queue_course``), two real ``attnkit serve --replica-id`` processes started
once for the module (``service_course.Replica``), real unix students' submissions in nbgrader's
exchange (``forge_submission``: written by root as them):

- one replica's recorder killed (-9, as the OOM killer does): that replica starts it again, both go
  on serving, every delivery is recorded once (before: that replica exited 2 at once);
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
from postgres import PostgresServer
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
        replicas = [Replica(name, course["root"], course["base"] / f"{name}.log") for name in ("replica-a", "replica-b")]
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
