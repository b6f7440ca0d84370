"""Grade cell check_future: the chapter's future-perturbation check (section 7) and
section 8's question 7, on scaled_attention and on multi_head_attention.

Change the third position's key and value (or input): the first two outputs must not move, and
the third position's own output must (so an output that ignores its inputs cannot pass).

Why not torch.equal, as the chapter prints? A -inf mask gives bit-identical earlier outputs, but
masking after the softmax *with* renormalisation is also correct (it gives the same weights) and differs from run
to run by float64 rounding (~1e-14). So the inputs are float64 and "unchanged" means within 1e-10:
any real leak through the mask moves an earlier output by O(1) here.
"""

import pytest
import torch

from attnkit.boundary.outcome import StudentRaised
from . import reference
from attnkit.assignment.checks import assert_shape, fail, fmt_index, max_change
from .attention_checks import (
    ATTENTION,
    BY_OWN_MULTI_HEAD,
    FUTURE,
    PROJECTION,
    assert_causal_mixing,
    assert_real_attention,
    expected_attention,
    judged_by_own,
    unpack_pair,
)
from .messages import _

pytestmark = [pytest.mark.grade_id("check_future"), pytest.mark.concept(FUTURE)]

UNCHANGED = 1e-10  # float64 rounding of a correct implementation, see above
CHANGED = 1e-6  # the changed position's own output moves by O(1)

_g = torch.Generator().manual_seed(1905)
T = 5
Q = torch.randn(2, 2, T, 3, generator=_g, dtype=torch.float64)
K = torch.randn(2, 2, T, 3, generator=_g, dtype=torch.float64)
V = torch.randn(2, 2, T, 2, generator=_g, dtype=torch.float64)
D, HEADS = 6, 2
X = torch.randn(2, T, D, generator=_g, dtype=torch.float64)
W_Q, W_K, W_V, W_O = (torch.randn(D, D, generator=_g, dtype=torch.float64) / D**0.5 for _ in range(4))
NEW_ROW = torch.randn(2, D, generator=_g, dtype=torch.float64) * 3


def causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def check_positions(before, after, changed, what, shape, again=None):
    """Outputs before ``changed`` unchanged, output at ``changed`` changed (positions on dim -2).
    ``again``: the first call once more, with the very same inputs; when it does not give the same
    output, the earlier outputs moved by chance (dropout left on, say), not by a path to the
    changed position, and the page says that instead of a leak (issue 53)."""
    assert_shape(before, shape, _("{what}（改动前）的输出").format(what=what))
    assert_shape(after, shape, _("{what}（改动后）的输出").format(what=what))
    moved, index = max_change(before[..., :changed, :], after[..., :changed, :])
    if moved > UNCHANGED and again is not None:
        repeated = again()
        if isinstance(repeated, torch.Tensor) and repeated.shape == before.shape and max_change(before, repeated)[0] > UNCHANGED:
            fail(
                _(
                    "{what}：输入完全相同、再调用一次，你的函数给出的输出就不一样（最大变化 {moved}）。"
                    "输出带有随机性（例如训练模式下的 dropout：F.dropout 默认 training=True），所以无法判断改动第 {position} 个位置有没有影响前面的位置。"
                    "注意力本身是确定的计算：去掉 dropout，或只在训练时、用 training 参数控制它。"
                ).format(what=what, moved=f"{max_change(before, repeated)[0]:.4g}", position=changed + 1)
            )
    if moved > UNCHANGED:
        fail(
            _(
                "{what}：只改动了第 {position} 个位置，前 {earlier} 个位置的输出却变了（最大变化 {moved}，在位置 {index}）。它们不应有访问这个位置的通路。"
            ).format(what=what, position=changed + 1, earlier=changed, moved=f"{moved:.4g}", index=fmt_index(index))
        )
    own, _unused = max_change(before[..., changed, :], after[..., changed, :])
    if not own > CHANGED:
        fail(
            _("{what}：改动第 {position} 个位置后，它自己的输出没有任何变化；这个位置应能访问自己的信息，输出应随之改变。").format(
                what=what, position=changed + 1
            )
        )


@pytest.mark.weight(3)
@pytest.mark.function("scaled_attention")
@pytest.mark.rests_on("check_scaled_attention", ATTENTION)
def test_future_key_and_value_do_not_leak(student):
    """本章的检查：加因果掩码后，改动第 3 个位置的键和值，前两个位置的输出是否保持不变（而第 3 个位置的输出改变）？"""
    changed_key, changed_value = K.clone(), V.clone()
    changed_key[..., 2, :] += 100
    changed_value[..., 2, :] -= 100
    before, _unused = unpack_pair(student.scaled_attention(Q, K, V, causal(T)), "scaled_attention")
    after, _unused = unpack_pair(student.scaled_attention(Q, changed_key, changed_value, causal(T)), "scaled_attention")
    again = lambda: unpack_pair(student.scaled_attention(Q, K, V, causal(T)), "scaled_attention")[0]
    check_positions(before, after, 2, _("因果注意力（改动第 3 个位置的键和值）"), (2, 2, T, 2), again)
    assert_real_attention(before, expected_attention(student, Q, K, V, causal(T))[0], _("因果注意力（改动前）的输出"))


