"""The hint ladder of each catalogued mistake (issue 53; see chapter 19's ``hints.py``): a nudge
(which check, which concept, which section; no fix), the misconception explained, the fix."""

from __future__ import annotations

from .messages import N_

HINTS: dict[str, tuple[str, str, str]] = {
    "softmax_without_shift": (
        N_("「大分数下的数值稳定」的检查没有通过，问题在 Softmax 的数值稳定上：重读第 2 节「分数很大时」，想一想分数很大时你的 softmax 先算出了什么。"),
        N_("你直接对分数取指数。分数很大时 exp 溢出为 inf，inf/inf 得到 NaN；Softmax 的结果只取决于同一行分数之间的差，减去每行的最大值不改变结果，却让指数不超过 1。"),
        N_("先减去每行的最大值再取指数：shifted = scores - scores.max(dim=-1, keepdim=True).values，exps = shifted.exp()，return exps / exps.sum(dim=-1, keepdim=True)。"),
    ),
}
