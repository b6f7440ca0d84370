"""Grade cell check_scaled_attention: scaled dot-product attention without a mask.

The chapter's numbers (sections 2 and 7), then inputs the chapter never shows (fixed-seed random
tensors with batch and head dims, T_q != T_k, d_k != d_v, float32 and float64) compared with
PyTorch's ``scaled_dot_product_attention`` and a softmax computed here, so hard-coding the
chapter's numbers earns nothing. d_k is 2, 5 or 6 here: sqrt(d_k), d_k and 1 all differ.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.assignment.checks import assert_close, assert_dtype, assert_shape
from .attention_checks import ATTENTION, unpack_pair
from .messages import _

pytestmark = [pytest.mark.grade_id("check_scaled_attention"), pytest.mark.function("scaled_attention"), pytest.mark.concept(ATTENTION)]

# The chapter prints 4 decimals: a value rounds to the printed one when it is within 5e-5 of it
# (plus float32 rounding of values up to 10).
CHAPTER_ATOL = 5e-5 + 2e-6

_g = torch.Generator().manual_seed(1901)
# (B, h, T_q, d_k), (B, h, T_k, d_k), (B, h, T_k, d_v) with T_q=4, T_k=6, d_k=5, d_v=3.
Q = torch.randn(2, 3, 4, 5, generator=_g, dtype=torch.float64)
K = torch.randn(2, 3, 6, 5, generator=_g, dtype=torch.float64)
V = torch.randn(2, 3, 6, 3, generator=_g, dtype=torch.float64)
# Fewer leading dims: (B, T_q, d_k) etc. with B=3, T_q=2, T_k=7, d_k=6, d_v=4; and none at all.
Q3 = torch.randn(3, 2, 6, generator=_g, dtype=torch.float64)
K3 = torch.randn(3, 7, 6, generator=_g, dtype=torch.float64)
V3 = torch.randn(3, 7, 4, generator=_g, dtype=torch.float64)
Q2, K2, V2 = Q3[0, :1], K3[1], V3[2]


def trusted(query, key, value):
    """Expected (output, weights) in float64: SDPA for the output, softmax written out for weights."""
    query, key, value = query.double(), key.double(), value.double()
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1)
    output = F.scaled_dot_product_attention(query[None], key[None], value[None])[0]
    return output, weights


def chapter_section7():
    query = torch.tensor([[1, 0], [0, 1], [1, 1]], dtype=torch.float64)[None, None]
    value = torch.tensor([[10, 0], [0, 10], [10, 10]], dtype=torch.float64)[None, None]
    return query, query.clone(), value


@pytest.mark.weight(4)
def test_section2_example(student):
    """第 2 节的例子：权重是否约为 (0.4011, 0.1978, 0.4011)，输出是否约为 (8.0222, 5.9889)？"""
    query = torch.tensor([[1.0, 0.0]])
    key = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    value = torch.tensor([[10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    output, weights = unpack_pair(student.scaled_attention(query, key, value), "scaled_attention")
    assert_shape(weights, (1, 3), _("第 2 节例子的权重"))
    assert_shape(output, (1, 2), _("第 2 节例子的输出"))
    assert_close(weights, torch.tensor([[0.4011, 0.1978, 0.4011]]), _("第 2 节例子的权重（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)
    assert_close(output, torch.tensor([[8.0222, 5.9889]]), _("第 2 节例子的输出（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)


@pytest.mark.weight(4)
def test_section7_unmasked(student):
    """第 7 节的三位置实验（不加掩码）：权重矩阵与第一行输出是否与本章一致？"""
    query, key, value = chapter_section7()
    output, weights = unpack_pair(student.scaled_attention(query, key, value), "scaled_attention")
    assert_shape(output, (1, 1, 3, 2), _("第 7 节实验的输出"))
    assert_shape(weights, (1, 1, 3, 3), _("第 7 节实验的权重"))
    assert_dtype(output, torch.float64, _("第 7 节实验的输出"))
    assert_dtype(weights, torch.float64, _("第 7 节实验的权重"))
    chapter_weights = torch.tensor([[0.4011, 0.1978, 0.4011], [0.1978, 0.4011, 0.4011], [0.2483, 0.2483, 0.5035]], dtype=torch.float64)[None, None]
    assert_close(weights, chapter_weights, _("第 7 节未加掩码的权重（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)
    first_row = torch.tensor([8.0222, 5.9889], dtype=torch.float64)
    assert_close(output[0, 0, 0], first_row, _("第 7 节第一行加权结果（保留 4 位小数）"), atol=CHAPTER_ATOL, rtol=0)


def as_split_heads(tensor):
    """The same values laid out as split_heads returns them: (B, h, T, d) viewing (B, T, h, d) memory."""
    return tensor.transpose(1, 2).contiguous().transpose(1, 2)


def assert_random_case(student, query, key, value):
    """The (2, 3, 4, 6) random case in ``query``'s dtype: shapes (2, 3, 4, 3) and (2, 3, 4, 6),
    the dtype kept, weights and output as the trusted implementation gives them."""
    output, weights = unpack_pair(student.scaled_attention(query, key, value), "scaled_attention")
    assert_shape(output, (2, 3, 4, 3), _("输出"))
    assert_shape(weights, (2, 3, 4, 6), _("权重"))
    assert_dtype(output, query.dtype, _("输出"))
    assert_dtype(weights, query.dtype, _("权重"))
    expected_output, expected_weights = trusted(query, key, value)
    assert_close(weights, expected_weights, _("权重"))
    assert_close(output, expected_output, _("输出"))


@pytest.mark.weight(4)
def test_random_float32(student):
    """随机的 float32 输入（批次 2、3 个头、T_q=4、T_k=6、d_k=5、d_v=3）：输出与权重是否正确、仍是 float32？"""
    # As multi-head attention will call it: float32 (the notebook's dtype) heads that are
    # transposed views, not contiguous (split_heads returns x.reshape(...).transpose(1, 2)), so a
    # .view() that only works on contiguous tensors is charged here, not to multi-head.
    assert_random_case(student, *(as_split_heads(t.float()) for t in (Q, K, V)))


@pytest.mark.weight(4)
def test_random_float64(student):
    """随机的 float64 输入（批次 2、3 个头、T_q=4、T_k=6、d_k=5、d_v=3）：结果是否精确到 float64 的精度、仍是 float64？"""
    assert_random_case(student, Q, K, V)


@pytest.mark.weight(4)
def test_other_leading_dims(student):
    """只有批次维 (B, T, d)、或者没有任何前导维 (T, d) 时，是否也能算对？"""
    output, weights = unpack_pair(student.scaled_attention(Q3, K3, V3), "scaled_attention")
    assert_shape(output, (3, 2, 4), _("三维输入的输出"))
    assert_shape(weights, (3, 2, 7), _("三维输入的权重"))
    expected_output, expected_weights = trusted(Q3, K3, V3)
    assert_close(weights, expected_weights, _("三维输入的权重"))
    assert_close(output, expected_output, _("三维输入的输出"))

    output, weights = unpack_pair(student.scaled_attention(Q2, K2, V2, None), "scaled_attention")
    assert_shape(output, (1, 4), _("二维输入（一个查询、7 把键）的输出"))
    assert_shape(weights, (1, 7), _("二维输入（一个查询、7 把键）的权重"))
    expected_output, expected_weights = trusted(Q2, K2, V2)
    assert_close(weights, expected_weights, _("二维输入（一个查询、7 把键）的权重"))
    assert_close(output, expected_output, _("二维输入（一个查询、7 把键）的输出"))
