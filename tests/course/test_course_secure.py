"""The course keeps its secrets (issue 49), with real unix users.

A course laid out as a git clone leaves it (folders 0755, files 0644, under a folder every user
can pass): ``attnkit serve`` and ``attnkit grade --gradebook`` refuse to start (exit 2), naming each
hidden part another user can read and the command that fixes it; a student reads all of it.
After ``attnkit course secure`` the student reads none of it (``open``, ``os.listdir``, ``os.stat``
as the student's own uid), a TA of the course's group reads it, and grading still works. A page the
service places, or nbgrader's ``release_feedback`` releases, is its student's alone: a classmate
who computes its name from the student's ``submission_secret.txt`` reads nothing, and the
student's own ``nbgrader fetch_feedback`` brings it.
"""

from __future__ import annotations

import datetime
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ta_machine import lend_to_others
from test_nbgrader_exchange import LENT, as_user, instructor, nbgrader_utc

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ASSIGNMENT = "ch19-attention"
STUDENT_ID = "wangfang"  # a demo submission (masks by multiplying): graded, not perfect
HIDDEN = ("autograder", "solutions", "submitted", "nbgrader_config.py", "gradebook.db")
# Inside each hidden folder: a file the student tries to read.
INSIDE = (
    "solutions/ch19-attention/attention.ipynb",
    "autograder/ch19_attention/reference.py",
    f"submitted/{STUDENT_ID}/ch19-attention/attention.ipynb",
)

pytestmark = [pytest.mark.root, pytest.mark.e2e]

# Run as the student with the system's Python (the checkout's venv may lie where they cannot pass):
# every read tried, each one that succeeded named.
PROBE = r"""
import json, os, sys
read = []
def first_byte(path):
    with open(path, "rb") as handle:
        return handle.read(1)
for kind, path in json.loads(sys.argv[1]):
    tries = {"file": [("open", first_byte)], "folder": [("listdir", os.listdir)], "inside": [("open", first_byte), ("stat", os.stat)]}[kind]
    for name, attempt in tries:
        try:
            attempt(path)
        except PermissionError:
            continue
        read.append(f"{name} {path}")
print(json.dumps(read))
"""


def user_reads(user: str, course: Path) -> list[str]:
    """What ``user`` can read of the course's hidden parts (each tried as their uid)."""
    targets = [("folder" if (course / name).is_dir() else "file", str(course / name)) for name in HIDDEN]
    targets += [("inside", str(course / name)) for name in INSIDE]
    run = subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/python3", "-c", PROBE, json.dumps(targets)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def attnkit(course: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", COLUMNS="200", ATTNKIT_LANG="en")
    return subprocess.run([str(BIN / "attnkit"), *args], cwd=course, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def clone() -> Iterator[dict]:
    """A course as a git clone leaves it, with a student's submission and a gradebook; a student
    and a TA (in the course's TA group) as unix users."""
    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.fail("this test creates unix users: run it as root (useradd)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-secure-"))
    base.chmod(0o755)
    suffix = f"{os.getpid() % 100000}"
    student, ta, group = f"ak49s{suffix}", f"ak49t{suffix}", f"ak49g{suffix}"
    course, exchange = base / "course", base / "exchange"
    try:
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        for user, extra in ((student, []), (ta, ["--groups", group])):
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", *extra, user], check=True, capture_output=True)
        exchange.mkdir(mode=0o777)
        exchange.chmod(0o777)
        course.mkdir(mode=0o755)
        for folder in ("solutions", "assignments", "autograder"):
            shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "examples" / "submitted" / STUDENT_ID / ASSIGNMENT, course / "submitted" / STUDENT_ID / ASSIGNMENT)
        shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(exchange)!r}\nc.AttnkitCourse.ta_group = {group!r}\n")
        for path in [course, *course.rglob("*")]:  # git's modes
            path.chmod(0o755 if path.is_dir() else 0o644)
        due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(days=1)
        instructor(course, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(due)}")
        instructor(course, str(BIN / "nbgrader"), "release_assignment", ASSIGNMENT)
        (course / "gradebook.db").chmod(0o644)
        yield {"course": course, "student": student, "ta": ta, "group": group}
    finally:
        for user in (student, ta):
            subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


GRADE = ("grade", "--submitted", "submitted", "--out", "graded", "--jobs", "1", "--gradebook", "gradebook.db")


def test_a_cloned_course_is_refused_then_secured_and_still_grades(clone: dict) -> None:
    course, student, ta = clone["course"], clone["student"], clone["ta"]
    # As cloned: the student reads every hidden part (the probe itself works).
    assert len(user_reads(student, course)) >= len(HIDDEN) + len(INSIDE)
    # Neither the service nor a grading into the course's gradebook starts; each names every part and the fix.
    for args in (("serve", "--jobs", "1"), GRADE):
        refused = attnkit(course, *args, timeout=120)
        said = refused.stdout + refused.stderr
        assert refused.returncode == 2, said[-3000:]
        for name in HIDDEN:
            assert str(course / name) in said, (name, said[-3000:])
        assert "attnkit course secure" in said and "--insecure-course" in said
    assert not (course / "graded").exists() and not (course / ".attnkit-serve" / "service.db").exists()

    secured = attnkit(course, "course", "secure")
    assert secured.returncode == 0, secured.stderr
    for name in HIDDEN:
        assert f"{course / name}: 07" in secured.stdout or f"{course / name}: 06" in secured.stdout, secured.stdout
    assert f"{course / 'solutions'}: 0755 {grp.getgrgid(os.stat(course).st_gid).gr_name} → 0750 {clone['group']}" in secured.stdout
    assert "→" not in attnkit(course, "course", "secure").stdout  # idempotent: nothing left to change
    # The student reads nothing; the TA (the course's group) reads it all; the release stays readable.
    assert user_reads(student, course) == []
    assert len(user_reads(ta, course)) >= len(HIDDEN) + len(INSIDE)
    assert stat.S_IMODE(os.stat(course / "assignments").st_mode) == 0o755

    graded = attnkit(course, *GRADE)
    assert graded.returncode == 0, (graded.stdout + graded.stderr)[-3000:]
    assert (course / "graded" / "grades.csv").is_file()
    # What the run made inside the course is as private: the OUT folder, the gradebook's files.
    for made in (course / "graded", course / "gradebook.db", course / "autograded"):
        assert os.stat(made).st_mode & 0o007 == 0, made
    from attnkit.course.secure import exposed

    assert exposed(course) == []
    assert user_reads(student, course) == []


