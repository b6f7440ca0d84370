"""Grade cell check_empty_row: a query with no allowed key is an error (the chapter's
choice; PyTorch instead returns zeros or NaN). The masks are built here (trusted)."""

import pytest
import torch

from attnkit.assignment.checks import assert_shape, broadcast_shape, expect_value_error, fail, fmt_index
from .attention_checks import ATTENTION, BY_OWN_MASKING, EMPTY_ROW, MASKING, as_judged, assert_real_attention, expected_attention, unpack_pair
from .messages import _

# The empty-row error rests on the attention itself: judged against the student's own attention
# when they failed check_scaled_attention (issue 41), so raising correctly keeps these points;
pytestmark = [
    pytest.mark.grade_id("check_empty_row"),
    pytest.mark.function("scaled_attention"),
    pytest.mark.concept(EMPTY_ROW),
    pytest.mark.rests_on("check_scaled_attention", ATTENTION),
    # And on masking (issue 53): a masking slip whose empty-row raise is right keeps these points.
    pytest.mark.rests_on("check_masking", MASKING, BY_OWN_MASKING),
]


def works_once_every_row_keeps_a_key(student, query, key, value, allowed, where):
    """The same call, with each empty row given back its first key, must return well-formed
    attention (right shapes, finite values). Without this, a function that raises ValueError on
    *every* input would earn the "must raise" points for nothing."""
    repaired = allowed.clone()
    repaired[..., 0] |= ~allowed.any(dim=-1)
    try:
        result = student.scaled_attention(query, key, value, repaired)
    except ValueError as error:
        fail(
            _(
                "{where}：先把空行补上一个可访问的键再调用，每个查询都有键可用，不应报错，"
                "但你的函数抛出了 ValueError：{message}。ValueError 只应在某个查询一个键也不能访问时抛出。"
            ).format(where=where, message=str(error)[:300])
        )
    output, weights = unpack_pair(result, "scaled_attention")
    # Judged against the student's own attention: its standard, and their weights in its layout.
    own, weights = as_judged(student, query, key, value, repaired, weights)
    batch = broadcast_shape(query.shape[:-2], repaired.shape[:-2])
    assert_shape(output, (*batch, query.shape[-2], value.shape[-1]), _("输出"))
    assert_shape(weights, (*batch, query.shape[-2], key.shape[-2]), _("权重"))
    if not (bool(torch.isfinite(weights).all()) and bool(torch.isfinite(output).all())):
        fail(_("{where}：补上可访问的键之后，每个查询都有键可用，权重和输出应是有限的数（不应有 NaN 或无穷大）。").format(where=where))
    # And real attention: a function that computes nothing but raises on empty rows earns 0 here.
    expected_output, expected_weights = own if own is not None else expected_attention(student, query, key, value, repaired)
    assert_real_attention(weights, expected_weights, _("{where}：补上可访问的键之后的权重").format(where=where))
    assert_real_attention(output, expected_output, _("{where}：补上可访问的键之后的输出").format(where=where))


def expect_error_only_for_the_empty_row(student, query, key, value, allowed, where, empty_row):
    """Works once every row keeps a key, and raises ValueError for ``allowed`` itself."""
    works_once_every_row_keeps_a_key(student, query, key, value, allowed, where)
    expect_value_error(lambda: student.scaled_attention(query, key, value, allowed), empty_row)


_g = torch.Generator().manual_seed(1903)
Q = torch.randn(2, 2, 3, 4, generator=_g)  # (B, h, T_q=3, d_k=4)
K = torch.randn(2, 2, 5, 4, generator=_g)  # T_k=5
V = torch.randn(2, 2, 5, 2, generator=_g)  # d_v=2


@pytest.mark.weight(3)
def test_one_row_fully_masked(student):
    """三个查询中第 2 个的 allowed 整行为 False（其余各行都有可访问的键）：是否抛出 ValueError？"""
    allowed = torch.tensor([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [0, 1, 1, 1, 0]], dtype=torch.bool)
    expect_error_only_for_the_empty_row(student, Q[0, 0], K[0, 0], V[0, 0], allowed, _("单个序列"), _("第 2 个查询没有任何允许访问的键时"))


@pytest.mark.weight(3)
def test_empty_row_inside_batch(student):
    """批次中只有第 2 个序列的最后一个查询整行被屏蔽：是否仍能发现并抛出 ValueError？"""
    allowed = torch.ones(2, 1, 3, 5, dtype=torch.bool).tril(diagonal=2)
    allowed[1, 0, 2] = False
    expect_error_only_for_the_empty_row(student, Q, K, V, allowed, _("批次输入"), _("批次中第 2 个序列的第 3 个查询没有任何允许访问的键时"))


@pytest.mark.weight(2)
def test_zero_length_padding(student):
    """填充掩码里有一个长度为 0 的序列（它的所有键都是 PAD）：是否抛出 ValueError？"""
    allowed = (torch.arange(5) < torch.tensor([4, 0])[:, None])[:, None, None, :]
    expect_error_only_for_the_empty_row(student, Q, K, V, allowed, _("填充掩码"), _("某个序列长度为 0、它的查询一个键也不能访问时"))


@pytest.mark.weight(2)
def test_no_error_when_every_row_keeps_a_key(student):
    """每个查询都恰好只剩一个可访问的键时：是否正常返回、没有报错也没有 NaN？"""
    allowed = torch.tensor([[0, 0, 0, 0, 1], [0, 0, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    try:
        result = student.scaled_attention(Q, K, V, allowed)
    except ValueError as error:
        fail(_("每个查询都还有一个可访问的键，不应报错，但你的函数抛出了 ValueError：{message}").format(message=str(error)[:300]))
    output, weights = unpack_pair(result, "scaled_attention")
    own, weights = as_judged(student, Q, K, V, allowed, weights)
    assert_shape(output, (2, 2, 3, 2), _("输出"))
    assert_shape(weights, (2, 2, 3, 5), _("权重"))
    for name, tensor in ((_("权重"), weights), (_("输出"), output)):
        broken = ~torch.isfinite(tensor)
        if broken.any():
            fail(
                _("{name}中出现了 NaN 或无穷大（第一处在位置 {index}），每个查询都有可访问的键时结果应是有限的数。").format(
                    name=name, index=fmt_index(tuple(int(i) for i in broken.nonzero()[0]))
                )
            )
    expected_output, expected_weights = own if own is not None else expected_attention(student, Q, K, V, allowed)
    assert_real_attention(weights, expected_weights, _("每个查询只剩一个可访问的键时的权重"))
    assert_real_attention(output, expected_output, _("每个查询只剩一个可访问的键时的输出"))
