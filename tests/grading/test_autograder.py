"""Does the hidden autograder (autograder/) grade right, and diagnose every known mistake as itself?

Everything runs in this process through real pytest sessions of the hidden suite (the
development provider, trusted code only): one session grades every submission below, so the
suite is collected once. No mocks.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from attnkit.grading import plugin as plugin_module
from attnkit.assignment.folder import Assignment
from attnkit.grading.local_provider import LocalProvider, notebook_source
from attnkit.grading.plugin import GradingPlugin, Provider
from attnkit.grading.student import LocalBackend, Student

ROOT = Path(__file__).resolve().parents[2]
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions" / "ch19-attention").glob("*.ipynb"))
SOLUTION = ROOT / "solutions" / "ch19-attention" / "attention.ipynb"
RELEASE = ROOT / "assignments" / "ch19-attention" / "attention.ipynb"

from contract import ASSIGNMENTS, CH19, GRADE_POINTS, own_imports
from wrong_submissions import UNCATALOGUED

# The mistake ids results.json promises (the catalogue-id contract; this set is where the repository
# states it): a course may rely on them, so none may go. The catalogue may add more.
DESIGN_IDS = {
    "no_scale",
    "scale_by_dk",
    "softmax_wrong_axis",
    "mask_by_multiplying",
    "mask_after_softmax",
    "mask_inverted",
    "mask_not_applied",
    "no_empty_row_error",
    "causal_excludes_diagonal",
    "causal_upper_triangle",
    "padding_on_queries",
    "split_without_transpose",
    "merge_without_transpose",
    "missing_output_projection",
    "causal_true_means_blocked",
}

catalogue = CH19.catalogue()  # the hidden suite's own module, imported as pytest imports it
REFERENCE = catalogue.reference_source()

STUBS = """
def scaled_attention(query, key, value, allowed=None):
    raise NotImplementedError()

def causal_allowed(size):
    raise NotImplementedError()

def padding_allowed(lengths, size):
    raise NotImplementedError()

def split_heads(x, num_heads):
    raise NotImplementedError()

def merge_heads(x):
    raise NotImplementedError()

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    raise NotImplementedError()

trace_projected = trace_split = trace_weights = trace_mixed = trace_merged = trace_output = None
answer_output_shape = answer_weights_shape = answer_causal_sees_current = None
answer_heads_split_sequence = answer_weights_factor = answer_output_factor = None
answer_earlier_outputs_change = answer_growth_factor = None
"""

# Correct solutions in other styles: each replaces one or two reference functions.
ALTERNATIVES = {
    "einsum": """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / math.sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("a query has no allowed key")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...qk,...kv->...qv", weights, value), weights
""",
    "minus_1e9": """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if allowed is not None:
        if (~allowed).all(dim=-1).any():
            raise ValueError("empty row")
        scores = scores.masked_fill(allowed.logical_not(), -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
""",
    "manual_stable_softmax": """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) * (1.0 / math.sqrt(query.shape[-1]))
    if allowed is not None:
        if not bool(allowed.any(-1).all()):
            raise ValueError("empty row")
        scores = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
    shifted = scores - scores.max(dim=-1, keepdim=True).values
    exps = shifted.exp()
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ value, weights
""",
    "mask_after_softmax_renormalised": """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    weights = scores.softmax(dim=-1)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        weights = weights * allowed
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights @ value, weights
""",
    "view_permute": """
def split_heads(x, num_heads):
    b, t, d = x.shape
    if d % num_heads:
        raise ValueError("width not divisible by heads")
    return x.view(b, t, num_heads, d // num_heads).permute(0, 2, 1, 3)

def merge_heads(x):
    b, h, t, d = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, t, h * d)
""",
    "heads_in_a_loop": """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    q, k, v = x @ w_q, source @ w_k, source @ w_v
    size = q.shape[-1] // num_heads
    outputs, all_weights = [], []
    for r in range(num_heads):
        part = slice(r * size, (r + 1) * size)
        out, weights = scaled_attention(q[:, None, :, part], k[:, None, :, part], v[:, None, :, part], allowed)
        outputs.append(out[:, 0])
        all_weights.append(weights[:, 0])
    return torch.cat(outputs, dim=-1) @ w_o, torch.stack(all_weights, dim=1)
""",
    "answer_forms": """
import numpy as np

trace_projected = [4, 5, 12]
trace_split = [4.0, 3.0, 5.0, 4.0]
trace_weights = (np.int64(4), 3, 5, 5)
trace_mixed = tuple(np.array([4, 3, 5, 4]).tolist())
trace_merged = torch.tensor([4, 5, 12])
trace_output = (torch.tensor(4), 5, torch.tensor(12.0))
answer_weights_shape = [6, 4]
answer_causal_sees_current = np.bool_(True)
answer_earlier_outputs_change = torch.tensor(False)
answer_heads_split_sequence = 0
answer_weights_factor = 1.0
answer_output_factor = np.int64(3)
answer_growth_factor = 9.0
""",
    "prints_and_warns": """
import sys
import warnings

print("loading my solution", file=sys.stderr)
_scaled_attention = scaled_attention

def scaled_attention(query, key, value, allowed=None):
    print("scaled_attention called with", tuple(query.shape))
    print("debug: on stderr", file=sys.stderr)
    warnings.warn("this is only a warning", UserWarning)
    return _scaled_attention(query, key, value, allowed)

