"""The hidden tests' checks (``attnkit.assignment.checks``): their shortcuts decide exactly as the full checks."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.assignment import checks

SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-12, 1e300, float("inf"), float("-inf"), float("nan")]


def outcome(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None when the check passes, else the student's message."""
    try:
        checks.assert_close(got, expected, "结果")
    except AssertionError as failure:
        return str(failure)
    return None


def cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = [(torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64)) for a, b in itertools.product(SPECIAL, repeat=2)]
    generator = torch.Generator().manual_seed(12)
    for dtype in (torch.float32, torch.float64):
        atol, rtol = checks.TOLERANCE[dtype]
        expected = torch.randn(3, 4, generator=generator, dtype=torch.float64)
        bound = atol + rtol * expected.abs()
        for scale in (0.0, 0.5, 0.999, 1.0, 1.001, 2.0):  # around the tolerance, both sides
            pairs.append(((expected + scale * bound).to(dtype), expected.to(dtype)))
            pairs.append(((expected - scale * bound).to(dtype), expected.to(dtype)))
        pairs.append((expected.to(dtype).T.contiguous().T, expected.to(dtype)))
    return pairs


def test_the_shortcut_passes_and_fails_exactly_as_the_full_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Special values (signed zeros, infinities, NaN) and values at, just inside and just outside
    the tolerance: does assert_close give every pair the same verdict and message with its
    isclose shortcut as with the full check alone?"""
    pairs = cases()
    fast = [outcome(got, expected) for got, expected in pairs]
    monkeypatch.setattr(torch, "isclose", lambda got, expected, **_: torch.zeros_like(got, dtype=torch.bool))
    full = [outcome(got, expected) for got, expected in pairs]
    assert fast == full
    assert None in fast and any(message is not None for message in fast)  # both verdicts were tried


@pytest.mark.parametrize(
    "shapes",
    [
        [(2, 3), (3,)],
        [(2, 1, 4), (1, 5, 1)],
        [(0, 1), (1, 3)],
        [(0,), (1,)],
        [(), (2, 2)],
        [(1,), ()],
        [(4, 4), (2, 2, 4, 4), (2, 1, 1, 4)],
        [(2, 3), (3, 2)],
        [(0,), (3,)],
        [(2, 1), (1, 2), (3, 1, 1)],
        [(5,)],
    ],
)
def test_broadcast_shape_agrees_with_torch(shapes: list[tuple[int, ...]]) -> None:
    """Does broadcast_shape give torch.broadcast_shapes' result, and refuse (RuntimeError) the
    shapes torch refuses?"""
    try:
        expected: tuple | type = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        expected = RuntimeError
    try:
        got: tuple | type = checks.broadcast_shape(*(torch.Size(shape) for shape in shapes))
    except RuntimeError:
        got = RuntimeError
    assert got == expected


@pytest.mark.parametrize("shape", [(7,), (2, 3), (2, 1, 4), (3, 4, 5, 2), ()])
def test_unravel_agrees_with_torch(shape: tuple[int, ...]) -> None:
    """Does the position named in a message (``_unravel``) match torch.unravel_index everywhere?"""
    for flat in range(max(1, torch.Size(shape).numel())):
        assert checks._unravel(flat, shape) == tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
