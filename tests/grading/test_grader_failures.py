"""The grader's own failures stop the run with their cause (issue 23): a hidden suite that cannot
be collected is the grader's fault, never "not graded" for every student."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, ROOT, SOLUTION, load, write
from commands import attnkit, tool_env

pytestmark = pytest.mark.e2e


def grade(autograder: Path, submitted: Path, out: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return attnkit(
        "grade",
        "--autograder",
        str(autograder),
        "--submitted",
        str(submitted),
        "--out",
        str(out),
        "--jobs",
        "2",
        "--quiet",
        "--force",
        script=True,
        env=tool_env(COLUMNS="300"),
        cwd=cwd,
    )


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A copy of the course's suites and source notebooks, and a class of two."""
    for part in ("autograder", "solutions"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    for student in ("ann", "bob"):
        write(load(SOLUTION), tmp_path / "submitted" / student / ASSIGNMENT)
    return tmp_path


@pytest.mark.parametrize(
    "broken",
    [
        ("test_ch19_0_broken.py", "def test_typo(student):\n    assert student.scaled_attention(\n"),  # a syntax error
        ("test_ch19_0_broken.py", "import attnkit_no_such_module\n"),  # a failed import
        ("test_ch19_0_broken.py", b"x = '\xff\xfe not utf-8'\n"),  # an unreadable file
    ],
    ids=["syntax-error", "import-error", "not-utf8"],
)
def test_a_suite_that_does_not_collect_stops_the_run_with_its_cause(course: Path, broken: tuple[str, str | bytes]) -> None:
    """Does a hidden suite with a file pytest cannot collect stop the run with exit 2, naming the
    file, and grade no one (no grades.csv, no results.json)?"""
    name, text = broken
    target = course / "autograder" / "ch19_attention" / name
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    run = grade(course / "autograder", course / "submitted", course / "out")
    assert run.returncode == 2, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    said = run.stdout + run.stderr
    assert "无法收集" in said and name in said, said[-2000:]
    assert "评分会话结束时没有得到这份提交的结果" not in said
    assert not (course / "out" / "grades.csv").exists()
    assert not list((course / "out").glob("students/*/*/results.json"))


def test_relative_paths_are_taken_from_where_the_grader_was_started(course: Path) -> None:
    """The grader runs from ``/`` whatever folder it was started in (``cli.leave_working_directory``;
    the unreadable one is ``test_isolation``'s): are relative paths still read from the starting
    folder, and the class graded into the ``--out`` given?"""
    run = grade(Path("autograder"), Path("submitted"), Path("out"), cwd=course)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (course / "out" / "grades.csv").is_file()
    assert len(list((course / "out").glob("students/*/*/results.json"))) == 2
