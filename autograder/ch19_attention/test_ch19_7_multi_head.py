"""Grade cell check_multi_head: multi_head_attention against torch.nn.MultiheadAttention
with the same weights, for self- and cross-attention, with and without masks (trusted masks).

nn.MultiheadAttention computes x @ W.T with its packed ``in_proj_weight`` (rows: query, key,
value), so its weights are w_q.T, w_k.T, w_v.T stacked, and ``out_proj.weight`` is w_o.T. Its
bool masks mean the opposite of ours (True = may NOT attend), so it gets ``~allowed``.
"""

import functools

import pytest
import torch
from torch import nn

from attnkit.assignment.checks import assert_close, assert_dtype, assert_shape
from .attention_checks import PROJECTION, unpack_pair
from .messages import _

# Each test grades multi_head_attention alone: when the student's scaled_attention, split_heads or
# merge_heads failed its own tests, a failing test here is re-run with the reference ones.
pytestmark = [
    pytest.mark.grade_id("check_multi_head"),
    pytest.mark.function("multi_head_attention"),
    pytest.mark.concept(PROJECTION),
    pytest.mark.depends_on("scaled_attention", "split_heads", "merge_heads"),
]

D = 6
_g = torch.Generator().manual_seed(1907)
W_Q, W_K, W_V, W_O = (torch.randn(D, D, generator=_g) / D**0.5 for _ in range(4))
X = torch.randn(2, 5, D, generator=_g)
X_SHORT = torch.randn(2, 3, D, generator=_g)
CONTEXT = torch.randn(2, 5, D, generator=_g)


@functools.cache
def pytorch_module(heads):
    """nn.MultiheadAttention in float64 with our weights: built once per head count (building
    one costs far more than running it, and every submission asks for the same ones)."""
    module = nn.MultiheadAttention(D, heads, bias=False, batch_first=True, dtype=torch.float64)
    module.eval()
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]).double())
        module.out_proj.weight.copy_(W_O.T.double())
    module.requires_grad_(False)
    return module


def pytorch_attention(x, heads, context=None, attn_mask=None, key_padding_mask=None):
    """Expected (output, per-head weights) from nn.MultiheadAttention in float64."""
    module = pytorch_module(heads)
    with torch.no_grad():
        source = (x if context is None else context).double()
        output, weights = module(
            x.double(),
            source,
            source,
            need_weights=True,
            average_attn_weights=False,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
        )
    return output, weights


def check(result, expected, what, shape_out, shape_weights):
    output, weights = unpack_pair(result, "multi_head_attention")
    assert_shape(output, shape_out, _("{what}的输出").format(what=what))
    assert_shape(weights, shape_weights, _("{what}的权重").format(what=what))
    assert_dtype(output, torch.float32, _("{what}的输出").format(what=what))
    expected_output, expected_weights = expected
    assert_close(weights, expected_weights, _("{what}的权重（每个头一张）").format(what=what))
    assert_close(output, expected_output, _("{what}的输出").format(what=what))


@pytest.mark.weight(5)
def test_self_attention_matches_pytorch(student):
    """自注意力（B=2、T=5、D=6、2 个头，不加掩码）：输出与各头权重是否与 nn.MultiheadAttention 一致？"""
    result = student.multi_head_attention(X, W_Q, W_K, W_V, W_O, 2)
    check(result, pytorch_attention(X, 2), _("多头自注意力"), (2, 5, D), (2, 2, 5, 5))


@pytest.mark.weight(5)
def test_causal_self_attention_matches_pytorch(student):
    """加因果掩码的多头自注意力（2 个头）：输出与各头权重是否与 nn.MultiheadAttention 一致？"""
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    result = student.multi_head_attention(X, W_Q, W_K, W_V, W_O, 2, allowed=allowed)
    check(result, pytorch_attention(X, 2, attn_mask=~allowed), _("加因果掩码的多头自注意力"), (2, 5, D), (2, 2, 5, 5))


@pytest.mark.weight(5)
def test_cross_attention_matches_pytorch(student):
    """交叉注意力（3 个查询位置、5 个上下文位置、3 个头），不加掩码与加上下文填充掩码时是否都与 nn.MultiheadAttention 一致？"""
    result = student.multi_head_attention(X_SHORT, W_Q, W_K, W_V, W_O, 3, context=CONTEXT)
    check(result, pytorch_attention(X_SHORT, 3, context=CONTEXT), _("交叉注意力"), (2, 3, D), (2, 3, 3, 5))
    padding = (torch.arange(5) < torch.tensor([5, 2])[:, None])[:, None, None, :]
    result = student.multi_head_attention(X_SHORT, W_Q, W_K, W_V, W_O, 3, allowed=padding, context=CONTEXT)
    expected = pytorch_attention(X_SHORT, 3, context=CONTEXT, key_padding_mask=~padding[:, 0, 0, :])
    check(result, expected, _("加上下文填充掩码的交叉注意力"), (2, 3, D), (2, 3, 3, 5))
