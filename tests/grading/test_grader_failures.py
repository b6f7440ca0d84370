"""The grader's own failures stop the run with their cause (issue 23): a hidden suite that cannot
be collected is the grader's fault, never "not graded" for every student."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, RELEASE, ROOT, SOLUTION, load, write
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
    # pytest's "cannot collect", or, for a file Python cannot compile, preflight's own words naming
    # its line and error (issue 50: a broken hidden suite is named by file and line).
    assert ("无法收集" in said or "行有错误" in said) and name in said, said[-2000:]
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


# -- issue 37: the grader's own code, checked before any submission is graded ---------------------
WARMUP, WARMUP_FOLDER = "warmup-softmax", "warmup_softmax"
COURSE_FIXTURE = ROOT / "tests" / "support" / "course"


def _break_catalogue_entry(suite: Path) -> tuple[str, int]:
    """The warm-up's one mistake, its source's last line left without its closing parenthesis."""
    path = suite / "catalogue.py"
    text = path.read_text(encoding="utf-8")
    line = "    return exps / exps.sum(dim=-1, keepdim=True)\n"
    assert text.count(line) == 1
    path.write_text(text.replace(line, line.replace("True)", "True")), encoding="utf-8")
    return "catalogue.py", text[: text.index(line)].count("\n") + 1


def _break_reference(suite: Path) -> tuple[str, int]:
    path = suite / "reference.py"
    text = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    path.write_text(text + "\ndef stable_softmax(scores:\n    return scores\n", encoding="utf-8")
    return "reference.py", text.count("\n") + 2


def _break_suite(suite: Path) -> tuple[str, int]:
    path = suite / "test_softmax.py"
    text = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    path.write_text(text + "\n\ndef test_typo(student):\n    assert student.softmax(\n", encoding="utf-8")
    return "test_softmax.py", text.count("\n") + 4


def _misname_a_grade_id(suite: Path) -> tuple[str, int]:
    path = suite / "test_softmax.py"
    text = path.read_text(encoding="utf-8")
    marker = '@pytest.mark.grade_id("check_stable")\n'
    assert text.count(marker) == 1
    path.write_text(text.replace(marker, marker.replace("check_stable", "check_stabel")), encoding="utf-8")
    return "test_softmax.py", text[: text.index(marker)].count("\n") + 1  # the misnamed marker


@pytest.fixture
def two_assignments(tmp_path: Path) -> Path:
    """A copy of the course with the warm-up beside chapter 19 (tests/course), and a class of two
    who submitted both."""
    for part in ("autograder", "solutions"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(COURSE_FIXTURE / "autograder" / WARMUP_FOLDER, tmp_path / "autograder" / WARMUP_FOLDER, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(COURSE_FIXTURE / "solutions" / WARMUP, tmp_path / "solutions" / WARMUP)
    for student in ("ann", "bob"):
        write(load(SOLUTION), tmp_path / "submitted" / student / ASSIGNMENT)
        shutil.copytree(COURSE_FIXTURE / "solutions" / WARMUP, tmp_path / "submitted" / student / WARMUP)
    return tmp_path


@pytest.mark.parametrize(
    "breaking",
    [_break_catalogue_entry, _break_reference, _break_suite, _misname_a_grade_id],
    ids=["catalogue-entry", "reference", "suite-syntax", "suite-grade-id"],
)
def test_a_broken_assignment_is_named_and_the_sound_one_graded(two_assignments: Path, breaking) -> None:
    """One assignment's own code broken (a catalogue entry that does not compile, a reference,
    a hidden test, a grade id of no grade cell): is it found before any submission is graded,
    named with its file and line, left ungraded (no results, no grades.csv row, no 0/0), while
    the other assignment is graded and written; and does the run exit 2?"""
    name, line = breaking(two_assignments / "autograder" / WARMUP_FOLDER)
    out = two_assignments / "out"
    run = grade(two_assignments / "autograder", two_assignments / "submitted", out)
    said = run.stdout + run.stderr
    assert run.returncode == 2, (run.returncode, said[-3000:])
    assert WARMUP in said and f"{name}:{line}" in said, said[-3000:]
    assert "INTERNALERROR" not in said
    rows = list(csv.DictReader((out / "grades.csv").open(encoding="utf-8")))
    assert {(row["student_id"], row["assignment"]) for row in rows} == {("ann", ASSIGNMENT), ("bob", ASSIGNMENT)}, rows
    assert all(float(row["score"]) == 100 for row in rows), rows
    assert not list(out.glob(f"students/*/{WARMUP}/*")), sorted(out.rglob("*"))
    skipped = json.loads((out / "skipped.json").read_text(encoding="utf-8"))
    assert any(WARMUP in json.dumps(item, ensure_ascii=False) and f"{name}:{line}" in json.dumps(item, ensure_ascii=False) for item in skipped), skipped


def test_a_broken_catalogue_entry_alone_stops_the_run_before_any_zero(course: Path) -> None:
    """Chapter 19's catalogue with an entry that does not compile, and no other assignment: exit 2
    naming the file and line, before any student is graded (it was 98 INTERNALERROR lines, the
    failing students 0/0, exit 0)."""
    path = course / "autograder" / "ch19_attention" / "catalogue.py"
    text = path.read_text(encoding="utf-8")
    line = "    scores = query @ key.transpose(-2, -1)\n"  # no_scale's first line of code that differs
    at = text.index(line)
    path.write_text(text[:at] + line.replace("(-2, -1)", "(-2, -1") + text[at + len(line) :], encoding="utf-8")
    write(load(RELEASE), course / "submitted" / "cat" / ASSIGNMENT)  # stubs: failed tests, so diagnosis would run the catalogue
    out = course / "out"
    run = grade(course / "autograder", course / "submitted", out)
    said = run.stdout + run.stderr
    assert run.returncode == 2, (run.returncode, said[-3000:])
    assert f"catalogue.py:{text[:at].count(chr(10)) + 1}" in said and "ch19-attention" in said, said[-3000:]
    assert "INTERNALERROR" not in said
    assert not (out / "grades.csv").exists()
    assert not list(out.glob("students/*/*/results.json"))
