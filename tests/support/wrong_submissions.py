"""Realistic wrong submissions written from the chapter, none of them in the catalogue: each replaces
one function of the reference (function name, source). Used by tests/grading/test_autograder.py: each must
cost only the points of its own function's tests and never be given a catalogue id."""

from __future__ import annotations

UNCATALOGUED: dict[str, tuple[str, str]] = {
    # scaled_attention
    "key_dot_T": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.T / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    "scale_after_softmax": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1) / sqrt(query.shape[-1])
    return weights @ value, weights
""",
    ),
    "scale_by_sequence_length": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(key.shape[-2])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    "returns_weights_first": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights, weights @ value
""",
    ),
    "always_float32": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    query, key, value = query.float(), key.float(), value.float()
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    # masks
    "causal_float_mask": (
        "causal_allowed",
        """
import torch

def causal_allowed(size):
    return torch.ones(size, size).tril()
""",
    ),
    "causal_one_step_ahead": (
        "causal_allowed",
        """
import torch

def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool).tril(diagonal=1)
""",
    ),
    "padding_2d_shape": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    lengths = torch.as_tensor(lengths)
    return torch.arange(size) < lengths[:, None]
""",
    ),
    "padding_off_by_one": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    lengths = torch.as_tensor(lengths)
    return (torch.arange(size) <= lengths[:, None])[:, None, None, :]
""",
    ),
    # heads
    "split_wrong_permute": (
        "split_heads",
        """
import torch

def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError("not divisible")
    return x.reshape(batch, length, num_heads, width // num_heads).permute(0, 2, 3, 1).reshape(batch, num_heads, length, width // num_heads)
""",
    ),
    "merge_view_noncontiguous": (
        "merge_heads",
        """
import torch

def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.transpose(1, 2).view(batch, length, heads * size)
""",
    ),
    "merge_concat_on_time": (
        "merge_heads",
        """
import torch

def merge_heads(x):
    return torch.cat(list(x.unbind(1)), dim=1)
""",
    ),
    # multi-head
    "mha_ignores_context": (
        "multi_head_attention",
        """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(x @ w_k, num_heads)
    value = split_heads(x @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights
""",
    ),
    "mha_averaged_weights": (
        "multi_head_attention",
        """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights.mean(dim=1)
""",
    ),
    "mha_values_with_w_k": (
        "multi_head_attention",
        """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_k, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights
""",
    ),
    "mha_output_projection_transposed": (
        "multi_head_attention",
        """
import torch

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o.T, weights
""",
    ),
}
