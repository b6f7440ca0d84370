"""The warm-up's hidden tests: one per grade cell of softmax.ipynb."""

from __future__ import annotations

import pytest
import torch

from attnkit.assignment.checks import assert_close

from . import reference
from .messages import _

pytestmark = pytest.mark.function("softmax")


@pytest.mark.grade_id("check_softmax")
def test_matches_softmax_on_every_row(student):
    """每一行的 Softmax 是否正确（任意批次形状，float64）？"""
    scores = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(7), dtype=torch.float64)  # (2, 3, 5)
    assert_close(student.softmax(scores), reference.softmax(scores), _("softmax 的结果"))


@pytest.mark.grade_id("check_stable")
def test_large_scores_stay_finite(student):
    """分数很大（1000）时结果是否仍是有限的正确概率？"""
    scores = torch.tensor([[1000.0, 999.0, 0.0], [-5.0, 0.0, 5.0]], dtype=torch.float64)  # (2, 3)
    assert_close(student.softmax(scores), reference.softmax(scores), _("大分数下 softmax 的结果"))
