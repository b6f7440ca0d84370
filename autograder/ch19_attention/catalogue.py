"""The catalogue of known mistakes (mutants) of the six API functions, for diagnosis.

Each mistake is the reference with exactly one function replaced (see ``attnkit.assignment.mistakes``): a
later part that fails only because of an earlier function is diagnosed as that earlier mistake.
Every ``source`` is self-contained (it imports what it uses), so it also works pasted into a
student's notebook cell in place of the right answer.

The ids are part of the results.json contract; more may be added, never renamed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from attnkit.assignment.mistakes import Catalogue, Mistake

from .hints import HINTS  # noqa: F401  # the hint ladder of each entry (Assignment.mistakes reads it here)
from .messages import N_

# scaled_attention with its Softmax over axis {dim}: the variants of softmax_wrong_axis.
_SOFTMAX_OVER = """\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim={dim})
    return weights @ value, weights
"""

MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        id="no_scale",
        section=N_("第 3 节"),
        function="scaled_attention",
        source="""\
import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_("点积分数没有除以 √d_k。维数越大，分数波动越大，Softmax 会变得过于尖锐；缩放点积注意力要先把 QKᵀ 除以键维数的平方根。"),
    ),
    Mistake(
        id="scale_by_dk",
        section=N_("第 3 节"),
        function="scaled_attention",
        source="""\
import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / query.shape[-1]
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_("分数除以了 d_k 本身，而不是 √d_k。d_k 个独立乘积之和的方差是 d_k，要让方差回到 1，应除以它的平方根（标准差）。"),
    ),
    Mistake(
        id="softmax_wrong_axis",
        section=N_("第 4 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-2)
    return weights @ value, weights
""",
        # Any axis but the last: over the batch (dim=0) or, for (B, h, T_q, T_k), the heads (dim=1);
        # or a fixed axis number, dim=2: the queries of 4-D inputs, the keys of 3-D ones, out of
        # range for 2-D ones (a diagnosis must agree with every test, the passed 3-D ones too).
        variants=tuple(_SOFTMAX_OVER.format(dim=dim) for dim in (0, 1, 2)),
        zh=N_(
            "Softmax 沿错误的维度计算（对查询归一化）。Softmax 应沿每一行、也就是最后一维（键的维度）计算：固定一个查询，在它能访问的键之间分配权重，每行之和为 1。"
        ),
    ),
    Mistake(
        id="mask_by_multiplying",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores * allowed
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_("用乘零来“屏蔽”分数。分数为 0 时 exp(0)=1，被屏蔽的位置照样分到概率；应在 Softmax 之前把不允许的位置的分数设为 -∞。"),
    ),
    Mistake(
        id="mask_after_softmax",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    weights = scores.softmax(dim=-1)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        weights = weights * allowed
    return weights @ value, weights
""",
        zh=N_("Softmax 之后才把不允许位置的权重清零，却没有重新归一化：每行之和不再是 1，而且被屏蔽位置的分数仍然影响了分母，未来的信息会漏进来。"),
    ),
    Mistake(
        id="mask_inverted",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            '你的代码屏蔽的是 allowed 为 True 的位置（例如 masked_fill(allowed, …)），留下的恰好是不允许访问的位置。本章的 allowed=True 表示“允许访问”（与 PyTorch 的 scaled_dot_product_attention 相同，与 nn.MultiheadAttention 相反），应屏蔽的是 allowed 为 False 的位置：masked_fill(~allowed, float("-inf"))。'
        ),
    ),
    Mistake(
        id="mask_not_applied",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "掩码没有起作用：例如调用了 scores.masked_fill(...) 却没有把结果赋回 scores（masked_fill 不会原地修改）。结果与不加掩码完全相同，查询仍能访问被屏蔽的位置。"
        ),
    ),
    Mistake(
        id="no_empty_row_error",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "某个查询整行都被屏蔽时没有报错。整行都是 -∞ 时 Softmax 的归一化没有定义，结果是 NaN；本章的实现约定此时抛出 ValueError，而不是等 NaN 出现后再猜。"
        ),
    ),
    Mistake(
        id="causal_excludes_diagonal",
        section=N_("第 5 节"),
        function="causal_allowed",
        source="""\
import torch


def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).tril(diagonal=-1)
""",
        zh=N_("因果掩码把对角线也屏蔽了。允许访问的条件是 j ≤ i：当前位置的输入属于已知前文，可以访问；否则第一个位置没有任何可访问的键。"),
    ),
    Mistake(
        id="causal_upper_triangle",
        section=N_("第 5 节"),
        function="causal_allowed",
        source="""\
