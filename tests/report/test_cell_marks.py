"""The marks the lab extension puts beside the code (``report/cell_marks.py``, issue 51), from the
demo class as ``attnkit grade`` grades it (the session's ``graded_demo_class``): the mistake's
function carries its diagnosis and chapter section, the others only their points; a correct
submission has full marks everywhere and no diagnosis; a ``scores`` page's marks no diagnosis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnkit.assignment.folder import discover
from attnkit.i18n import set_language
from attnkit.report.cell_marks import marks_json

pytestmark = [pytest.mark.e2e]

ASSIGNMENT = "ch19-attention"
CJK = re.compile(r"[\u4e00-\u9fff]")


def results_of(out: Path, student: str) -> dict:
    return json.loads((out / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))


def test_mistake_is_marked_on_the_function_where_it_starts(graded_demo_class) -> None:
    out = graded_demo_class("zh")[0]
    suite = discover()[ASSIGNMENT]
    results = results_of(out, "wangfang")  # masks by multiplying
    marks = marks_json(results, suite, "full", {"attempts": 5, "window_seconds": 3600.0, "counted": [1.0]})
    by_name = {mark["function"]: mark for mark in marks["functions"]}
    scaled = by_name["scaled_attention"]
    assert [d["id"] for d in scaled["diagnoses"]] == ["mask_by_multiplying"] and "第 5 节" in scaled["diagnoses"][0]["section"]
    assert not scaled["full"] and scaled["score"] < scaled["max_score"] and scaled["first_failure"]["check"]
    # multi_head_attention's tests ran with the reference swapped in: full marks, no diagnosis of its own.
    assert all(mark["full"] and not mark["diagnoses"] and mark["first_failure"] is None for name, mark in by_name.items() if name != "scaled_attention")
    graded_by_functions = sum(t["max_score"] for t in results["tests"] if t.get("functions"))
    assert abs(sum(m["max_score"] for m in marks["functions"]) - graded_by_functions) < 1e-6
    assert marks["limit"]["counted"] == [1.0] and marks["labels"]["diagnosis"].count("{text}") == 1
    # A scores-only page's marks: points, no diagnosis; a withheld page's: nothing.
    scores_only = marks_json(results, suite, "scores")
    assert scores_only["functions"] and all(not m["diagnoses"] and m["first_failure"] is None for m in scores_only["functions"])
    assert marks_json(results, suite, "withheld")["functions"] == [] and "score" not in marks_json(results, suite, "withheld")


def test_correct_submission_has_full_marks_and_no_diagnosis(graded_demo_class) -> None:
    out = graded_demo_class("zh")[0]
    marks = marks_json(results_of(out, "xiaolin"), discover()[ASSIGNMENT], "full")
    assert {m["function"] for m in marks["functions"]} == set(discover()[ASSIGNMENT].functions)
    assert all(m["full"] and not m["diagnoses"] for m in marks["functions"])


def test_english_marks_have_no_chinese(graded_demo_class) -> None:
    out = graded_demo_class("en")[0]
    set_language("en", export=False)
    try:
        marks = marks_json(results_of(out, "wangfang"), discover()[ASSIGNMENT], "full")
    finally:
        set_language(None, export=False)
    assert not CJK.search(json.dumps(marks["labels"], ensure_ascii=False))
    scaled = next(m for m in marks["functions"] if m["function"] == "scaled_attention")
    assert not CJK.search(scaled["diagnoses"][0]["text"] + scaled["diagnoses"][0]["section"])
