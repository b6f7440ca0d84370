"""A module's course for the service's end-to-end tests: ``test_service_exchange.Course`` set up with
unix students of its own (useradd, removed at the end), the assignment released and fetched, the
service started under ``policy``. Shared by the issue-48 test files; each file uses its own user
prefix, since the files run in one pytest process (one pid, the users' suffix).

And the replicas' course (``shared_queue_course``): the queue and nbgrader's gradebook in one
PostgreSQL database, students without homes (their folders are written by root as them), and
``Replica``, one ``attnkit serve --replica-id`` process on it (test_service_replicas.py,
test_service_poison_replicas.py)."""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_nbgrader_exchange import as_user, instructor, nbgrader_utc
from commands import service_events
from test_service_exchange import ASSIGNMENT, BIN, ROOT, Course, free_port


@contextmanager
def running_course(
    prefix: str,
    roles: tuple[str, ...],
    due_in: datetime.timedelta,
    before_start: Callable[[Course], None] | None = None,
    log: Path | None = None,
    **policy: object,
) -> Iterator[Course]:
    """The course, its students ``roles`` (``course.users[role]``: their unix names) and the running service.
    ``before_start``: what the test sets in the course (its configuration, the gradebook) before the service starts;
    ``log``: where the service's log goes (else in the course's base folder)."""
    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.fail("this test creates unix users: run it as root (useradd)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-serve-"))
    base.chmod(0o755)
    setup = Course(base)
    if log is not None:
        setup.log = log
    suffix = f"{os.getpid() % 100000}"
    users = {role: f"{prefix}{role[0]}{suffix}" for role in roles}
    created: list[str] = []
    try:
        setup.exchange.mkdir()
        setup.exchange.chmod(0o777)
        setup.root.mkdir()
        (base / "home").mkdir(mode=0o755)
        for user in users.values():
            home = base / "home" / user
            subprocess.run(["userdel", "--remove", user], capture_output=True)  # a leftover of a killed run
            subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", user], check=True, capture_output=True)
            created.append(user)
            setup.homes[user] = home
            (home / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(setup.exchange)!r}\nc.CourseDirectory.course_id = 'ch19'\n")
        shutil.copy(ROOT / "nbgrader_config.py", setup.root / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", setup.root / "solutions")
        shutil.copytree(ROOT / "assignments", setup.root / "assignments")
        with open(setup.root / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(setup.exchange)!r}\n")
        due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + due_in
        instructor(setup.root, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(due)}")
        instructor(setup.root, str(BIN / "nbgrader"), "release_assignment", ASSIGNMENT)
        for user in users.values():
            as_user(user, setup.homes[user], str(BIN / "nbgrader"), "fetch_assignment", ASSIGNMENT)
        # As the docs say an instructor does: the hidden parts the grader's (and its TAs') alone.
        instructor(setup.root, str(BIN / "attnkit"), "course", "secure")
        setup.users = users  # type: ignore[attr-defined]
        setup.policy(**policy)
        if before_start is not None:
            before_start(setup)
        setup.start()
        yield setup
    finally:
        if setup.service is not None:
            setup.service.kill()
            setup.service.wait()
        for user in created:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def children_of(pid: int) -> list[int]:
    """``pid``'s child processes (every thread's), from /proc."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def workers_of(service: int) -> list[int]:
    """The grading workers of the ``attnkit serve`` process ``service``: its children forked from it
    (the same command line), not the seed, the recorder or the hub side (programs of their own)."""
    own = Path(f"/proc/{service}/cmdline").read_bytes()
    workers = []
    for child in children_of(service):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == own:
                workers.append(child)
        except OSError:
            pass
    return workers


def sandboxes_of(service: int) -> list[int]:
    """The sandboxes under the service ``service`` and what they started: its descendants three
    levels down or more (the service, the seed or a worker, a zygote, a sandbox)."""
    level, found = [service], []
    for depth in range(1, 8):
        level = [child for pid in level for child in children_of(pid)]
        if depth >= 3:
            found += level
    return found


# clock_nanosleep, the call ``time.sleep`` waits in, as /proc/<pid>/syscall numbers it
NANOSLEEP = {"x86_64": "230", "aarch64": "115"}


def sleeping(pids: list[int]) -> list[int]:
    """Those of ``pids`` waiting in ``time.sleep`` now (a notebook's cell that sleeps)."""
    import platform

    number = NANOSLEEP.get(platform.machine())
    found = []
    for pid in pids:
        try:
            if number is not None and Path(f"/proc/{pid}/syscall").read_text().split()[0] == number:
                found.append(pid)
        except (OSError, IndexError):
            pass
    return found


class Replica:
    """One ``attnkit serve --replica-id name --jobs 1 --lease-seconds 3`` on ``course``, its log in ``log``."""

    def __init__(self, name: str, course: Path, log: Path, queue_url: str = "") -> None:
        """``queue_url``: its own ``--queue-url`` (another address of the course's database), else the course's."""
        self.name, self.course, self.log, self.port = name, course, log, free_port()
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        command = [str(BIN / "attnkit"), "serve", "--jobs", "1", "--replica-id", name, "--lease-seconds", "3", "--metrics-port", str(self.port)]
        command += ["--queue-url", queue_url] if queue_url else []
        self.process = subprocess.Popen(command, cwd=course, env=env, stdin=subprocess.DEVNULL, stdout=open(log, "a"), stderr=subprocess.STDOUT)

    def events(self, kind: str) -> list[dict]:
        return service_events(self.log, kind)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def wait_ready(self, deadline: float) -> None:
        """Until its ``/health`` answers 200 (its workers warm), while it runs, before ``deadline`` (monotonic)."""
        while self.get("/health")[0] != 200:
            assert self.process.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)

    def children(self) -> list[int]:
        """Its child processes (workers, recorder), read before it is killed, to wait for them after."""
        found: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            found += [int(pid) for pid in (task / "children").read_text().split()]
        return found

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        self.process.wait(timeout=300)


@contextmanager
def shared_queue_course(url: str, users: list[str], due: datetime.datetime | None = None) -> Iterator[dict]:
    """A course whose queue (``c.AttnkitServe.queue_url``) and nbgrader gradebook
    (``c.CourseDirectory.db_url``) are the PostgreSQL database at ``url``; ``users`` made (no
    homes), the assignment added (due at ``due``, naive UTC, if given) and released; no attempt
    limit. Yields ``base``, ``exchange``, ``root``, ``users``, ``url``."""
    from attnkit.service.queue.postgres import engine_url

    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.fail("this test creates unix users: run it as root (useradd)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-replicas-"))
    base.chmod(0o755)
    exchange, root = base / "exchange", base / "course"
    created: list[str] = []
    try:
        exchange.mkdir()
        exchange.chmod(0o777)
        root.mkdir()
        for user in users:
            subprocess.run(["userdel", user], capture_output=True)  # a leftover of a killed run
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True, capture_output=True)
            created.append(user)
        shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", root / "solutions")
        shutil.copytree(ROOT / "assignments", root / "assignments")
        with open(root / "nbgrader_config.py", "a") as config:
            # The gradebook and the queue in one PostgreSQL database: nbgrader's tables, attnkit's schema.
            config.write(
                f"\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.db_url = {engine_url(url)!r}\n"
                f"c.AttnkitServe.queue_url = {url!r}\nc.AttnkitServe.policies = {{{ASSIGNMENT!r}: {{'attempts': 0}}}}\n"
            )
        due_option = [f"--duedate={nbgrader_utc(due)}"] if due is not None else []
        instructor(root, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, *due_option)
        instructor(root, str(BIN / "nbgrader"), "release_assignment", ASSIGNMENT)
        # As the docs say an instructor does: the hidden parts the grader's (and its TAs') alone.
        instructor(root, str(BIN / "attnkit"), "course", "secure")
        yield {"base": base, "exchange": exchange, "root": root, "users": users, "url": url}
    finally:
        for user in created:
            subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
