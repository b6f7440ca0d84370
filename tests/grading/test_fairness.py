"""Fairness, round 2 (issue 26; issue 23's property points): realistic mistakes of our own, none
catalogued, graded through a real pytest session of the hidden suite. Each must lose only its own
function's points, earn no property point without a working function, and never be told another
function's mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


from contract import CH19
from fair_submissions import FAIRNESS
from test_autograder import grade_in_one_session

catalogue = CH19.catalogue()
REFERENCE = catalogue.reference_source()
FUNCTION_OF_MISTAKE = {mistake.id: mistake.function for mistake in catalogue.MISTAKES}


@pytest.fixture(scope="module")
def results() -> dict:
    sources = {"reference": REFERENCE}
    sources.update({name: REFERENCE + "\n" + source for name, (_, source) in FAIRNESS.items()})
    return grade_in_one_session(sources)


def score(graded: list) -> float:
    return sum(result["score"] for result in graded)


def summary(graded: list) -> str:
    return "\n".join(f"{r['nodeid']}: {r['status']} {r['diagnoses']} {r['output'][:200]}" for r in graded if r["status"] != "passed")


def test_there_are_at_least_ten_new_cases():
    """Ten or more that the catalogue still does not know (those it learned to name are EXACT_IDS)."""
    assert len(set(FAIRNESS) - set(EXACT_IDS)) >= 10


@pytest.mark.parametrize("name", list(FAIRNESS))
def test_each_case_loses_only_its_own_functions_points(results, name):
    function, _ = FAIRNESS[name]
    graded = results[name]
    assert score(graded) < 100, summary(graded)
    for result in graded:
        if result["status"] != "passed":
            assert function in result["functions"], f"{result['nodeid']} grades {result['functions']}, not {function}:\n" + summary(graded)


@pytest.mark.parametrize("name", list(FAIRNESS))
def test_no_case_is_told_another_functions_mistake(results, name):
    """A diagnosis names a mistake of one function; never on a submission whose that function is right."""
    function, _ = FAIRNESS[name]
    named = {d for r in results[name] for d in r["diagnoses"]}
    wrong = {d for d in named if FUNCTION_OF_MISTAKE.get(d) != function}
    assert not wrong, summary(results[name])


# Fairness cases the catalogue has since learned to name (issue 26): each failed test must carry
# exactly its own id, never a neighbour's (scale_by_fixed_number, no_empty_row_error used to fit).
EXACT_IDS = {"scale_by_dim1": "scale_by_dim1", "empty_check_on_keys": "empty_check_on_keys"}


@pytest.mark.parametrize("name", list(EXACT_IDS))
def test_a_catalogued_case_is_named_by_its_exact_id(results, name):
    failed = [r for r in results[name] if r["status"] != "passed"]
    assert failed, summary(results[name])
    assert all(r["diagnoses"] == [EXACT_IDS[name]] for r in failed), summary(results[name])


@pytest.mark.parametrize("name", list(FAIRNESS))
def test_no_case_gets_a_wrong_id(results, name):
    """A wrong name is worse than none, even one of the right function's (a fixed √2 for a scale by
    dim 1's size): each case is named by its own id or not at all."""
    named = {d for r in results[name] for d in r["diagnoses"]}
    assert named == ({EXACT_IDS[name]} if name in EXACT_IDS else set()), summary(results[name])


def test_a_split_heads_that_always_raises_earns_no_property_point(results):
    graded = {r["nodeid"].rsplit("::", 1)[-1]: r for r in results["split_always_raises"]}
    assert graded["test_split_heads_rejects_indivisible_width"]["score"] == 0, summary(results["split_always_raises"])
    # The reference still earns it.
    assert all(r["status"] == "passed" for r in results["reference"])


def test_a_missing_module_says_what_grading_has_installed():
    from attnkit.boundary.explain import explain

    text = explain("ModuleNotFoundError", "No module named 'einops'")
    assert all(name in text for name in ("torch", "numpy", "matplotlib", "标准库"))


def test_a_missing_name_explains_skipped_cells_truthfully():
    """Grading does not run skip-grading cells: the NameError explanation must not claim it runs all."""
    from attnkit.boundary.explain import explain

    text = explain("NameError", "name 'helper' is not defined")
    assert "skip-grading" in text and "评分时按顺序运行全部单元格）" not in text


