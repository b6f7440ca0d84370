"""Grade cell check_shape_trace: section 6's shape trace, as answer variables.

The notebook asks for a configuration the chapter does not print (B=4, T=5, D=12, three heads; the
chapter traces B=2, T=3, D=8, two heads), so the answers take reasoning, not copying. The expected
shapes are computed here by running the reference functions on those sizes. The feedback names a
wrong answer but never shows the right one.
"""

import pytest
import torch

from . import reference
from attnkit.assignment.checks import answer_shape, judge_answers
from .attention_checks import SHAPE_TRACE
from .messages import _

pytestmark = [pytest.mark.grade_id("check_shape_trace"), pytest.mark.concept(SHAPE_TRACE)]


def traced_shapes():
    batch, length, width, heads = 4, 5, 12, 3  # as the notebook asks (not the chapter's 2, 3, 8, 2)
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
    judge_answers(student, items, _("这里是 D=12、三个头、B=4、T=5，不是第 6 节的例子：对照第 6 节，按各维的含义重新推一遍。"))


@pytest.mark.weight(2)
def test_projection_and_split(student):
    """形状追踪（D=12、三个头、B=4、T=5）：投影后的 Q/K/V 与拆成三个头之后的形状是否正确？"""
    check_answers(student, ["trace_projected", "trace_split"])


@pytest.mark.weight(2)
def test_weights_and_mixing(student):
    """形状追踪（D=12、三个头、B=4、T=5）：每个头的权重与混合值向量之后的形状是否正确？"""
    check_answers(student, ["trace_weights", "trace_mixed"])


@pytest.mark.weight(1)
def test_merge_and_output(student):
    """形状追踪（D=12、三个头、B=4、T=5）：把头拼回去与输出投影之后的形状是否正确？"""
    check_answers(student, ["trace_merged", "trace_output"])
