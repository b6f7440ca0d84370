"""The typed records (``attnkit.records``) are the data's own shape: a real graded submission's
record, as the parent receives it from a worker, and its results.json hold exactly the keys the
TypedDicts declare (required and optional alike), so the types cannot drift from the data; and a
key a producer adds without the type is caught."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from attnkit import records
from attnkit.engine import fan_out
from attnkit.report import results_json
from attnkit.intake.jobs import find_jobs
from attnkit.grading import outcomes
from attnkit.boundary.policy import Limits
from attnkit.records import (
    ADDED_LATER,
    GRADED_ONLY,
    NOT_GRADED_ONLY,
    SENT_BY_WORKER,
    CellRecord,
    HiddenTestRecord,
    Job,
    NotebookRecord,
    PartScore,
    ResultsJson,
    ResultsTest,
    SubmissionRecord,
)
from attnkit.driver.replies import CellRun
from attnkit.report.store import write_record

from contract import CH19, write_submission

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = CH19.catalogue()
STUDENTS = {
    "r0_correct": "",
    "r1_no_scale": CATALOGUE.by_id("no_scale").source,
    "r2_raises": "def padding_allowed(lengths, size):\n    raise NotImplementedError()\n",
    "r3_broken_cell": "1 / 0\n",
}


def declared(typed: Any) -> tuple[frozenset[str], frozenset[str]]:
    """A TypedDict's (required, optional) keys; every key also has a type hint."""
    assert set(get_type_hints(typed)) == typed.__required_keys__ | typed.__optional_keys__
    return typed.__required_keys__, typed.__optional_keys__


def undeclared(data: Mapping[str, Any], typed: Any, present: frozenset[str] | None = None) -> list[str]:
    """What is wrong with ``data``'s keys for ``typed``: keys it does not declare, required keys
    missing, and (with ``present``: the optional keys this kind of record has) optional ones
    missing or there when they should not be. Empty: exactly the declared keys."""
    required, optional = declared(typed)
    wrong = [f"undeclared key {key!r}" for key in sorted(set(data) - required - optional)]
    wrong += [f"missing required key {key!r}" for key in sorted(required - set(data))]
    if present is not None:
        wrong += [f"missing optional key {key!r}" for key in sorted(present - set(data))]
        wrong += [f"unexpected optional key {key!r}" for key in sorted((set(data) & optional) - present)]
    return wrong


def check_record(record: Mapping[str, Any], graded: bool, from_worker: bool) -> list[str]:
    present = (GRADED_ONLY if graded else NOT_GRADED_ONLY) | (SENT_BY_WORKER if from_worker else frozenset())
    wrong = undeclared(record, SubmissionRecord, present)
    for test in record["tests"]:
        wrong += undeclared(test, HiddenTestRecord)
    for cell in record.get("cells", []):
        wrong += undeclared(cell, CellRecord)
    for notebook in record.get("notebooks", []):
        wrong += undeclared(notebook, NotebookRecord)
    return wrong


def check_results(results: Mapping[str, Any]) -> list[str]:
    wrong = undeclared(results, ResultsJson, frozenset())  # the class-level steps' keys come later
    for test in results["tests"]:
        wrong += undeclared(test, ResultsTest)
        wrong += [f"empty optional {key!r}" for key in ResultsTest.__optional_keys__ if key in test and not test[key]]
    for part in results["parts"].values():
        wrong += undeclared(part, PartScore)
    for cell in results["cells"]:
        wrong += undeclared(cell, CellRecord)
    for notebook in results["notebooks"]:
        wrong += undeclared(notebook, NotebookRecord)
    return wrong


def test_the_record_types_are_the_dataclasses_they_copy() -> None:
    """A test's record is every field of ``TestResult`` (one definition: ``HiddenTestRecord`` itself, as
    ``test_result`` makes it), a cell's every field of ``CellRun`` and its section."""
    assert outcomes.TestResult is HiddenTestRecord
    assert list(outcomes.test_result("t", "t", "g", 1.0, 1.0, "passed")) == list(get_type_hints(HiddenTestRecord))
    assert [f.name for f in fields(CellRun)] + ["section"] == list(get_type_hints(CellRecord))
    assert ADDED_LATER == ResultsJson.__optional_keys__
    assert GRADED_ONLY | NOT_GRADED_ONLY | SENT_BY_WORKER == SubmissionRecord.__optional_keys__


def test_a_not_graded_record_has_exactly_its_keys() -> None:
    job = Job("s", CH19.name, [], "f")
    record = fan_out.not_graded_record(job, "killed")
    assert check_record(record, graded=False, from_worker=False) == []
    assert check_results(results_json.results_json(record, CH19)) == []


def test_a_key_added_in_a_producer_without_the_type_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: a producer that writes a key the type does not declare (or drops
    one it requires) fails it. (mypy refuses the same producer: the record is typed where it is built.)"""
    made = fan_out.not_graded_record

    def with_extra(job: Job, reason: str) -> dict[str, Any]:
        return {**made(job, reason), "retries": 1}

    monkeypatch.setattr(fan_out, "not_graded_record", with_extra)
    record = fan_out.not_graded_record(Job("s", CH19.name, [], "f"), "killed")
    assert check_record(record, graded=False, from_worker=False) == ["undeclared key 'retries'"]
    results = dict(results_json.results_json(made(Job("s", CH19.name, [], "f"), "killed"), CH19))
    results["score_after_penalty"] = 0.0
    del results["isolation"]
    assert check_results(results) == ["undeclared key 'score_after_penalty'", "missing required key 'isolation'"]
    graded_looking = {**made(Job("s", CH19.name, [], "f"), "killed"), "seconds": 1.0}
    assert check_record(graded_looking, graded=False, from_worker=False) == ["unexpected optional key 'seconds'"]


@pytest.mark.e2e
def test_real_records_and_results_have_exactly_the_declared_keys(tmp_path: Path) -> None:
    """A small class graded by the engine (a real worker, its zygote and sandboxes): every record
    the parent receives, and every results.json written from it, has exactly the declared keys."""
    submitted = tmp_path / "submitted"
    for student, override in STUDENTS.items():
        write_submission(submitted, student, override)
    jobs = find_jobs(submitted, {CH19.name: CH19}).jobs
    received: list[dict[str, Any]] = []
    not_graded = fan_out.grade_jobs(jobs, ROOT / "autograder", 1, Limits(), [], received.append)
    assert not_graded == []
    assert sorted(r["student_id"] for r in received) == sorted(STUDENTS)
    out = tmp_path / "out"
    for record in received:
        assert check_record(record, graded=True, from_worker=True) == [], record["student_id"]
        write_record(out, record, {CH19.name: CH19})
        path = out / "students" / record["student_id"] / CH19.name / "results.json"
        assert check_results(json.loads(path.read_text(encoding="utf-8"))) == [], record["student_id"]
    by_student = {r["student_id"]: r for r in received}
    # The data covers what the types say may be there: failed tests, a failed cell, a notebook.
    assert any(t["status"] == "failed" for t in by_student["r1_no_scale"]["tests"])
    assert any(not c["ok"] for c in by_student["r3_broken_cell"]["cells"])
    assert all(r["notebooks"] for r in received)


def test_records_imports_nothing_of_attnkit() -> None:
    source = Path(records.__file__).read_text(encoding="utf-8")
    assert "from attnkit" not in source and "import attnkit" not in source
