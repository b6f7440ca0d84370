"""HTML pages: each student's feedback and the TA's class report (jinja2 templates)."""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Mapping
from typing import Any

import jinja2
import markupsafe

from attnkit import i18n
from attnkit.assignment.folder import Assignment
from attnkit.constants import CRASHED, STUDENTS_FOLDER, TIMEOUT
from attnkit.i18n import _
from attnkit.records import ResultsJson

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("attnkit.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],
)
# gettext in the templates: ``_("… %(name)s …", name=…)`` with its variables escaped; looked up in
# the language current when the page is rendered.
_ENV.install_gettext_callables(  # type: ignore[attr-defined]  # a method the i18n extension adds to the Environment
    gettext=lambda message: _(message), ngettext=lambda s, p, n: i18n.ngettext(s, p, n), newstyle=True
)
# Every page carries this as a second wall behind escaping: no script, no frame, nothing fetched
# from anywhere; only the inline styles the templates use, and data: images.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_ENV.globals["csp"] = markupsafe.Markup(CSP)  # our constant: its quotes stay quotes


def feedback_link(student_id: str, assignment: str) -> str:
    """A relative link from report.html to a student's page: each id is one percent-encoded path
    segment, so no id (``javascript:…``, ``../``, ``?``, ``#``) can become a scheme or leave OUT."""
    return "/".join([STUDENTS_FOLDER, urllib.parse.quote(student_id, safe=""), urllib.parse.quote(assignment, safe=""), "feedback.html"])


def error_kind(error_type: str) -> str:
    """A failed cell's error type as the page names it."""
    return {TIMEOUT: _("超时"), CRASHED: _("进程退出")}.get(error_type, error_type)


def cell_explanation(cell: dict) -> str:
    """For a cell whose import failed, what grading has installed (everything defined after the
    import is missing, and the tests only say so); "" otherwise: other causes are explained once,
    where the tests they break are."""
    from attnkit.boundary.explain import explain

    if cell.get("error_type") not in ("ModuleNotFoundError", "ImportError"):
        return ""
    return explain(str(cell.get("error_type") or ""), str(cell.get("message") or ""), str(cell.get("text") or ""))


_ENV.globals["error_kind"] = error_kind
_ENV.globals["cell_explanation"] = cell_explanation


def late_notice(results: ResultsJson) -> dict[str, Any] | None:
    """The lateness a page and the console show, from one of two sources. The gradebook's
    (``gradebook.lateness``: nbgrader's rule, its penalty and the total ``nbgrader export``
    reports) wins whenever the course gave nbgrader a due date, late or not: it is what the
    totals use. Without one, the LMS's own flag (``lms.json``'s ``late``, Canvas's ``_LATE_``)
    is shown, with no penalty: the LMS applies its own late policy in its gradebook."""
    late = results.get("late") or {}
    if late.get("duedate"):
        return {"source": "gradebook", **late} if late.get("penalty") or late.get("seconds_late") else None
    if results.get("lms_late"):
        return {"source": "lms", **results["lms_late"]}
    return None


_ENV.globals["late_notice"] = late_notice


def heat(value: float | None) -> str:
    """A background colour for a weight in [0, 1]."""
    if value is None or value != value:
        return "#eeeeee"
    level = max(0.0, min(1.0, float(value)))
    return f"rgba(37, 99, 235, {0.08 + 0.8 * level:.3f})"


def _weights_differ(panel: dict[str, Any]) -> bool:
    student, expected = panel.get("student"), panel["expected"]
    if student is None:
        return True
    return any(abs(s - e) > 1e-4 for srow, erow in zip(student, expected, strict=True) for s, e in zip(srow, erow, strict=True))


