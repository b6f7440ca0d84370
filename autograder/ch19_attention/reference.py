"""第 19 章 注意力机制：六个作业函数的参考实现（可信一侧）。

The six functions of the student API, correct. ``scaled_attention`` is the chapter's own code
(section 7); the others follow the chapter's text (sections 5 and 6). The hidden tests use this module for trusted masks and
expected values, and ``catalogue`` execs this file's *source* into fresh namespaces (the
reference, and the reference with one function replaced by a known mistake), so keep it a plain
module: imports, ``def``s and the answer cells' constants, nothing that runs code.
"""

from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).tril()


def padding_allowed(lengths, size):
    lengths = torch.as_tensor(lengths)
    allowed = torch.arange(size) < lengths[:, None]
    return allowed[:, None, None, :]


def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError(f"宽度 {width} 不能被头数 {num_heads} 整除")
    return x.reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * size)


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights


# The answer cells (section 6's shape trace, section 8's self-test), so that this file is also a
# complete model submission. The hidden tests compute their expected answers themselves.
trace_projected = (4, 5, 12)
trace_split = (4, 3, 5, 4)
trace_weights = (4, 3, 5, 5)
trace_mixed = (4, 3, 5, 4)
trace_merged = (4, 5, 12)
trace_output = (4, 5, 12)

answer_output_shape = (6, 9)
answer_weights_shape = (6, 4)
answer_causal_sees_current = True
answer_heads_split_sequence = False
answer_weights_factor = 1
answer_output_factor = 3
answer_earlier_outputs_change = False
answer_growth_factor = 9
