"""Fairness, round 4 (issue 53): a slip costs its own concept wherever a test rests on another
part (the multi-head future tests on the multi-head part, the empty-row tests on masking), and
every sentence on the page is true for the submission it is on: line numbers count in the cell
the page names, sections cited hold what the text says they hold, the top box leads with the
function where the mistake starts, and each explanation is shown only where its premise holds.

The submissions (``fair_round4_submissions.ROUND4``) were written from the chapter with their fair
grades before they were graded; they are graded here in one real pytest session of the hidden
suite (``test_autograder.grade_in_one_session``), a few of them again by the real ``attnkit grade``."""

from __future__ import annotations

import json
import re

import markupsafe
import pytest

from contract import CH19
from fair_round4_submissions import ROUND4
from test_autograder import grade_in_one_session
from test_fairness_round3 import page, score, summary

catalogue = CH19.catalogue()
REFERENCE = catalogue.reference_source()
JUDGED = "这一项按你自己的"


@pytest.fixture(scope="module")
def results() -> dict:
    sources = {"reference": REFERENCE}
    sources.update({name: REFERENCE + "\n" + case.source for name, case in ROUND4.items()})
    return grade_in_one_session(sources)


def part_score(graded: list, grade_id: str) -> float:
    return round(sum(r["score"] for r in graded if r["grade_id"] == grade_id), 4)


def part_max(graded: list, grade_id: str) -> float:
    return round(sum(r["max_score"] for r in graded if r["grade_id"] == grade_id), 4)


@pytest.mark.e2e
def test_the_reference_still_scores_100(results):
    assert score(results["reference"]) == 100, summary(results["reference"])


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(ROUND4))
def test_each_case_scores_its_fair_grade(results, name):
    case = ROUND4[name]
    assert score(results[name]) == case.fair, f"{name}: {case.why}\n" + summary(results[name])


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(ROUND4))
def test_each_case_is_named_exactly_by_its_ids(results, name):
    """A catalogued mistake in a new style is named, and only by its ids; an uncatalogued one by none."""
    assert {d for r in results[name] for d in r["diagnoses"]} == ROUND4[name].ids, summary(results[name])


MULTI_HEAD_SLIPS = ["mha_einsum_model_width", "mha_loop_no_projection", "mha_one_weight_helper", "mha_head_size_as_count"]


@pytest.mark.e2e
@pytest.mark.parametrize("name", MULTI_HEAD_SLIPS)
def test_a_multi_head_slip_that_still_computes_causal_attention_keeps_the_future_points(results, name):
    """The multi-head future tests rest on the multi-head part: its slip is charged there only,
    and the page says the future tests were judged against the student's own function, with no
    charge on 不泄漏未来."""
    graded = results[name]
    assert part_score(graded, "check_future") == part_max(graded, "check_future"), summary(graded)
    assert part_score(graded, "check_multi_head") == 0, summary(graded)
    judged = [r for r in graded if r["charge"].get("judged_by_own")]
    assert {r["nodeid"].rsplit("::", 1)[1] for r in judged} == {"test_multi_head_future_with_your_causal_mask", "test_multi_head_future_with_trusted_mask"}
    assert all(r["charge"]["judged_by_own"] == "check_multi_head" for r in judged)
    text = page(graded)
    assert JUDGED in text and "按概念扣分：「不泄漏未来」" not in text


MASKING_SLIPS = ["mask_fill_zero_checks_rows", "mask_small_negative_checks_rows", "additive_mask_subtracted", "allowed_read_as_blocked"]


@pytest.mark.e2e
@pytest.mark.parametrize("name", MASKING_SLIPS)
def test_a_masking_slip_keeps_the_points_of_its_right_empty_row_raise(results, name):
    """The empty-row tests rest on masking: a masking mistake whose raise is right is charged in
    masking only, and the page says the empty-row tests were judged by the student's own masking."""
    graded = results[name]
    assert part_score(graded, "check_empty_row") == part_max(graded, "check_empty_row"), summary(graded)
    assert part_score(graded, "check_masking") == 0, summary(graded)
    judged = [r for r in graded if r["grade_id"] == "check_empty_row" and r["charge"].get("judged_by_own")]
    assert judged and all(r["charge"]["judged_by_own"] == "check_masking" for r in judged), summary(graded)
    assert "按概念扣分：「空行报错」" not in page(graded)