import torch


def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).triu()
""",
        zh=N_("因果掩码取成了上三角（j ≥ i）：每个位置能看到自己之后的位置，恰好允许了偷看未来。行是查询位置 i、列是键位置 j，应允许 j ≤ i，即下三角。"),
    ),
    Mistake(
        id="padding_on_queries",
        section=N_("第 5 节"),
        function="padding_allowed",
        source="""\
import torch


def padding_allowed(lengths, size):
    lengths = torch.as_tensor(lengths)
    allowed = torch.arange(size) < lengths[:, None]
    return allowed[:, None, :, None]
""",
        zh=N_(
            "填充掩码屏蔽的是查询而不是键。要屏蔽的是 PAD 对应的键（最后一维），形状应为 (B, 1, 1, T)，以便对所有头和所有查询广播；屏蔽查询会让 PAD 查询整行无键可用。"
        ),
    ),
    Mistake(
        id="split_without_transpose",
        section=N_("第 6 节"),
        function="split_heads",
        source="""\
import torch


def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError(f"宽度 {width} 不能被头数 {num_heads} 整除")
    return x.reshape(batch, num_heads, length, width // num_heads)
""",
        zh=N_(
            "拆头时直接 reshape 成 (B, h, T, d)，没有先拆成 (B, T, h, d) 再交换维度。这样各个头拿到的是按内存顺序切开的片段，混进了别的位置，而不是每个位置特征的一部分；头拆分的是特征，不是序列。"
        ),
    ),
    Mistake(
        id="merge_without_transpose",
        section=N_("第 6 节"),
        function="merge_heads",
        source="""\
import torch


def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.reshape(batch, length, heads * size)
""",
        zh=N_(
            "拼回多头时直接 reshape 成 (B, T, h·d)，没有先把维度换回 (B, T, h, d)。这样每个位置拿到的是同一个头里相邻几个位置的结果，而不是各个头在这个位置的结果。"
        ),
    ),
    Mistake(
        id="missing_output_projection",
        section=N_("第 6 节"),
        function="multi_head_attention",
        source="""\
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads), weights
""",
        zh=N_("拼接各头之后漏了输出投影 W_O。多头注意力的输出是 Concat(O_1, …, O_h) W_O，投影让各头的结果混合起来。"),
    ),
    Mistake(
        id="causal_true_means_blocked",
        section=N_("第 5 节"),
        function="causal_allowed",
        source="""\
import torch


def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).triu(diagonal=1)
""",
        zh=N_(
            "你的 causal_allowed 在未来位置（j > i）为 True、在当前与之前的位置为 False，这是 nn.MultiheadAttention 的约定（True 表示“禁止访问”）。本章的约定相反：True 表示“允许访问”，应在 j ≤ i 处为 True，例如 torch.ones(size, size, dtype=torch.bool).tril()。"
        ),
    ),
    Mistake(
        id="additive_mask_wrong_sign",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores + (~allowed).to(scores.dtype) * 1e9
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "你把掩码变成了加到分数上的数，但符号反了：被屏蔽的位置加上了一个很大的正数，于是权重几乎全部落在不允许访问的位置上。你选出被屏蔽位置的方式（~allowed）是对的；加上的应是 -∞（或 -1e9 这样很大的负数），这样 exp 之后才为 0。"
        ),
    ),
    Mistake(
        id="scale_by_dv",
        section=N_("第 3 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(value.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "你的代码用值向量的维数 d_v（value.shape[-1]）来缩放分数。分数是查询与键的点积，它的方差随键的维数 d_k 增长，所以要除以 √d_k，即 query.shape[-1] 或 key.shape[-1] 的平方根；d_k = d_v 时两者恰好相同，所以本章的例子看不出区别。"
        ),
    ),
    Mistake(
        id="scale_by_fixed_number",
        section=N_("第 3 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(2)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "你的代码总是把分数除以同一个固定的数 √2（本章例子里 d_k = 2），而不是按输入的键维数计算 √d_k。d_k 换成别的值时缩放就错了；应写成 sqrt(query.shape[-1])。"
        ),
    ),
    Mistake(
        id="multi_head_scale_by_model_width",
        section=N_("第 6 节"),
        function="multi_head_attention",
        source="""\