def test_section_titles_lose_their_markdown(tmp_path):
    import json

    from attnkit.notebook import parse_notebook

    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "### 练习 4.1：`scaled_attention` 与 **掩码**"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "x = 1"},
    ]
    raw = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    notebook = parse_notebook(raw, tmp_path / "a.ipynb")
    assert notebook.cells[-1].section == "练习 4.1：scaled_attention 与 掩码"


def test_the_page_does_not_call_pythons_errors_pytorchs():
    from attnkit.report import pages

    template = (Path(pages.__file__).parent / "templates" / "feedback.html.j2").read_text(encoding="utf-8")
    assert "PyTorch 的原始信息" not in template


PROPERTY_FILES = ("test_ch19_3_empty_row.py", "test_ch19_5_future.py")


@pytest.mark.parametrize("name", ["numpy_float64", "float32_scale"])
def test_precision_never_costs_the_property_tests(results, name):
    """The empty-row and future tests of scaled_attention are judged at concept level."""
    own = [r for r in results[name] if r["nodeid"].split("::")[0].endswith(PROPERTY_FILES) and r["functions"] == ["scaled_attention"]]
    assert own and all(r["status"] == "passed" for r in own), summary(results[name])


def test_a_precision_failure_says_so_instead_of_printing_equal_rows(results):
    failed = [r for r in results["float32_scale"] if r["status"] != "passed"]
    assert failed, summary(results["float32_scale"])
    assert all("精度问题：检查 float32 的中间结果" in r["output"] and "这一行应为" not in r["output"] for r in failed), summary(results["float32_scale"])


def test_an_answer_more_precise_than_the_expectation_is_judged_at_the_expectations_precision():
    """A float64 answer compared with a float32 expectation: float32's tolerance, not float64's."""
    from attnkit.assignment.checks import assert_close

    exact = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    assert_close(exact, exact.to(torch.float32), "x")  # off by float32 rounding only
    with pytest.raises(AssertionError, match="精度问题"):
        assert_close(exact + 1e-4, exact, "x")


def page(graded: list) -> str:
    """The student's feedback page for one graded submission, as the CLI renders it."""
    from attnkit.report.pages import feedback_html
    from attnkit.report.results_json import results_json

    record = {"student_id": "s", "assignment": CH19.name, "fingerprint": "", "tests": [dict(result) for result in graded]}
    return feedback_html(results_json(record, CH19), CH19)


def test_the_page_names_a_precision_problem_as_one(results):
    text = page(results["float32_scale"])
    assert "精度问题：检查 float32 的中间结果" in text and "这一行应为" not in text


def test_the_page_shows_a_diagnosis_once_per_page(results):
    """scale_by_dim1 fails several tests of one part with one diagnosis: its explanation is shown
    once, at the top (issue 41 replaced "once per part, under its first test": the same paragraph
    four times on one page), and each of its tests refers to it."""
    graded = results["scale_by_dim1"]
    parts = {r["grade_id"] for r in graded if r["diagnoses"]}
    assert parts
    text = page(graded)
    explanation = CH19.mistakes["scale_by_dim1"]["text"]
    summary_part, parts_part = text.split("各部分得分", 1)
    assert summary_part.count(explanation) == 1, "once in the diagnosis summary at the top"
    assert parts_part.count(explanation) == 0, "the parts refer to it instead of repeating it"
    assert parts_part.count('data-refers="scale_by_dim1"') == sum("scale_by_dim1" in r["diagnoses"] for r in graded)


def grade_notebooks(tmp_path: Path, notebooks: dict[str, dict]) -> Path:
    """Each student's notebook graded by the real ``attnkit grade``; the students' output folder."""
    import json
    import os
    import sys

    from commands import run_command

    for student, notebook in notebooks.items():
        target = tmp_path / "in" / student / CH19.name
        target.mkdir(parents=True)
        (target / CH19.notebook).write_text(json.dumps(notebook), encoding="utf-8")
    run = run_command([Path(sys.executable).with_name("attnkit"), "grade", "--submitted", str(tmp_path / "in"), "--out", str(tmp_path / "out")], env=os.environ)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    return tmp_path / "out" / "students"


