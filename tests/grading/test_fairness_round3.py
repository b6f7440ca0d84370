"""Fairness, round 3 (issue 41): a mistake costs only its own concept, a correct raise of a
subclass counts as its base, a diagnosis agrees with every test of its function, and every
message on the page is true. The submissions (``fair_round3_submissions.ROUND3``) were written
from the chapter with their fair grades before they were graded; they are graded here in one
real pytest session of the hidden suite (``test_autograder.grade_in_one_session``)."""

from __future__ import annotations

import pytest

from contract import CH19
from fair_round3_submissions import ROUND3
from test_autograder import grade_in_one_session

pytestmark = pytest.mark.e2e

catalogue = CH19.catalogue()
REFERENCE = catalogue.reference_source()


# Stubs that must not be given points back by the charge per concept: they do masking and the
# empty-row check right, but their attention is no attention (the real-work gate of own_attention).
GATED = {
    # Uniform weights over the allowed keys: never looks at the query or the keys.
    "uniform_weights": """
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.zeros(*query.shape[:-1], key.shape[-2], dtype=query.dtype)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    # Zeros of the right shapes, raising on empty rows.
    "zeros_that_raise": """
import torch

def scaled_attention(query, key, value, allowed=None):
    if allowed is not None and not allowed.any(dim=-1).all():
        raise ValueError("empty row")
    weights = torch.zeros(*query.shape[:-1], key.shape[-2], dtype=query.dtype)
    return weights @ value, weights
""",
    # Softmax over the queries (softmax_wrong_axis, named on the attention part) and no empty-row
    # check: the name is taken back at the close (the empty-row calls contradict it), so the tests
    # it explained while it stood get nothing by it, and its own attention (normalised over the
    # queries) is no row-by-row standard.
    "named_then_contradicted": """
from math import sqrt

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=2)
    return weights @ value, weights
""",
    # The catalogued slip (softmax over dim 2) on every input but the 3-D one of the attention
    # part's tests, where it halves its weights: the masking and future tests it explains while
    # the name stands are judged at the close, and the name does not survive it (that 3-D call
    # contradicts it), so they get nothing by it.
    "slip_but_one_input": """
from math import sqrt

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=2)
    if key.shape[-2] == 7:
        weights = weights * 0.5
    return weights @ value, weights
""",
}


@pytest.fixture(scope="module")
def results() -> dict:
    sources = {"reference": REFERENCE}
    sources.update({name: REFERENCE + "\n" + case.source for name, case in ROUND3.items()})
    sources.update({name: REFERENCE + "\n" + source for name, source in GATED.items()})
    return grade_in_one_session(sources)


@pytest.mark.parametrize("name", list(GATED))
def test_no_point_is_given_back_to_a_function_that_computes_no_attention(results, name):
    graded = results[name]
    assert not [r["nodeid"] for r in graded if r["charge"].get("judged_by_own")], summary(graded)
    lost = {r["grade_id"] for r in graded if r["status"] != "passed"}
    assert {"check_scaled_attention", "check_masking", "check_empty_row", "check_future"} <= lost, summary(graded)


@pytest.mark.parametrize("name", ["scale_by_sqrt_dv", "scale_by_dk_matmul", "softmax_dim2", "weights_transposed"])
def test_a_test_judged_against_the_students_own_attention_says_so(results, name):
    graded = results[name]
    judged = [r for r in graded if r["charge"].get("judged_by_own")]
    assert judged and all(r["status"] == "passed" and r["score"] == r["max_score"] for r in judged), summary(graded)
    assert {r["grade_id"] for r in judged} <= {"check_masking", "check_empty_row", "check_future"}
    assert all("这一项按你自己的注意力结果评判" in r["output"] for r in judged)
    assert "这一项按你自己的注意力结果评判" in page(graded)


def score(graded: list) -> float:
    return round(sum(result["score"] for result in graded), 4)


def summary(graded: list) -> str:
    return "\n".join(
        f"{r['nodeid']}: {r['status']} {r['score']}/{r['max_score']} {r['diagnoses']} {r['output'][:300]}" for r in graded if r["status"] != "passed"
    )


def page(graded: list) -> str:
    """The student's feedback page for one graded submission, as the CLI renders it."""
    from attnkit.report.pages import feedback_html
    from attnkit.report.results_json import results_json

    record = {"student_id": "s", "assignment": CH19.name, "fingerprint": "", "tests": [dict(result) for result in graded]}
    return feedback_html(results_json(record, CH19), CH19)


