"""Each output of a grade run is written once.

Every output file goes through ``files.atomic_write``, whose last step is ``os.replace`` (Python
raises the audit event ``os.rename`` for it). A run of the real ``attnkit`` command with an audit
hook counts, per path in OUT, how often a file was put there. A class with both kinds of lateness
(nbgrader's, from a gradebook with a due date and the course's late-submission plugin, and the
LMS's late flag from the lms.json ``attnkit collect`` wrote) and a gradebook is the case where
results.json and feedback.html used to be written three times, grades.csv and report.html twice.
"""

from __future__ import annotations

import collections
import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from commands import BIN, run_command
from test_collect_identity import canvas_zip, collect

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch19-attention"

# The command as the `attnkit` script runs it, with an audit hook that appends each os.replace
# destination under OUT (argv[-1] of the hook's own argument) to a log, one line per write.
COUNTING = """
import os, sys
out, log = sys.argv.pop(1), sys.argv.pop(1)
def hook(event, args):
    if event == "os.rename" and str(args[1]).startswith(out):
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(os.path.relpath(str(args[1]), out) + "\\n")
sys.addaudithook(hook)
sys.argv[0] = "attnkit"
from attnkit.launch import run
run()
"""


def graded_run(course: Path, log: Path) -> dict[str, int]:
    out = course / "graded"
    log.unlink(missing_ok=True)
    result = run_command(
        [sys.executable, "-c", COUNTING, str(out), str(log), "grade", "--submitted", "submitted", "--out", str(out), "--jobs", "2", "--quiet"]
        + ["--gradebook", "gradebook.db"],
        cwd=course,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = log.read_text(encoding="utf-8").split() if log.exists() else []
    return dict(collections.Counter(lines))


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    course = tmp_path_factory.mktemp("course-once")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:
        config.write("\nc.LateSubmissionPlugin.penalty_method = 'zero'  # a late submission scores 0\n")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    # Canvas's download: 1001 on time, 1002 flagged late by Canvas (and after the due date below).
    placed = collect(str(canvas_zip(course / "canvas.zip")), "--submitted", str(course / "submitted"))
    assert placed.returncode == 0, placed.stdout + placed.stderr
    due = run_command([BIN / "nbgrader", "db", "assignment", "add", ASSIGNMENT, "--duedate=2025-10-02 00:00:00.000000 UTC"], cwd=course)
    assert due.returncode == 0, due.stdout + due.stderr
    return course


@pytest.mark.e2e
def test_each_output_is_written_once_and_holds_both_latenesses(course: Path, tmp_path: Path) -> None:
    writes = graded_run(course, tmp_path / "writes.log")
    per_student = [f"students/{s}/{ASSIGNMENT}/{name}" for s in ("1001", "1002") for name in ("results.json", "feedback.html")]
    for path in [*per_student, "grades.csv", "report.html", "skipped.json"]:
        assert writes.get(path) == 1, (path, writes)
    assert all(count == 1 for count in writes.values()), writes
    # What was written once is complete: nbgrader's lateness as the gradebook has it, and Canvas's flag.
    late = json.loads((course / "graded" / "students" / "1002" / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
    on_time = json.loads((course / "graded" / "students" / "1001" / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
    assert late["lms_late"]["lms"] == "Canvas" and "lms_late" not in on_time
    assert late["late"]["seconds_late"] > 0 and late["late"]["penalty"] == late["score"] > 0 and late["late"]["total"] == 0.0
    assert on_time["late"]["seconds_late"] == 0 and on_time["late"]["penalty"] == 0 and on_time["late"]["total"] == on_time["score"]
    exported = run_command([BIN / "nbgrader", "export", "--to", "export.csv"], cwd=course)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    with open(course / "export.csv", encoding="utf-8", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(rows["1002"]["late_submission_penalty"]) == late["late"]["penalty"]
    assert float(rows["1002"]["score"]) == late["late"]["total"] and float(rows["1001"]["score"]) == on_time["late"]["total"]
    page = (course / "graded" / "students" / "1002" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    # The gradebook's lateness wins over the LMS's flag where the course gave nbgrader a due date.
    assert f"迟交扣分：{late['late']['penalty']:g} 分" in page


@pytest.mark.e2e
def test_a_second_run_writes_only_the_class_files(course: Path, tmp_path: Path) -> None:
    """Nothing changed: no student's record is written again; the class files once each."""
    writes = graded_run(course, tmp_path / "writes.log")
    assert writes == {"grades.csv": 1, "report.html": 1, "skipped.json": 1, f"lms-feedback-canvas-{ASSIGNMENT}.zip": 1}, writes