_causal_allowed = causal_allowed

def causal_allowed(size):
    warnings.warn("deprecated-looking warning", DeprecationWarning)
    print("causal", size, file=sys.stderr)
    return _causal_allowed(size)
""",
}


class SourceProvider(Provider):
    """Several trusted sources (or trusted notebooks, by path) graded in one pytest session."""

    def __init__(self, sources: dict[str, str | Path]) -> None:
        self.sources = sources

    def submission_ids(self) -> list[str]:
        return list(self.sources)

    def open(self, submission_id: str) -> Student:
        source = self.sources[submission_id]
        if isinstance(source, Path):
            return LocalProvider(source).open(submission_id)
        return Student(LocalBackend.from_source(source), api=CH19.functions)

    def close(self, submission_id: str) -> None:
        pass


# Well-formed but wrong answers: the feedback must name them without giving the right values away.
WRONG_ANSWERS = """
trace_projected = (4, 5, 4)
trace_split = (4, 5, 3, 4)
trace_weights = (4, 3, 5, 4)
trace_mixed = (4, 3, 4, 5)
trace_merged = (4, 12, 5)
trace_output = (4, 5, 4)
answer_output_shape = (9, 6)
answer_weights_shape = (4, 6)
answer_causal_sees_current = False
answer_heads_split_sequence = True
answer_weights_factor = 3
answer_output_factor = 1
answer_earlier_outputs_change = True
answer_growth_factor = 3
"""
RIGHT_ANSWER_TEXTS = ("(4, 5, 12)", "(4, 3, 5, 4)", "(4, 3, 5, 5)", "(6, 9)", "(6, 4)", "True", "False", "[4, 5, 12]")
# The chapter's own printed answers, which the notebook no longer asks for: copying them must fail.
CHAPTER_ANSWERS = """
trace_projected = (2, 3, 8)
trace_split = (2, 2, 3, 4)
trace_weights = (2, 2, 3, 3)
trace_mixed = (2, 2, 3, 4)
trace_merged = (2, 3, 8)
trace_output = (2, 3, 8)
answer_output_shape = (5, 3)
answer_weights_shape = (5, 7)
answer_weights_factor = 1
answer_output_factor = 2
answer_growth_factor = 16
"""


# The new catalogue entries written in other styles a student would use: each must be diagnosed as
# exactly its own id (a mask meaning "blocked" must never be called causal_excludes_diagonal).
NEW_ENTRY_STYLES: dict[str, tuple[str, str]] = {
    # Softmax over the batch: softmax_wrong_axis covers every wrong axis (issue 26).
    "softmax_dim0": (
        "softmax_wrong_axis",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=0)
    return weights @ value, weights
""",
    ),
    # Softmax over axis 1 (the heads of (B, h, T_q, T_k)).
    "softmax_dim1": (
        "softmax_wrong_axis",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.matmul(query, key.transpose(-2, -1)) / sqrt(query.size(-1))
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return weights @ value, weights
""",
    ),
    "triu_function": (
        "causal_true_means_blocked",
        """
import torch

def causal_allowed(size):
    return torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)
""",
    ),
    "not_tril": (
        "causal_true_means_blocked",
        """
import torch

def causal_allowed(size):
    return ~torch.ones(size, size, dtype=torch.bool).tril()
""",
    ),
    "arange_greater": (
        "causal_true_means_blocked",
        """
import torch

def causal_allowed(size):
    return torch.arange(size)[None, :] > torch.arange(size)[:, None]