def test_there_are_at_least_fifteen_new_cases_covering_every_class():
    assert len(ROUND3) >= 15
    assert {case.concept for case in ROUND3.values()} >= {"kind", "slip", "name", "explain", "dtype"}


def test_the_reference_still_scores_100(results):
    assert score(results["reference"]) == 100, summary(results["reference"])


@pytest.mark.parametrize("name", list(ROUND3))
def test_each_case_scores_its_fair_grade(results, name):
    case = ROUND3[name]
    graded = results[name]
    assert score(graded) == case.fair, f"{name}: {case.why}\n" + summary(graded)


@pytest.mark.parametrize("name", list(ROUND3))
def test_no_case_gets_a_wrong_id(results, name):
    named = {d for r in results[name] for d in r["diagnoses"]}
    assert named <= ROUND3[name].ids, summary(results[name])


@pytest.mark.parametrize("name", [name for name, case in ROUND3.items() if case.concept == "kind"])
def test_a_subclass_raise_is_never_called_wrong(results, name):
    """No message, on the tests or the page, says that a subclass of ValueError is the wrong exception."""
    text = page(results[name])
    assert "实际抛出了" not in text and all("实际抛出了" not in r["output"] for r in results[name]), summary(results[name])


@pytest.mark.parametrize("name", [name for name, case in ROUND3.items() if case.ids])
def test_a_catalogued_mistake_written_another_way_is_still_named(results, name):
    """Agreement with every test takes a name back only when it contradicts one: a catalogued
    mistake written in another style keeps its name."""
    assert {d for r in results[name] for d in r["diagnoses"]} == ROUND3[name].ids, summary(results[name])


def test_the_empty_row_probes_tell_the_catalogued_checks_apart():
    """Issue 41: the probes separate the chapter's check, the one over the keys and the one with
    any and all swapped: each pair differs on some probe."""
    from attnkit.boundary import wire
    from attnkit.boundary.outcome import Call, Outcome
    from attnkit.grading.diagnosis import _replay, outcomes_match

    swapped = catalogue.reference_source() + "\n" + ROUND3["empty_any_all_swapped"].source
    implementations = {"reference": catalogue.reference_namespace(), "on_keys": catalogue.mistake_namespaces()["empty_check_on_keys"]}
    implementations["swapped"] = {}
    exec(compile(swapped, "<swapped>", "exec"), implementations["swapped"])
    probes = [
        (Call("scaled_attention", tuple(args), kwargs, Outcome()), wire.fingerprint((args, kwargs)))
        for args, kwargs in catalogue.probes()["scaled_attention"]
    ]
    names = list(implementations)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            assert any(
                not outcomes_match(_replay(implementations[first], call, data), _replay(implementations[second], call, data))
                for call, data in probes
            ), (first, second)


def causes_of(graded: list) -> list[dict]:
    from attnkit.report.pages import causes

    return causes([dict(result) for result in graded])  # type: ignore[misc]


# (case, the explanation kind its cause must get): what really happened, not the first pattern near it.
MATCHED = {
    "softmax_dim3_fixed": "dimension",
    "softmax_dim2": "dimension",
    "mask_unsqueezed_wrong": "broadcast",
    "value_transposed_matmul": "matmul",
    "mha_mask_keyword": "keyword",
    "undefined_scale_name": "name",
}