@pytest.mark.weight(2)
@pytest.mark.function("scaled_attention")
@pytest.mark.rests_on("check_scaled_attention", ATTENTION)
def test_later_query_does_not_change_earlier_outputs(student):
    """第 8 节问题 7：不加掩码，只改动第 4 个查询，前 3 个输出是否不变（第 4 个输出改变）？"""
    changed_query = Q.clone()
    changed_query[..., 3, :] = -2 * changed_query[..., 3, :] + 1
    before, _unused = unpack_pair(student.scaled_attention(Q, K, V), "scaled_attention")
    after, _unused = unpack_pair(student.scaled_attention(changed_query, K, V), "scaled_attention")
    check_positions(before, after, 3, _("改动第 4 个查询"), (2, 2, T, 2), lambda: unpack_pair(student.scaled_attention(Q, K, V), "scaled_attention")[0])
    assert_real_attention(before, expected_attention(student, Q, K, V)[0], _("不加掩码时（改动前）的输出"))


def first_position_changed():
    """The input with its first position changed: a later output of causal attention moves."""
    changed = X.clone()
    changed[:, 0, :] = NEW_ROW
    return changed


def perturbed_input():
    changed = X.clone()
    changed[:, 2, :] = NEW_ROW
    return changed


@pytest.mark.weight(3)
@pytest.mark.function("multi_head_attention")
@pytest.mark.depends_on("causal_allowed", "scaled_attention", "split_heads", "merge_heads")
# The question (does a future token change an earlier output?) rests on the multi-head part: a slip
# there that still computes causal attention keeps these points (issue 53).
@pytest.mark.rests_on("check_multi_head", PROJECTION, BY_OWN_MULTI_HEAD)
def test_multi_head_future_with_your_causal_mask(student):
    """多头注意力配你的 causal_allowed(5)：改动第 3 个位置的输入，前两个位置的输出是否不变？"""
    mask = student.causal_allowed(T)
    try:
        before = student.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=mask)
        after = student.multi_head_attention(perturbed_input(), W_Q, W_K, W_V, W_O, HEADS, allowed=mask)
    except StudentRaised as error:
        if error.type_name == "NotImplementedError":
            raise
        fail(
            _("用你的 causal_allowed({size}) 作掩码调用 multi_head_attention 时出错（{type}：{message}）。").format(
                size=T, type=error.type_name, message=str(error)[:300]
            )
        )
    before, weights = unpack_pair(before, "multi_head_attention")
    after, _unused = unpack_pair(after, "multi_head_attention")
    what = _("多头注意力 + 你的 causal_allowed({size})").format(size=T)
    again = lambda: unpack_pair(student.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=mask), "multi_head_attention")[0]
    check_positions(before, after, 2, what, (2, T, D), again)
    if judged_by_own(student):  # they failed check_multi_head: their own multi-head attention is the standard
        call = lambda changed: student.multi_head_attention(changed, W_Q, W_K, W_V, W_O, HEADS, allowed=mask)
        assert_causal_mixing(call, before, weights, first_position_changed(), causal(T), what)
        return
    expected = reference.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T))[0]
    assert_real_attention(before, expected, _("多头注意力 + 你的 causal_allowed({size})（改动前）的输出").format(size=T))


@pytest.mark.weight(2)
@pytest.mark.function("multi_head_attention")
@pytest.mark.depends_on("scaled_attention", "split_heads", "merge_heads")
@pytest.mark.rests_on("check_multi_head", PROJECTION, BY_OWN_MULTI_HEAD)
def test_multi_head_future_with_trusted_mask(student):
    """多头注意力配正确的因果掩码：改动第 3 个位置的输入，前两个位置的输出是否不变？"""
    before, weights = unpack_pair(student.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T)), "multi_head_attention")
    after, _unused = unpack_pair(student.multi_head_attention(perturbed_input(), W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T)), "multi_head_attention")
    again = lambda: unpack_pair(student.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T)), "multi_head_attention")[0]
    check_positions(before, after, 2, _("多头注意力 + 因果掩码"), (2, T, D), again)
    if judged_by_own(student):  # they failed check_multi_head: their own multi-head attention is the standard
        call = lambda changed: student.multi_head_attention(changed, W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T))
        assert_causal_mixing(call, before, weights, first_position_changed(), causal(T), _("多头注意力 + 因果掩码"))
        return
    expected = reference.multi_head_attention(X, W_Q, W_K, W_V, W_O, HEADS, allowed=causal(T))[0]
    assert_real_attention(before, expected, _("多头注意力 + 因果掩码（改动前）的输出"))
