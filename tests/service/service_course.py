"""A module's course for the service's end-to-end tests: ``test_service_exchange.Course`` set up with
unix students of its own (useradd, removed at the end), the assignment released and fetched, the
service started under ``policy``. Shared by the issue-48 test files; each file uses its own user
prefix, since the files run in one pytest process (one pid, the users' suffix)."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_nbgrader_exchange import as_user, instructor, nbgrader_utc
from test_service_exchange import ASSIGNMENT, BIN, ROOT, Course


@contextmanager
def running_course(prefix: str, roles: tuple[str, ...], due_in: datetime.timedelta, **policy: object) -> Iterator[Course]:
    """The course, its students ``roles`` (``course.users[role]``: their unix names) and the running service."""
    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.fail("this test creates unix users: run it as root (useradd)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-serve-"))
    base.chmod(0o755)
    setup = Course(base)
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
        setup.start()
        yield setup
    finally:
        if setup.service is not None:
            setup.service.kill()
            setup.service.wait()
        for user in created:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