@pytest.mark.e2e
def test_the_page_explains_a_helper_left_in_a_skipped_cell(tmp_path):
    """A helper made only by an experiment in a skip-grading demo cell (an assignment, not a
    ``def``: issue 41 runs a demo cell's definitions that answers use, never its experiments) is
    missing at grading time: the page says why (skip-grading cells do not run their
    experiments), never that every cell runs."""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    helper = {
        "cell_type": "code",
        "metadata": {"tags": ["skip-grading"]},
        "execution_count": None,
        "outputs": [],
        "source": "import math\nscale_of = lambda query: math.sqrt(query.shape[-1])\nprint(scale_of)\n",
    }
    answer = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": (
            "def scaled_attention(query, key, value, allowed=None):\n"
            "    scores = query @ key.transpose(-2, -1) / scale_of(query)\n"
            "    if allowed is not None:\n"
            "        if not allowed.any(dim=-1).all():\n"
            "            raise ValueError('empty row')\n"
            "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
            "    weights = scores.softmax(dim=-1)\n"
            "    return weights @ value, weights\n"
        ),
    }
    notebook["cells"] += [helper, answer]
    text = (grade_notebooks(tmp_path, {"lisi": notebook}) / "lisi" / CH19.name / "feedback.html").read_text(encoding="utf-8")
    assert "NameError" in text and "skip-grading" in text, text[-3000:]
    assert "评分时按顺序运行全部单元格）" not in text
    assert "PyTorch 的原始信息" not in text


@pytest.mark.e2e
def test_a_helper_defined_in_a_skipped_cell_is_defined_at_grading_time(tmp_path):
    """Issue 41's policy: a notebook that runs top to bottom in Jupyter gets its points. A helper
    ``def`` in a skip-grading demo cell that an answer uses is run at grading time (its
    definitions, not its experiment: the demo's plot and print do not run), and the page says
    so; an answer function defined only in a demo cell is still not taken from it."""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    demo = {
        "cell_type": "code",
        "metadata": {"tags": ["skip-grading"]},
        "execution_count": None,
        "outputs": [],
        "source": (
            "import math\n\n"
            "def scale_of(query):\n    return math.sqrt(_width(query))\n\n"
            "def _width(tensor):\n    return tensor.shape[-1]\n\n"
            "raise RuntimeError('an experiment that must not run at grading time')\n"
        ),
    }
    answer = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": (
            "def scaled_attention(query, key, value, allowed=None):\n"
            "    scores = query @ key.transpose(-2, -1) / scale_of(query)\n"
            "    if allowed is not None:\n"
            "        if not allowed.any(dim=-1).all():\n"
            "            raise ValueError('empty row')\n"
            "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
            "    weights = scores.softmax(dim=-1)\n"
            "    return weights @ value, weights\n"
        ),
    }
    notebook["cells"] += [demo, answer]
    folder = grade_notebooks(tmp_path, {"qianqi": notebook})
    results = json.loads((folder / "qianqi" / CH19.name / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == results["max_score"] == 100, [(t["name"], t["output"][:200]) for t in results["tests"] if t["status"] != "passed"]
    assert any("scale_of" in note and "skip-grading" in note and "_width" in note for note in results["notes"]), results["notes"]
    assert not any(cell.get("error_type") == "RuntimeError" for cell in results.get("cells", [])), "the experiment did not run"


@pytest.mark.e2e
def test_a_failure_inside_a_called_function_names_that_function(tmp_path):
    """A scaled_attention that breaks only on cross-attention shapes of several heads (its own
    tests pass): does the multi-head test's message say the failing line is in scaled_attention,
    not only that multi_head_attention raised?"""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    picky = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": (
            "_reference_attention = scaled_attention\n\n"
            "def scaled_attention(query, key, value, allowed=None):\n"
            "    if query.dim() == 4 and query.shape[-1] == 2 and query.shape[-2] != key.shape[-2]:\n"
            "        raise RuntimeError('cross shapes not handled')\n"
            "    return _reference_attention(query, key, value, allowed)\n"
        ),
    }
    notebook["cells"] += [picky]
    folder = grade_notebooks(tmp_path, {"zhouliu": notebook})
    results = json.loads((folder / "zhouliu" / CH19.name / "results.json").read_text(encoding="utf-8"))
    raised = [t for t in results["tests"] if "multi_head_attention" in t.get("functions", ()) and "cross shapes not handled" in t["output"]]
    assert raised, [(t["name"], t["status"], t["output"][:200]) for t in results["tests"] if t["status"] != "passed"]
    assert all("出错的一行在它调用的 scaled_attention 里" in t["output"] for t in raised), [t["output"][:300] for t in raised]


