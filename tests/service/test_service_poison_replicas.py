"""Issue 48's poison folders against two ``attnkit serve`` replicas sharing a real PostgreSQL.

test_service_poison.py's seven folders (``Attacks``: made in the attacker's name, by their uid)
against two real replicas (``--jobs 1``, 3 s leases) of one course whose queue and nbgrader
gradebook are one PostgreSQL database (``service_course.shared_queue_course``, as in
test_service_replicas.py). Before the fix a folder that stopped a replica stopped the other too:
both saw the folder, and a row whose replica died was handed on by its lease to the next one.
Here: both replicas keep running (no ``stopped``), a classmate's submission after the attacks is
delivered once, every poison row is refused/failed with its cause or graded as what it is, no
row is left queued or in grading, nothing is delivered twice, and the gradebook holds the
classmate's record and the attacker's forged-early submission late by the service's clock. Then
one replica is killed with ``kill -9`` and the other delivers a new submission.

And the queue's own rule that makes it so across replicas (fast, no service): a row whose lease
lapses ``MAX_TRIES`` times is failed by ``PostgresQueue.expire`` instead of being handed to yet
another replica (test_queue_contract.py has the same rule through ``recover``, one replica
restarting under its name).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from postgres import PostgresServer
from service_course import Replica, shared_queue_course
from test_service_exchange import ASSIGNMENT, CORRECT, WAIT, Course, forge_submission
from test_service_poison import Attacks

from attnkit.service.queue import DELIVERED, FAILED, GRADING, MAX_TRIES, QUEUED, REFUSED
from attnkit.service.queue.postgres import PostgresQueue, engine_url

pytestmark = [pytest.mark.root]
SETTLED = (DELIVERED, FAILED, REFUSED)


@dataclass
class Poisoned:
    course: Course  # the exchange's and the course's folders (no service of its own: the replicas are)
    url: str
    users: dict[str, str]  # role -> unix name
    attacks: Attacks
    replicas: list[Replica]
    check: PostgresQueue  # the test's own reader of the shared queue
    classmate: tuple[str, str]  # the classmate's folder after the attacks: its name and secret
    lingering: list[int]  # a killed replica's children (its recorder finishes its batch), waited for at the end

    def row(self, inbound: str) -> dict:
        found = self.check.rows("SELECT * FROM submissions WHERE inbound = :inbound", inbound=inbound)
        assert len(found) == 1, (inbound, found, self.logs())
        return dict(found[0])

    def attack(self, kind: str) -> dict:
        from attnkit.service.exchange import inbound_key

        return self.row(inbound_key(os.fsdecode(self.attacks.made[kind])))

    def delivered(self) -> list[int]:
        """Every ``delivered`` the replicas logged, by row id (a replica killed keeps its log)."""
        return [int(event["id"]) for replica in self.replicas for event in replica.events("delivered")]

    def logs(self) -> str:
        return "\n".join(f"--- {r.name} (exit {r.process.poll()})\n{r.log.read_text()[-2500:]}" for r in self.replicas)

    def settle(self, count: int, alive: list[Replica]) -> list[dict]:
        """Until ``count`` rows exist and none is queued or in grading; ``alive`` must stay running."""
        deadline = time.monotonic() + WAIT
        while True:
            for replica in alive:
                assert replica.process.poll() is None, f"{replica.name} stopped\n{self.logs()}"
            rows = [dict(r) for r in self.check.rows("SELECT * FROM submissions ORDER BY id")]
            if len(rows) >= count and all(r["state"] in SETTLED for r in rows):
                return rows
            assert time.monotonic() < deadline, f"{[(r['inbound'], r['state']) for r in rows]}\n{self.logs()}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def poisoned(postgres: PostgresServer) -> Iterator[Poisoned]:
    """Two replicas ready; the seven attacks; then the classmate's folder; every row settled."""
    suffix = f"{os.getpid() % 100000}"
    users = {role: f"ak48r{role[0]}{suffix}" for role in ("attacker", "classmate")}
    # Due an hour ago: every submission of this module is late by the service's clock.
    due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(hours=1)
    with shared_queue_course(postgres.create_database("poison"), list(users.values()), due) as made:
        course = Course(made["base"])
        replicas = [Replica(name, made["root"], made["base"] / f"{name}.log") for name in ("replica-a", "replica-b")]
        check = PostgresQueue(made["url"], "the-test")
        lingering: list[int] = []
        try:
            deadline = time.monotonic() + WAIT
            for replica in replicas:
                replica.wait_ready(deadline)
            attacks = Attacks(course)
            attacks.make_all(users["attacker"])
            classmate = forge_submission(course, users["classmate"], CORRECT, 1)
            state = Poisoned(course, made["url"], users, attacks, replicas, check, classmate, lingering)
            state.settle(len(attacks.made) + 1, replicas)
            yield state
        finally:
            check.close()
            for replica in replicas:
                replica.kill(signal.SIGTERM)
            for pid in lingering:  # a killed replica's recorder ends after its batch (its parent died)
                until = time.monotonic() + 120
                while Path(f"/proc/{pid}").exists() and time.monotonic() < until:
                    time.sleep(0.2)


