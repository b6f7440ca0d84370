"""Per-assignment policies of the on-submit service, and the page each one lets a student see.

Configured in the course's ``nbgrader_config.py`` (where the course's exchange, course id and late
rule already are, and which the TA edits anyway; the assignment folders are the kit's, shared by
every course that uses them, so a course's limits do not belong there)::

    c.AttnkitServe.policies = {"ch19-attention": {"attempts": 3, "window_hours": 1, "visibility": "full", "counts": "latest", "hints": "ladder"}}

Defaults (``DEFAULT``): 5 graded feedbacks per student per hour, ``full`` pages, the ``latest``
submission counts (nbgrader's own rule), ``full`` hints (each diagnosis's whole explanation, the
page ``make grade`` and ``make check`` show). ``hints = "ladder"`` (issue 53): each diagnosis shows
the next level of its catalogue entry's hints (1: a nudge, which check, concept and section; 2: the
misconception explained; 3: the fix) each time the same student's page shows the same mistake again
(``ladder_levels``; the levels seen so far are the queue's, ``Queue.hints_seen``).

Past the limit a submission is still graded and recorded for the TA; the student's page says when
the next feedback comes.

How they compose (issue 48):

- ``after-due`` with ``attempts``: the limit holds. ``after-due`` delays pages, it adds none: at
  the due date each withheld page becomes the page ``full`` visibility under the same limit would
  have given it when it was delivered (``released_at_due``): at most ``attempts`` full pages per
  student in any window, the others the limit's page, saying why.
- A submission that could not be graded (no notebook read: a link, none, several; a worker that
  died on it) is "not graded": its page says so and why (``not_graded_page``), whatever the
  visibility; it is not an attempt, and it never replaces a graded submission in the gradebook
  (the recorder keeps only graded ones, ``latest`` or ``best``).
"""

from __future__ import annotations

import datetime
import html
from dataclasses import dataclass, replace
from typing import Any

from attnkit.i18n import _
from attnkit.records import ResultsJson

VISIBILITIES = ("full", "scores", "after-due")
GRADED_PAGES = ("full", "scores", "released")  # what a submission's ``shown`` is when its page showed a score
COUNTS = ("latest", "best")
HINTS = ("full", "ladder")
HINT_LEVELS = 3  # a nudge, the misconception explained, the fix


@dataclass(frozen=True)
class Policy:
    attempts: int = 5  # graded feedbacks per student per window (0: no limit)
    window_hours: float = 1.0
    visibility: str = "full"
    counts: str = "latest"
    hints: str = "full"  # "ladder": one more level of a diagnosis's hints each time the student sees it again

    @property
    def window_seconds(self) -> float:
        return self.window_hours * 3600


DEFAULT = Policy()


def policies_from(config: Any) -> dict[str, Policy]:
    """``c.AttnkitServe.policies`` of a loaded nbgrader config; ValueError names a bad entry."""
    from traitlets import TraitError

    from attnkit.course.settings import AttnkitServe

    try:
        given = AttnkitServe(config=config).policies if hasattr(config, "get") else {}
    except TraitError as error:  # not a dict
        raise ValueError(f"AttnkitServe.policies: {error}") from None
    found: dict[str, Policy] = {}
    for assignment, entry in dict(given).items():
        unknown = set(entry) - set(Policy.__dataclass_fields__)
        if unknown:
            raise ValueError(f"AttnkitServe.policies[{assignment!r}]: unknown keys {sorted(unknown)}")
        policy = replace(DEFAULT, **entry)
        if (
            policy.visibility not in VISIBILITIES
            or policy.counts not in COUNTS
            or policy.hints not in HINTS
            or policy.attempts < 0
            or policy.window_hours <= 0
        ):
            raise ValueError(f"AttnkitServe.policies[{assignment!r}]: {policy}")
        found[assignment] = policy
    return found


