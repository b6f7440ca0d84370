"""Issue 23: a property point needs a working function, for every function. Stubs that do no real
work (always raise, return their input, return zeros, all-True or all-False masks, a mask of the
input's shape of ones, one mask doing the other's job) are graded through a real pytest session of
the hidden suite, and once through the real ``attnkit grade``: none earns any point of the function
it stubs, and none costs another function a point. scaled_attention's own property tests are held
by tests/grading/test_autograder.py (``property_faker``), split_heads' always-raising split also by
tests/grading/test_fairness.py."""

from __future__ import annotations

import json

import pytest


from contract import CH19, code_cell
from test_autograder import grade_in_one_session
from test_fairness import grade_notebooks

REFERENCE = CH19.catalogue().reference_source()

# name -> (the function it replaces, its source). Each does no real work for that function.
STUBS: dict[str, tuple[str, str]] = {
    "merge_always_raises": (
        "merge_heads",
        """
def merge_heads(x):
    raise ValueError("cannot merge")
""",
    ),
    "merge_returns_input": (
        "merge_heads",
        """
def merge_heads(x):
    return x
""",
    ),
    "merge_returns_zeros": (
        "merge_heads",
        """
import torch

def merge_heads(x):
    batch, heads, length, size = x.shape  # (B, h, T, d)
    return torch.zeros(batch, length, heads * size, dtype=x.dtype)  # (B, T, h*d), no data moved
""",
    ),
    "split_returns_input": (
        "split_heads",
        """
def split_heads(x, num_heads):
    if x.shape[-1] % num_heads != 0:
        raise ValueError("width not divisible by heads")
    return x
""",
    ),
    "split_returns_zeros": (
        "split_heads",
        """
import torch

def split_heads(x, num_heads):
    batch, length, width = x.shape  # (B, T, D)
    if width % num_heads != 0:
        raise ValueError("width not divisible by heads")
    return torch.zeros(batch, num_heads, length, width // num_heads, dtype=x.dtype)  # (B, h, T, D/h)
""",
    ),
    "causal_all_true": (
        "causal_allowed",
        """
import torch

def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool)
""",
    ),
    "causal_all_false": (
        "causal_allowed",
        """
import torch

def causal_allowed(size):
    return torch.zeros(size, size, dtype=torch.bool)
""",
    ),
    "causal_always_raises": (
        "causal_allowed",
        """
def causal_allowed(size):
    raise ValueError("no mask")
""",
    ),
    "padding_all_true": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    return torch.ones(len(lengths), 1, 1, size, dtype=torch.bool)
""",
    ),
    "padding_all_false": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    return torch.zeros(len(lengths), 1, 1, size, dtype=torch.bool)
""",
    ),
    "padding_ones_of_the_inputs_shape": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    return torch.ones_like(torch.as_tensor(lengths), dtype=torch.bool)
""",
    ),
    "padding_always_raises": (
        "padding_allowed",
        """
def padding_allowed(lengths, size):
    raise ValueError("no mask")
""",
    ),
    # Does the causal mask's work too, (B, 1, size, size): beside the right causal mask, & gives
    # the right combination, yet padding_allowed alone blocks what it should not.
    "padding_carries_causal": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    keys = torch.arange(size)[None, :] < torch.as_tensor(lengths)[:, None]  # (B, size)
    return keys[:, None, None, :] & torch.ones(size, size, dtype=torch.bool).tril()  # (B, 1, size, size)
""",
    ),
}

# A causal mask of another but equivalent layout, (1, 1, size, size): it loses its own test (the
# contract's shape is (size, size)) and nothing else; the combined test judges meaning, not layout.
EQUIVALENT_LAYOUT = """
import torch

def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]  # (1, 1, size, size)
"""

GATE_TEXT = "这项检查只在因果掩码与填充掩码各自都正确时给分"

# Right at every size but 5, the size the multi-head future test asks for: causal_allowed's own
# test must see the sizes the function really receives, so its mistake is charged to it, and the
# future test is re-run with the reference mask instead of costing multi_head_attention.
WRONG_AT_FIVE = """
import torch

def causal_allowed(size):
    allowed = torch.ones(size, size, dtype=torch.bool).tril()  # (size, size)
    if size == 5:
        allowed[4, 0] = False
    return allowed
"""


@pytest.fixture(scope="module")
def results() -> dict:
    sources = {"reference": REFERENCE, "equivalent_layout": REFERENCE + "\n" + EQUIVALENT_LAYOUT, "wrong_at_five": REFERENCE + "\n" + WRONG_AT_FIVE}
    sources.update({name: REFERENCE + "\n" + source for name, (_, source) in STUBS.items()})
    return grade_in_one_session(sources)