def causes(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct runtime errors behind the failed tests, in page order: each is shown once,
    expanded ("从这里开始"), and the tests it made fail are folded under it. Marks each test
    with ``cause`` (1-based) and ``repeat`` (not the first test of its cause)."""
    found: dict[str, dict[str, Any]] = {}
    # The functions some failed test grades: a function that passes all its own tests is not where
    # a caller's mistake starts, even when the exception surfaces on its line (issue 53).
    failing = {name for test in tests if test.get("status") != "passed" for name in test.get("functions") or []}
    for test in tests:
        error = test.get("error") or {}
        key = error.get("key")
        if test.get("status") == "passed" or not key:
            continue
        cause = found.get(key)
        if cause is None:
            called, surfaced = str(error.get("called") or ""), str(error.get("function") or "")
            starts_in = called if called and surfaced not in failing and called in failing else ""
            cause = found[key] = {**error, "starts_in": starts_in, "number": len(found) + 1, "tests": []}
        test["cause"] = cause["number"]
        test["repeat"] = bool(cause["tests"])
        cause["tests"].append(test["name"])
    return list(found.values())


def concept_charges(tests: list[dict[str, Any]], part_title: str) -> list[dict[str, Any]]:
    """A part's lost points by the concept each test states (issue 41's charge per concept), in
    the order the tests come: each charge names one concept (a test that states none is charged
    to its part's title)."""
    charged: dict[str, float] = {}
    for test in tests:
        lost = round(float(test["max_score"]) - float(test["score"]), 4)
        if lost > 0:
            concept = str(test.get("concept") or part_title)
            charged[concept] = round(charged.get(concept, 0.0) + lost, 4)
    return [{"concept": concept, "points": points} for concept, points in charged.items()]


def feedback_html(results: Mapping[str, Any], assignment: Assignment) -> str:
    results = {**results, "tests": [dict(test) for test in results["tests"]]}  # marked below, not the caller's
    order = list(assignment.parts) + ["other"]
    ordered = [t for grade_id in order for t in results["tests"] if (t.get("grade_id") or "other") == grade_id]
    error_causes = causes(ordered)
    parts = []
    for grade_id in order:
        tests = [t for t in results["tests"] if (t["grade_id"] or "other") == grade_id]
        if tests:
            title = assignment.part_title(grade_id)
            parts.append({"id": grade_id, "title": title, "tests": tests, "charges": concept_charges(tests, title), **results["parts"].get(grade_id, {})})
    # Each diagnosis's parts (titles, in page order): its one box at the top names what it cost.
    diagnosis_parts: dict[str, list[str]] = {}
    for part in parts:
        for test in part["tests"]:
            for id_ in test.get("diagnoses") or []:
                titles = diagnosis_parts.setdefault(id_, [])
                if part["title"] not in titles:
                    titles.append(part["title"])
    evidence = results.get("evidence") or {}
    show_heatmaps = any(_weights_differ(panel) for panel in evidence.get("panels", []))
    return _ENV.get_template("feedback.html.j2").render(
        r=results,
        title=assignment.page_title,
        parts=parts,
        catalogue=assignment.mistakes,
        evidence=evidence,
        show_heatmaps=show_heatmaps,
        heat=heat,
        causes=error_causes,
        diagnosis_parts={id_: i18n.join(titles) for id_, titles in diagnosis_parts.items()},
        html_lang=i18n.html_lang(),
    )


def report_html(
    all_results: list[ResultsJson],
    suites: dict[str, Assignment],
    seconds: float,
    skipped: list[dict[str, str]] | None = None,
    isolation: str = "",
) -> str:
    present = {r["assignment"] for r in all_results}
    shown = [suite for suite in suites.values() if suite.name in present] or list(suites.values())
    catalogue = {mistake: info for suite in shown for mistake, info in suite.mistakes.items()}
    scores = [r["score"] for r in all_results]
    bins = [0] * 10
    for score, maximum in ((r["score"], r["max_score"] or 100) for r in all_results):
        bins[min(9, int(10 * score / maximum))] += 1
    tests: dict[tuple[str, str], dict[str, Any]] = {}  # by (assignment, test name)
    for r in all_results:
        for t in r["tests"]:
            entry = tests.setdefault(
                (r["assignment"], t["name"]), {"name": t["name"], "assignment": r["assignment"], "grade_id": t["grade_id"], "passed": 0, "total": 0}
            )
            entry["total"] += 1
            entry["passed"] += t["status"] == "passed"
    diagnoses = Counter(d for r in all_results for d in r["diagnoses"])
    broken = [r for r in all_results if not r.get("not_graded") and (r["problems"] or any(c.get("error_type") in (TIMEOUT, CRASHED) for c in r["cells"]))]
    return _ENV.get_template("report.html.j2").render(
        results=sorted(all_results, key=lambda r: (r["student_id"], r["assignment"])),
        title=" · ".join(suite.page_title for suite in shown),
        several=len(shown) > 1,
        count=len(all_results),
        isolation=isolation,
        mean=sum(scores) / len(scores) if scores else 0.0,
        bins=bins,
        top=max(bins) or 1,
        tests=sorted(tests.values(), key=lambda t: t["passed"] / t["total"]),
        diagnoses=diagnoses.most_common(),
        catalogue=catalogue,
        broken=broken,
        not_graded=[r for r in all_results if r.get("not_graded")],
        # The late columns, when a gradebook was used (results carry "late", see gradebook.lateness)
        # or an LMS flagged a submission late (results carry "lms_late"; which is shown: late_notice).
        late=any(r.get("late") or r.get("lms_late") for r in all_results),
        skipped=skipped or [],
        link=feedback_link,
        seconds=seconds,
        html_lang=i18n.html_lang(),
    )