@pytest.mark.e2e
def test_both_replicas_run_on_and_the_classmate_is_delivered_once(poisoned: Poisoned) -> None:
    from nbgrader.utils import notebook_hash

    for replica in poisoned.replicas:
        assert replica.process.poll() is None and replica.events("stopped") == [], poisoned.logs()
        assert replica.get("/health")[0] == 200, replica.name
    name, secret = poisoned.classmate
    row = poisoned.row(name)
    assert row["state"] == DELIVERED and row["tries"] == 1 and row["score"] == row["max_score"], row
    assert poisoned.delivered().count(int(row["id"])) == 1, "delivered once, by one replica"
    assert (poisoned.course.exchange / "ch19" / "feedback" / f"{notebook_hash(secret=secret, notebook_id='attention')}.html").is_file()


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["name-not-utf8", "secret-not-utf8", "folder-named-ipynb", "file-name-not-utf8", "zone-dateutil-cannot-read", "year-9999"])
def test_a_poison_folder_is_refused_or_failed_with_its_cause_or_graded_as_what_it_is(poisoned: Poisoned, kind: str) -> None:
    row = poisoned.attack(kind)
    assert row["state"] in SETTLED, (kind, row["state"])
    assert row["tries"] <= 1, f"{kind}: taken {row['tries']} times (handed from replica to replica)"
    if row["state"] != DELIVERED:
        assert row["cause"], f"{kind}: {row['state']} without a cause"
    else:
        assert row["score"] == row["max_score"], "what was graded is the attacker's own correct notebook"


@pytest.mark.e2e
def test_no_row_is_left_queued_or_in_grading_and_nothing_is_delivered_twice(poisoned: Poisoned) -> None:
    rows = [dict(r) for r in poisoned.check.rows("SELECT * FROM submissions ORDER BY id")]
    assert len(rows) == len(poisoned.attacks.made) + 1, [r["inbound"] for r in rows]
    assert not [r for r in rows if r["state"] in (QUEUED, GRADING)]
    delivered = poisoned.delivered()
    assert len(delivered) == len(set(delivered)), f"delivered twice: {delivered}"
    assert sorted(delivered) == sorted(int(r["id"]) for r in rows if r["state"] == DELIVERED)


@pytest.mark.e2e
def test_the_forged_early_timestamp_is_late_on_the_row_and_in_nbgraders_postgresql_gradebook(poisoned: Poisoned) -> None:
    from nbgrader.api import Gradebook

    row = poisoned.attack("forged-early-timestamp")
    assert row["state"] == DELIVERED, row
    late = json.loads(row["results"]).get("late")
    assert late is not None and late["seconds_late"] > 0 and not late["timestamp"].startswith("2020"), late
    deadline = time.monotonic() + WAIT
    while poisoned.check.unrecorded() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert poisoned.check.unrecorded() == 0, poisoned.logs()
    with Gradebook(engine_url(poisoned.url)) as gradebook:
        classmate = gradebook.find_submission(ASSIGNMENT, poisoned.users["classmate"])
        assert classmate.score == pytest.approx(poisoned.row(poisoned.classmate[0])["score"]), "the page's score is the record's"
        attacker = gradebook.find_submission(ASSIGNMENT, poisoned.users["attacker"])
        assert attacker.timestamp is not None and attacker.timestamp > attacker.duedate, (attacker.timestamp, attacker.duedate)
        assert attacker.total_seconds_late > 0
        assert attacker.timestamp.year != 2020


@pytest.mark.e2e
def test_after_a_kill_9_of_one_replica_the_other_delivers_a_new_submission(poisoned: Poisoned) -> None:
    killed, survivor = poisoned.replicas
    poisoned.lingering += killed.children()
    killed.kill()
    assert killed.process.returncode == -signal.SIGKILL
    before = len(poisoned.check.rows("SELECT id FROM submissions"))
    name, _secret = forge_submission(poisoned.course, poisoned.users["classmate"], CORRECT, 2)
    poisoned.settle(before + 1, [survivor])
    row = poisoned.row(name)
    assert row["state"] == DELIVERED and row["replica"] == survivor.name and row["tries"] == 1, row
    assert poisoned.delivered().count(int(row["id"])) == 1
    assert survivor.events("stopped") == [] and survivor.get("/health")[0] == 200


# -- the queue's rule, without a service ---------------------------------------------------------


def test_a_row_whose_lease_lapses_max_tries_times_is_failed_by_expire_not_handed_on(postgres: PostgresServer) -> None:
    """Each replica claims the row and dies (no heartbeat): its 1 s lease lapses and the next
    replica's claim hands it on, until it has been cut short ``MAX_TRIES`` times; then the next
    claim fails it with the cause and takes the classmate's instead."""
    url = postgres.create_database("lapse")
    replicas = [PostgresQueue(url, f"r{n}", lease_seconds=1.0) for n in range(MAX_TRIES + 1)]
    try:
        poison = replicas[0].notice("evil", "eve", "x", "t", noticed=1.0)
        replicas[0].notice("fine", "bo", "x", "t", noticed=2.0)
        assert poison is not None
        for n in range(MAX_TRIES):
            (taken,) = replicas[n].claim(1)
            assert (taken.inbound, taken.tries) == ("evil", n + 1), "handed on while under MAX_TRIES"
            assert replicas[n].rows("SELECT replica FROM submissions WHERE id = :id", id=poison)[0]["replica"] == f"r{n}"
            time.sleep(1.3)  # r{n} is dead: it renews nothing, and its lease lapses
        assert [row.inbound for row in replicas[MAX_TRIES].claim(2)] == ["fine"], "the poison is not handed to a fourth replica"
        gave_up = replicas[MAX_TRIES].row(poison)
        assert gave_up.state == FAILED and gave_up.tries == MAX_TRIES and str(MAX_TRIES) in gave_up.cause, gave_up
        found = replicas[MAX_TRIES].find(poison)
        assert found is not None and found["recorded"] == 1 and found["leased_until"] is None
        assert not replicas[MAX_TRIES - 1].deliver(poison, {}, "f", "full", 1.0, 1.0), "the last holder lost it"
    finally:
        for queue in replicas:
            queue.close()