def summary(graded: list) -> str:
    return "\n".join(f"{r['nodeid']}: {r['status']} {r['score']} {r['output'][:300]}" for r in graded if r["status"] != "passed" or r["score"])


def by_test(graded: list) -> dict:
    return {r["nodeid"].rsplit("::", 1)[-1]: r for r in graded}


@pytest.mark.parametrize("name", list(STUBS))
def test_a_function_that_does_no_work_earns_none_of_its_points(results, name):
    """Does a stub earn 0 on every test that grades its function (values and properties alike),
    while every test of the other functions still pays in full?"""
    function, _ = STUBS[name]
    graded = results[name]
    own = [r for r in graded if function in r["functions"]]
    assert own and sum(r["score"] for r in own) == 0, summary(own)
    others = [r for r in graded if function not in r["functions"]]
    assert all(r["status"] == "passed" and r["score"] == r["max_score"] for r in others), summary(others)


def test_a_padding_mask_that_does_the_causal_masks_work_earns_no_combined_point(results):
    """padding_allowed that also blocks the future: is the combined test's failure the gate's,
    saying why (the combination alone is right)?"""
    combined = by_test(results["padding_carries_causal"])["test_causal_and_padding_combined"]
    assert combined["score"] == 0 and GATE_TEXT in combined["output"], combined["output"]
    assert "padding_allowed(长度 [4, 2], 4)" in combined["output"], combined["output"]


def test_a_mask_of_an_equivalent_layout_keeps_the_combined_point(results):
    """The gate judges what a mask means where attention uses it, not its layout: a (1, 1, T, T)
    causal mask loses its own test only; the reference loses nothing."""
    graded = by_test(results["equivalent_layout"])
    failed = {name for name, r in graded.items() if r["status"] != "passed"}
    assert failed == {"test_causal_allowed"}, summary(results["equivalent_layout"])
    assert graded["test_causal_and_padding_combined"]["score"] == graded["test_causal_and_padding_combined"]["max_score"]
    assert all(r["status"] == "passed" and r["score"] == r["max_score"] for r in results["reference"]), summary(results["reference"])


def test_a_mask_wrong_only_where_a_dependent_uses_it_is_charged_to_the_mask(results):
    """causal_allowed wrong only at size 5 (the multi-head future test's): does it fail its own
    test, while every multi_head_attention test still pays in full (its future test re-run with
    the reference mask)?"""
    graded = results["wrong_at_five"]
    own = by_test(graded)["test_causal_allowed"]
    assert own["status"] == "failed" and own["score"] == 0, (own["status"], own["output"][:300])
    assert "causal_allowed(5)" in own["output"], own["output"][:300]
    heads = [r for r in graded if "multi_head_attention" in r["functions"]]
    assert heads and all(r["score"] == r["max_score"] for r in heads), summary(heads)


def with_stub(notebook: dict, name: str) -> dict:
    """The model notebook with one more cell at the end that redefines the stubbed function (the
    last definition is the one graded, as Jupyter's Run All leaves it)."""
    return {**notebook, "cells": notebook["cells"] + [code_cell(STUBS[name][1])]}


@pytest.mark.e2e
def test_the_real_grader_pays_no_point_to_stub_notebooks(tmp_path):
    """Through ``attnkit grade`` (sandbox, protocol, swapped re-runs): do notebooks whose merge_heads
    returns its input, whose causal mask is all True, or whose padding mask carries the causal part
    earn nothing for that function and lose nothing else?"""
    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    names = ("merge_returns_input", "causal_all_true", "padding_carries_causal")
    folder = grade_notebooks(tmp_path, {name: with_stub(notebook, name) for name in names})
    for name in names:
        function, _ = STUBS[name]
        tests = json.loads((folder / name / CH19.name / "results.json").read_text(encoding="utf-8"))["tests"]
        own = [t for t in tests if function in t.get("functions", ())]
        assert own and sum(t["score"] for t in own) == 0, (name, [(t["name"], t["score"], t["output"][:200]) for t in own])
        others = [t for t in tests if function not in t.get("functions", ())]
        assert all(t["score"] == t["max_score"] for t in others), (name, [(t["name"], t["output"][:200]) for t in others if t["score"] != t["max_score"]])
    padding = json.loads((folder / "padding_carries_causal" / CH19.name / "results.json").read_text(encoding="utf-8"))["tests"]
    assert any(GATE_TEXT in t["output"] for t in padding if t["score"] == 0)
