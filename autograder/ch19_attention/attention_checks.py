"""Checks about this chapter's functions, on top of the generic ones in attnkit.assignment.checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnkit import i18n
from attnkit.assignment.checks import CONCEPT_TOLERANCE, assert_bool_equal, assert_close, fail

from .messages import N_, _


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


def judged_by_own(student: Any) -> str:
    """The concept this run judges the test by the student's own function for ("" for none): the
    plugin sets it when the student failed the part that concept is graded in (issue 41's charge
    per concept): ATTENTION, MASKING (the empty-row tests, issue 53), PROJECTION (the multi-head
    future tests)."""
    return str(getattr(student, "judged_by_own", "") or "")


def assert_causal_mixing(call: Any, before: Any, weights: Any, changed_input: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    """The real-work gate of a multi-head future test judged against the student's own
    multi-head attention (they failed check_multi_head; issue 53): their no-leak result counts
    if the same function computes causal attention of some kind. Its weights are per-head
    distributions over the keys (finite, non-negative, rows of 1, nothing on a blocked key) that
    depend on the query, and its output mixes positions: changing the first position's input
    (``changed_input``, through ``call``) changes a later position's output. A function that
    returns its input, a per-position map or uniform weights earns nothing here."""
    reason = ""
    if not (isinstance(before, torch.Tensor) and isinstance(weights, torch.Tensor)) or weights.dim() < 3 or tuple(weights.shape[-2:]) != tuple(mask.shape):
        reason = _("你的多头注意力返回的权重形状不是 (…, T, T)。")
    elif not (bool(torch.isfinite(weights).all()) and bool(torch.isfinite(before).all())):
        reason = _("你的多头注意力返回了 NaN 或无穷大。")
    else:
        w = weights.double()
        if bool((w < -1e-6).any()) or not torch.allclose(w.sum(dim=-1), torch.ones((), dtype=torch.float64), atol=1e-3):
            reason = _("你的多头注意力返回的权重不是每行非负、和为 1 的分布。")
        elif bool((w.abs() * (~mask).double()).max() > 1e-6):
            reason = _("你的多头注意力给被屏蔽的位置分了权重。")
        elif bool((w[..., -1, :] - 1.0 / w.shape[-1]).abs().max() < 1e-6):  # the last query may see every key
            reason = _("你的多头注意力在最后一个位置上对所有键的权重都一样，没有用到查询与键的匹配。")
        else:
            after, _unused = unpack_pair(call(changed_input), "multi_head_attention")
            if not isinstance(after, torch.Tensor) or tuple(after.shape) != tuple(before.shape) or not float((after[:, 1:] - before[:, 1:]).abs().max()) > 1e-6:
                reason = _("改动第 1 个位置的输入后，你的多头注意力在后面位置的输出没有变化：它没有按权重混合各位置的值。")
    if reason:
        fail(i18n.sentences([reason, _("{what}：这一项只在你的函数本身算的是因果注意力时，才按你自己的多头注意力评判。").format(what=what)]))


def expected_attention(
    student: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (output, weights) a test of masking, of empty rows or of the future expects: the
    reference's; or, judged against the student's own function, the student's own attention over
    the allowed keys (``own_attention``)."""
    from . import reference

    if judged_by_own(student) == MASKING:
        return own_masking(student, query, key, value, allowed)
    if judged_by_own(student):
        own = own_attention(student, query, key, value, allowed)
        return own.output, own.weights
    return reference.scaled_attention(query, key, value, allowed)


def own_masking(student: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Judged against the student's own masking (a test resting on check_masking, which they
    failed: issue 53): the student's own (output, weights) of this very call, once their unmasked
    function has shown it computes attention (``_assert_is_attention``). What is left to judge is
    the test's own concept (an empty row raises, a row that keeps a key does not); how blocked keys
    are treated was charged in check_masking."""
    plain_output, plain_weights = unpack_pair(student.scaled_attention(query, key, value), "scaled_attention")
    _assert_is_attention(plain_output, plain_weights, query, key, value)
    output, weights = unpack_pair(student.scaled_attention(query, key, value, allowed), "scaled_attention")
    if not (isinstance(output, torch.Tensor) and isinstance(weights, torch.Tensor)):
        fail(_("这一项按你自己的掩码结果评判时，你的函数没有返回张量，无法评判。"))
    return output, weights


def as_judged(
    student: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None, weights: Any
) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, Any]:
    """Judged against the student's own function: (their own attention's (output, weights), the
    student's ``weights`` of this call read in the API's layout, as their own function lays them
    out). Otherwise (None, ``weights``): the test's reference standard applies."""
    if not judged_by_own(student):
        return None, weights
    if judged_by_own(student) == MASKING:
        return own_masking(student, query, key, value, allowed), weights
    own = own_attention(student, query, key, value, allowed)
    return (own.output, own.weights), own.read(weights)


