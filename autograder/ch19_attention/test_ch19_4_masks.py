"""Grade cell check_masks: causal_allowed and padding_allowed, alone and combined.

The combined check feeds the student's masks (joined with &) to the *reference* attention, so a
mistake in scaled_attention costs nothing here. It pays only when each mask alone already means
what it should (``assert_mask_alone``): one mask doing both jobs earns nothing."""

import pytest
import torch
import torch.nn.functional as F

from . import reference
from attnkit.assignment.checks import assert_bool_equal, assert_close, assert_tensor, broadcast_shape, fail, fmt_shape
from .attention_checks import CAUSAL_MASK, COMBINED_MASKS, PADDING_MASK, assert_mask_alone
from .messages import _

pytestmark = pytest.mark.grade_id("check_masks")


def expected_causal(size):
    rows = torch.arange(size)[:, None]
    columns = torch.arange(size)[None, :]
    return columns <= rows


def expected_padding(lengths, size):
    return (torch.arange(size)[None, :] < lengths[:, None])[:, None, None, :]


@pytest.mark.weight(5)
@pytest.mark.function("causal_allowed")
@pytest.mark.concept(CAUSAL_MASK)
def test_causal_allowed(student):
    """causal_allowed(size)：是否为 (size, size) 的布尔矩阵，且恰好在 j ≤ i（含对角线）处为 True？"""
    # Every size the suite's other tests ask the student's mask for (4: combined, 5: the future
    # test) is checked here too, so a mask wrong only there is charged to causal_allowed and its
    # dependents are re-run with the reference mask (issue 26: inputs it really receives).
    for size in (1, 3, 4, 5, 6):
        got = student.causal_allowed(size)
        assert_bool_equal(got, expected_causal(size), f"causal_allowed({size})")


@pytest.mark.weight(5)
@pytest.mark.function("padding_allowed")
@pytest.mark.concept(PADDING_MASK)
def test_padding_allowed(student):
    """padding_allowed(lengths, size)：形状是否为 (B, 1, 1, size)，且只在键位置小于序列长度处为 True？"""
    lengths = torch.tensor([3, 5, 1])
    got = student.padding_allowed(lengths, 5)
    assert_bool_equal(got, expected_padding(lengths, 5), _("padding_allowed(长度 [3, 5, 1], 5)"))
    lengths = torch.tensor([2, 4])
    got = student.padding_allowed(lengths, 6)
    assert_bool_equal(got, expected_padding(lengths, 6), _("padding_allowed(长度 [2, 4], 6)"))


@pytest.mark.weight(5)
@pytest.mark.function("causal_allowed", "padding_allowed")
@pytest.mark.concept(COMBINED_MASKS)
def test_causal_and_padding_combined(student):
    """把你的因果掩码与填充掩码用 & 组合后做注意力（长度 4 与 2 的两个序列）：结果是否正确？"""
    lengths = torch.tensor([4, 2])
    shape = (2, 2, 4, 4)  # (B, h, T_q, T_k): what attention broadcasts the combined mask to
    causal = assert_tensor(student.causal_allowed(4), "causal_allowed(4)")
    padding = assert_tensor(student.padding_allowed(lengths, 4), _("padding_allowed(长度 [4, 2], 4)"))
    masks = []
    for name, mask in (("causal_allowed(4)", causal), (_("padding_allowed(长度 [4, 2], 4)"), padding)):
        if mask.dtype != torch.bool:
            # A mask of 0s and 1s in another dtype is charged once, in its own test (which
            # checks torch.bool): the combination is judged on what it means (issue 41).
            if mask.dtype.is_complex or not bool(((mask == 0) | (mask == 1)).all()):
                fail(_("{name} 应是布尔张量（torch.bool），实际数据类型为 {dtype}。").format(name=name, dtype=mask.dtype))
            mask = mask != 0
        masks.append(mask)
    causal, padding = masks
    try:
        # Shapes first, values after: two thin masks ((n, 1) and (1, n)) would broadcast to n * n
        # elements on the trusted side if `&` came before this check.
        if broadcast_shape(causal.shape, padding.shape, shape) != shape:
            raise RuntimeError("does not fit")
        combined = causal & padding
    except RuntimeError:
        fail(
            _("因果掩码 {causal} 与填充掩码 {padding} 用 & 组合后无法广播到 (批次 2, 头数 2, 4 个查询, 4 把键)。").format(
                causal=fmt_shape(causal.shape), padding=fmt_shape(padding.shape)
            )
        )
    expected_mask = expected_causal(4) & expected_padding(lengths, 4)
    generator = torch.Generator().manual_seed(1904)
    query, key, value = (torch.randn(2, 2, 4, size, generator=generator, dtype=torch.float64) for size in (3, 3, 2))
    try:
        output, _unused = reference.scaled_attention(query, key, value, combined)
    except ValueError:
        fail(_("两个掩码组合后，有的查询一个键也不能访问（整行为 False）；而正确的组合下每个查询至少能访问自己所在序列的第一个位置。"))
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=expected_mask)
    assert_close(output, expected, _("用组合掩码算出的注意力输出"))
    # The combination is right; it pays only if each mask also does its own job (issue 23): a
    # padding mask that also blocks the future would otherwise pass beside an all-True causal
    # mask, or pass itself while padding_allowed fails its own test for carrying the causal part.
    assert_mask_alone(causal, expected_causal(4), shape, _("causal_allowed(4) 单独广播到 (批次 2, 头数 2, 4 个查询, 4 把键) 后"))
    assert_mask_alone(padding, expected_padding(lengths, 4), shape, _("padding_allowed(长度 [4, 2], 4) 单独广播到 (批次 2, 头数 2, 4 个查询, 4 把键) 后"))
