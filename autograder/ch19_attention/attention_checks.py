"""Checks about this chapter's functions, on top of the generic ones in attnkit.assignment.checks."""

from __future__ import annotations

from typing import Any

import torch

from attnkit import i18n
from attnkit.assignment.checks import CONCEPT_TOLERANCE, assert_bool_equal, assert_close, fail

from .messages import _


def unpack_pair(result: Any, function: str) -> tuple[Any, Any]:
    """``(output, weights)`` from a function that must return a pair."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__
        if isinstance(result, (tuple, list)):
            fail(_("{function} 应返回 (输出, 权重) 两个张量，实际返回了长度为 {length} 的 {kind}。").format(function=function, length=len(result), kind=kind))
        fail(_("{function} 应返回 (输出, 权重) 两个张量，实际返回了 {kind}。").format(function=function, kind=kind))
    return result[0], result[1]


def assert_real_attention(got: Any, expected: torch.Tensor, what: str) -> None:
    """A property test (an error on empty rows, no leak from the future) pays only if the same
    call also computes correct attention: raising or ignoring inputs alone earns nothing."""
    try:
        # Concept level: this test is about the property, not the last digits.
        assert_close(got, expected, what, *CONCEPT_TOLERANCE)
    except AssertionError as problem:
        fail(i18n.sentences([problem, _("这项检查只在同一个函数也能算出正确的注意力时给分。")]))


def assert_mask_alone(mask: torch.Tensor, expected: torch.Tensor, shape: tuple[int, ...], what: str) -> None:
    """A test of masks used together pays only if each mask already means the right thing alone,
    as attention sees it (both broadcast to ``shape``): a padding mask that also does the causal
    mask's work, or a causal mask left all True beside it, earns nothing. Only the meaning is
    judged, not the layout: a mask of another but equivalent shape loses its own test's points,
    not these."""
    try:
        assert_bool_equal(mask.expand(shape), expected.expand(shape), what)  # (*shape,) both
    except AssertionError as problem:
        fail(i18n.sentences([problem, _("这项检查只在因果掩码与填充掩码各自都正确时给分：一个掩码不能替另一个完成工作。")]))
