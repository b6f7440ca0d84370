"""Checks about this chapter's functions, on top of the generic ones in attnkit.checks."""

from __future__ import annotations

from typing import Any

import torch

from attnkit.checks import assert_close, fail


def unpack_pair(result: Any, function: str) -> tuple[Any, Any]:
    """``(output, weights)`` from a function that must return a pair."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__
        size = f"长度为 {len(result)} 的 {kind}" if isinstance(result, (tuple, list)) else kind
        fail(f"{function} 应返回 (输出, 权重) 两个张量，实际返回了 {size}。")
    return result[0], result[1]


def assert_real_attention(got: Any, expected: torch.Tensor, what: str) -> None:
    """A property test (an error on empty rows, no leak from the future) pays only if the same
    call also computes correct attention: raising or ignoring inputs alone earns nothing."""
    try:
        assert_close(got, expected, what)
    except AssertionError as problem:
        fail(f"{problem}这项检查只在同一个函数也能算出正确的注意力时给分。")