@dataclass(frozen=True)
class OwnAttention:
    """The student's own attention on a test's inputs (``own_attention``), in the API's layout."""

    output: torch.Tensor  # (*lead, T_q, d_v)
    weights: torch.Tensor  # (*lead, T_q, T_k)
    # The student's function returns its weights as (..., T_k, T_q): a slip in what it returns,
    # charged in check_scaled_attention; judged against their own function, theirs are read back.
    transposed: bool = False

    def read(self, weights: Any) -> Any:
        """The student's weights of another call of the same test, in the API's layout."""
        if self.transposed and isinstance(weights, torch.Tensor) and weights.dim() >= 2:
            return weights.transpose(-2, -1)
        return weights


def _layout(weights: Any, rows: int, keys: int) -> bool | None:
    """Whether ``weights`` of a call with ``rows`` queries and ``keys`` keys come back transposed
    (None: cannot tell, a square or another shape)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2 or rows == keys:
        return None
    last = tuple(weights.shape[-2:])
    return False if last == (rows, keys) else True if last == (keys, rows) else None


def own_attention(student: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None) -> OwnAttention:
    """What the student's own ``scaled_attention`` gives each query over the keys it may see:
    called without a mask on those keys only, one call per distinct row of ``allowed`` (per
    leading index only where the rows differ between them), the weights of the blocked keys 0.
    A masked result equal to this is masking done right on the student's own attention. Weights
    that come back transposed on every call whose shape tells (T_q != T_k) are read back in the
    API's layout: that slip is the attention part's.

    It counts only if the student's unmasked function computes attention at all (weights that
    are finite, non-negative, sum to 1 over the keys, depend on the query, and mix the values):
    a function that returns zeros, its input or uniform weights earns nothing here."""
    from attnkit.assignment.checks import broadcast_shape

    t_q, t_k = query.shape[-2], key.shape[-2]
    plain_output, plain_weights = unpack_pair(student.scaled_attention(query, key, value), "scaled_attention")
    layouts = [_layout(plain_weights, t_q, t_k)]
    if layouts[0] is not None or allowed is None:  # the layout is known already: the gate first, before any more calls
        _assert_is_attention(plain_output, OwnAttention(plain_output, plain_weights, bool(layouts[0])).read(plain_weights), query, key, value)
    blocks: list[tuple[tuple, torch.Tensor, torch.Tensor, Any, Any]] = []
    lead: tuple[int, ...] = ()
    if allowed is not None:
        lead = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2], allowed.shape[:-2])
        q = query.expand(*lead, t_q, query.shape[-1])  # (*lead, T_q, d_k)
        k = key.expand(*lead, t_k, key.shape[-1])  # (*lead, T_k, d_k)
        v = value.expand(*lead, t_k, value.shape[-1])  # (*lead, T_k, d_v)
        mask = allowed.expand(*lead, t_q, t_k)  # (*lead, T_q, T_k)
        shared = not lead or bool((mask == mask[(0,) * len(lead)]).all())
        # Each sub-problem: where in the leading dimensions, the rows (queries) of one pattern of
        # allowed keys, those keys; one call each, on the allowed keys only.
        problems: list[tuple[tuple, torch.Tensor, torch.Tensor]] = []
        for index in [()] if shared else list(torch.cartesian_prod(*[torch.arange(n) for n in lead]).reshape(-1, len(lead)).tolist()):
            where = (Ellipsis,) if shared else tuple(index)
            rows_mask = mask[(0,) * len(lead)] if shared else mask[tuple(index)]  # (T_q, T_k)
            for pattern in torch.unique(rows_mask, dim=0):
                keys = pattern.nonzero().flatten()
                if keys.numel() == 0:
                    fail(_("这一项按你自己的注意力结果评判时，某个查询一个键也不能访问：无法评判。"))
                problems.append((where, (rows_mask == pattern).all(dim=-1).nonzero().flatten(), keys))
        calls = [(q[where][..., rows, :], k[where][..., keys, :], v[where][..., keys, :]) for where, rows, keys in problems]
        # Their inputs are fixed now: the sandbox answers them all in one round trip.
        if hasattr(student, "ask_ahead"):
            student.ask_ahead([("scaled_attention", args, {}) for args in calls])
        for (where, rows, keys), args in zip(problems, calls, strict=True):
            got_output, got_weights = unpack_pair(student.scaled_attention(*args), "scaled_attention")
            layouts.append(_layout(got_weights, rows.numel(), keys.numel()))
            blocks.append((where, rows, keys, got_output, got_weights))
    told = {layout for layout in layouts if layout is not None}
    if len(told) > 1:
        fail(_("这一项按你自己的注意力结果评判时，你的函数只用允许访问的键计算，返回的形状不对，无法评判。"))
    own = OwnAttention(plain_output, plain_weights, transposed=told == {True})
    plain_weights = own.read(plain_weights)
    if layouts[0] is None and allowed is not None:  # square: the layout was told by the calls per row
        _assert_is_attention(plain_output, plain_weights, query, key, value)
    if allowed is None:
        return OwnAttention(plain_output, plain_weights, own.transposed)
    output = torch.zeros(*lead, t_q, value.shape[-1], dtype=plain_output.dtype)  # (*lead, T_q, d_v)
    weights = torch.zeros(*lead, t_q, t_k, dtype=plain_weights.dtype)  # (*lead, T_q, T_k)
    for where, rows, keys, got_output, got_weights in blocks:
        got_weights = own.read(got_weights)
        sub = output[where]
        expected_shape = (*sub.shape[:-2], rows.numel())
        if (
            not isinstance(got_output, torch.Tensor)
            or not isinstance(got_weights, torch.Tensor)
            or tuple(got_output.shape) != (*expected_shape, value.shape[-1])
            or tuple(got_weights.shape) != (*expected_shape, keys.numel())
        ):
            fail(_("这一项按你自己的注意力结果评判时，你的函数只用允许访问的键计算，返回的形状不对，无法评判。"))
        output[where][..., rows, :] = got_output.to(output.dtype)
        block = weights[where][..., rows, :]
        block[..., keys] = got_weights.to(weights.dtype)
        weights[where][..., rows, :] = block
    return OwnAttention(output, weights, own.transposed)


def _assert_is_attention(output: Any, weights: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """The real-work gate of a test judged against the student's own attention."""
    reason = ""
    shape = (*torch.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.shape[-2], key.shape[-2])
    if not (isinstance(output, torch.Tensor) and isinstance(weights, torch.Tensor)) or tuple(weights.shape) != shape:
        reason = _("你的函数不加掩码时返回的权重形状不对。")
    elif not (bool(torch.isfinite(weights).all()) and bool(torch.isfinite(output).all())):
        reason = _("你的函数不加掩码时返回了 NaN 或无穷大。")
    else:
        w = weights.double()
        if bool((w < -1e-6).any()) or not torch.allclose(w.sum(dim=-1), torch.ones((), dtype=torch.float64), atol=1e-3):
            reason = _("你的函数不加掩码时，权重不是每行非负、和为 1 的分布。")
        elif w.shape[-2] > 1 and bool((w - w[..., :1, :]).abs().max() < 1e-6):
            reason = _("你的函数不加掩码时，每个查询得到的权重都一样，没有用到查询与键的匹配。")
        elif tuple(output.shape) != (*shape[:-1], value.shape[-1]) or not torch.allclose(output.double(), w @ value.double(), atol=1e-3, rtol=1e-3):
            reason = _("你的函数不加掩码时，输出不是按返回的权重混合值向量的结果。")
    if reason:
        fail(i18n.sentences([reason, _("这一项只在你的函数本身算的是注意力时，才按你自己的注意力结果评判。")]))