from math import sqrt

import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)  # (B, h, T_q, D/h)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    scores = query @ key.transpose(-2, -1) / sqrt(x.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return merge_heads(weights @ value) @ w_o, weights
""",
        zh=N_(
            "你的多头注意力把每个头的分数除以 √D（整个模型宽度的平方根）。每个头里的点积只在 D/h 维上求和，所以应除以 √(D/h)，即每个头的维数 d_k 的平方根；直接调用 scaled_attention 处理拆好的头就会自动用对的维数。"
        ),
    ),
    Mistake(
        id="shared_projection",
        section=N_("第 6 节"),
        function="multi_head_attention",
        source="""\
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_q, num_heads)
    value = split_heads(source @ w_q, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights
""",
        zh=N_(
            "你的代码用同一个投影矩阵 w_q 算出了 Q、K 和 V，w_k 与 w_v 没有用到。查询、键、值各有自己的投影：Q = X W_Q，K = X W_K（或上下文 W_K），V = X W_V，这样“要找什么”“能提供什么线索”“提供什么内容”才能分开学习。"
        ),
    ),
    Mistake(
        id="multi_head_mask_inverted",
        section=N_("第 5 节"),
        function="multi_head_attention",
        source="""\
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, None if allowed is None else ~allowed)
    return merge_heads(heads) @ w_o, weights
""",
        zh=N_(
            "你的多头注意力把掩码取反（~allowed）后才交给 scaled_attention，大概是按 nn.MultiheadAttention 的习惯（那里 True 表示不许访问）。"
            "本章的 allowed 与 scaled_attention 的约定相同，True 表示允许访问：直接把 allowed 传下去，不要取反。"
        ),
    ),
    Mistake(
        id="no_divisibility_check",
        section=N_("第 6 节"),
        function="split_heads",
        source="""\
import torch


def split_heads(x, num_heads):
    batch, length, width = x.shape
    return x.reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)
