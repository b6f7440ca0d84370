"""Points charged where the failure starts (issue 26; ``attnkit.grading.charges``): a dependency that
passes its own tests but breaks on what multi-head attention hands it (a ``.view()`` on split
heads, float32 out of float64 heads) loses the dependent tests' points in its own part, capped
at what its own tests there hold; the dependent tests get them back; the total is unchanged."""

from __future__ import annotations

import json

import pytest


from charge_submissions import CHARGES
from contract import CH19
from fair_submissions import FAIRNESS
from test_autograder import ALTERNATIVES, grade_in_one_session
from test_fairness import grade_notebooks

catalogue = CH19.catalogue()
REFERENCE = catalogue.reference_source()
# Each case's total on main before the charges (multi-head lost 15 for a scaled_attention bug,
# the future test's multi-head 5 for a split_heads or merge_heads one): charging moves the
# deduction, it never changes it.
BEFORE = {name: 85.0 if function == "scaled_attention" else 95.0 for name, (function, _) in CHARGES.items()}
# The part each dependency's charges go to: that of its first own test.
CHARGED_PART = {"scaled_attention": "check_scaled_attention", "split_heads": "check_heads", "merge_heads": "check_heads"}


@pytest.fixture(scope="module")
def results() -> dict:
    sources = {"reference": REFERENCE, **{f"style_{name}": REFERENCE + "\n" + source for name, source in list(ALTERNATIVES.items())[:3]}}
    sources.update({name: REFERENCE + "\n" + source for name, (_, source) in CHARGES.items()})
    return grade_in_one_session(sources)


def summary(graded: list) -> str:
    return "\n".join(
        f"{r['nodeid']}: {r['score']}/{r['max_score']} {r['diagnoses']} {r['charge']} {r['output'][:200]}"
        for r in graded
        if r["score"] < r["max_score"] or r["charge"]
    )


def test_there_are_at_least_ten_new_cases():
    names = {mistake.id for mistake in catalogue.MISTAKES}
    assert len(CHARGES) >= 10 and not set(CHARGES) & (set(FAIRNESS) | names)


@pytest.mark.parametrize("name", list(CHARGES))
def test_each_case_loses_only_its_own_functions_points(results, name):
    function, _ = CHARGES[name]
    graded = results[name]
    for result in graded:
        if result["score"] < result["max_score"] and function not in result["functions"]:
            # Only a charge capped at the dependency's own points leaves any with a dependent test.
            assert result["charge"].get("to") == function and result["charge"]["points"] > 0, summary(graded)
    assert sum(r["score"] for r in graded) < 100, summary(graded)


@pytest.mark.parametrize("name", list(CHARGES))
def test_the_total_deduction_is_unchanged_and_moved_to_the_dependencys_part(results, name):
    function, _ = CHARGES[name]
    graded = results[name]
    assert sum(r["score"] for r in graded) == BEFORE[name], summary(graded)
    given = sum(r["charge"]["points"] for r in graded if "to" in r["charge"])
    taken = sum(r["charge"]["points"] for r in graded if "from" in r["charge"])
    assert given == taken > 0, summary(graded)
    assert {r["charge"]["part"] for r in graded if "to" in r["charge"]} == {CHARGED_PART[function]}
    payers = [r for r in graded if "from" in r["charge"]]
    assert all(r["grade_id"] == CHARGED_PART[function] and function in r["functions"] and r["score"] >= 0 for r in payers), summary(graded)


@pytest.mark.parametrize("name", [name for name, (function, _) in CHARGES.items() if function == "merge_heads"])
def test_a_charge_is_capped_at_the_dependencys_own_points(results, name):
    """merge_heads holds 4 points of its part: of the future test's 5, one stays with multi-head."""
    graded = results[name]
    own = [r for r in graded if "merge_heads" in r["functions"]]
    assert sum(r["score"] for r in own) == 0, summary(graded)
    kept = [r for r in graded if "to" in r["charge"] and r["score"] < r["max_score"]]
    assert len(kept) == 1 and kept[0]["max_score"] - kept[0]["score"] == 1, summary(graded)
    assert "仍扣 1 分" in kept[0]["output"]


@pytest.mark.parametrize("name", list(CHARGES))
def test_no_case_gets_a_wrong_id(results, name):
    assert not {d for r in results[name] for d in r["diagnoses"]}, summary(results[name])


@pytest.mark.parametrize("name", list(CHARGES))
def test_both_sides_of_a_charge_say_so_without_test_source(results, name):
    function, _ = CHARGES[name]
    graded = results[name]
    for result in graded:
        if "to" in result["charge"]:
            assert result["output"].startswith(f"这一项的问题出在你的 {function} 里"), summary(graded)
        if "from" in result["charge"]:
            assert f"你的 {function} 通过了这一项的检查" in result["output"], summary(graded)
        assert "student." not in result["output"] and "def test_" not in result["output"] and "assert " not in result["output"]


def test_the_reference_and_alternative_styles_keep_every_point_uncharged(results):
    for name in ["reference", *[key for key in results if key.startswith("style_")]]:
        graded = results[name]
        assert sum(r["score"] for r in graded) == 100 and not any(r["charge"] for r in graded), (name, summary(graded))


@pytest.mark.e2e
def test_a_real_grading_charges_the_dependency_through_the_plan(tmp_path):
    """Through ``attnkit grade`` (sandbox, plan, scoped reference): a scaled_attention whose own
    line raises and a merge_heads that is wrong only on the future test's float64 heads (found by
    the plan's inputs) are charged; their pages and results.json say so; the model answer is not."""
    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))

    def with_cell(source: str) -> dict:
        cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}
        return {**notebook, "cells": notebook["cells"] + [cell]}

    folder = grade_notebooks(
        tmp_path,
        {
            "qianer": with_cell(CHARGES["masked_branch_views_heads"][1]),
            "sunsan": with_cell(CHARGES["merge_into_float32_buffer"][1]),
            "model": notebook,
        },
    )
    for student, function, part, before in (("qianer", "scaled_attention", "check_scaled_attention", 85), ("sunsan", "merge_heads", "check_heads", 95)):
        results = json.loads((folder / student / CH19.name / "results.json").read_text(encoding="utf-8"))
        tests = results["tests"]
        assert results["score"] == before, [(t["name"], t["score"], t.get("charge")) for t in tests if t["score"] < t["max_score"]]
        charged = [t for t in tests if t.get("charge", {}).get("to") == function]
        lost = [(t["name"], t["score"], t["output"][:200]) for t in tests if t["score"] < t["max_score"]]
        assert charged and all(t["charge"]["part"] == part for t in charged), lost
        assert all(function in t["functions"] for t in tests if t["score"] < t["max_score"] and not t.get("charge"))
        page = (folder / student / CH19.name / "feedback.html").read_text(encoding="utf-8")
        assert f"你的 {function} 通过了这一项的检查" in page
    model = json.loads((folder / "model" / CH19.name / "results.json").read_text(encoding="utf-8"))
    assert model["score"] == model["max_score"] and not any(t.get("charge") for t in model["tests"])
