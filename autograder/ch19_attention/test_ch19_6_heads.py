"""Grade cell check_heads: split_heads and merge_heads.

Heads split the features, not the sequence: head r at position t holds features r*d..(r+1)*d-1
of position t. The inputs are numbered 0, 1, 2, ... so every element is distinct and a misplaced
one is named exactly. T (5) differs from every head count, so a reshape without the transpose
cannot land on the right layout by accident.
"""

import pytest
import torch

from . import reference
from attnkit.assignment.checks import assert_equal_exactly, assert_shape, expect_value_error, fail, fmt_number
from .attention_checks import HEAD_MERGE, HEAD_SPLIT
from .messages import _

pytestmark = pytest.mark.grade_id("check_heads")

X = torch.arange(2 * 5 * 6, dtype=torch.float32).reshape(2, 5, 6)  # (B=2, T=5, D=6)


def check_split(got, x, heads):
    batch, length, width = x.shape
    size = width // heads
    what = _("split_heads(x, {heads})（x 的形状为 (2, 5, 6)）").format(heads=heads)
    assert_shape(got, (batch, heads, length, size), what)
    if got.dtype != x.dtype:
        fail(_("{what}的数据类型应与输入一致（{expected}），实际为 {got}。").format(what=what, expected=x.dtype, got=got.dtype))
    for b in range(batch):
        for r in range(heads):
            for t in range(length):
                expected = x[b, t, r * size : (r + 1) * size]
                if not torch.equal(got[b, r, t], expected):
                    fail(
                        _(
                            "split_heads(x, {heads}) 的元素放错了位置：第 {head} 个头在第 {position} 个位置（批次 {batch}）"
                            "应是该位置的第 {first}–{last} 个特征 {expected}，实际为 {got}。"
                            "多头拆分的是每个位置的特征，不是序列。"
                        ).format(
                            heads=heads,
                            head=r + 1,
                            position=t + 1,
                            batch=b + 1,
                            first=r * size + 1,
                            last=(r + 1) * size,
                            expected="[" + ", ".join(fmt_number(float(v)) for v in expected) + "]",
                            got="[" + ", ".join(fmt_number(float(v)) for v in got[b, r, t]) + "]",
                        )
                    )


@pytest.mark.weight(4)
@pytest.mark.function("split_heads")
@pytest.mark.concept(HEAD_SPLIT)
def test_split_heads(student):
    """split_heads：(2, 5, 6) 拆成 2 个头和 3 个头时，形状是否为 (B, h, T, D/h)，每个头是否拿到每个位置的对应一段特征？"""
    for heads in (2, 3):
        check_split(student.split_heads(X, heads), X, heads)


@pytest.mark.weight(4)
@pytest.mark.function("merge_heads")
@pytest.mark.concept(HEAD_MERGE)
def test_merge_heads(student):
    """merge_heads：(2, 3, 5, 2) 拼回后形状是否为 (2, 5, 6)、元素是否到位，拆开再拼回是否得到原输入？"""
    heads = torch.arange(2 * 3 * 5 * 2, dtype=torch.float32).reshape(2, 3, 5, 2)
    got = student.merge_heads(heads)
    assert_shape(got, (2, 5, 6), _("merge_heads 的结果（输入形状为 (2, 3, 5, 2)）"))
    for b in range(2):
        for t in range(5):
            for r in range(3):
                if not torch.equal(got[b, t, 2 * r : 2 * r + 2], heads[b, r, t]):
                    fail(
                        _(
                            "merge_heads 的元素放错了位置：批次 {batch}、第 {position} 个位置的第 {first}–{last} 个特征"
                            "应来自第 {head} 个头在同一位置的结果 {expected}，实际为 {got}。"
                        ).format(
                            batch=b + 1,
                            position=t + 1,
                            first=2 * r + 1,
                            last=2 * r + 2,
                            head=r + 1,
                            expected="[" + ", ".join(fmt_number(float(v)) for v in heads[b, r, t]) + "]",
                            got="[" + ", ".join(fmt_number(float(v)) for v in got[b, t, 2 * r : 2 * r + 2]) + "]",
                        )
                    )
    round_trip = student.merge_heads(reference.split_heads(X, 2))
    assert_equal_exactly(round_trip, X, _("把 (2, 5, 6) 的输入拆成 2 个头再用 merge_heads 拼回的结果"))


@pytest.mark.weight(2)
@pytest.mark.function("split_heads")
@pytest.mark.concept(HEAD_SPLIT)
def test_split_heads_rejects_indivisible_width(student):
    """宽度 6 不能被 4 个头整除：split_heads 是否抛出 ValueError？"""
    # A property point needs a working function: a split_heads that refuses every width (or
    # splits wrongly) earns nothing here for raising ValueError.
    try:
        split = student.split_heads(X, 3)
    except ValueError as error:
        fail(
            _("宽度 6 能被 3 个头整除，split_heads(x, 3) 不应报错，但你的函数抛出了 ValueError：{message}。ValueError 只应在宽度不能被头数整除时抛出。").format(
                message=str(error)[:300]
            )
        )
    check_split(split, X, 3)
    expect_value_error(lambda: student.split_heads(X, 4), _("宽度 6 不能被 4 个头整除时，split_heads"))
