"""A graded class into nbgrader's gradebook and the LMS, and the facts from beside a submission
(nbgrader's lateness, the LMS's late flag) into its record: shared by ``attnkit grade``,
``merge`` and ``lms-feedback``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.i18n import _

if TYPE_CHECKING:
    from attnkit.assignment.folder import Assignment
    from attnkit.course.lateness import GradebookLateness
    from attnkit.course.lms_upload import Packed
    from attnkit.records import ResultsJson
    from attnkit.report.shard_set import Plan


def set_fact(results: ResultsJson, key: str, value: Any) -> bool:
    """Put a fact from beside the submission (``late``, ``lms_late``) into ``results`` (None: none);
    True if that changed it."""
    if results.get(key) == value:
        return False
    if value is None:
        results.pop(key, None)  # type: ignore[misc]  # key is one of ResultsJson's NotRequired keys
    else:
        results[key] = value  # type: ignore[literal-required]  # as above
    return True


def add_lms_lateness(out: Path, all_results: list[ResultsJson], submitted: Path, suites: dict[str, Assignment]) -> None:
    """``attnkit lms-feedback`` after a re-collect: the LMS's late flag of each submission as its
    lms.json has it now, into results.json and feedback.html where it changed (``attnkit grade``
    reads it at intake, so a grade run writes each record once with it)."""
    from attnkit.intake.lms_record import lms_lateness, lms_record
    from attnkit.report.store import write_results

    for results in all_results:
        found = lms_lateness(lms_record(submitted, results["student_id"], results["assignment"]))
        if set_fact(results, "lms_late", found) and results["assignment"] in suites:
            write_results(out, results, suites)


def report_lms_feedback(out: Path, submitted: Path, all_results: list[ResultsJson], quiet: bool) -> Packed:
    """Write the LMS bulk-feedback zips (``lms_feedback``) and say where they are and who is not in them."""
    from attnkit.course.lms_upload import write_lms_feedback

    from attnkit.pipeline.console import print_lms_feedback

    packed = write_lms_feedback(out, submitted, all_results)
    print_lms_feedback(out, packed, quiet)
    return packed


def gradebook_lateness(database: Path, submitted: Path | None, keys: list[tuple[str, str]]) -> GradebookLateness:
    """The gradebook's assignments registered (before grading: a refusal stops the run before any
    work) and nbgrader's lateness of the class's submissions (student, assignment), ready for each
    record (without the submissions folder, no timestamps: as the gradebook records it then)."""
    from attnkit.course.gradebook import course_root, register_assignments
    from attnkit.course.lateness import GradebookLateness

    register_assignments(database, [assignment for _student, assignment in keys])
    return GradebookLateness.read(database, submitted, keys, course_root(database))


def record_class(
    database: Path, submitted: Path | None, out: Path, all_results: list[ResultsJson], suites: dict[str, Assignment], quiet: bool
) -> dict[tuple[str, str], dict[str, Any]]:
    """Record the graded submissions in the gradebook (no "not graded" zeros) and return the
    totals ``nbgrader export`` will report, for grades.csv. A record whose lateness the gradebook
    computed otherwise than ``course.lateness`` foresaw (a late-submission plugin that is not a
    function of the score and the time) is written again with the gradebook's: it is the truth."""
    from attnkit.pipeline.console import console
    from attnkit.course.gradebook import record_grades
    from attnkit.course.gradebook_totals import class_lateness, totals_of
    from attnkit.report.store import write_results

    graded = [r for r in all_results if not r.get("not_graded")]
    if not quiet:
        console.print(_("正在记入 nbgrader 的成绩库 {gradebook}…").format(gradebook=database), markup=False, soft_wrap=True)
    # (Registered before grading, or before the merge gathered: ``gradebook_lateness``.)
    for warning in record_grades(database, graded, submitted, registered=True):
        console.print(warning, markup=False)
    keys = [(r["student_id"], r["assignment"]) for r in graded]
    recorded = class_lateness(database, keys)
    totals = totals_of(recorded)
    for results in graded:
        if set_fact(results, "late", recorded.get((results["student_id"], results["assignment"]))):
            write_results(out, results, suites)
    post_to_lms(database, keys, quiet)
    if not quiet:
        manual = sum(1 for t in totals.values() if t["manual"] is not None)
        console.print(
            _("已记入 {gradebook}（{count} 份提交，其中 {manual} 份已有人工评分）；grades.csv 的 total 列与 nbgrader export 的 score 一致").format(
                gradebook=database, count=len(totals), manual=manual
            ),
            soft_wrap=True,
            markup=False,
        )
    return totals


def post_to_lms(database: Path, keys: list[tuple[str, str]], quiet: bool) -> None:
    """After the gradebook has them: the scores posted to the course's LMS when it has one
    (``lms.passback``; an LMS that does not answer leaves them queued for ``attnkit lms-sync``)."""
    from attnkit.pipeline.console import console
    from attnkit.course.gradebook import course_root
    from attnkit.lms.passback import after_gradebook

    outcome = after_gradebook(course_root(database), database, keys)
    if outcome is None:
        return
    lines = [_("已把 {posted} 份成绩发送到学习平台").format(posted=outcome.posted)] if not quiet else []
    if outcome.unmatched:
        lines.append(_("{count} 份成绩未发送：学习平台的名单里没有这些学生（attnkit lms-sync --dry-run 列出）").format(count=len(outcome.unmatched)))
    if outcome.refused:
        lines.append(_("{count} 份成绩被学习平台拒绝（attnkit lms-sync --dry-run 列出）").format(count=len(outcome.refused)))
    if outcome.waiting:
        lines.append(_("{count} 份成绩等待重试（平台无法访问：{cause}）；再次运行 attnkit lms-sync 即可").format(count=outcome.waiting, cause=outcome.cause))
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)


def gather_plan(
    plan: Plan, out: Path, late_of: GradebookLateness | None = None, suites: dict[str, Assignment] | None = None
) -> tuple[list[ResultsJson], list[dict[str, str]]]:
    """Each shard's own students' results.json and feedback.html, copied into ``out`` (with
    ``late_of``, a record gains nbgrader's lateness as it is written there)."""
    from attnkit.report.store import copy_results

    add_facts = None
    if late_of is not None:

        def add_facts(results: ResultsJson) -> bool:
            return set_fact(results, "late", late_of.of(results))

    all_results = [copy_results(take.shard.folder, out, key, add_facts, suites) for take in plan.takes for key in take.keys]
    return all_results, plan.skipped
