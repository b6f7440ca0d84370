"""Grade cell check_shape_trace (5 points): section 6's shape trace, as answer variables.

The expected shapes are computed here by running the reference functions on the section's sizes
(B=2, T=3, D=8, two heads). The feedback names a wrong answer but never shows the right one.
"""

import pytest
import torch

import reference
from checks import answer_shape, judge_answers

pytestmark = pytest.mark.grade_id("check_shape_trace")


def traced_shapes():
    batch, length, width, heads = 2, 3, 8, 2
    x = torch.zeros(batch, length, width)
    w = torch.eye(width)
    projected = x @ w
    split = reference.split_heads(projected, heads)
    mixed, weights = reference.scaled_attention(split, split, split)
    merged = reference.merge_heads(mixed)
    output = merged @ w
    return {
        "trace_projected": tuple(projected.shape),
        "trace_split": tuple(split.shape),
        "trace_weights": tuple(weights.shape),
        "trace_mixed": tuple(mixed.shape),
        "trace_merged": tuple(merged.shape),
        "trace_output": tuple(output.shape),
    }


EXPECTED = traced_shapes()


def check_answers(student, names):
    items = [(name, answer_shape, EXPECTED[name]) for name in names]
    judge_answers(student, items, "对照第 6 节，按各维的含义重新推一遍。")


@pytest.mark.points(2)
def test_projection_and_split(student):
    """第 6 节形状追踪：投影后的 Q/K/V 与拆成两个头之后的形状是否正确？"""
    check_answers(student, ["trace_projected", "trace_split"])


@pytest.mark.points(2)
def test_weights_and_mixing(student):
    """第 6 节形状追踪：每个头的权重与混合值向量之后的形状是否正确？"""
    check_answers(student, ["trace_weights", "trace_mixed"])


@pytest.mark.points(1)
def test_merge_and_output(student):
    """第 6 节形状追踪：把头拼回去与输出投影之后的形状是否正确？"""
    check_answers(student, ["trace_merged", "trace_output"])
