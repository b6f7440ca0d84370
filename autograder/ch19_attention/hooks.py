"""The engine's hooks for this assignment (named in manifest.toml)."""

from __future__ import annotations

from typing import Any

from .messages import _

# Run once by each worker's zygote before it forks sandboxes: the kind of code every submission
# runs, so each sandbox inherits warm caches (torch's op dispatch, IPython's compiler). Then the
# zygote runs the release notebook's own examples (``Assignment.warm_up_cells``) with the
# stand-ins below in place of the student's functions. They return the right shapes and nothing
# else right (uniform weights, zeros): every sandbox inherits this zygote's memory, so nothing in
# it may be a working answer.
WARM_UP = """
from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("stand-in")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.zeros_like(scores).softmax(dim=-1)  # uniform: a stand-in, not attention
    return weights @ value, weights

def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool)

def padding_allowed(lengths, size):
    return torch.ones(len(lengths), 1, 1, size, dtype=torch.bool)

def split_heads(x, num_heads):
    return x.new_zeros(*x.shape[:-2], num_heads, x.shape[-2], x.shape[-1] // num_heads)

def merge_heads(x):
    return x.new_zeros(*x.shape[:-3], x.shape[-2], x.shape[-3] * x.shape[-1])

def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    query, key, value = x @ w_q, source @ w_k, source @ w_v
    weights = x.new_ones(x.shape[0], num_heads, x.shape[1], source.shape[1]) / source.shape[1]
    return query @ w_o, weights

trace_projected = trace_split = trace_weights = trace_mixed = trace_merged = trace_output = (1, 1)
answer_output_shape = answer_weights_shape = (1, 1)
answer_causal_sees_current = answer_heads_split_sequence = answer_earlier_outputs_change = False
answer_weights_factor = answer_output_factor = answer_growth_factor = 1

x = torch.randn(2, 3, 8, dtype=torch.float64)
heads = x.reshape(2, 3, 2, 4).transpose(1, 2)
causal = torch.ones(3, 3, dtype=torch.bool).tril()
out, weights = scaled_attention(heads, heads, heads, causal)
merged = out.transpose(1, 2).reshape(2, 3, 8) @ torch.eye(8, dtype=torch.float64)
lengths = torch.arange(3)[None, :] < torch.tensor([3, 2])[:, None]
"""


def evidence(student: Any, reference: dict) -> dict[str, Any]:
    """The student's and the expected weights on the chapter's three-position example (section 7),
    for the feedback page's heatmaps. A panel's ``student`` is None when the student's function
    cannot produce weights there."""
    import torch

    query = torch.tensor([[1, 0], [0, 1], [1, 1]], dtype=torch.float64)[None, None]  # (1, 1, 3, 2)
    value = torch.tensor([[10, 0], [0, 10], [10, 10]], dtype=torch.float64)[None, None]  # (1, 1, 3, 2)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()  # (3, 3)
    panels = []
    shown = (("full", _("未加掩码"), None), ("causal", _("因果掩码"), causal))
    # Both inputs are fixed: the sandbox answers them in one round trip (``Student.ask_ahead``).
    if hasattr(student, "ask_ahead"):
        student.ask_ahead([("scaled_attention", (query, query.clone(), value, allowed), {}) for _label, _title, allowed in shown])
    for label, title, allowed in shown:
        _output, expected = reference["scaled_attention"](query, query.clone(), value, allowed)  # (1, 1, 3, 3)
        panel: dict[str, Any] = {"label": label, "title": title, "expected": expected[0, 0].tolist(), "student": None}
        try:
            result = student.scaled_attention(query, query.clone(), value, allowed)
            weights = result[1] if isinstance(result, (tuple, list)) and len(result) == 2 else None
            if isinstance(weights, torch.Tensor) and weights.numel() == 9:
                panel["student"] = weights.reshape(3, 3).to(torch.float64).tolist()
        except Exception:  # whatever the student's code does, the page just shows less
            pass
        panels.append(panel)
    return {
        "title": _("你的注意力权重与期望权重（第 7 节的三位置实验）"),
        "note": _("行表示查询位置，列表示被访问的位置；每一行加起来应为 1。"),
        "panels": panels,
    }
