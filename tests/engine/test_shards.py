"""Sharding a class: ``--shard 1/2`` + ``--shard 2/2`` + ``attnkit merge`` == one unsharded run.

Six students made from the solution, the release, a half-finished notebook and catalogue mistakes
(``tools/bench.py`` builds them). The shards must be disjoint, cover everyone, and merge into the
same grades.csv (and the same per-student results) as grading the class in one go.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from synthetic_class import ASSIGNMENT, make_named_class
from commands import python_m

pytestmark = pytest.mark.e2e

STUDENTS = {
    "ada": "correct",
    "bo": "release",
    "chen": "mistake:no_scale",
    "dai": "half_3_of_8",
    "eve": "mistake:causal_excludes_diagonal",
    "fang": "mistake:missing_output_projection",
}


def attnkit(*args: str) -> subprocess.CompletedProcess:
    result = python_m("attnkit.cli", *args)
    assert result.returncode == 0, f"attnkit {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def grade(submitted: Path, out: Path, *extra: str) -> None:
    attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--quiet", "--force", *extra)


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "grades.csv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def graded_students(out: Path) -> set[str]:
    return {path.parent.parent.name for path in out.glob(f"students/*/{ASSIGNMENT}/results.json")}


def scores(out: Path) -> dict[str, dict]:
    found = {}
    for path in out.glob(f"students/*/{ASSIGNMENT}/results.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        found[data["student_id"]] = {
            "score": data["score"],
            "parts": data["parts"],
            "diagnoses": data["diagnoses"],
            "tests": [(t["name"], t["score"], t["status"], t["diagnoses"]) for t in data["tests"]],
        }
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("shards")
    submitted = base / "submitted"
    make_named_class(submitted, STUDENTS)
    outs = {"whole": base / "whole", "shard1": base / "shard1", "shard2": base / "shard2", "merged": base / "merged"}
    grade(submitted, outs["whole"], "--jobs", "2")
    grade(submitted, outs["shard1"], "--jobs", "1", "--shard", "1/2")
    grade(submitted, outs["shard2"], "--jobs", "1", "--shard", "2/2")
    attnkit("merge", str(outs["shard1"]), str(outs["shard2"]), "--out", str(outs["merged"]))
    return outs


def test_shards_are_disjoint_and_cover_the_class(graded: dict[str, Path]) -> None:
    first, second = graded_students(graded["shard1"]), graded_students(graded["shard2"])
    assert first and second, "each shard grades someone"
    assert not first & second, f"graded by both shards: {sorted(first & second)}"
    assert first | second == set(STUDENTS)
    # Each shard's own grades.csv lists exactly its students.
    assert {row["student_id"] for row in rows(graded["shard1"])} == first
    assert {row["student_id"] for row in rows(graded["shard2"])} == second


def test_merged_grades_equal_one_unsharded_run(graded: dict[str, Path]) -> None:
    whole = (graded["whole"] / "grades.csv").read_text(encoding="utf-8")
    merged = (graded["merged"] / "grades.csv").read_text(encoding="utf-8")
    assert merged == whole
    assert len(rows(graded["whole"])) == len(STUDENTS)
    assert scores(graded["merged"]) == scores(graded["whole"])
    assert (graded["merged"] / "report.html").is_file()
    for student in STUDENTS:
        assert (graded["merged"] / "students" / student / ASSIGNMENT / "feedback.html").is_file()


def test_the_class_is_graded_as_expected(graded: dict[str, Path]) -> None:
    """Sanity: the made-up class spans full marks, zero and partial credit."""
    by_student = {row["student_id"]: row for row in rows(graded["whole"])}
    assert float(by_student["ada"]["score"]) == float(by_student["ada"]["max_score"]) > 0
    assert float(by_student["bo"]["score"]) == 0
    for student in ("chen", "dai", "eve", "fang"):
        assert 0 < float(by_student[student]["score"]) < float(by_student[student]["max_score"])
    diagnosed = scores(graded["whole"])
    assert "no_scale" in diagnosed["chen"]["diagnoses"]
    assert "causal_excludes_diagonal" in diagnosed["eve"]["diagnoses"]
