"""Round-4 fairness cases (issue 53): submissions written from the chapter, none of them in the
catalogue or elsewhere in tests/ when written. Each replaces one function of the reference.

Each case carries its *fair* grade, written down before it was ever graded, from the points of
the source notebook's grade cells (scaled_attention 20 = 5 tests x 4; masking 10 = 4 + 3 + 3;
empty row 10 = 3 + 3 + 2 + 2; masks 15 = 5 + 5 + 5; heads 10; multi-head 15; shape trace 5;
future 10 = 3 + 2 + 3 + 2; self-test 5), and the catalogue ids it may be named by (a wrong
name is worse than none). ``concept``: the class of issue 53 the case stands for:

- ``rests``: a slip in one concept on which another part's test rests (a multi-head slip that
  still computes causal attention; a masking slip whose empty-row ``raise`` is right): it costs
  its own concept only;
- ``premise``: a case whose page used to say something untrue of it (a leak for dropout's
  randomness; "你选出被屏蔽位置的方式（~allowed）是对的" to a student who never wrote ~allowed);
- ``explain``: a runtime error or a catalogued mistake that needs its own explanation (torch.bmm's
  batch dimensions, scaling twice, the additive 0/−∞ matrix returned as the causal mask);
- ``misreading``: ``allowed`` read as "blocked" consistently through scaled_attention.

``fair``: the score the case deserves under issue 53's policy, written before grading. ``TODAY``
(measured on main a494f88, after the fair grades were written) is kept for the before/after note.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    function: str
    concept: str
    source: str
    fair: float
    ids: frozenset[str] = frozenset()  # the ids it may be named by (none: nameless)
    why: str = ""


ROUND4: dict[str, Case] = {
    # -- multi-head slips that still compute causal attention -------------------------------------
    "mha_einsum_model_width": Case(
        "multi_head_attention",
        "rests",
        """
import math
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    memory = context if context is not None else x
    batch, length, width = x.shape
    q = torch.einsum("btd,de->bte", x, w_q).reshape(batch, length, num_heads, -1).permute(0, 2, 1, 3)
    k = torch.einsum("bsd,de->bse", memory, w_k).reshape(batch, memory.shape[1], num_heads, -1).permute(0, 2, 1, 3)
    v = torch.einsum("bsd,de->bse", memory, w_v).reshape(batch, memory.shape[1], num_heads, -1).permute(0, 2, 1, 3)
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(width)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("有查询没有可访问的键")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    mixed = torch.einsum("bhts,bhsd->bhtd", weights, v)
    return mixed.permute(0, 2, 1, 3).reshape(batch, length, width) @ w_o, weights
""",
        85,
        frozenset({"multi_head_scale_by_model_width"}),
        why="scaled by √D instead of √(D/h): the multi-head part (15); causal attention is still causal, so check_future keeps its 5",
    ),
    "mha_loop_no_projection": Case(
        "multi_head_attention",
        "rests",
        """
import torch


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    src = x if context is None else context
    q_all, k_all, v_all = x @ w_q, src @ w_k, src @ w_v
    size = x.shape[-1] // num_heads
    outputs, weight_list = [], []
    for h in range(num_heads):
        piece = slice(h * size, (h + 1) * size)
        out, w = scaled_attention(q_all[..., piece], k_all[..., piece], v_all[..., piece], allowed)
        outputs.append(out)
        weight_list.append(w)
    return torch.cat(outputs, dim=-1), torch.stack(weight_list, dim=1)