""",
        zh=N_(
            "拆头前没有检查宽度能否被头数整除。D 不能被 h 整除时每个头分不到相同的维数，应明确抛出 ValueError 说明原因，而不是让 reshape 报出难懂的错误（或悄悄丢掉特征）。"
        ),
    ),
    Mistake(
        id="scale_by_dim1",
        section=N_("第 3 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        # The key's dimension 1 instead of the query's: the same for self-attention, T_k for a
        # 3-D cross-attention (a diagnosis must agree with every test of the function, issue 41).
        variants=(
            """\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(key.shape[1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        ),
        zh=N_(
            "你的代码用张量第 1 维的大小（例如 query.size(1)）来缩放分数。对 (B, h, T, d_k) 的输入这是头数 h，对 (B, T, d_k) 的输入是序列长度 T，都不是键的维数。分数是 d_k 个乘积之和，方差为 d_k，应除以 √d_k，即最后一维 query.shape[-1] 的平方根；只有第 1 维恰好等于 d_k 时结果才碰巧正确。"
        ),
    ),
    Mistake(
        id="empty_check_on_keys",
        section=N_("第 5 节"),
        function="scaled_attention",
        source="""\
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-2).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        zh=N_(
            "你检查空行时沿错了维度（例如 allowed.any(dim=-2)）：这检查的是每个键是否至少有一个查询能访问，而不是每个查询是否至少有一个可访问的键。于是某个查询整行都被屏蔽时没有报错（整行都是 -∞，Softmax 的归一化没有定义，结果是 NaN），而填充掩码屏蔽了某个 PAD 键（整列为 False）时却报了错。应沿最后一维检查每一行：allowed.any(dim=-1).all()。"
        ),
    ),
)

CATALOGUE = Catalogue(Path(__file__).with_name("reference.py"), MISTAKES)
by_id = CATALOGUE.by_id
reference_source = CATALOGUE.reference_source
reference_namespace = CATALOGUE.reference_namespace
mistake_namespaces = CATALOGUE.mistake_namespaces
diagnosable_namespaces = CATALOGUE.diagnosable_namespaces


@lru_cache(maxsize=1)
def probes() -> dict[str, list[tuple[tuple, dict]]]:
    """Extra inputs per function, replayed on the student's function and on every mistake when a
    test that called it fails: inputs on which the catalogue's mistakes all differ from each other
    and from the reference (sizes > 1, d_k != d_v != 2, masks that keep several keys per row, rows
    with every key allowed and rows with some blocked, T != every head count). A failed test may
    have stopped at a degenerate call (causal_allowed(1), where [[False]] fits several mistakes);
    these keep a diagnosis from resting on such a call alone."""
    import torch

    g = torch.Generator().manual_seed(1999)
    query = torch.randn(2, 2, 4, 5, generator=g, dtype=torch.float64)  # (B, h, T_q, d_k)
    key = torch.randn(2, 2, 6, 5, generator=g, dtype=torch.float64)  # (B, h, T_k, d_k)
    value = torch.randn(2, 2, 6, 3, generator=g, dtype=torch.float64)  # (B, h, T_k, d_v)
    allowed = torch.tensor(  # (T_q, T_k): the first row keeps every key, the others some
        [[1, 1, 1, 1, 1, 1], [1, 0, 1, 0, 0, 1], [0, 1, 1, 1, 0, 0], [1, 0, 0, 0, 1, 0]], dtype=torch.bool
    )
    width, heads = 6, 2
    x = torch.randn(2, 5, width, generator=g, dtype=torch.float64)  # (B, T, D)
    context = torch.randn(2, 4, width, generator=g, dtype=torch.float64)
    weights = [torch.randn(width, width, generator=g, dtype=torch.float64) / width**0.5 for _ in range(4)]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    # Drawn last, so the inputs above stay as they were. Three heads and a key no query may see (a
    # PAD column; every row still keeps a key): dim 1's size (3) is then neither 2 nor d_k, and a
    # check for empty rows made over the keys raises where the reference does not.
    query3 = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)  # (B, h=3, T_q, d_k)
    key3 = torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)  # (B, h, T_k, d_k)
    value3 = torch.randn(2, 3, 6, 3, generator=g, dtype=torch.float64)  # (B, h, T_k, d_v)
    padded = allowed.clone()  # (T_q, T_k)
    padded[:, -1] = False
    # The empty-row checks told apart (issue 41): no row keeps every key, none keeps none, every
    # key is seen by some query. The chapter's check passes it, and so does one over the keys
    # (empty_check_on_keys); a check with any and all swapped ("some row keeps every key") raises.
    # And one empty row beside a row that keeps every key, every key seen: the chapter's check
    # raises, the one over the keys and the swapped one do not.
    no_full_row = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0]], dtype=torch.bool)  # (T_q, T_k)
    empty_beside_full = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0]], dtype=torch.bool)
    return {
        "scaled_attention": [
            ((query, key, value), {}),
            ((query, key, value, allowed), {}),
            ((query3, key3, value3, padded), {}),
            ((query, key, value, no_full_row), {}),
            ((query, key, value, empty_beside_full), {}),
        ],
        "causal_allowed": [((3,), {}), ((5,), {})],
        "padding_allowed": [((torch.tensor([3, 5, 1]), 5), {})],
        "split_heads": [((torch.arange(2 * 5 * 6, dtype=torch.float32).reshape(2, 5, 6), 2), {})],
        "merge_heads": [((torch.arange(2 * 3 * 5 * 2, dtype=torch.float32).reshape(2, 3, 5, 2),), {})],
        "multi_head_attention": [
            ((x, *weights, heads), {}),
            ((x, *weights, 3), {"allowed": causal}),
            ((x, *weights, heads), {"context": context}),
        ],
    }