def ladder_levels(diagnoses: list[str], seen: dict[str, int]) -> dict[str, int]:
    """``hints = "ladder"``: the level of each diagnosis's hints this page shows: one above the
    highest its student has seen for that mistake on this assignment (``seen``), at most the last."""
    return {mistake: min(HINT_LEVELS, seen.get(mistake, 0) + 1) for mistake in diagnoses}


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )


def scores_page(results: ResultsJson) -> str:
    """``scores``: the total and each part's score, nothing of the diagnosis, tests or heatmaps."""
    rows = "".join(
        f'<tr data-part="{html.escape(name)}"><td>{html.escape(name)}</td><td>{part["score"]:g} / {part["max_score"]:g}</td></tr>'
        for name, part in results["parts"].items()
    )
    title = _("{assignment} 的评分结果").format(assignment=results["assignment"])
    withheld = _("本作业只公布各部分得分；详细诊断在截止后由助教公布。")
    body = (
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="score" id="score">{results["score"]:g} / {results["max_score"]:g}</p>'
        f'<table id="parts">{rows}</table>'
        f"<p>{html.escape(withheld)}</p>"
    )
    return _page(title, body)


def withheld_page(assignment: str, why: str) -> str:
    """A page with no result: why, and when the next one comes."""
    title = _("{assignment} 已收到").format(assignment=assignment)
    return _page(title, f'<h1>{html.escape(title)}</h1><p id="withheld">{html.escape(why)}</p>')


def when(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def next_feedback_at(policy: Policy, shown: list[float]) -> float | None:
    """When the next submission gets feedback again under the attempt limit: ``shown``, the moments
    of the pages shown in the window that ends now (oldest first, ``Queue.shown_times``); None
    while the limit is not reached. The one rule the page (``serve``) and the student's status
    (``hub``) both say."""
    if not policy.attempts or len(shown) < policy.attempts:
        return None
    return shown[len(shown) - policy.attempts] + policy.window_seconds


def limit_reason(policy: Policy, next_at: float) -> str:
    return _("你在 {hours:g} 小时内已获得 {count} 次评分反馈（上限）。这次提交已评分并记录，助教可见；下一次反馈最早在 {moment} 之后的提交。").format(
        hours=policy.window_hours, count=policy.attempts, moment=when(next_at)
    )


def after_due_reason(due: float | None) -> str:
    if due is None:
        return _("本作业的反馈在截止之后公布（尚未设定截止时间）。这次提交已评分并记录。")
    return _("本作业的反馈在截止时间 {moment} 之后公布。这次提交已评分并记录；截止后再次提交或运行 Fetch Feedback 即可看到完整反馈。").format(moment=when(due))


def released_at_due(policy: Policy, pages: list[tuple[float, str]]) -> list[float | None]:
    """One student's delivered pages of an assignment, oldest first (when each was delivered, what it
    showed); for each, once the due date has passed: None, its full page (a page withheld until the
    due date is released; any other stays as it is), or, for a withheld one past the attempt limit,
    the moment the limit gave the next feedback (its page says so). The limit counts as it does for
    ``full`` visibility at the moment each page was delivered: the graded pages of the window that
    ends there, the ones released before it included."""
    shown_at: list[float] = []
    found: list[float | None] = []
    for finished, shown in pages:
        if shown != "after-due":
            if shown in GRADED_PAGES:
                shown_at.append(finished)
            found.append(None)
            continue
        recent = [moment for moment in shown_at if finished - policy.window_seconds <= moment <= finished]
        if policy.attempts and len(recent) >= policy.attempts:
            found.append(recent[len(recent) - policy.attempts] + policy.window_seconds)
            continue
        shown_at.append(finished)
        found.append(None)
    return found


def not_graded_page(assignment: str, reason: str) -> str:
    """A submission that could not be graded: why; no score (it does not count, not even as an attempt)."""
    title = _("{assignment} 已收到").format(assignment=assignment)
    why = _("这次提交未能评分：{reason}。它不计入成绩，也不占评分反馈的次数；成绩册里保留你之前已评分的提交（如有）。").format(reason=reason)
    return _page(title, f'<h1>{html.escape(title)}</h1><p id="not-graded">{html.escape(why)}</p>')
