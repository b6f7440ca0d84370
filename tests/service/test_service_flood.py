"""Issue 48: fair under a flood. One student floods inbound/; twenty classmates still get their pages.

Real unix students, nbgrader's real exchange and the real service (``--jobs 1``), as in
test_service_exchange.py. The attacker makes, with their own uid, 200 finished submissions (as
``forge_submission`` does: their uid owns every file, the mode 0777 set last) and 10,000
unfinished names shaped like submissions (9,000 folders that never become 0777 and 1,000 hard
links to a file of theirs), while twenty classmates submit once each. Each classmate's page is
delivered (a generous deadline; no timing is asserted on a shared machine: each classmate's
latency is printed, from the service's ``delivered`` events); the attacker's submissions beyond
MAX_WAITING are refused with the reason; ``/health`` answers throughout; the service runs on; and
the unfinished names beyond the attacker's cap (UNFINISHED_PER_OWNER, by the uid owning them) are
counted in ``attnkit_serve_unfinished_ignored_total`` and logged as a few ``unfinished-capped``
lines, never a line per name.
"""

from __future__ import annotations

import datetime
import os
import pwd
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from service_course import running_course
from test_service_exchange import ASSIGNMENT, CORRECT, MISTAKE, WAIT, Course, forge_submission

pytestmark = [pytest.mark.e2e, pytest.mark.root]

FINISHED = 200  # the attacker's finished submissions
UNFINISHED_FOLDERS = 9000  # and unfinished names: folders never made 0777 ...
UNFINISHED_LINKS = 1000  # ... and hard links to a file of theirs
CLASSMATES = 20


@dataclass
class Health:
    """``GET /health`` every 0.2 s from a thread of the test while the flood lasts."""

    port: int
    answers: list[tuple[int, float]] = field(default_factory=list)  # (status, seconds)
    unanswered: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        while not self.done.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=30) as answer:
                    self.answers.append((answer.status, time.monotonic() - started))
            except urllib.error.HTTPError as error:  # 503: answered, not ready
                self.answers.append((error.code, time.monotonic() - started))
            except OSError as error:
                self.unanswered.append(f"{type(error).__name__}: {error}")
            self.done.wait(0.2)


@dataclass
class Flood:
    course: Course
    attacker: str
    classmates: list[str]
    classmate_names: dict[str, str]  # classmate: their inbound name
    health: Health
    seconds: float  # from the flood's first name to the last classmate's page


def unfinished_name(attacker: str, n: int) -> str:
    return f"{attacker}+{ASSIGNMENT}+2026-12-07 08:{n // 6000:02d}:{n // 100 % 60:02d}.{n:06d} UTC+unfinished{n}"


def make_unfinished(course: Course, attacker: str, numbers: range) -> None:
    """Names shaped like the attacker's submissions that never finish, owned by their uid:
    folders (mode 0755) and hard links to one file of theirs, made by root and chowned."""
    inbound = course.exchange / "ch19" / "inbound"
    uid = pwd.getpwnam(attacker).pw_uid
    source = course.base / "attacker-file"
    if not source.exists():
        source.write_text("not a submission")
        os.chown(source, uid, uid)
    for n in numbers:
        path = inbound / unfinished_name(attacker, n)
        if n % 10 == 9 and n < 10 * UNFINISHED_LINKS:
            os.link(source, path)
        else:
            os.mkdir(path, 0o755)
            os.chown(path, uid, uid)