@pytest.mark.e2e
def test_an_empty_check_slip_costs_no_masking_point(results):
    """A check over the keys raises for the padding mask's PAD column, where every query keeps a
    key: that raise is the empty-row concept's; masking is judged on a mask the check lets through."""
    graded = results["empty_check_column_sums"]
    assert part_score(graded, "check_masking") == part_max(graded, "check_masking"), summary(graded)
    judged = [r for r in graded if r["grade_id"] == "check_masking" and r["charge"].get("judged_by_own")]
    assert [r["charge"]["judged_by_own"] for r in judged] == ["check_empty_row"], summary(graded)
    assert "这是空行检查的问题" in judged[0]["output"]
    assert "按概念扣分：「用掩码屏蔽」" not in page(graded)


@pytest.mark.e2e
def test_a_masking_slip_that_raises_is_not_given_masking_points_by_the_empty_row_concept():
    """Judged by the empty-row concept, masking is still checked (on a mask the student's check
    lets through): a function that raises for every mask, or masks wrongly as well, keeps nothing."""
    raises_always = """
from math import sqrt


def scaled_attention(query, key, value, allowed=None):
    if allowed is not None:
        raise ValueError("no masks")
    weights = (query @ key.transpose(-2, -1) / sqrt(query.shape[-1])).softmax(dim=-1)
    return weights @ value, weights
"""
    both_wrong = """
from math import sqrt


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-2).all():
            raise ValueError("empty")
        scores = scores.masked_fill(~allowed, 0.0)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
"""
    graded = grade_in_one_session({"raises_always": REFERENCE + raises_always, "both_wrong": REFERENCE + both_wrong})
    for name in graded:
        assert part_score(graded[name], "check_masking") == 0, (name, summary(graded[name]))


@pytest.mark.e2e
def test_a_multi_head_slip_that_breaks_causality_still_loses_the_future_points():
    """The standard is the student's own multi-head attention behind a real-work gate: one that
    looks at a later position, or returns uniform weights, keeps no future point."""
    leaking = """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    heads, weights = scaled_attention(split_heads(x @ w_q, num_heads), split_heads(source @ w_k, num_heads), split_heads(source @ w_v, num_heads))
    return merge_heads(heads) @ w_o, weights
"""
    uniform = """
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    batch, length, width = x.shape
    weights = torch.ones(batch, num_heads, length, length, dtype=x.dtype).tril()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return x @ w_o, weights
"""
    graded = grade_in_one_session({"leaking": REFERENCE + leaking, "uniform": REFERENCE + uniform})
    for name in ("leaking", "uniform"):
        assert part_score(graded[name], "check_multi_head") < part_max(graded[name], "check_multi_head"), summary(graded[name])
        lost = {r["nodeid"].rsplit("::", 1)[1] for r in graded[name] if r["grade_id"] == "check_future" and r["status"] != "passed"}
        assert lost == {"test_multi_head_future_with_your_causal_mask", "test_multi_head_future_with_trusted_mask"}, (name, summary(graded[name]))


@pytest.mark.e2e
def test_dropout_is_not_told_it_leaks(results):
    text = page(results["dropout_left_on"])
    assert "不应有访问这个位置的通路" not in text
    future = [r for r in results["dropout_left_on"] if r["grade_id"] == "check_future" and r["status"] != "passed"]
    assert future and all("dropout" in r["output"] and "再调用一次" in r["output"] for r in future), summary(results["dropout_left_on"])


@pytest.mark.e2e
def test_subtracting_the_additive_mask_is_pointed_at_its_sign_and_not_praised_for_a_not_written_by_it(results):
    text = page(results["additive_mask_subtracted"])
    assert "~allowed）是对的" not in text
    assert "scores - M" in text and "scores + M" in text


@pytest.mark.e2e
def test_bmm_on_four_dimensions_is_explained(results):
    from attnkit.boundary.explain import EXPLANATIONS
    from attnkit.i18n import _

    from test_fairness_round3 import causes_of

    found = causes_of(results["bmm_for_four_dims"])
    assert found and all(cause["explanation"] == _(EXPLANATIONS["batch_dims"]) for cause in found), [(c["message"], c["explanation"][:40]) for c in found]


@pytest.mark.e2e
def test_scaling_twice_is_told_it_may_have_divided_twice(results):
    assert "除了两次 √d_k" in page(results["scaled_twice"])


