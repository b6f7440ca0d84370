"""The warm-up's known mistake: exponentiating the raw scores (no shift by the row maximum)."""

from __future__ import annotations

from pathlib import Path

from attnkit.assignment.mistakes import Catalogue, Mistake

from .hints import HINTS  # noqa: F401  # the hint ladder of each entry (Assignment.mistakes reads it here)
from .messages import N_

MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        id="softmax_without_shift",
        section=N_("第 2 节"),
        function="softmax",
        source="""\
import torch


def softmax(scores):
    exps = scores.exp()
    return exps / exps.sum(dim=-1, keepdim=True)
""",
        zh=N_("直接对分数取指数，没有先减去每行的最大值。分数很大时 exp 溢出为 inf，inf/inf 得到 NaN；减去最大值不改变结果，却让指数不超过 1。"),
    ),
)

CATALOGUE = Catalogue(Path(__file__).with_name("reference.py"), MISTAKES)
by_id = CATALOGUE.by_id
reference_source = CATALOGUE.reference_source
reference_namespace = CATALOGUE.reference_namespace
mistake_namespaces = CATALOGUE.mistake_namespaces
