"""Points charged where the failure starts (issue 26).

A dependent test (multi-head attention, the future test's multi-head) can fail because of a
dependency that passes all of its own tests: the failing line is in the dependency's own code
(a ``.view()`` on the non-contiguous heads ``split_heads`` returns), or the dependency goes wrong
on the inputs it really receives there (a ``merge_heads`` that returns float32 for the float64
heads of the future test). Such a test is re-run with the reference in the dependency's place
(``attnkit.grading.own_loop``, the swap machinery of ``attnkit.grading.plugin``); when it then passes, its points
are *charged* to the dependency: the dependent test gets them back, and the dependency's own
tests in the part of its first own test lose as many, capped at what those tests still hold.
The total deduction is unchanged; it is only moved to the function that caused it.

The policy, in order:

1. only tests whose dependencies all passed their own tests (a dependency that failed one is
   already swapped for the reference, with its own points lost in its own tests);
2. the suspects (:func:`suspects`): the dependency whose own code raised, if any; otherwise every
   dependency that goes wrong (raises, another dtype, another value) on the inputs it receives in
   that test on the source notebook (the plan's scope, :func:`differs`), or, without a plan (the
   development backend), every dependency;
3. each suspect alone swapped in, in the test's ``depends_on`` order: the first with which the test
   passes is charged (:func:`apply`); none: the test's own failure stands, uncharged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnkit.assignment.folder import Assignment
from attnkit.i18n import _
from attnkit.grading.outcomes import TestResult
from attnkit.boundary.outcome import Outcome, StudentRaised


@dataclass(frozen=True)
class Charge:
    """Points moved from a dependent test to a dependency's part."""

    test: str  # the dependent test's node id
    function: str  # the dependency charged
    part: str  # the grade id of the part that pays
    points: float


def raised_in(error: BaseException) -> str:
    """The student function whose own line raised ``error`` (or the student exception a check
    turned into its own failure), "" when no student code raised."""
    for cause in (error, error.__cause__, error.__context__):
        if isinstance(cause, StudentRaised):
            where = cause.where or {}
            return str(where.get("function") or cause.function)
    return ""


def suspects(dependencies: Sequence[str], error: BaseException, wrong_on_inputs: Iterable[str] | None) -> tuple[str, ...]:
    """The dependencies (all of which passed their own tests) a failed dependent test may be
    charged to: the one whose own code raised; else those ``wrong_on_inputs`` names (None: no
    plan to tell, every dependency)."""
    inner = raised_in(error)
    if inner in dependencies:
        return (inner,)
    if wrong_on_inputs is None:
        return tuple(dependencies)
    wrong = set(wrong_on_inputs)
    return tuple(name for name in dependencies if name in wrong)


def differs(outcome: Outcome, expected: Any) -> bool:
    """Whether a dependency's ``outcome`` on an input it really receives is not the reference's
    ``expected`` answer: it raised, or another structure, dtype or value (float tolerance of the
    expected dtype)."""
    return outcome.raised or not _same(outcome.value, expected)


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or got.dtype != expected.dtype:
            return False
        if expected.is_floating_point():
            tolerance = 1e-4 if expected.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-8
            return bool(torch.allclose(got, expected, rtol=tolerance, atol=tolerance, equal_nan=True))
        return bool(torch.equal(got, expected))
    if isinstance(expected, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(expected) and all(map(_same, got, expected))
    return bool(got == expected)


def _points(value: float) -> str:
    return f"{value:g}"


def apply(results: list[TestResult], pending: Sequence[tuple[TestResult, str]], assignment: Assignment) -> list[Charge]:
    """Charge each ``(dependent test's result, dependency)`` of ``pending`` (in the session's
    order) to the dependency's own tests in the part of its first own test in ``results``; the
    results are changed in place (scores, statuses, the notes in their outputs, ``charge``)."""
    made: list[Charge] = []
    for dependent, function in pending:
        own = [result for result in results if function in result["functions"] and result is not dependent]
        if not own:
            continue
        part = own[0]["grade_id"]
        payers = [result for result in own if result["grade_id"] == part]
        owed = round(dependent["max_score"] - dependent["score"], 4)
        amount = round(min(owed, sum(result["score"] for result in payers)), 4)
        where = part
        if part in assignment.parts:
            where = _("第 {number} 部分「{title}」").format(number=assignment.part_number(part), title=assignment.part_title(part))
        note = _(
            "这一项的问题出在你的 {function} 里：它通过了自己的检查，却在这一项交给它的输入上出错；"
            "换上参考的 {function} 重新运行后这一项通过。所以这一项的分数记在 {function} 自己的{where}上，不在这里扣。"
        ).format(function=function, where=where)
        if amount < owed:
            note += _("{where}中 {function} 的分数已经扣完，这一项仍扣 {left} 分。").format(where=where, function=function, left=_points(owed - amount))
        dependent["output"] = note + ("\n" + dependent["output"] if dependent["output"] else "")
        dependent["charge"] = {"to": function, "part": part, "points": amount}
        if amount <= 0:
            continue
        dependent["score"] = round(dependent["score"] + amount, 4)
        if dependent["score"] >= dependent["max_score"]:
            dependent["status"] = "passed"
        left = amount
        for payer in payers:
            take = round(min(payer["score"], left), 4)
            if take <= 0:
                continue
            payer["score"] = round(payer["score"] - take, 4)
            payer["status"] = "failed"
            spent = _("这一项扣 {points} 分：你的 {function} 通过了这一项的检查，但在「{test}」中出错（见那一项）。").format(
                points=_points(take), function=function, test=dependent["name"]
            )
            payer["output"] = payer["output"] + "\n" + spent if payer["output"] else spent
            payer["charge"].setdefault("from", []).append(dependent["nodeid"])
            payer["charge"]["points"] = round(payer["charge"].get("points", 0.0) + take, 4)
            left = round(left - take, 4)
            if left <= 0:
                break
        made.append(Charge(dependent["nodeid"], function, part, amount))
    return made
