"""Issue 50: a full disk pauses ``attnkit serve``'s intake, and it resumes by itself when space returns.

The whole course (its folder, the exchange, the students' homes) on a small tmpfs of its own
(mounted for the module, as root), filled up by a file of zeros and freed by removing it:

- running: a submission that becomes complete (its folder made 0777, nbgrader submit's last step)
  while the disk is full is not refused: the service logs one ``paused`` line, ``--status`` says
  so, ``/health`` answers 503; the filler removed, it logs ``resumed`` and grades it (before: the
  folder was refused with "OSError: No space left on device", the submission lost);
- started while the disk is full: it starts, paused, and resumes when space returns, then grades
  what nbgrader submit brings (before: a traceback and exit 1 at the warm-up's copy).
"""

from __future__ import annotations

import datetime
import errno
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import attnkit
from service_course import running_course
from test_service_exchange import ASSIGNMENT, CORRECT, WAIT, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: run it as root")
    tmp_path_factory.getbasetemp()  # pytest's own folders stay where they were, off the small disk
    mount = Path(tempfile.mkdtemp(prefix="attnkit-small-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192m,mode=0755", "tmpfs", str(mount)], check=True, capture_output=True)
    saved = tempfile.tempdir
    tempfile.tempdir = str(mount)  # running_course's base (course, exchange, homes) goes there
    try:
        yield mount
    finally:
        tempfile.tempdir = saved
        subprocess.run(["umount", "--lazy", str(mount)], capture_output=True)
        shutil.rmtree(mount, ignore_errors=True)


@pytest.fixture(scope="module")
def course(small_disk: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Course]:
    # The service's log off the small disk, as a journal is: a full disk must not cost the lines that say so.
    log = tmp_path_factory.mktemp("disk-full-log") / "serve.log"
    with running_course("ak50d", ("first", "second"), datetime.timedelta(days=1), log=log, attempts=0, visibility="full") as setup:
        assert str(setup.root).startswith(str(small_disk))
        yield setup


def fill(disk: Path) -> Path:
    """A file of zeros over every free byte of ``disk``; its path (remove it to free the space)."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as handle:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    handle.write(chunk[:size])
            except OSError as error:
                assert error.errno == errno.ENOSPC
    assert os.statvfs(disk).f_bavail == 0
    return filler


def until(condition: object, course: Course, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert course.service is not None and course.service.poll() is None, f"the service stopped while waiting for {what}:\n{course.log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what}:\n{course.log.read_text()[-3000:]}"
        time.sleep(0.2)


def health(course: Course) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{course.port}/health", timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def unfinished_submission(course: Course, user: str) -> Path:
    """What ``nbgrader submit`` leaves in inbound/ just before its last step (the folder not yet 0777)."""
    name = f"{user}+{ASSIGNMENT}+2026-12-07 07:00:00.000000 UTC+diskfull"
    folder = course.exchange / "ch19" / "inbound" / name
    folder.mkdir(mode=0o700)
    (folder / "attention.ipynb").write_bytes(CORRECT.read_bytes())
    (folder / "timestamp.txt").write_text("2026-12-07 07:00:00.000000 UTC")
    (folder / "submission_secret.txt").write_text("d" * 128)
    for path in [folder, *folder.iterdir()]:
        shutil.chown(path, user, user)
    return folder


def state_of(course: Course, inbound: str) -> str | None:
    with course.db() as db:
        found = db.execute("SELECT state FROM submissions WHERE inbound = ?", (inbound,)).fetchone()
    return None if found is None else str(found["state"])


def test_a_full_disk_pauses_intake_and_it_resumes_by_itself(course: Course, small_disk: Path) -> None:
    first = course.users["first"]  # type: ignore[attr-defined]
    until(lambda: health(course) == 200, course, "ready")
    folder = unfinished_submission(course, first)
    filler = fill(small_disk)
    try:
        folder.chmod(0o777)  # complete now, while the disk is full: the service's copy cannot be made
        until(lambda: len(course.events("paused")) >= 1, course, "paused")
        assert state_of(course, folder.name) is None  # not refused, not lost: waiting
        assert health(course) == 503
        status = attnkit("serve", "--status", "--lang", "en", cwd=course.root, script=True)
        # (its paused.txt could not be written on the full disk: --status measures the space itself)
        assert "almost full (0 bytes free): intake is paused" in status.stdout, status.stdout + status.stderr
        assert "No space left" in course.events("paused")[0]["reason"]
        assert "Traceback" not in course.log.read_text()
    finally:
        filler.unlink()
    until(lambda: state_of(course, folder.name) == "delivered", course, "the submission graded after the space returned")
    assert course.events("resumed")
    assert len(course.events("paused")) == 1  # one line, not one per turn
    with course.db() as db:
        row = db.execute("SELECT score, max_score FROM submissions WHERE inbound = ?", (folder.name,)).fetchone()
    assert row["score"] == row["max_score"] > 0
    until(lambda: health(course) == 200, course, "ready again")


def test_a_service_started_on_a_full_disk_waits_then_serves(course: Course, small_disk: Path) -> None:
    second = course.users["second"]  # type: ignore[attr-defined]
    paused = len(course.events("paused"))
    filler = fill(small_disk)
    try:
        assert course.stop() == 0
        course.start()  # on main: a traceback, exit 1 (the warm-up's copy)
        until(lambda: len(course.events("paused")) > paused, course, "paused at the start")
        assert health(course) == 503
        status = attnkit("serve", "--status", "--lang", "en", cwd=course.root, script=True)
        assert status.returncode == 0 and "intake is paused" in status.stdout, status.stdout + status.stderr
    finally:
        filler.unlink()
    until(lambda: health(course) == 200, course, "ready after the space returned")
    assert 'id="score"' in course.fetch(second, course.submit(second, CORRECT))