def metric(course: Course, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{course.port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found is not None, text
    return float(found.group(1))


def waiting_reason() -> str:
    from attnkit.i18n import _
    from attnkit.service.queue import MAX_WAITING

    return _("你已有 {count} 份提交在排队等待评分（上限）：这份未评分，请等反馈后再提交").format(count=MAX_WAITING)


@pytest.fixture(scope="module")
def flood() -> Iterator[Flood]:
    with running_course("ak48f", ("attacker",), datetime.timedelta(days=1), attempts=0, visibility="full") as course:
        suffix = f"{os.getpid() % 100000}"
        classmates = [f"ak48c{n:02d}x{suffix}" for n in range(CLASSMATES)]
        made: list[str] = []
        health = Health(course.port)
        poller = threading.Thread(target=health.poll, daemon=True)
        try:
            for user in classmates:  # no home: their submissions are forged as nbgrader submit leaves them
                subprocess.run(["userdel", user], capture_output=True)  # a leftover of a killed run
                subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True, capture_output=True)
                made.append(user)
            attacker = course.users["attacker"]  # type: ignore[attr-defined]
            poller.start()
            started = time.monotonic()
            names: dict[str, str] = {}
            chunks = 10  # each: a tenth of the unfinished names, of the finished ones, two classmates
            total = UNFINISHED_FOLDERS + UNFINISHED_LINKS
            for chunk in range(chunks):
                make_unfinished(course, attacker, range(chunk * total // chunks, (chunk + 1) * total // chunks))
                for n in range(chunk * FINISHED // chunks, (chunk + 1) * FINISHED // chunks):
                    forge_submission(course, attacker, CORRECT, n)
                for n in range(chunk * CLASSMATES // chunks, (chunk + 1) * CLASSMATES // chunks):
                    names[classmates[n]] = forge_submission(course, classmates[n], (CORRECT, MISTAKE)[n % 2], 1000 + n)[0]
            print(f"\nthe flood made in {time.monotonic() - started:.1f} s")
            deadline = time.monotonic() + WAIT
            while not set(classmates) <= {e["student"] for e in course.events("delivered")} and time.monotonic() < deadline:
                assert course.service is not None and course.service.poll() is None, course.log.read_text()[-4000:]
                time.sleep(0.5)
            seconds = time.monotonic() - started
            while time.monotonic() < deadline:  # every one of the attacker's finished folders looked at
                with course.db() as db:
                    if db.execute("SELECT COUNT(*) FROM submissions WHERE student = ?", (attacker,)).fetchone()[0] >= FINISHED:
                        break
                time.sleep(0.5)
            health.done.set()
            poller.join(timeout=60)
            yield Flood(course, attacker, classmates, names, health, seconds)
        finally:
            health.done.set()
            for user in made:
                subprocess.run(["userdel", user], capture_output=True)


def test_each_classmate_is_delivered_under_the_flood(flood: Flood) -> None:
    delivered = {e["student"]: e for e in flood.course.events("delivered") if e["student"] in flood.classmates}
    print(f"\nall {len(delivered)} classmates delivered {flood.seconds:.1f} s after the flood began")
    for student in flood.classmates:
        if student in delivered:
            event = delivered[student]
            print(f"  {student}: latency {event['latency']:.3f} s, waited {event['waited']:.3f} s, grading {event['grading']:.3f} s")
    missing = sorted(set(flood.classmates) - set(delivered))
    assert not missing, f"no page for {missing}\n" + flood.course.log.read_text()[-4000:]
    with flood.course.db() as db:
        for student, name in flood.classmate_names.items():
            row = db.execute("SELECT state, score, max_score FROM submissions WHERE inbound = ?", (name,)).fetchone()
            assert row is not None and row["state"] == "delivered", (student, row and dict(row))


def test_the_attacker_beyond_max_waiting_is_refused_with_the_reason(flood: Flood) -> None:
    from attnkit.service.queue import MAX_WAITING

    with flood.course.db() as db:
        rows = db.execute("SELECT state, cause FROM submissions WHERE student = ?", (flood.attacker,)).fetchall()
    refused = [row for row in rows if row["state"] == "refused"]
    print(f"\nthe attacker's {FINISHED} finished submissions: {len(refused)} refused, {len(rows) - len(refused)} taken")
    assert len(rows) == FINISHED, len(rows)
    assert all(row["cause"] == waiting_reason() for row in refused), {row["cause"] for row in refused}
    assert refused, "the attacker's flood was all queued"
    assert 0 < len(rows) - len(refused)
    assert sum(row["state"] == "queued" for row in rows) <= MAX_WAITING


def test_health_answered_throughout_and_the_service_runs_on(flood: Flood) -> None:
    course, health = flood.course, flood.health
    times = [seconds for _status, seconds in health.answers]
    print(f"\n/health: {len(times)} answers during the flood, slowest {max(times, default=float('nan')):.3f} s, unanswered {len(health.unanswered)}")
    assert times and not health.unanswered, health.unanswered[:5]
    assert any(status == 200 for status, _seconds in health.answers)
    assert course.service is not None and course.service.poll() is None
    assert course.events("stopped") == []


def test_unfinished_names_over_the_owners_cap_are_counted_and_logged_per_uid(flood: Flood) -> None:
    from attnkit.service.inbound import CAPPED_LOG_SECONDS, UNFINISHED_PER_OWNER

    course = flood.course
    ignored = metric(course, "attnkit_serve_unfinished_ignored_total")
    lines = course.events("unfinished-capped")
    print(f"\nunfinished names ignored over the cap: {ignored:.0f}; unfinished-capped lines: {lines}")
    assert ignored > 0
    uid = pwd.getpwnam(flood.attacker).pw_uid
    assert lines and {line["uid"] for line in lines} == {uid} and all(line["cap"] == UNFINISHED_PER_OWNER for line in lines)
    running = lines[-1]["time"] - course.events("started")[-1]["time"]
    assert len(lines) <= 1 + running / CAPPED_LOG_SECONDS, "one line per uid per minute, never one per name"


def test_an_ignored_name_finished_later_is_taken_by_its_event(flood: Flood) -> None:
    """An unfinished folder over the cap that the attacker then finishes (files written, mode
    0777 last): the event of its chmod gets it looked at, and it has its row."""
    course, attacker = flood.course, flood.attacker
    name = unfinished_name(attacker, UNFINISHED_FOLDERS + UNFINISHED_LINKS - 2)  # a folder, among the last made
    folder = course.exchange / "ch19" / "inbound" / name
    stamp = "2026-12-07 08:30:00.000000 UTC"
    (folder / "attention.ipynb").write_bytes(CORRECT.read_bytes())
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text("f" * 128)
    for path in folder.iterdir():
        shutil.chown(path, attacker, attacker)
    folder.chmod(0o777)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with course.db() as db:
            row = db.execute("SELECT state FROM submissions WHERE inbound = ?", (name,)).fetchone()
        if row is not None:
            break
        time.sleep(0.2)
    assert row is not None, course.log.read_text()[-3000:]