# The concept each hidden test checks (its ``concept`` marker; issue 41's charge per concept), as
# the page names it where a part loses points. ATTENTION is also what the masking, empty-row and
# future tests of scaled_attention rest on (their ``rests_on`` marker): the attention itself
# (scaling, the softmax over the keys, what it returns), graded in check_scaled_attention.
ATTENTION = N_("注意力")
MASKING = N_("用掩码屏蔽")
EMPTY_ROW = N_("空行报错")
FUTURE = N_("不泄漏未来")
CAUSAL_MASK = N_("因果掩码")
PADDING_MASK = N_("填充掩码")
COMBINED_MASKS = N_("组合掩码")
HEAD_SPLIT = N_("拆分多头")
HEAD_MERGE = N_("合并多头")
PROJECTION = N_("多头注意力的投影")
SHAPE_TRACE = N_("形状推导")
SELF_TEST = N_("自测题")

# How a test is judged when it rests on a part the student failed (the third argument of its
# ``rests_on`` marker: the page's sentence, issue 53). Without one, the engine's sentence says the
# standard became the student's own function's result.
BY_OWN_MASKING = N_(
    "这一项检查的是它自己的内容（有没有在该报错时报错、不该报错时正常返回）；被屏蔽的键怎样处理，标准换成了你自己的函数加同一个掩码的结果。"
)
BY_OWN_EMPTY_CHECK = N_(
    "你的函数对这个掩码（每个查询都还有可访问的键）抛出了 ValueError，这是空行检查的问题；"
    "这一项改用另一个掩码（每个键都有查询能访问）检查屏蔽本身，仍按参考答案的数值评判。"
)
BY_OWN_MULTI_HEAD = N_(
    "这一项检查的是它自己的内容（改动后面的位置，前面的输出是否不变）；"
    "“同时算出正确的注意力”这一条，标准换成了你自己的多头注意力：权重是每行和为 1、不给被屏蔽位置的分布，输出按权重混合各位置。"
)