@pytest.mark.parametrize("name", list(MATCHED))
def test_each_runtime_error_is_explained_by_what_happened(results, name):
    from attnkit.boundary.explain import EXPLANATIONS
    from attnkit.i18n import _

    found = causes_of(results[name])
    assert found, summary(results[name])
    expected = _(EXPLANATIONS[MATCHED[name]])
    assert all(cause["explanation"] == expected for cause in found if cause["type"] != "ValueError"), [
        (c["type"], c["message"], c["explanation"][:60]) for c in found
    ]
    text = page(results[name])
    assert expected in text
    others = {kind: _(text_) for kind, text_ in EXPLANATIONS.items() if kind != MATCHED[name]}
    assert not [kind for kind, other in others.items() if other in text], "no explanation of another error on the page"


def test_a_cause_shared_by_tests_is_folded_once_for_all_of_them(results):
    """Every multi-head test fails from the one wrong keyword: one cause, counting all of them."""
    graded = results["mha_mask_keyword"]
    failed = [r for r in graded if r["status"] != "passed"]
    found = causes_of(graded)
    assert len(found) == 1 and len(found[0]["tests"]) == len(failed) == 5, [(c["type"], c["tests"]) for c in found]


def test_a_students_own_raise_is_shown_as_their_raise(results):
    """A deliberate `raise ValueError(...)` is the student's decision, not an error that
    interrupted their code: the page says it is their raise."""
    text = page(results["own_raise_for_leading_dims"])
    assert "你的 scaled_attention 用 raise 主动抛出了 ValueError" in text, text[:3000]
    assert "让你的代码在运行时中断" not in text
    found = causes_of(results["own_raise_for_leading_dims"])
    assert found and all(cause["own_raise"] for cause in found)
    # An error torch raised is not the student's raise.
    assert not any(cause["own_raise"] for cause in causes_of(results["softmax_dim3_fixed"]))


@pytest.mark.parametrize("name", ["scale_by_dk_matmul", "softmax_dim2", "no_check_nan_to_num"])
def test_a_diagnosis_is_shown_once_per_page_with_the_parts_it_cost(results, name):
    """One diagnosis box at the top naming the parts it cost; each failing test refers to it
    instead of repeating its paragraph."""
    graded = results[name]
    (mistake,) = ROUND3[name].ids
    explanation = CH19.mistakes[mistake]["text"]
    text = page(graded)
    assert text.count(explanation) == 1, text.count(explanation)
    box = text.split(f'data-diagnosis="{mistake}"', 1)[1].split("</div>", 1)[0]
    cost = {r["grade_id"] for r in graded if mistake in r["diagnoses"]}
    assert cost and all(CH19.part_title(grade_id) in box for grade_id in cost), box
    referring = text.count(f'data-refers="{mistake}"')
    assert referring == sum(mistake in r["diagnoses"] for r in graded)


def test_through_real_sandboxes_the_scores_are_the_same(tmp_path, results):
    """The same cases graded by the real `attnkit grade` (sandboxes, the plan's prefetch, the
    wire's exception bases): the same scores and names as in this process, the subclass raise
    passed, and the page of a scale slip says which tests were judged against the student's own
    attention."""
    import json

    from test_fairness import grade_notebooks

    chosen = ["empty_row_subclass", "scale_by_dk_matmul", "empty_any_all_swapped", "causal_float_mask"]
    notebooks = {}
    for name in chosen:
        notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
        notebook["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": ROUND3[name].source})
        notebooks[name.replace("_", "")] = notebook
    folder = grade_notebooks(tmp_path, notebooks)
    for name in chosen:
        graded = json.loads((folder / name.replace("_", "") / CH19.name / "results.json").read_text(encoding="utf-8"))
        assert graded["score"] == score(results[name]), (name, [(t["name"], t["output"][:200]) for t in graded["tests"] if t["status"] != "passed"])
        assert set(graded["diagnoses"]) == {d for r in results[name] for d in r["diagnoses"]}, name
    page_text = (folder / "scalebydkmatmul" / CH19.name / "feedback.html").read_text(encoding="utf-8")
    assert "这一项按你自己的注意力结果评判" in page_text