""",
        85,
        frozenset({"missing_output_projection"}),
        why="a loop over heads that forgets W_O: the multi-head part (15); no path to the future, so check_future keeps its 5",
    ),
    "mha_one_weight_helper": Case(
        "multi_head_attention",
        "rests",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    def project(t):
        return split_heads(t @ w_q, num_heads)

    source = context if context is not None else x
    heads, weights = scaled_attention(project(x), project(source), project(source), allowed)
    return merge_heads(heads) @ w_o, weights
""",
        85,
        frozenset({"shared_projection"}),
        why="one weight for Q, K and V: the multi-head part (15); the attention it computes is still causal",
    ),
    "mha_head_size_as_count": Case(
        "multi_head_attention",
        "rests",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    head_size = x.shape[-1] // num_heads
    kv = x if context is None else context
    q = split_heads(x @ w_q, head_size)
    k = split_heads(kv @ w_k, head_size)
    v = split_heads(kv @ w_v, head_size)
    out, weights = scaled_attention(q, k, v, allowed)
    return merge_heads(out) @ w_o, weights
""",
        85,
        why=(
            "the head size passed as the head count (D=6, h=2 gives 3 heads of 2):"
            " the multi-head part (15); each head is causal attention, so check_future keeps its 5"
        ),
    ),
    # -- a masking slip whose empty-row raise is right ----------------------------------------------
    "mask_fill_zero_checks_rows": Case(
        "scaled_attention",
        "rests",
        """
import math


def scaled_attention(query, key, value, allowed=None):
    d_k = query.size(-1)
    scores = query.matmul(key.transpose(-2, -1)) / math.sqrt(d_k)
    if allowed is not None:
        if (allowed.sum(dim=-1) == 0).any():
            raise ValueError("至少有一个查询的所有键都被屏蔽了")
        scores = scores.masked_fill(allowed == False, 0.0)  # noqa: E712
    weights = scores.softmax(-1)
    return weights.matmul(value), weights
""",
        87,
        frozenset({"mask_by_multiplying"}),
        why=(
            "blocked scores set to 0, not -inf:"
            " masking (10) and the scaled_attention future test it leaks on (3); its empty-row raise is right, so check_empty_row keeps its 10"
        ),
    ),
    "mask_small_negative_checks_rows": Case(
        "scaled_attention",
        "rests",
        """
import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) * query.shape[-1] ** -0.5
    if allowed is not None:
        has_key = allowed.any(dim=-1)
        if not bool(has_key.all()):
            raise ValueError("a query has no key it may attend to")
        scores = torch.where(allowed, scores, torch.full_like(scores, -1.0))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
""",
        87,
        why=(
            "blocked scores set to -1 ('any negative number will do'), not -inf (uncatalogued):"
            " masking (10) and the future test it leaks on (3); the empty-row raise is right: check_empty_row keeps its 10"
        ),
    ),
    # -- an empty-check slip that raises where every query keeps a key --------------------------------
    "empty_check_column_sums": Case(
        "scaled_attention",
        "rests",
        """
import math

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if allowed is not None:
        if (allowed.sum(dim=-2) == 0).any():
            raise ValueError("有位置无法访问")
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.softmax(scores, dim=-1) @ value, torch.softmax(scores, dim=-1)
""",
        90,
        frozenset({"empty_check_on_keys"}),
        why=(
            "counts blocked queries per key instead of keys per query: the empty-row part (10); "
            "its raise for the padding mask's PAD column is that concept's, not masking's (masking keeps its 10)"
        ),
    ),
    # -- sentences that were not true -------------------------------------------------------------
    "dropout_left_on": Case(
        "scaled_attention",
        "premise",
        """
from math import sqrt

import torch.nn.functional as F


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = F.dropout(scores.softmax(dim=-1), p=0.1, training=True)
    return weights @ value, weights
