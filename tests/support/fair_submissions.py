"""Round-2 fairness cases (issue 26, issue 23's property points): realistic wrong functions written
from the chapter, none of them in wrong_submissions.py and, when written, none in the catalogue
(scale_by_dim1 and empty_check_on_keys now have entries of their own, written differently). Each
replaces one function of the reference (function name, source); used by tests/grading/test_fairness.py."""

from __future__ import annotations

FAIRNESS: dict[str, tuple[str, str]] = {
    # A split_heads that only ever refuses: the "width not divisible by heads" points need a
    # split_heads that splits (issue 23).
    "split_always_raises": (
        "split_heads",
        """
def split_heads(x, num_heads):
    raise ValueError("width must be divisible by num_heads")
""",
    ),
    # Heads take every h-th feature instead of a contiguous block of D/h features.
    "split_interleaved_features": (
        "split_heads",
        """
def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError("width not divisible")
    return x.reshape(batch, length, width // num_heads, num_heads).permute(0, 3, 1, 2)
""",
    ),
    # Swaps time and feature axes of each head before merging.
    "merge_swaps_last_two": (
        "merge_heads",
        """
def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.transpose(2, 3).reshape(batch, length, heads * size)
""",
    ),
    # Key positions counted up to the longest sequence, not up to size.
    "padding_ignores_size": (
        "padding_allowed",
        """
import torch

def padding_allowed(lengths, size):
    positions = torch.arange(int(lengths.max()))
    return (positions[None, :] < lengths[:, None])[:, None, None, :]
""",
    ),
    # The chapter's mask built with numpy, returned as a numpy array.
    "causal_numpy": (
        "causal_allowed",
        """
import numpy as np

def causal_allowed(size):
    return np.tril(np.ones((size, size), dtype=bool))
""",
    ),
    # Multi-head that never passes the mask on: its scaled_attention is right (issue 26's
    # misdiagnosis: mask_not_applied named scaled_attention's mistake).
    "mha_forgets_allowed": (
        "multi_head_attention",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(x @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value)
    return merge_heads(heads) @ w_o, weights
""",
    ),
    # Cross-attention with the queries taken from the context as well.
    "mha_queries_from_context": (
        "multi_head_attention",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query = split_heads(source @ w_q, num_heads)
    key = split_heads(source @ w_k, num_heads)
    value = split_heads(source @ w_v, num_heads)
    heads, weights = scaled_attention(query, key, value, allowed)
    return merge_heads(heads) @ w_o, weights
""",
    ),
    # Scales by the size of dimension 1 (the heads, or T for 3-d inputs) instead of d_k.
    "scale_by_dim1": (
        "scaled_attention",
        """
from math import sqrt

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.size(1))
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    # Checks for an empty row over the wrong axis (a key no query may see), so it raises for a
    # padded key column and misses an empty query row.
    "empty_check_on_keys": (
        "scaled_attention",
        """
from math import sqrt

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-2).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    # Merges heads by summing them, a shape-correct but wrong reduction.
    "merge_sums_heads": (
        "merge_heads",
        """
def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.sum(dim=1).repeat(1, 1, heads)
""",
    ),
    # A causal mask that works for one size only (hard-coded from the chapter's example).
    "causal_fixed_size": (
        "causal_allowed",
        """
import torch

def causal_allowed(size):
    return torch.ones(4, 4, dtype=torch.bool).tril()[:size, :size] if size <= 4 else torch.ones(size, size, dtype=torch.bool)
""",
    ),
    # Precision (issue 26): computes in numpy float64, so a float32 input comes back float64. It
    # loses the dtype-kept checks (the stated policy), never the property tests.
    "numpy_float64": (
        "scaled_attention",
        """
import numpy as np
import torch

def scaled_attention(query, key, value, allowed=None):
    q, k, v = (t.detach().numpy().astype(np.float64) for t in (query, key, value))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if allowed is not None:
        a = allowed.numpy()
        if not a.any(axis=-1).all():
            raise ValueError("empty row")
        scores = np.where(a, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return torch.from_numpy(weights @ v), torch.from_numpy(weights)
""",
    ),
    # The scale made as a float32 tensor: a ~1e-8 relative error on float64 inputs. A precision
    # problem, named as one; the property tests (concept level) pass.
    "float32_scale": (
        "scaled_attention",
        """
import torch

def scaled_attention(query, key, value, allowed=None):
    d_k = torch.tensor(query.shape[-1])
    scores = query @ key.transpose(-2, -1) / torch.sqrt(d_k.float())
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
    # Charged where the failure starts (issue 26): .view() on the (B, h, T, d) heads works on
    # contiguous inputs only; split_heads' heads are transposed views.
    "view_flattens_heads": (
        "scaled_attention",
        """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    *lead, t_q, d_k = query.shape
    q = query.view(-1, t_q, d_k)
    k = key.view(-1, key.shape[-2], d_k)
    v = value.view(-1, value.shape[-2], value.shape[-1])
    scores = q @ k.transpose(-2, -1) / sqrt(d_k)
    scores = scores.view(*lead, t_q, key.shape[-2]) if lead else scores[0]
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
    ),
}
