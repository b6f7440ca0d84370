"""Dependencies that pass their own tests and break on what their callers hand them (issue 26:
points charged where the failure starts). Each replaces one function of the reference (function
name, source); none is in wrong_submissions.py, fair_submissions.py or the catalogue. Used by
tests/grading/test_charge.py."""

from __future__ import annotations

CHARGES: dict[str, tuple[str, str]] = {
    # The masked branch flattens the heads with .view(): the masking tests' inputs are
    # contiguous, split_heads' heads are transposed views (raises inside scaled_attention).
    "masked_branch_views_heads": (
        "scaled_attention",
        """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    d_k = query.shape[-1]
    if allowed is None:
        weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k), dim=-1)
        return weights @ value, weights
    if not allowed.any(dim=-1).all():
        raise ValueError("a query has no allowed key")
    lead = query.shape[:-2]
    q = query.view(-1, query.shape[-2], d_k)
    k = key.view(-1, key.shape[-2], d_k)
    scores = torch.bmm(q, k.transpose(1, 2)).reshape(*lead, query.shape[-2], key.shape[-2]) / math.sqrt(d_k)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights @ value, weights
""",
    ),
    # Only the values are flattened with .view() in the masked branch.
    "masked_branch_views_values": (
        "scaled_attention",
        """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("a query has no allowed key")
        scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        flat = weights.reshape(-1, *weights.shape[-2:])
        values = value.view(-1, *value.shape[-2:])
        if flat.shape[0] != values.shape[0]:
            values = values.expand(flat.shape[0], -1, -1)
        return torch.bmm(flat, values).reshape(*weights.shape[:-1], value.shape[-1]), weights
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
""",
    ),
    # The masked branch's queries flattened with .view() for an einsum over one batch axis.
    "masked_branch_views_queries": (
        "scaled_attention",
        """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    if allowed is None:
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
        weights = scores.softmax(-1)
        return weights @ value, weights
    if not allowed.any(-1).all():
        raise ValueError("empty row")
    lead, t_q, d_k = query.shape[:-2], query.shape[-2], query.shape[-1]
    q = query.view(-1, t_q, d_k)
    k = key.reshape(-1, key.shape[-2], d_k)
    scores = torch.einsum("bqd,bkd->bqk", q, k).reshape(*lead, t_q, key.shape[-2]) / math.sqrt(d_k)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return weights @ value, weights
""",
    ),
    # split_heads fills a buffer made with torch.zeros: float32 whatever x is (its own tests are
    # float32; the future test's multi-head runs in float64).
    "split_into_float32_buffer": (
        "split_heads",
        """
import torch

def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads:
        raise ValueError("width must be divisible by num_heads")
    size = width // num_heads
    heads = torch.zeros(batch, num_heads, length, size)
    for head in range(num_heads):
        heads[:, head] = x[:, :, head * size : (head + 1) * size]
    return heads
""",
    ),
    # split_heads casts to float "to be safe".
    "split_casts_to_float": (
        "split_heads",
        """
def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads != 0:
        raise ValueError("D must be divisible by num_heads")
    return x.float().reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)
""",
    ),
    # merge_heads fills a torch.zeros buffer: float32 whatever the heads are.
    "merge_into_float32_buffer": (
        "merge_heads",
        """
import torch

def merge_heads(x):
    batch, heads, length, size = x.shape
    merged = torch.zeros(batch, length, heads * size)
    for head in range(heads):
        merged[:, :, head * size : (head + 1) * size] = x[:, head]
    return merged
""",
    ),
    # merge_heads ends with .float().
    "merge_casts_to_float": (
        "merge_heads",
        """
def merge_heads(x):
    batch, heads, length, size = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * size).float()
""",
    ),
    # merge_heads goes through Python lists: torch.tensor makes float32 of them.
    "merge_through_lists": (
        "merge_heads",
        """
import torch

def merge_heads(x):
    batch, heads, length, size = x.shape
    rows = [[sum((x[b, h, t].tolist() for h in range(heads)), []) for t in range(length)] for b in range(batch)]
    return torch.tensor(rows)
""",
    ),
    # split_heads builds the heads with torch.tensor over Python lists (float32 again).
    "split_through_lists": (
        "split_heads",
        """
import torch

def split_heads(x, num_heads):
    batch, length, width = x.shape
    if width % num_heads:
        raise ValueError("width % num_heads != 0")
    size = width // num_heads
    values = x.tolist()
    return torch.tensor([[[row[h * size : (h + 1) * size] for row in values[b]] for h in range(num_heads)] for b in range(batch)])
""",
    ),
    # The masked branch applies the mask per matrix after flattening everything with .view().
    "masked_branch_views_everything": (
        "scaled_attention",
        """
import math
import torch

def scaled_attention(query, key, value, allowed=None):
    scale = math.sqrt(query.shape[-1])
    if allowed is None:
        weights = torch.softmax(torch.matmul(query, key.transpose(-1, -2)) / scale, dim=-1)
        return torch.matmul(weights, value), weights
    if (allowed.sum(dim=-1) == 0).any():
        raise ValueError("every query needs at least one allowed key")
    shape = query.shape[:-2]
    q = query.view(-1, *query.shape[-2:])
    k = key.view(-1, *key.shape[-2:])
    v = value.view(-1, *value.shape[-2:])
    mask = allowed.expand(*shape, query.shape[-2], key.shape[-2]).reshape(-1, query.shape[-2], key.shape[-2])
    weights = torch.softmax((q @ k.transpose(1, 2) / scale).masked_fill(~mask, float("-inf")), dim=-1)
    return (weights @ v).view(*shape, query.shape[-2], value.shape[-1]), weights.view(*shape, query.shape[-2], key.shape[-2])
""",
    ),
}
