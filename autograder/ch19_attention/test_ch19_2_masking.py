"""Grade cell check_masking: scaled_attention with an ``allowed`` mask.

The masks are built here (trusted), so a wrong causal_allowed/padding_allowed costs nothing in
this cell: masks and attention are graded independently. The masks are not symmetric and keep
several keys per row, so multiplying by the mask, zeroing after the softmax, inverting the mask
and ignoring it all give different numbers.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.assignment.checks import assert_close, assert_dtype, assert_shape, fail, fmt_index, fmt_number
from attnkit.assignment.checks import CONCEPT_TOLERANCE
from .attention_checks import ATTENTION, BY_OWN_EMPTY_CHECK, EMPTY_ROW, MASKING, as_judged, judged_by_own, unpack_pair
from .messages import _, ngettext

# Masking rests on the attention itself: a student who failed check_scaled_attention (a wrong
# scale, say) is judged here against their own attention over the allowed keys (issue 41).
pytestmark = [
    pytest.mark.grade_id("check_masking"),
    pytest.mark.function("scaled_attention"),
    pytest.mark.concept(MASKING),
    pytest.mark.rests_on("check_scaled_attention", ATTENTION),
    # And on the empty-row check (issue 53), graded after it: a check that raises for a mask where
    # every query keeps a key (one made over the keys raises for a PAD column) is that concept's
    # mistake, not masking's. Judged so, masking is judged on a mask that check lets through.
    pytest.mark.rests_on("check_empty_row", EMPTY_ROW, BY_OWN_EMPTY_CHECK),
]

CHAPTER_ATOL = 5e-5 + 2e-6

_g = torch.Generator().manual_seed(1902)
Q = torch.randn(2, 3, 4, 5, generator=_g, dtype=torch.float64)  # T_q=4, d_k=5
K = torch.randn(2, 3, 6, 5, generator=_g, dtype=torch.float64)  # T_k=6
V = torch.randn(2, 3, 6, 3, generator=_g, dtype=torch.float64)  # d_v=3

# A 2-D (T_q, T_k) mask for 4-D inputs: every row keeps 1 to 5 of the 6 keys, no pattern.
ALLOWED_2D = torch.tensor(
    [
        [1, 0, 0, 1, 0, 1],
        [0, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 1, 0],
    ],
    dtype=torch.bool,
)
# A padding mask (B, 1, 1, T_k): the second sequence has 3 real keys out of 6.
PADDING = (torch.arange(6) < torch.tensor([6, 3])[:, None])[:, None, None, :]


def trusted(query, key, value, allowed):
    query, key, value = query.double(), key.double(), value.double()
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return output, weights


def assert_blocked_zero(weights, allowed, what):
    """Blocked keys must get weight exactly 0 (exp(-inf) = 0)."""
    blocked = ~allowed.expand(weights.shape)
    leaked = blocked & (weights != 0)
    if leaked.any():
        index = tuple(int(i) for i in leaked.nonzero()[0])
        count = int(leaked.sum())
        fail(
            ngettext(
                "{what}：不允许访问的位置应得到 0 权重，但位置 {index} 的权重为 {weight}（共 {count} 处不为 0）。",
                "{what}：不允许访问的位置应得到 0 权重，但位置 {index} 的权重为 {weight}（共 {count} 处不为 0）。",
                count,
            ).format(what=what, index=fmt_index(index), weight=fmt_number(float(weights[index])), count=count)
        )


def judged_where_the_empty_check_lets_masking_through(student, query, key, value, allowed) -> bool:
    """Judged by the student's own empty-row check (they failed check_empty_row): when their
    function raises ValueError for this mask, where every query keeps a key, that raise is the
    empty-row check's mistake, charged there; masking is then judged on the 2-D mask instead,
    whose every key some query sees (which a check made over the keys lets through). True when
    judged so (it passed); False when this test applies as it is."""
    if judged_by_own(student) != EMPTY_ROW:
        return False
    try:
        student.scaled_attention(query, key, value, allowed)
    except ValueError:
        assert_masked_case(student, Q.float(), K.float(), V.float(), ALLOWED_2D, _("加掩码后的输出"), _("加掩码后的权重"))
        return True
    return False


@pytest.mark.weight(4)
def test_section7_causal(student):
    """第 7 节的三位置实验（因果掩码）：因果权重与因果输出是否与本章一致？"""
    query = torch.tensor([[1, 0], [0, 1], [1, 1]], dtype=torch.float64)[None, None]
    value = torch.tensor([[10, 0], [0, 10], [10, 10]], dtype=torch.float64)[None, None]
    allowed = torch.ones(3, 3, dtype=torch.bool).tril()
    if judged_where_the_empty_check_lets_masking_through(student, query, query.clone(), value, allowed):
        return
    output, weights = unpack_pair(student.scaled_attention(query, query.clone(), value, allowed), "scaled_attention")
    # Judged against the student's own attention: its standard, and their weights in its layout.
    own, weights = as_judged(student, query, query.clone(), value, allowed, weights)
    assert_shape(output, (1, 1, 3, 2), _("第 7 节因果输出"))
    assert_shape(weights, (1, 1, 3, 3), _("第 7 节因果权重"))
    assert_dtype(output, torch.float64, _("第 7 节因果输出"))
    if own is not None:
        own_output, own_weights = own
        assert_close(weights, own_weights, _("第 7 节因果权重"), *CONCEPT_TOLERANCE)
        assert_close(output, own_output, _("第 7 节因果输出"), *CONCEPT_TOLERANCE)
        return
    chapter_weights = torch.tensor([[1.0, 0.0, 0.0], [0.3302, 0.6698, 0.0], [0.2483, 0.2483, 0.5035]], dtype=torch.float64)
    chapter_output = torch.tensor([[10.0, 0.0], [3.3024, 6.6976], [7.5174, 7.5174]], dtype=torch.float64)
    assert_close(weights, chapter_weights[None, None], _("第 7 节因果权重（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)
    assert_close(output, chapter_output[None, None], _("第 7 节因果输出（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)


def assert_masked_case(student, query, key, value, allowed, output_label, weights_label):
    """The (2, 3, 4, 6) random case under ``allowed``: shapes, dtype kept, blocked keys at
    weight 0, weights and output as the trusted implementation gives them."""
    if allowed is not ALLOWED_2D and judged_where_the_empty_check_lets_masking_through(student, query, key, value, allowed):
        return
    output, weights = unpack_pair(student.scaled_attention(query, key, value, allowed), "scaled_attention")
    own, weights = as_judged(student, query, key, value, allowed, weights)
    assert_shape(output, (2, 3, 4, 3), output_label)
    assert_shape(weights, (2, 3, 4, 6), weights_label)
    assert_dtype(output, query.dtype, output_label)
    assert_blocked_zero(weights, allowed, weights_label)
    if own is not None:
        expected_output, expected_weights = own
        assert_close(weights, expected_weights, weights_label, *CONCEPT_TOLERANCE)
        assert_close(output, expected_output, output_label, *CONCEPT_TOLERANCE)
        return
    expected_output, expected_weights = trusted(query, key, value, allowed)
    assert_close(weights, expected_weights, weights_label)
    assert_close(output, expected_output, output_label)


@pytest.mark.weight(3)
def test_2d_mask_broadcast(student):
    """二维掩码 (T_q, T_k) 配四维输入（float32）：被屏蔽的键权重是否为 0、结果是否与 PyTorch 一致？"""
    assert_masked_case(student, Q.float(), K.float(), V.float(), ALLOWED_2D, _("加掩码后的输出"), _("加掩码后的权重"))


@pytest.mark.weight(3)
def test_padding_mask_broadcast(student):
    """形状 (B, 1, 1, T_k) 的填充掩码（float64）：是否对所有头、所有查询广播，并屏蔽 PAD 键？"""
    assert_masked_case(student, Q, K, V, PADDING, _("加填充掩码后的输出"), _("加填充掩码后的权重"))
