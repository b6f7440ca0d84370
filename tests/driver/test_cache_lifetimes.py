"""Caches whose input can change within one process: each must see the change, not serve what it
kept (every other module-level cache states why its input cannot change while it is kept)."""

from __future__ import annotations

import shutil
from pathlib import Path

from attnkit.assignment.folder import discover
from attnkit.intake.jobs import find_jobs

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "tests" / "support" / "course"
WARMUP = "warmup-softmax"


def test_an_edited_suite_changes_the_next_intakes_fingerprints(tmp_path: Path) -> None:
    """Two intakes in one process (a TA grading twice from a notebook, a test), with the hidden
    suite edited between them: do the second intake's jobs get new fingerprints, so that the results the
    first graded are not taken as current? The suite is one ``Assignment`` object for the
    process's life (``discover``), so a digest kept per object would not see the edit."""
    course = tmp_path / "course"
    shutil.copytree(COURSE, course, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    submitted = tmp_path / "submitted"
    (submitted / "alice" / WARMUP).mkdir(parents=True)
    shutil.copy2(course / "solutions" / WARMUP / "softmax.ipynb", submitted / "alice" / WARMUP / "softmax.ipynb")

    first = find_jobs(submitted, discover(course / "autograder")).jobs
    again = find_jobs(submitted, discover(course / "autograder")).jobs
    assert [job.fingerprint for job in again] == [job.fingerprint for job in first]  # nothing changed: nothing regraded

    tests = course / "autograder" / "warmup_softmax" / "test_softmax.py"
    tests.write_text(tests.read_text(encoding="utf-8") + "\n# a TA's edit between two runs\n", encoding="utf-8")
    suites = discover(course / "autograder")
    assert suites[WARMUP] is discover(course / "autograder")[WARMUP]  # the same object, as in the first intake
    edited = find_jobs(submitted, suites).jobs
    assert len(edited) == len(first) == 1
    assert edited[0].fingerprint != first[0].fingerprint