@pytest.mark.e2e
def test_the_additive_matrix_returned_as_the_causal_mask_is_told_why_bool_inverts_it(results):
    text = page(results["causal_as_additive_matrix"])
    assert 'data-diagnosis="causal_additive_matrix"' in text and ".bool()" in text


@pytest.mark.e2e
def test_reading_allowed_as_blocked_throughout_is_named_as_one_misreading(results):
    """Named by what the whole function does (the fill and the empty-row check), not only by one
    line: and not as mask_inverted, whose empty-row check is the chapter's."""
    named = {d for r in results["allowed_read_as_blocked"] for d in r["diagnoses"]}
    assert named == {"allowed_read_as_blocked"}
    text = page(results["allowed_read_as_blocked"])
    assert "自始至终把 allowed 读成了" in text


@pytest.mark.e2e
def test_the_top_box_leads_with_the_function_where_the_mistake_starts(results):
    """Values taken from x in cross-attention surface as scaled_attention's RuntimeError; the
    mistake starts in multi_head_attention, and scaled_attention passes its own tests."""
    text = page(results["mha_value_from_x"])
    assert 'data-starts-in="multi_head_attention"' in text, text[:3000]
    box = text.split('data-starts-in="multi_head_attention"', 1)[1].split("</div>", 1)[0]
    assert "问题从你的 multi_head_attention 开始" in box
    # Where the surfacing function itself failed its tests, it is still the one named.
    assert "data-starts-in" not in page(results["bmm_for_four_dims"])


# -- every section cited holds what the text says it holds ------------------------------------------

# What each text that cites a section says that section holds, as a pattern of that section's own
# markdown (its heading and text up to the next "## " heading). A text that cites a section not
# listed here fails the test until its claim is written down.
CLAIMS: dict[str, dict[int, str]] = {
    "explain:matmul": {4: r"\| *对象 *\| *形状 *\|"},  # "对照第 4 节的形状表"
    "catalogue:additive_mask_wrong_sign": {5: r"-\\infty|−∞|-∞"},  # section 5's additive mask
    "catalogue:causal_additive_matrix": {5: r"-\\infty|−∞|-∞"},
}
# What a mistake's ``section`` must hold: the subject of the mistake, by the function it replaces
# (and, for the ones about scaling or the softmax's axis, that subject).
SUBJECTS = {
    "scale": r"平方根",
    "softmax_wrong_axis": r"Softmax \*\*沿每一行\*\*",
    "scaled_attention": r"掩码",
    "causal_allowed": r"因果",
    "padding_allowed": r"填充|PAD",
    "split_heads": r"split_heads",
    "merge_heads": r"merge_heads",
    "multi_head_attention": r"multi_head_attention|多头",
    "multi_head_mask_inverted": r"布尔掩码含义可能相反",  # the libraries' opposite conventions
}


def notebook_sections() -> dict[int, str]:
    """The source notebook's "## N title" sections: number -> its markdown, heading included."""
    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    sections: dict[int, str] = {}
    current = None
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines(keepends=True):
            heading = re.match(r"## (\d+) ", line)
            if heading:
                current = int(heading.group(1))
                sections[current] = ""
            if current is not None:
                sections[current] += line
    return sections


def cited_texts() -> dict[str, str]:
    """Every catalogue explanation and every runtime-error explanation, by a key of CLAIMS."""
    from attnkit.boundary.explain import DOT_T_EXPLANATION, EXPLANATIONS

    texts = {f"catalogue:{m.id}": m.zh for m in catalogue.MISTAKES}
    texts.update({f"explain:{kind}": text for kind, text in EXPLANATIONS.items()})
    texts["explain:dot_t"] = DOT_T_EXPLANATION
    return texts


def test_every_section_a_message_cites_holds_what_the_message_says():
    sections = notebook_sections()
    assert set(sections) >= set(range(1, 9)), sorted(sections)
    problems = []
    for key, text in cited_texts().items():
        for number in map(int, re.findall(r"第 ?(\d+) ?节", text)):
            claim = CLAIMS.get(key, {}).get(number)
            if claim is None:
                problems.append(f"{key} cites section {number}: write down what it holds in CLAIMS")
            elif number not in sections or not re.search(claim, sections[number]):
                problems.append(f"{key} cites section {number}, which does not hold {claim!r}")
    assert not problems, problems