# -- the pages ---------------------------------------------------------------------------------


def secret_of(home: Path) -> tuple[str, str]:
    """The student's last submission's secret and timestamp, from their nbgrader cache."""
    cache = home / ".local" / "share" / "jupyter" / "nbgrader_cache" / "ch19"
    last = sorted(cache.iterdir())[-1]
    return (last / "submission_secret.txt").read_text(), (last / "timestamp.txt").read_text()


def test_a_page_is_its_students_alone(tmp_path: Path) -> None:
    """The service's page, then a page released by nbgrader's release_feedback (the TA's path
    after ``make grade``): owned by the student, 0600; a classmate who computes the name from the
    student's secret reads nothing; the student's nbgrader fetch_feedback brings each."""
    from nbgrader.utils import notebook_hash

    from service_course import running_course
    from test_service_exchange import CORRECT

    with running_course("ak49p", ("owner", "classmate"), datetime.timedelta(days=1), attempts=0, visibility="full") as course:
        owner, classmate = course.users["owner"], course.users["classmate"]  # type: ignore[attr-defined]
        fetched = course.submit(owner, CORRECT)
        assert 'id="score"' in course.fetch(owner, fetched)
        secret, timestamp = secret_of(course.home(owner))
        page = course.exchange / "ch19" / "feedback" / f"{notebook_hash(secret=secret, notebook_id='attention')}.html"

        def only_the_owners() -> None:
            info = os.stat(page)
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (pwd.getpwnam(owner).pw_uid, 0o600), oct(info.st_mode)
            tried = as_user(classmate, course.home(classmate), "sh", "-c", f"cat '{page}' 2>&1 || true").stdout
            assert "Permission denied" in tried and "<html" not in tried, tried[:300]

        only_the_owners()
        # nbgrader's release_feedback, run by the instructor from the course root (after make grade
        # and generate_feedback): the same page name, given to the student the same way.
        released = course.root / "feedback" / owner / ASSIGNMENT
        released.mkdir(parents=True)
        (released / "attention.html").write_text("<html><body>released by the TA</body></html>")
        (released / "submission_secret.txt").write_text(secret)
        (released / "timestamp.txt").write_text(timestamp)
        instructor(course.root, str(BIN / "nbgrader"), "release_feedback", ASSIGNMENT)
        assert "released by the TA" in page.read_text()
        only_the_owners()
        deadline = time.monotonic() + 120
        while "released by the TA" not in fetched.read_text():
            assert time.monotonic() < deadline, fetched.read_text()[:300]
            as_user(owner, course.home(owner), str(BIN / "nbgrader"), "fetch_feedback", ASSIGNMENT)


def test_a_page_placed_without_root_is_its_students_by_an_acl() -> None:
    """A service or TA that is not root cannot chown: the page gets an ACL for its student only
    (setfacl); a student who is no user of the host gets nbgrader's 0644, with a warning, once."""
    if shutil.which("setfacl") is None:
        pytest.skip("setfacl is not installed (Debian: apt install acl)")
    suffix = f"{os.getpid() % 100000}"
    grader, owner, classmate = f"ak49i{suffix}", f"ak49o{suffix}", f"ak49c{suffix}"
    base = Path(tempfile.mkdtemp(prefix="attnkit-acl-"))
    base.chmod(0o755)
    try:
        for user in (grader, owner, classmate):
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True, capture_output=True)
        feedback = base / "feedback"
        feedback.mkdir(mode=0o711)
        feedback.chmod(0o711)
        shutil.chown(feedback, grader, grader)
        script = (
            "import sys; from pathlib import Path; from attnkit.course.secure import write_page; "
            "write_page(Path(sys.argv[1]), b'<html>page</html>', sys.argv[2]); write_page(Path(sys.argv[3]), b'<html>x</html>', 'nobody-here'); "
            "write_page(Path(sys.argv[4]), b'<html>y</html>', 'nobody-here')"
        )
        page, shared, again = feedback / "page.html", feedback / "shared.html", feedback / "again.html"
        run = subprocess.run(  # the checkout's interpreter, lent to the user as the exchange tests lend it
            lend_to_others(["runuser", "-u", grader, "--", sys.executable, "-c", script, str(page), owner, str(shared), str(again)], LENT),
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
        )
        assert run.returncode == 0, run.stderr
        assert run.stderr.count("0644") == 1, run.stderr  # the warning, once
        assert stat.S_IMODE(os.stat(shared).st_mode) == 0o644 and os.stat(page).st_mode & 0o077 == 0o040  # the ACL's mask
        reads = {user: subprocess.run(["runuser", "-u", user, "--", "cat", str(page)], capture_output=True, text=True) for user in (owner, classmate)}
        assert reads[owner].stdout == "<html>page</html>", reads[owner].stderr
        assert reads[classmate].returncode != 0 and "Permission denied" in reads[classmate].stderr
    finally:
        for user in (grader, owner, classmate):
            subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