""",
    ),
    "bias_plus_1e9": (
        "additive_mask_wrong_sign",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        bias = torch.zeros_like(scores).masked_fill(~allowed, 1e9)
        scores = scores + bias
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    "literal_1_4142": (
        "scale_by_fixed_number",
        """
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / 1.4142
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    "value_size_power": (
        "scale_by_dv",
        """
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) / value.size(-1) ** 0.5
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
""",
    ),
    "inline_einsum_sqrt_d_model": (
        "multi_head_scale_by_model_width",
        """
import math
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    d_model = w_q.shape[0]
    q, k, v = split_heads(x @ w_q, num_heads), split_heads(source @ w_k, num_heads), split_heads(source @ w_v, num_heads)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_model)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(-1)
    return merge_heads(weights @ v) @ w_o, weights
""",
    ),
    # The size of dim 1 as the scale, through size() and a power (issue 26).
    "dim1_size_power": (
        "scale_by_dim1",
        """
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) / key.size(1) ** 0.5
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
""",
    ),
    # The empty-row check over the queries' axis, written as "some column is all blocked".
    "empty_column_check": (
        "empty_check_on_keys",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if (~allowed).all(dim=-2).any():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    "one_projection_reused": (
        "shared_projection",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    projected = split_heads(source @ w_q, num_heads)
    heads, weights = scaled_attention(split_heads(x @ w_q, num_heads), projected, projected, allowed)
    return merge_heads(heads) @ w_o, weights
""",
    ),
}

# A student whose scaled_attention is wrong and whose multi_head_attention keeps whatever
# scaled_attention it finds bound during its calls (the reference's stand-in, when the grader swaps
# it in), and the reference's answers on every input seen so far, to use them in later calls.
STASHER = """
_stash = {}
_seen = []
_answers = []

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    _stash.setdefault("attention", scaled_attention)
    if not _answers:
        for args in list(_seen)[:50]:
            try:
                _answers.append((args, scaled_attention(*args)))
            except Exception:
                pass
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights

_own_attention = scaled_attention

def scaled_attention(query, key, value, allowed=None):
    if len(_seen) < 50:
        _seen.append((query, key, value, allowed))
    for (q, k, v, a), answer in _answers:
        if q.shape == query.shape and torch.equal(q, query) and torch.equal(k, key):
            return answer
    stashed = _stash.get("attention")
    if stashed is not None:
        try:
            return stashed(query, key, value, allowed)
        except Exception:
            pass
    return _own_attention(query, key, value, allowed)
"""


# Computes no attention at all, yet has both properties the property tests look for: it raises
# ValueError exactly when a row is empty, and each output depends on its own position only (so
# nothing from the future leaks, and a changed position's own output moves).
PROPERTY_FAKER = """
import torch

def scaled_attention(query, key, value, allowed=None):
    if allowed is not None and not allowed.any(dim=-1).all():
        raise ValueError("empty row")
    shapes = [query.shape[:-2], key.shape[:-2]] + ([allowed.shape[:-2]] if allowed is not None else [])
    batch = torch.broadcast_shapes(*shapes)
    weights = torch.eye(query.shape[-2], key.shape[-2], dtype=query.dtype).expand(*batch, -1, -1)
    return weights @ value + query.mean(dim=-1, keepdim=True), weights
"""


# An unfinished multi_head_attention beside a broken split_heads (its dependency): the stub cannot
# be finished by swapping references in, so its tests are not re-run with them.
UNFINISHED_MULTI_HEAD = """
def split_heads(x, num_heads):
    return x.reshape(*x.shape[:-1], num_heads, -1)  # no transpose: heads and positions mixed

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    raise NotImplementedError()
"""
# A correct multi_head_attention with an unfinished causal_allowed, which some of its tests use:
# the dependency's stub is swapped out like any failed dependency.
UNFINISHED_CAUSAL = """
def causal_allowed(size):
    raise NotImplementedError()
"""


def submissions() -> dict[str, str | Path]:
    sources: dict[str, str | Path] = {
        "reference": REFERENCE,
        "nothing": "",
        "stubs": STUBS,
        "wrong_answers": REFERENCE + WRONG_ANSWERS,
        "property_faker": REFERENCE + PROPERTY_FAKER,
        "chapter_answers": REFERENCE + CHAPTER_ANSWERS,
    }
    for name, path in (("solution_notebook", SOLUTION), ("release_notebook", RELEASE)):
        if path.exists():
            sources[name] = path
    for name, source in ALTERNATIVES.items():
        sources[f"alternative_{name}"] = REFERENCE + "\n" + source
    for mistake in catalogue.MISTAKES:
        sources[f"mistake_{mistake.id}"] = REFERENCE + "\n" + mistake.source
    for name, (_, source) in UNCATALOGUED.items():
        sources[f"wrong_{name}"] = REFERENCE + "\n" + source
    for name, (_, source) in NEW_ENTRY_STYLES.items():
        sources[f"style_{name}"] = REFERENCE + "\n" + source
    sources["stasher"] = REFERENCE + "\n" + catalogue.by_id("softmax_wrong_axis").source + "\nimport torch\n" + STASHER
    sources["unfinished_multi_head"] = REFERENCE + "\n" + UNFINISHED_MULTI_HEAD
    sources["unfinished_causal"] = REFERENCE + "\n" + UNFINISHED_CAUSAL
    return sources


def grade_in_one_session(sources: dict[str, str], *options: str) -> dict:
    """Per submission id, ch19's hidden suite's TestResults for these notebook sources: one real
    pytest session in this process (``options`` go to pytest)."""
    plugin = GradingPlugin(SourceProvider(sources))
    # As the engine does: tiny tensors run several times faster on one thread (and a busy machine
    # makes OpenMP's thread pool far slower still).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = pytest.main(["-q", "--assert=plain", "-p", "no:cacheprovider", *options, str(CH19.folder)], plugins=[plugin_module, plugin])
    finally:
        torch.set_num_threads(threads)
    assert code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), f"the hidden suite did not run: {code!r}"
    return plugin.results


@pytest.fixture(scope="module")
def autograder_results() -> dict:
    """Per submission id, the hidden suite's TestResults (one real pytest session for all)."""
    return grade_in_one_session(submissions(), "-W", "error::pytest.PytestRemovedIn10Warning")


def score(results: list) -> float:
    return sum(result["score"] for result in results)


def all_diagnoses(results: list) -> set[str]:
    return {diagnosis for result in results for diagnosis in result["diagnoses"]}


def summary(results: list) -> str:
    return "\n".join(f"{r['nodeid']}: {r['status']} {r['diagnoses']} {r['output'][:200]}" for r in results if r["status"] != "passed")


@pytest.mark.e2e
def test_reference_scores_full_marks_without_diagnosis(autograder_results):
    """Does the reference solution score 100/100, with every test passing and no diagnosis?"""
    results = autograder_results["reference"]
    assert score(results) == 100, summary(results)
    assert all(result["status"] == "passed" for result in results), summary(results)
    assert all_diagnoses(results) == set()


@pytest.mark.parametrize("submission", ["nothing", "stubs"])
@pytest.mark.e2e
def test_empty_or_stub_submission_scores_zero_without_diagnosis(autograder_results, submission):
    """Does a file that defines nothing, or only NotImplementedError stubs, score 0 with no diagnosis?"""
    results = autograder_results[submission]
    assert score(results) == 0
    assert all_diagnoses(results) == set()
    assert all(result["output"] for result in results), "every failed test should say why"


@pytest.mark.skipif(not (SOLUTION.exists() and RELEASE.exists()), reason="no notebooks yet")
@pytest.mark.e2e
def test_solution_notebook_scores_100_and_release_notebook_0(autograder_results):
    """Does the model-answer notebook score 100/100 and the unfilled release notebook 0, neither with a diagnosis?"""
    solution, release = autograder_results["solution_notebook"], autograder_results["release_notebook"]
    assert score(solution) == 100 and all_diagnoses(solution) == set(), summary(solution)
    assert score(release) == 0 and all_diagnoses(release) == set(), summary(release)


@pytest.mark.e2e
def test_points_per_grade_cell_match_the_contract(autograder_results):
    """Do the hidden tests' points, summed per grade_id, equal the grade cells' points of the source notebook (total 100)?"""
    points: dict[str, float] = defaultdict(float)
    for result in autograder_results["reference"]:
        points[result["grade_id"]] += result["max_score"]
    assert dict(points) == GRADE_POINTS
    assert sum(points.values()) == 100


@pytest.mark.skipif(not SOLUTION_NOTEBOOKS, reason="no solution notebook yet")
def test_points_match_the_notebooks_grade_cells():
    """Does every grade cell the engine reads (``GRADE_POINTS``) appear exactly once in the solution notebooks, with the same points?"""
    found: dict[str, float] = {}
    for path in SOLUTION_NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and meta.get("grade_id") in GRADE_POINTS:
                assert meta["grade_id"] not in found, f"grade cell {meta['grade_id']} appears twice"
                found[meta["grade_id"]] = float(meta.get("points", 0))
    assert found == {grade_id: float(points) for grade_id, points in GRADE_POINTS.items()}


def test_catalogue_covers_the_design_ids_and_each_mistake_replaces_one_function():
    """Does the catalogue hold every contracted mistake id, each mistake defining exactly the one function it names?"""
    ids = [mistake.id for mistake in catalogue.MISTAKES]
    assert len(ids) == len(set(ids))
    assert DESIGN_IDS <= set(ids)
    api = {"scaled_attention", "causal_allowed", "padding_allowed", "split_heads", "merge_heads", "multi_head_attention"}
    for mistake in catalogue.MISTAKES:
        tree = ast.parse(mistake.source)
        defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        assert defined == [mistake.function] and mistake.function in api, mistake.id
        assert mistake.section.startswith("第 ") and mistake.zh, mistake.id
        assert catalogue.by_id(mistake.id) is mistake
    # Built once: the plugin asks for them on every failed test.
    assert catalogue.mistake_namespaces() is catalogue.mistake_namespaces()
    assert set(catalogue.mistake_namespaces()) == set(ids)


@pytest.mark.parametrize("mistake", catalogue.MISTAKES, ids=lambda mistake: mistake.id)
@pytest.mark.e2e
def test_each_mistake_loses_points_and_is_diagnosed_as_itself(autograder_results, mistake):
    """Does a full solution with exactly this one mistake lose points, and is every failed test diagnosed as this mistake and nothing else?"""
    results = autograder_results[f"mistake_{mistake.id}"]
    assert score(results) < 100
    assert all_diagnoses(results) == {mistake.id}, summary(results)
    for result in results:
        if result["status"] != "passed":
            assert result["diagnoses"] == [mistake.id], summary(results)


def notebook_headings(path: Path) -> list[str]:
    """The markdown headings of a notebook, without their #s."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("mistake", catalogue.MISTAKES, ids=lambda mistake: mistake.id)
@pytest.mark.e2e
def test_each_mistakes_first_hint_names_what_it_fails(autograder_results, mistake):
    """Is the hint ladder's nudge (issue 53) true for its mistake: of the names it quotes (「…」), one is
    a check the mistake loses points on, and each is such a check, the concept of a test it fails
    (diagnosed as itself), or a heading of the notebook?"""
    results = autograder_results[f"mistake_{mistake.id}"]
    failed = [r for r in results if r["status"] != "passed" and mistake.id in r["diagnoses"]]
    checks = {re.split("（", CH19.part_title(r["grade_id"]))[0] for r in failed}
    concepts = {r["concept"] for r in failed if r["concept"]}
    headings = notebook_headings(SOLUTION)
    quoted = re.findall(r"「(.+?)」", catalogue.HINTS[mistake.id][0])
    assert set(quoted) & checks, (quoted, checks)
    for name in quoted:
        assert name in checks | concepts or any(name in heading for heading in headings), (name, checks, concepts)


@pytest.mark.parametrize("name", list(ALTERNATIVES))
@pytest.mark.e2e
def test_correct_alternatives_score_full_marks(autograder_results, name):
    """Does a correct solution in another style (einsum, -1e9, manual softmax, renormalising after
    softmax, view+permute, a loop over heads, answers as lists/floats/numpy, printing and warning)
    score 100 with no diagnosis?"""
    results = autograder_results[f"alternative_{name}"]
    assert score(results) == 100, summary(results)
    assert all_diagnoses(results) == set()


@pytest.mark.e2e
def test_faked_properties_earn_nothing(autograder_results):
    """Does a function that computes no attention, but raises ValueError on empty rows and never
    leaks the future, earn 0 from the empty-row and future-perturbation tests of that function (it
    earned 20)? (The submission's own multi-head function is right: its future test, run with
    the reference scaled_attention swapped in, grades multi_head_attention and pays.)"""
    results = autograder_results["property_faker"]
    for part in ("check_empty_row", "check_future"):
        tests = [result for result in results if result["grade_id"] == part and "scaled_attention" in result["functions"]]
        assert tests and sum(result["score"] for result in tests) == 0, summary(results)
        properties = [result for result in tests if result["nodeid"].endswith(("fully_masked", "inside_batch", "do_not_leak"))]
        assert all("正确的注意力" in result["output"] for result in properties), summary(results)


@pytest.mark.e2e
def test_wrong_answers_are_named_not_revealed(autograder_results):
    """Does every answer test fail on wrong answers, naming the wrong variables without showing the right values?"""
    results = autograder_results["wrong_answers"]
    answer_cells = {"check_shape_trace", "check_self_test"}
    assert score(results) == 100 - sum(GRADE_POINTS[cell] for cell in answer_cells)
    for result in results:
        if result["grade_id"] in answer_cells:
            assert result["status"] == "failed" and ("trace_" in result["output"] or "answer_" in result["output"]), result["output"]
            assert not any(text in result["output"] for text in RIGHT_ANSWER_TEXTS), result["output"]
    assert all_diagnoses(results) == set()


@pytest.mark.e2e
def test_feedback_never_shows_test_source(autograder_results):
    """Is every failure message curated text, never a line of the hidden tests' code?"""
    leaks = ("assert ", "student.", "def ", "lambda", "Traceback", "torch.equal", "autograder/", ".py")
    messages = [result["output"] for results in autograder_results.values() for result in results if result["output"]]
    assert messages, "some submissions must fail"
    for message in messages:
        assert not any(leak in message for leak in leaks), message


NEW_IDS = (
    "causal_true_means_blocked",
    "additive_mask_wrong_sign",
    "scale_by_dv",
    "scale_by_fixed_number",
    "multi_head_scale_by_model_width",
    "shared_projection",
    "scale_by_dim1",
    "empty_check_on_keys",
)


def test_new_entries_are_in_the_catalogue():
    """Are the issue's new mistakes catalogued (each then checked by the per-mistake test above)?"""
    ids = {mistake.id for mistake in catalogue.MISTAKES}
    assert set(NEW_IDS) <= ids


SINGLE_FUNCTION = [(f"mistake_{m.id}", m.function) for m in catalogue.MISTAKES] + [(f"wrong_{name}", function) for name, (function, _) in UNCATALOGUED.items()]


@pytest.mark.parametrize("submission,function", SINGLE_FUNCTION, ids=[name for name, _ in SINGLE_FUNCTION])
@pytest.mark.e2e
def test_a_mistake_in_one_function_costs_only_that_functions_tests(autograder_results, submission, function):
    """Does a solution with one wrong function lose points only on tests that grade that function
    (multi-head, future perturbation and mask tests re-run with the reference dependency)?"""
    results = autograder_results[submission]
    assert score(results) < 100, summary(results)
    for result in results:
        if result["status"] != "passed":
            assert function in result["functions"], f"{result['nodeid']} grades {result['functions']}, not {function}:\n" + summary(results)


@pytest.mark.e2e
def test_a_swapped_dependency_is_named_on_the_page(autograder_results):
    """When the student's scaled_attention is wrong, do the multi-head tests pass with the reference
    in its place and say so, pointing at part 1?"""
    results = autograder_results["mistake_softmax_wrong_axis"]
    multi_head = [r for r in results if r["grade_id"] == "check_multi_head"]
    assert multi_head and all(r["status"] == "passed" and r["substituted"] == ["scaled_attention"] for r in multi_head), summary(results)
    for result in multi_head:
        assert "这一项用参考的 scaled_attention 代替了你的实现" in result["output"]
        assert "第 1 部分" in result["output"] and "先修正它" in result["output"]
    # Tests of the student's own scaled_attention are never given the reference.
    assert all(not r["substituted"] for r in results if "scaled_attention" in r["functions"])
    # A correct submission's dependent tests run as they are, with nothing substituted.
    assert all(not r["substituted"] and not r["output"] for r in autograder_results["reference"])


@pytest.mark.e2e
def test_an_unfinished_function_is_not_rerun_with_references_swapped_in(autograder_results):
    """A multi_head_attention still raising NotImplementedError beside a broken split_heads: are
    its tests told it is unfinished, with nothing swapped in (a swapped re-run cannot finish a
    stub, and used to blame "your own code" for it)? And an unfinished causal_allowed under a
    correct multi_head_attention: is it still swapped out, so the multi-head tests pass?"""
    results = autograder_results["unfinished_multi_head"]
    multi_head = [r for r in results if r["grade_id"] == "check_multi_head"]
    assert multi_head, summary(results)
    for result in multi_head:
        assert result["status"] == "failed" and not result["substituted"], summary(results)
        assert "multi_head_attention 还没有完成" in result["output"], result["output"]
    # The stub's own part and split_heads' part cost what they cost before: nothing else changes.
    heads = [r for r in results if r["grade_id"] == "check_heads"]
    assert heads and any(r["status"] == "failed" for r in heads), summary(results)
    with_causal = [r for r in autograder_results["unfinished_causal"] if "causal_allowed" in r["substituted"]]
    assert with_causal and all(r["status"] == "passed" for r in with_causal), summary(autograder_results["unfinished_causal"])


@pytest.mark.e2e
def test_a_stashed_reference_gains_nothing(autograder_results):
    """Does a student that keeps whatever scaled_attention it sees during a swapped multi-head call
    (and the answers it got through it) score no more than the same mistake without the trick?"""
    stasher, plain = autograder_results["stasher"], autograder_results["mistake_softmax_wrong_axis"]
    assert score(stasher) <= score(plain), summary(stasher)
    own = lambda results: {r["nodeid"]: r["status"] for r in results if "scaled_attention" in r["functions"]}
    assert own(stasher) == own(plain)


@pytest.mark.parametrize("style", list(NEW_ENTRY_STYLES))
@pytest.mark.e2e
def test_new_entries_written_in_other_styles_are_diagnosed_as_themselves(autograder_results, style):
    """Is each new mistake, written the way a student might, diagnosed as exactly its own id?"""
    expected, _ = NEW_ENTRY_STYLES[style]
    results = autograder_results[f"style_{style}"]
    assert score(results) < 100
    assert all_diagnoses(results) == {expected}, summary(results)


@pytest.mark.parametrize("submission", ["mistake_causal_true_means_blocked", "style_triu_function", "style_not_tril", "style_arange_greater"])
@pytest.mark.e2e
def test_a_mask_meaning_blocked_is_never_called_excludes_diagonal(autograder_results, submission):
    """A causal mask with True = blocked (triu(diagonal=1)) is [[False]] at size 1, like a mask that
    excludes the diagonal: is it never diagnosed causal_excludes_diagonal?"""
    results = autograder_results[submission]
    assert "causal_excludes_diagonal" not in all_diagnoses(results), summary(results)
    assert all_diagnoses(results) == {"causal_true_means_blocked"}


@pytest.mark.e2e
def test_uncatalogued_mistakes_are_never_given_a_catalogue_id(autograder_results):
    """Do at least ten realistic mistakes that are not in the catalogue get no diagnosis at all
    (a wrong name is worse than none)?"""
    assert len(UNCATALOGUED) >= 10
    named = {name: sorted(all_diagnoses(autograder_results[f"wrong_{name}"])) for name in UNCATALOGUED}
    assert all(not ids for ids in named.values()), named
    assert all(score(autograder_results[f"wrong_{name}"]) < 100 for name in UNCATALOGUED)


@pytest.mark.e2e
def test_the_sandbox_forgets_everything_a_swapped_call_saw():
    """In the real sandbox: after a multi-head call run with the reference scaled_attention swapped
    in, does the student's own scaled_attention still give its own (wrong) answer, even on an input
    whose reference answer it asked for during that call, with nothing kept from the call?"""
    from attnkit.notebook import CodeCell
    from attnkit.boundary.policy import Limits
    from attnkit.driver.submission import Submission
    from attnkit.driver.zygote_handle import Zygote

    source = REFERENCE + "\n" + catalogue.by_id("softmax_wrong_axis").source + "\nimport torch\n" + STASHER
    reference = catalogue.reference_namespace()
    wrong = catalogue.mistake_namespaces()["softmax_wrong_axis"]
    query = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # (T=3, d=2)
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(2, 5, 6, generator=generator)  # (B, T, D)
    weights = [torch.randn(6, 6, generator=generator) for _ in range(4)]
    zygote = Zygote()
    session = Submission(zygote, [CodeCell(0, source)], Limits())
    try:
        session.start()
        assert all(run.ok for run in session.runs), session.runs
        before = session.call("scaled_attention", (query, query, query), {})
        swapped = session.call_with("multi_head_attention", (x, *weights, 2), {}, {"scaled_attention": reference["scaled_attention"]})
        after = session.call("scaled_attention", (query, query, query), {})
        stash, answers = session.variable("_stash"), session.variable("_answers")
    finally:
        session.close()
        zygote.close()
    expected_mha = reference["multi_head_attention"](x, *weights, 2)[0]
    assert swapped.error_type is None and torch.allclose(swapped.value[0], expected_mha, atol=1e-5), swapped
    own = wrong["scaled_attention"](query, query, query)[1]
    right = reference["scaled_attention"](query, query, query)[1]
    assert torch.allclose(before.value[1], own) and not torch.allclose(own, right)
    assert torch.allclose(after.value[1], own), "the reference leaked into a later call"
    assert stash.value == {} and answers.value == []


def test_a_stashed_stand_in_refuses_after_its_call():
    """In-process (the development backend): is the stand-in a student kept from a swapped call
    useless afterwards, and the student's own binding restored?"""
    source = REFERENCE + "\n" + catalogue.by_id("softmax_wrong_axis").source + "\nimport torch\n" + STASHER
    student = Student(LocalBackend.from_source(source), api=CH19.functions)
    own = student.backend.namespace["scaled_attention"]
    x = torch.randn(2, 5, 6)
    weights = [torch.randn(6, 6) for _ in range(4)]
    student.substitutes = {"scaled_attention": catalogue.reference_namespace()["scaled_attention"]}
    student.multi_head_attention(x, *weights, 2)
    student.substitutes = {}
    assert student.backend.namespace["scaled_attention"] is own
    stand_in = student.backend.namespace["_stash"]["attention"]
    with pytest.raises(RuntimeError):
        stand_in(x, x, x)


@pytest.mark.e2e
def test_copying_the_chapters_printed_answers_earns_nothing(autograder_results):
    """The shape trace and the self-test ask for other numbers than the chapter prints: do the
    chapter's own answers fail every question whose numbers changed (and keep the rest)?"""
    results = {r["nodeid"].split("::")[-1]: r for r in autograder_results["chapter_answers"]}
    changed = (
        "test_projection_and_split",
        "test_weights_and_mixing",
        "test_merge_and_output",
        "test_output_and_weights_shapes",
        "test_values_times_two",
        "test_earlier_outputs_and_growth",
    )
    for name in changed:
        assert results[name]["status"] == "failed", name
    for name in ("test_causal_sees_current", "test_heads_do_not_split_sequence"):
        assert results[name]["status"] == "passed", name


def run_visible_cells(mistake_source: str = "") -> dict[str, str]:
    """Run the solution notebook's code cells in order in this process (trusted: our own notebook),
    with ``mistake_source`` run right after the model answers, as a student's wrong cell would
    replace them; return the cells that raised (grade_id or first line -> error type)."""
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__main__"}
    failed: dict[str, str] = {}
    cells = [c for c in json.loads(SOLUTION.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    last_solution = max(i for i, c in enumerate(cells) if c["metadata"].get("nbgrader", {}).get("grade_id") == "multi_head_attention")
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        name = cell["metadata"].get("nbgrader", {}).get("grade_id") or source.splitlines()[0]
        try:
            exec(compile(source, "<cell>", "exec"), namespace)
        except Exception as error:  # a failing visible check is what we look for
            failed[name] = type(error).__name__
        if mistake_source and cell["metadata"].get("nbgrader", {}).get("solution") and index <= last_solution:
            exec(compile(mistake_source, "<mistake>", "exec"), namespace)
    return failed


@pytest.mark.parametrize("mistake_id", ["scale_by_dv", "scale_by_fixed_number", "shared_projection", "multi_head_scale_by_model_width"])
def test_visible_self_checks_catch_the_cheap_mistakes(mistake_id):
    """Do the notebook's visible, torch-only self-checks already stop the mistakes the hidden suite
    punishes (√d_v or a fixed √2 as the scale, one projection for Q/K/V, √D in multi-head), while
    the model answers pass every one of them?"""
    assert run_visible_cells() == {}
    failed = run_visible_cells(catalogue.by_id(mistake_id).source)
    assert "AssertionError" in failed.values(), failed


FAILING_STYLES = {
    # name: (the student's scaled_attention body line that fails, what the explanation must say)
    "dot_t": ("scores = query @ key.T", ".T 会把张量的所有维度倒过来"),
    "matmul_shapes": ("scores = query @ value.transpose(-2, -1)", "矩阵乘法 A @ B 要求 A 的最后一维等于 B 的倒数第二维"),
    "view_non_contiguous": ("scores = (query @ key.transpose(-2, -1)).transpose(-2, -1).view(-1)", "view 只能用在内存连续的张量上"),
    "dtype_mismatch": ("scores = query @ key.transpose(-2, -1).double()", "数据类型不一致"),
}


@pytest.mark.parametrize("style", list(FAILING_STYLES))
def test_common_torch_failures_are_explained_at_the_students_line(style):
    """Does a common torch failure come back with the student's own failing line (never the
    grader's), a Chinese explanation, and no traceback or path?"""
    from attnkit.grading.outcomes import error_info, failure_message

    line, explanation = FAILING_STYLES[style]
    source = f"import torch\n\ndef scaled_attention(query, key, value, allowed=None):\n    {line}\n    return scores, scores\n"
    student = Student(LocalBackend.from_source(source), api=CH19.functions)
    query = torch.randn(2, 3, 4, 5)  # (B, h, T, d_k)
    value = torch.randn(2, 3, 4, 7)  # d_v = 7 != d_k
    with pytest.raises(Exception) as caught:
        student.scaled_attention(query, query, value)
    info = error_info(caught.value)
    assert info["text"] == line and info["line"] == 4 and info["function"] == "scaled_attention"
    assert explanation in info["explanation"], info
    message = failure_message(caught.value)
    assert line in message and explanation in message
    assert "Traceback" not in message and ".py" not in message and "site-packages" not in message


@pytest.mark.e2e
def test_the_stand_in_answers_only_the_swapped_name_within_bounds():
    """During a swapped call, does the trusted side answer the stand-in for the swapped name only,
    refuse huge inputs and stop after its call budget, without the call itself failing?"""
    from attnkit.notebook import CodeCell
    from attnkit.boundary.policy import Limits
    from attnkit.driver.submission import Submission
    from attnkit.driver.zygote_handle import Zygote

    source = (
        REFERENCE
        + """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    report = []
    small = torch.ones(1, 2, 2)
    try:
        scaled_attention(torch.zeros(2_000_000, 1), torch.zeros(2_000_000, 1), torch.zeros(2_000_000, 1))
        report.append("huge answered")
    except (RuntimeError, TypeError):  # the protocol refuses the tensor before it leaves the sandbox
        report.append("huge refused")
    answered = 0
    for _ in range(100):
        try:
            scaled_attention(small, small, small)
            answered += 1
        except RuntimeError:
            pass
    report.append(answered)
    return report
"""
    )
    reference = catalogue.reference_namespace()
    zygote = Zygote()
    session = Submission(zygote, [CodeCell(0, source)], Limits())
    try:
        session.start()
        outcome = session.call_with(
            "multi_head_attention", (torch.zeros(1, 2, 2), *[torch.eye(2)] * 4, 1), {}, {"scaled_attention": reference["scaled_attention"]}
        )
        later = session.call("scaled_attention", (torch.ones(1, 2, 2),) * 3, {})
    finally:
        session.close()
        zygote.close()
    assert outcome.error_type is None, outcome
    assert outcome.value[0] == "huge refused"
    # The huge call never reached the trusted side (the protocol's size cap refused it in the
    # sandbox), so the whole budget went to the small calls, and not one more.
    assert outcome.value[1] == Submission.MAX_CALLBACKS
    assert later.error_type is None  # the student's own function, unaffected


# --- every assignment (contract.ASSIGNMENTS): chapter 19's and the tests' second one --------------
# The same promises, from each folder's own parts only (its manifest, source notebook, reference and
# catalogue): a second folder that breaks one fails here as chapter 19 would.


class AssignmentSources(Provider):
    """An assignment's trusted sources in one pytest session: its reference, its source
    notebook, stubs of its API, and the source notebook with each catalogued mistake as a last
    cell (a later definition wins, as a student's edit would)."""

    def __init__(self, assignment: Assignment) -> None:
        self.api = assignment.functions
        cells = notebook_source(assignment.source)
        stubs = "".join(f"def {name}(*args, **kwargs):\n    raise NotImplementedError()\n\n" for name in self.api)
        self.sources: dict[str, list[str]] = {
            "reference": [assignment.catalogue().reference_source()],
            "source_notebook": cells,
            "stubs": [stubs],
            **{f"mistake_{m.id}": [*cells, m.source] for m in assignment.catalogue().MISTAKES},
        }

    def submission_ids(self) -> list[str]:
        return list(self.sources)

    def open(self, submission_id: str) -> Student:
        return Student(LocalBackend.from_cells(self.sources[submission_id], submission_id), api=self.api)

    def close(self, submission_id: str) -> None:
        pyplot = sys.modules.get("matplotlib.pyplot")  # a source notebook's figures, drawn in this process
        if pyplot is not None:
            pyplot.close("all")


@pytest.fixture(scope="module", params=list(ASSIGNMENTS))
def every_assignment(request: pytest.FixtureRequest) -> tuple[Assignment, dict]:
    """(assignment, per submission id its TestResults): one real pytest session of its hidden suite."""
    assignment = ASSIGNMENTS[request.param]
    plugin = GradingPlugin(AssignmentSources(assignment))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with own_imports(assignment.folder.name):
            code = pytest.main(
                [
                    "-q",
                    "--assert=plain",
                    "-p",
                    "no:cacheprovider",
                    "--confcutdir",
                    str(assignment.folder),
                    "-W",
                    "error::pytest.PytestRemovedIn10Warning",
                    str(assignment.folder),
                ],
                plugins=[plugin_module, plugin],
            )
    finally:
        torch.set_num_threads(threads)
    assert code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), f"{assignment.name}: the hidden suite did not run: {code!r}"
    return assignment, plugin.results


@pytest.mark.e2e
def test_every_assignments_reference_and_source_score_full_marks(every_assignment):
    """Do the reference and the source notebook score every point of the source notebook's grade
    cells, each part its own points, with no diagnosis, and do stubs score 0?"""
    assignment, results = every_assignment
    total = sum(part.points for part in assignment.parts.values())
    for submission in ("reference", "source_notebook"):
        assert score(results[submission]) == total, summary(results[submission])
        assert all(result["status"] == "passed" for result in results[submission]), summary(results[submission])
        assert all_diagnoses(results[submission]) == set(), summary(results[submission])
        points: dict[str, float] = defaultdict(float)
        for result in results[submission]:
            points[result["grade_id"]] += result["max_score"]
        assert dict(points) == {grade_id: part.points for grade_id, part in assignment.parts.items()}
    assert score(results["stubs"]) == 0 and all_diagnoses(results["stubs"]) == set(), summary(results["stubs"])


@pytest.mark.e2e
def test_every_assignments_mistakes_are_diagnosed_as_themselves(every_assignment):
    """Does each catalogued mistake (ids unique, each defining the one API function it names)
    lose points on the source notebook, every failed test naming that mistake and nothing else?"""
    assignment, results = every_assignment
    mistakes = assignment.catalogue().MISTAKES
    assert mistakes, f"{assignment.name}: an empty catalogue"
    assert len({m.id for m in mistakes}) == len(mistakes)
    total = sum(part.points for part in assignment.parts.values())
    for mistake in mistakes:
        defined = [node.name for node in ast.parse(mistake.source).body if isinstance(node, ast.FunctionDef)]
        assert defined == [mistake.function] and mistake.function in assignment.functions, mistake.id
        outcome = results[f"mistake_{mistake.id}"]
        assert score(outcome) < total, f"{assignment.name}: {mistake.id} loses nothing"
        assert all_diagnoses(outcome) == {mistake.id}, summary(outcome)