@pytest.mark.e2e
def test_a_failed_import_says_on_the_page_and_in_the_tests_what_grading_has(tmp_path):
    """merge_heads' cell imports einops, which grading does not have: do the failed-cells table and
    the message of every test that misses merge_heads say what is installed for grading, not only
    "name is not defined"?"""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    answer = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code" and "def merge_heads" in "".join(cell["source"]))
    answer["source"] = "from einops import rearrange  # not installed for grading\n" + "".join(answer["source"])
    folder = grade_notebooks(tmp_path, {"wangwu": notebook})
    results = json.loads((folder / "wangwu" / CH19.name / "results.json").read_text(encoding="utf-8"))
    page = (folder / "wangwu" / CH19.name / "feedback.html").read_text(encoding="utf-8")
    installed = "评分环境里只安装了 torch"
    assert "ModuleNotFoundError" in page and installed in page, page[-3000:]
    missing = [t for t in results["tests"] if "merge_heads" in t.get("functions", ()) and t["status"] != "passed"]
    assert missing and all(installed in t["output"] for t in missing), [(t["name"], t["output"][:300]) for t in missing]


@pytest.mark.e2e
def test_a_later_redefinition_is_reported_and_the_last_definition_graded(tmp_path):
    """An experiment cell near the end defines scaled_attention again (a scale forgotten): is that
    last definition the one graded, as Jupyter's "Run All" leaves it, and do results.json and the
    page say where both definitions are and which one counts? The model answer gets no such note."""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    heading = {"cell_type": "markdown", "metadata": {}, "source": "## 我的实验"}
    experiment = {
        "cell_type": "code",
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": (
            "def scaled_attention(query, key, value, allowed=None):\n"
            "    scores = query @ key.transpose(-2, -1)\n"
            "    if allowed is not None:\n"
            "        if not allowed.any(dim=-1).all():\n"
            "            raise ValueError('empty row')\n"
            "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
            "    weights = scores.softmax(dim=-1)\n"
            "    return weights @ value, weights\n"
        ),
    }
    folder = grade_notebooks(tmp_path, {"zhaoliu": {**notebook, "cells": notebook["cells"] + [heading, experiment]}, "model": notebook})
    results = json.loads((folder / "zhaoliu" / CH19.name / "results.json").read_text(encoding="utf-8"))
    notes = [note for note in results["notes"] if "scaled_attention 在 2 个单元格里都有定义" in note]
    assert len(notes) == 1 and "「我的实验」一节" in notes[0] and "被评分的是最后一个（「我的实验」一节）" in notes[0], results["notes"]
    graded = [t for t in results["tests"] if t["grade_id"] == "check_scaled_attention"]
    assert graded and any(t["status"] == "failed" for t in graded), "the unscaled later definition is the one graded"
    page = (folder / "zhaoliu" / CH19.name / "feedback.html").read_text(encoding="utf-8")
    assert "「我的实验」一节" in page and "都有定义" in page
    model = json.loads((folder / "model" / CH19.name / "results.json").read_text(encoding="utf-8"))
    assert not any("都有定义" in note for note in model["notes"]) and model["score"] == model["max_score"]


@pytest.mark.parametrize("case", ["full_width_paren", "skipped_definition"])
@pytest.mark.e2e
def test_a_missing_function_names_the_cell_that_failed_to_define_it(tmp_path, case):
    """scaled_attention's answer cell has a full-width parenthesis (a SyntaxError), or the only
    definition sits in a skip-grading cell: does each failed test's message point at that cell
    (its section, and the error or the tag) instead of only saying the name is missing?"""
    import json

    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    answer = next(i for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code" and "def scaled_attention" in "".join(cell["source"]))
    source = "".join(notebook["cells"][answer]["source"])
    if case == "full_width_paren":
        notebook["cells"][answer]["source"] = source.replace("def scaled_attention(", "def scaled_attention（", 1)
    else:
        notebook["cells"][answer]["metadata"] = {**notebook["cells"][answer].get("metadata", {}), "tags": ["skip-grading"]}
    folder = grade_notebooks(tmp_path, {"wangwu": notebook})
    results = json.loads((folder / "wangwu" / CH19.name / "results.json").read_text(encoding="utf-8"))
    own = [t for t in results["tests"] if t["grade_id"] == "check_scaled_attention"]
    assert own and all(t["status"] == "failed" for t in own)
    expected = "运行出错（SyntaxError" if case == "full_width_paren" else "带有 skip-grading 标签"
    assert all("定义它的单元格（「练习 4.1：scaled_attention」一节）" in t["output"] and expected in t["output"] for t in own), [t["output"][:400] for t in own]