# The concepts issue 41 names (scaling and the softmax axis are the attention part's one concept,
# the one the masking, empty-row and future tests rest on), as the tests state them.
NAMED_CONCEPTS = {"注意力", "用掩码屏蔽", "空行报错", "不泄漏未来", "拆分多头", "合并多头", "多头注意力的投影"}


def test_every_hidden_test_states_the_concept_it_checks(results):
    """Each hidden test states its concept (``concept`` marker), carried on its result; the
    concept a dependent test rests on (``rests_on``) is the one its part's tests state."""
    graded = results["reference"]
    assert graded and all(r["concept"] for r in graded), [r["nodeid"] for r in graded if not r["concept"]]
    assert NAMED_CONCEPTS <= {r["concept"] for r in graded}
    assert {r["concept"] for r in graded if r["grade_id"] == "check_scaled_attention"} == {"注意力"}
    one_per_test = {r["grade_id"]: {s["concept"] for s in graded if s["grade_id"] == r["grade_id"]} for r in graded}
    assert one_per_test["check_heads"] == {"拆分多头", "合并多头"}, one_per_test


@pytest.mark.parametrize("name", ["scale_by_dk_matmul", "softmax_dim2", "weights_transposed", "causal_float_mask", "mha_mask_keyword", "split_heads_subclass"])
def test_each_charge_on_the_page_names_one_concept(results, name):
    """Where a part loses points the page says on which concept, one charge per concept its
    failed tests state, adding up to what the part lost; a part that lost nothing is charged
    nothing."""
    import re

    graded = results[name]
    text = page(graded)
    for grade_id in CH19.parts:
        tests = [r for r in graded if r["grade_id"] == grade_id]
        lost = round(sum(r["max_score"] - r["score"] for r in tests), 4)
        section = text.split(f'<h3 id="{grade_id}">', 1)[1].split("<table>", 1)[0]
        charges = re.findall(r'data-charge-concept="([^"]*)">按概念扣分：「([^」]*)」扣 ([0-9.]+) 分', section)
        if not lost:
            assert not charges, (grade_id, charges)
            continue
        assert charges, (grade_id, section)
        assert all(attribute == concept for attribute, concept, _points in charges)
        assert {concept for _a, concept, _p in charges} == {r["concept"] for r in tests if r["score"] < r["max_score"]}
        assert round(sum(float(points) for _a, _c, points in charges), 4) == lost, (grade_id, charges)


def test_a_dependent_test_rests_on_the_concept_its_part_states():
    """``rests_on(part, concept)`` names the concept that part's tests state, and every test of
    the suite states one: the page's "按你自己的{concept}结果评判" and its charges speak of the
    same concepts."""
    from attnkit.grading import plugin as plugin_module
    from attnkit.grading.plugin import GradingPlugin
    from test_autograder import SourceProvider

    class Items:
        found: list = []

        def pytest_collection_finish(self, session):
            Items.found = list(session.items)

    code = pytest.main(
        ["-q", "--collect-only", "-p", "no:cacheprovider", str(CH19.folder)],
        plugins=[plugin_module, GradingPlugin(SourceProvider({"reference": REFERENCE})), Items()],
    )
    assert code == pytest.ExitCode.OK and Items.found
    stated = {}
    for item in Items.found:
        concept = item.get_closest_marker("concept")
        assert concept is not None and concept.args and concept.args[0], item.nodeid
        stated.setdefault(item.get_closest_marker("grade_id").args[0], set()).add(concept.args[0])
    # Every rests_on marker of a test (the empty-row tests rest on two parts, issue 53), each with
    # an optional third argument: how the test is judged then.
    resting = [marker.args for item in Items.found for marker in item.iter_markers("rests_on")]
    assert resting and all(stated[part] == {concept} for part, concept, *_how in resting), (resting, stated)
