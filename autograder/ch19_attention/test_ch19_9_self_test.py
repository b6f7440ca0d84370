"""Grade cell check_self_test: section 8's self-test, as answer variables.

Questions 2, 6 and 8 are asked with other numbers than the chapter prints (6 queries, 4 keys,
9-dimensional values; values times 3; length 100 to 300), so the answers take reasoning, not copying.
Where natural the expected answer is computed here with the reference functions rather than
written as a literal. The feedback names a wrong answer but never shows the right one.
"""

import pytest
import torch

from . import reference
from attnkit.assignment.checks import answer_bool, answer_int, answer_shape, judge_answers

from .attention_checks import SELF_TEST
from .messages import N_, _

pytestmark = [pytest.mark.grade_id("check_self_test"), pytest.mark.concept(SELF_TEST)]

HINT = N_("回到第 8 节对应的问题再想一想。")
_g = torch.Generator().manual_seed(1909)


@pytest.mark.weight(1)
def test_output_and_weights_shapes(student):
    """第 8 节问题 2（换了数）：6 个查询、4 把键、值向量 9 维时，输出与权重的形状答对了吗？"""
    query, key, value = torch.randn(6, 5, generator=_g), torch.randn(4, 5, generator=_g), torch.randn(4, 9, generator=_g)
    output, weights = reference.scaled_attention(query, key, value)
    judge_answers(
        student,
        [
            ("answer_output_shape", answer_shape, tuple(output.shape)),
            ("answer_weights_shape", answer_shape, tuple(weights.shape)),
        ],
        _(HINT),
    )


@pytest.mark.weight(1)
def test_causal_sees_current(student):
    """第 8 节问题 4：因果注意力能否访问输入的当前位置，答对了吗？"""
    sees_current = bool(reference.causal_allowed(4).diagonal().all())
    judge_answers(student, [("answer_causal_sees_current", answer_bool, sees_current)], _(HINT))


@pytest.mark.weight(1)
def test_heads_do_not_split_sequence(student):
    """第 8 节问题 5：两个头是否分别处理序列的前半段和后半段，答对了吗？"""
    x = torch.randn(1, 6, 4, generator=_g)
    every_head_sees_every_position = reference.split_heads(x, 2).shape[-2] == x.shape[1]
    judge_answers(student, [("answer_heads_split_sequence", answer_bool, not every_head_sees_every_position)], _(HINT))


@pytest.mark.weight(1)
def test_values_times_two(student):
    """第 8 节问题 6（换了数）：只把所有值向量乘 3，权重与输出各变为原来的几倍，答对了吗？"""
    query, key, value = torch.randn(3, 4, generator=_g), torch.randn(5, 4, generator=_g), torch.randn(5, 2, generator=_g)
    output, weights = reference.scaled_attention(query, key, value)
    output2, weights2 = reference.scaled_attention(query, key, 3 * value)
    judge_answers(
        student,
        [
            ("answer_weights_factor", answer_int, round(float((weights2 / weights).mean()))),
            ("answer_output_factor", answer_int, round(float((output2 / output).mean()))),
        ],
        _(HINT),
    )


@pytest.mark.weight(1)
def test_earlier_outputs_and_growth(student):
    """第 8 节问题 7–8（第 8 题换了数）：改动第三个查询时前两个输出会不会变、序列从 100 增至 300 时权重元素数变为几倍，答对了吗？"""
    query, key, value = torch.randn(3, 4, generator=_g), torch.randn(5, 4, generator=_g), torch.randn(5, 2, generator=_g)
    changed = query.clone()
    changed[2] += 1
    before, _unused = reference.scaled_attention(query, key, value)
    after, _unused = reference.scaled_attention(changed, key, value)
    batch, heads = 2, 4  # any fixed batch and head count: the ratio of B*h*T*T
    judge_answers(
        student,
        [
            ("answer_earlier_outputs_change", answer_bool, not torch.equal(before[:2], after[:2])),
            ("answer_growth_factor", answer_int, (batch * heads * 300 * 300) // (batch * heads * 100 * 100)),
        ],
        _(HINT),
    )