def test_every_mistakes_section_is_where_the_notebook_teaches_its_subject():
    sections = notebook_sections()
    problems = []
    for mistake in catalogue.MISTAKES:
        number = int(re.fullmatch(r"第 (\d+) 节", mistake.section).group(1))  # type: ignore[union-attr]
        subject = SUBJECTS["scale"] if mistake.id.startswith("scale") or mistake.id == "no_scale" else SUBJECTS.get(mistake.id, SUBJECTS[mistake.function])
        if number not in sections or not re.search(subject, sections[number]):
            problems.append(f"{mistake.id}: section {number} does not hold {subject!r}")
    assert not problems, problems


# -- every line number on a page counts in the cell the page names -------------------------------------


def cell_line(notebook: dict, index: int, line: int) -> str:
    lines = "".join(notebook["cells"][index]["source"]).splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else f"<no line {line} in a {len(lines)}-line cell>"


def cell_defining(notebook: dict, section_title: str, function: str) -> int:
    """The index of the code cell under ``section_title`` that defines ``function`` (the last)."""
    found, current = -1, ""
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            headings = [line.lstrip("#").strip().replace("`", "") for line in source.splitlines() if line.startswith("#")]
            current = headings[-1] if headings else current
        elif re.search(rf"^def {re.escape(function)}\b", source, re.M) and (not section_title or current == section_title):
            found = index
    return found


@pytest.mark.e2e
def test_every_line_number_on_a_page_points_into_the_cell_the_page_names(tmp_path):
    """Graded by the real ``attnkit grade``: a scaled_attention that fails (torch.bmm on 4-D
    inputs) makes a later demo cell fail inside it, and a multi-head attention that takes its
    values from x fails inside scaled_attention. Each line number the page gives (a failed cell's
    row, a cause's failing line) is that line of the cell it names, and the text shown with it is
    that line's text."""
    from test_fairness import grade_notebooks

    source = json.loads(CH19.source.read_text(encoding="utf-8"))
    notebooks = {}
    for name, function in (("bmm_for_four_dims", "scaled_attention"), ("mha_value_from_x", "multi_head_attention")):
        notebook = json.loads(json.dumps(source))
        index = next(i for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code" and "".join(cell["source"]).startswith(f"def {function}("))
        notebook["cells"][index]["source"] = ROUND4[name].source.strip() + "\n"
        notebooks[name.replace("_", "")] = notebook
    folder = grade_notebooks(tmp_path, notebooks)
    checked = 0
    for student, notebook in notebooks.items():
        results = json.loads((folder / student / CH19.name / "results.json").read_text(encoding="utf-8"))
        page_text = (folder / student / CH19.name / "feedback.html").read_text(encoding="utf-8")
        for cell in results["cells"]:
            if not cell.get("line"):
                continue
            assert cell_line(notebook, cell["index"], cell["line"]) == cell["text"], (student, cell)
            assert f"出错的是这个单元格的第 {cell['line']} 行" in page_text
            checked += 1
            inner = cell.get("inner")
            if inner:
                defining = cell_defining(notebook, inner["section"], inner["function"])
                assert defining >= 0 and cell_line(notebook, defining, inner["line"]) == inner["text"], (student, inner)
                checked += 1
        for test in results["tests"]:
            error = test.get("error") or {}
            if error.get("line"):
                defining = cell_defining(notebook, error.get("section", ""), error["function"])
                assert defining >= 0 and cell_line(notebook, defining, error["line"]) == error["text"], (student, error)
                checked += 1
        # Every failed cell's "第 N 行" on the page is shown with that line of that cell.
        shown = set(re.findall(r"出错的是这个单元格的第 (\d+) 行：<code data-cell-line>(.*?)</code>", page_text))
        assert shown == {(str(c["line"]), str(markupsafe.escape(c["text"]))) for c in results["cells"] if c.get("line")}, shown
    assert checked >= 4, checked
    # A demo cell that failed inside the student's scaled_attention names that function's cell and
    # line, not only its own calling line.
    results = json.loads((folder / "bmmforfourdims" / CH19.name / "results.json").read_text(encoding="utf-8"))
    calling = [cell for cell in results["cells"] if cell.get("line") and "scaled_attention(" in cell["text"]]
    assert calling and all(cell.get("inner", {}).get("function") == "scaled_attention" for cell in calling), calling
    page_text = (folder / "bmmforfourdims" / CH19.name / "feedback.html").read_text(encoding="utf-8")
    assert "错误发生在这一行调用的 scaled_attention 里" in page_text and "data-inner-line" in page_text
