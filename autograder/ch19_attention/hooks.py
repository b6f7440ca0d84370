"""The engine's hooks for this assignment (named in manifest.toml)."""

from __future__ import annotations

from typing import Any

from .messages import _

# Run once by each worker's zygote before it forks sandboxes: the kind of code every submission
# runs, so each sandbox inherits warm caches (torch's op dispatch, IPython's compiler).
WARM_UP = """
from math import sqrt
import torch

def attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("empty row")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights

x = torch.randn(2, 3, 8, dtype=torch.float64)
heads = x.reshape(2, 3, 2, 4).transpose(1, 2)
out, weights = attention(heads, heads, heads, torch.ones(3, 3, dtype=torch.bool).tril())
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