""",
        # Dropout changes every call: no number of scaled_attention can be checked, its own function
        # is no standard either (random too): its four parts' 45 points; the parts that call it are
        # graded with the reference in its place.
        55,
        why="dropout in training mode: its future tests must not be told of a leak",
    ),
    "additive_mask_subtracted": Case(
        "scaled_attention",
        "premise",
        """
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        additive = torch.where(allowed, torch.zeros(()), torch.tensor(-1e9))  # section 5's additive mask
        scores = scores - additive.to(scores.dtype)
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        87,
        frozenset({"additive_mask_wrong_sign"}),
        why="section 5's additive mask subtracted: named additive_mask_wrong_sign; the page must point at the sign and not praise a ~allowed it never wrote",
    ),
    "mha_value_from_x": Case(
        "multi_head_attention",
        "premise",
        """
def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    keys_from = x if context is None else context
    q = split_heads(x @ w_q, num_heads)
    k = split_heads(keys_from @ w_k, num_heads)
    v = split_heads(x @ w_v, num_heads)
    heads, weights = scaled_attention(q, k, v, allowed)
    return merge_heads(heads) @ w_o, weights
""",
        95,
        why="values from x in cross-attention: the cross-attention test (5); scaled_attention, where the RuntimeError surfaces, passes its own tests",
    ),
    # -- explanations ---------------------------------------------------------------------------------
    "bmm_for_four_dims": Case(
        "scaled_attention",
        "explain",
        """
from math import sqrt

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = torch.bmm(query, key.transpose(-2, -1)) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return torch.bmm(weights, value), weights
""",
        # Every input of scaled_attention's tests but the 3-D one is 2-D or 4-D: its four parts'
        # 45 points (its own function, raising there, is no standard either); the callers swapped.
        55,
        why="torch.bmm takes 3-D tensors only: 'batch1 must be a 3D tensor' gets its explanation",
    ),
    "scaled_twice": Case(
        "scaled_attention",
        "explain",
        """
import math


def scaled_attention(query, key, value, allowed=None):
    scale = math.sqrt(query.shape[-1])
    query = query / scale
    scores = (query @ key.transpose(-2, -1)) / scale
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights
""",
        80,
        frozenset({"scale_by_dk"}),
        why="divides by √d_k twice (d_k in all): its explanation must say it may have divided twice",
    ),
    "causal_as_additive_matrix": Case(
        "causal_allowed",
        "explain",
        """
import torch


def causal_allowed(size):
    future = torch.triu(torch.ones(size, size), diagonal=1).bool()
    return torch.zeros(size, size).masked_fill(future, float("-inf"))
""",
        # causal_allowed's own test (5) and the combined test, whose causal mask means the opposite
        # (5); the multi-head future test with it runs with the reference mask.
        90,
        frozenset({"causal_additive_matrix"}),
        why="section 5's additive 0/−∞ matrix returned as the mask: the page says why .bool() would invert it",
    ),
    # -- a misreading, consistent through the function ------------------------------------------------
    "allowed_read_as_blocked": Case(
        "scaled_attention",
        "misreading",
        """
import math

import torch


def scaled_attention(query, key, value, allowed=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(key.size(-1))
    if allowed is not None:
        blocked = allowed
        if blocked.all(dim=-1).any():
            raise ValueError("某个查询的所有位置都被屏蔽了")
        scores = scores.masked_fill(blocked, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value), weights
""",
        # One misreading, charged once in masking (10); the causal future test of scaled_attention
        # raises on the causal mask's full last row (3, it rests on the attention, which is right);
        # the empty-row tests rest on masking, where the misreading is charged.
        87,
        frozenset({"allowed_read_as_blocked"}),
        why="allowed read as 'blocked' in the fill and the empty-row check alike: named as one misreading",
    ),
}


# Measured on main a494f88 (``tests/grading/test_fairness_round4.py``'s session), after the fair
# grades above were written.
TODAY: dict[str, float] = {
    "mha_einsum_model_width": 80,
    "mha_loop_no_projection": 80,
    "mha_one_weight_helper": 80,
    "mha_head_size_as_count": 80,
    "mask_fill_zero_checks_rows": 77,
    "mask_small_negative_checks_rows": 77,
    "empty_check_column_sums": 87,
    "dropout_left_on": 55,  # its future tests told of a leak
    "additive_mask_subtracted": 77,  # told its ~allowed was right
    "mha_value_from_x": 95,  # led by scaled_attention's RuntimeError
    "bmm_for_four_dims": 55,  # no explanation
    "scaled_twice": 80,  # shown the variance argument only
    "causal_as_additive_matrix": 90,  # unnamed
    "allowed_read_as_blocked": 77,  # unnamed
}
