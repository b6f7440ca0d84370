"""``attnkit grade``'s pipeline: a class from its submissions folder to OUT (results.json and the
page of each submission as it is graded, then grades.csv, report.html, the LMS's zips) and, with a
gradebook, into nbgrader's gradebook (ARCHITECTURE.md, "One submission, from file to
grades.csv"). The command line parses; this runs; ``check`` calls it for one notebook."""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit import i18n
from attnkit.boundary.policy import hidden_paths
from attnkit.constants import AUTOGRADER_ROOT, GraderError
from attnkit.course.settings import KitSettings
from attnkit.i18n import _
from attnkit.pipeline.class_record import gradebook_lateness, record_class, report_lms_feedback, set_fact

if TYPE_CHECKING:
    from attnkit.assignment.folder import Assignment
    from attnkit.intake.jobs import Intake
    from attnkit.records import ResultsJson, SubmissionRecord


@dataclass
class GradeOptions:
    """What a grade run is asked to do (``attnkit grade``'s options)."""

    submitted: Path  # DIR/<student_id>/<assignment>/<notebook>.ipynb
    out: Path
    autograder: Path = AUTOGRADER_ROOT
    assignment: str | None = None  # only this assignment
    jobs: int | None = None  # workers (None: one per CPU)
    force: bool = False  # regrade unchanged submissions too
    shard: tuple[int, int] | None = None  # only slice i/n
    gradebook: Path | None = None  # also record into this nbgrader gradebook
    quiet: bool = False
    verbose: bool = False
    no_isolation: bool = False  # the notebooks are trusted: unisolated where the OS gives no sandbox
    secured: Path | None = None  # the course ``secure_gradebook_course`` checked: a gradebook made here is kept private
    settings: dict[str, Any] = field(default_factory=dict)  # the declared settings given on the command line (``command_line_values``)


def grade(options: GradeOptions) -> int:
    """Grade the class in ``options.submitted`` into ``options.out`` (and the gradebook, the LMS): 0 when
    every submission was graded, 1 when some were not or were skipped, 2 when an assignment's own
    code is broken (GraderError when nothing can be graded)."""
    started = time.perf_counter()
    import torch

    from attnkit.assignment.folder import discover, solutions_beside
    from attnkit.pipeline.console import LogProgress, console, grading_progress, print_graded, print_grade_end
    from attnkit.engine.fan_out import grade_jobs, shard_of
    from attnkit.files import DurableBatch
    from attnkit.intake.jobs import find_jobs
    from attnkit.driver.seed import take as take_seed
    from attnkit.report.shard_set import begin_shard, finish_shard
    from attnkit.report.store import is_current, read_results, repair_outputs, write_class_outputs, write_record, write_results

    # Workers are forked from here: never let this process start an OpenMP thread pool.
    torch.set_num_threads(1)
    secured = options.secured
    unloadable: list[tuple[Path, str]] = []  # assignment folders whose manifest cannot be read
    suites = discover(options.autograder, unloadable)
    intake = find_jobs(options.submitted, suites, options.assignment)
    if not intake.jobs and not intake.skipped and not unloadable:
        layout = i18n.join(_("<学号>/{assignment}/{notebook}").format(assignment=suite.name, notebook=suite.notebook) for suite in suites.values())
        raise GraderError(_("提交文件夹 {folder} 里没有任何学生文件夹（应为 {layout}），没有可评分的提交").format(folder=options.submitted, layout=layout))
    if options.shard is not None and options.gradebook is not None:
        # Shards run at once, and SQLite takes one writer: the merge records the whole class once.
        raise GraderError(
            _("--shard 与 --gradebook 不能同时使用：分片同时运行，成绩册只能有一个写入者。请在合并时记入：attnkit merge … --gradebook {gradebook}").format(
                gradebook=options.gradebook
            )
        )
    broken = set_aside_broken_assignments(intake, suites, unloadable)
    jobs = shard_of(intake.jobs, options.shard)
    skipped = [item.to_dict() for item in intake.skipped]
    todo = [job for job in jobs if options.force or not is_current(options.out, job)]
    # The course's settings where there is a course (its gradebook's folder), under the command line's.
    from attnkit.course.gradebook import course_root

    course = course_root(options.gradebook) if options.gradebook is not None else None
    limits = KitSettings.load(course, options.settings).limits.limits(trusted=options.no_isolation)
    workers = options.jobs or len(os.sched_getaffinity(0))
    options.out.mkdir(parents=True, exist_ok=True)
    begin_shard(options.out, options.shard, intake.jobs, jobs, suites, options.submitted, options.assignment, skipped)
    repair_outputs(options.out, suites)
    # Every fact from beside a submission is known before its record is written, so each
    # results.json and feedback.html is written once: the LMS's late flag (read at intake, in the
    # job) and, with a gradebook, nbgrader's lateness (its due dates read once, now).
    keys = [(job.student_id, job.assignment) for job in jobs]
    late_of = gradebook_lateness(options.gradebook, options.submitted, keys) if options.gradebook is not None else None
    job_of = {job.key: job for job in jobs}

    def add_facts(results: ResultsJson) -> bool:
        job = job_of.get(f"{results['student_id']}/{results['assignment']}")
        changed = set_fact(results, "lms_late", job.lms_late if job is not None else None)
        if late_of is not None:
            changed = set_fact(results, "late", late_of.of(results)) or changed
        return changed

    if not options.quiet:
        console.print(
            _("{total} 份提交；{unchanged} 份未变化，跳过；{todo} 份需要评分（{workers} 个进程）").format(
                total=len(jobs), unchanged=len(jobs) - len(todo), todo=len(todo), workers=workers
            )
        )
    # What is here now (besides the imports, frozen already: the suites, the class's jobs) lives
    # until the end: out of the collector's view, so that the collections a class's records
    # trigger here do not walk it each time.
    gc.collect()
    gc.freeze()
    written: dict[str, ResultsJson] = {}
    log_progress = LogProgress(len(todo), options.quiet)  # a batch log's periodic lines (no terminal, no bar)
    # The records' files are made durable a batch at a time (one sync of OUT's file system per
    # batch, not an fsync per file), each on disk within about half a second of its grading;
    # leaving the block commits what is pending, however it ends.
    with grading_progress(options.quiet) as progress, DurableBatch() as batch:
        task = progress.add_task("grade", total=len(todo))

        def on_record(record: SubmissionRecord) -> None:
            results = write_record(options.out, record, suites, add_facts, batch)
            written[f"{results['student_id']}/{results['assignment']}"] = results
            if options.verbose:
                print_graded(progress, results)
            progress.advance(task)
            progress.refresh()
            log_progress.advance()

        # The suites and the source notebooks they take points from (model answers), wherever they lie.
        gradebook = [options.gradebook] if options.gradebook else []
        hide = hidden_paths(options.submitted, options.out, options.autograder, solutions_beside(options.autograder), *gradebook)
        grade_jobs(todo, options.autograder, workers, limits, hide, on_record, seed=take_seed(), every_turn=batch.commit_if_due)
    if not options.quiet:  # what follows the bar can take a minute under load: say what it is
        console.print(_("评分完毕；正在写出 grades.csv、report.html 与每名学生的反馈页面（{out}）…").format(out=options.out), markup=False, soft_wrap=True)
    # The class: what this run wrote (in memory) and, unchanged since an earlier run, what is on
    # disk; an unchanged record is written again only if a fact beside it changed since (a
    # re-collect's late flag, a due date moved in the gradebook).
    all_results: list[ResultsJson] = []
    for job in jobs:
        results = written.get(job.key) or read_results(options.out, job)
        if results is None:
            continue
        if job.key not in written and results["assignment"] in suites and add_facts(results):
            write_results(options.out, results, suites)
        all_results.append(results)
    not_graded = [r for r in all_results if r.get("not_graded")]
    totals = None
    if options.gradebook is not None:
        totals = record_class(options.gradebook, options.submitted, options.out, all_results, suites, options.quiet)
        if secured is not None:  # a gradebook this run made is the grader's, as secure makes it
            from attnkit.course.secure import GRADEBOOK_SUFFIXES, keep_private

            keep_private(secured, [options.gradebook.with_name(options.gradebook.name + suffix) for suffix in GRADEBOOK_SUFFIXES])
    write_class_outputs(options.out, all_results, suites, time.perf_counter() - started, skipped, totals)
    if options.shard is None:  # a shard holds part of the class: `attnkit lms-feedback` after the merge
        if not options.quiet and next(options.submitted.glob("*/*/lms.json"), None) is not None:  # placed by `attnkit collect`
            console.print(_("正在写出学习平台的批量反馈压缩包…"), markup=False, soft_wrap=True)
        report_lms_feedback(options.out, options.submitted, all_results, options.quiet)
    from attnkit.intake.lms_collect import read_roster  # the names an LMS gave, beside the ids

    print_grade_end(options.out, all_results, skipped, options.quiet, time.perf_counter() - started, read_roster(options.submitted))
    finish_shard(options.out, options.shard)
    # A shard that graded all it owns exits 0: what intake skipped is the whole class's news, told
    # once by the merge (an exit 1 from every shard would fail a Slurm array or an Indexed Job).
    incomplete = bool(not_graded or (skipped and options.shard is None))
    if incomplete:
        console.print(
            _("{not_graded} 份提交未能评分，{skipped} 项被跳过（见 report.html）").format(not_graded=len(not_graded), skipped=len(skipped)), markup=False
        )
    if broken:  # the grader's own code: said again last, where the TA looks
        for line in broken:
            print(line, file=sys.stderr)
        return 2
    return 1 if incomplete else 0


def secure_gradebook_course(gradebook: Path | None, out: Path, insecure_course: bool) -> Path | None:
    """``attnkit grade --gradebook`` into a course's own gradebook (its folder is the course: the
    one ``course.gradebook.course_root`` finds): refused while another user can read the course's
    hidden parts (``course.secure``), unless ``--insecure-course``. The course root when checked."""
    if gradebook is None:
        return None
    from attnkit.course.secure import is_course, refuse_if_exposed

    root = gradebook.resolve().parent
    if not is_course(root):
        return None
    refuse_if_exposed(root, "attnkit grade", insecure_course)
    if insecure_course:
        return None
    if out.is_relative_to(root) and not out.exists():
        from attnkit.course.secure import keep_private

        out.mkdir(parents=True, mode=0o700)  # an OUT inside a secured course stays the grader's
        keep_private(root, [out])
    return root


def set_aside_broken_assignments(intake: Intake, suites: dict[str, Assignment], unloadable: list[tuple[Path, str]]) -> list[str]:
    """Before any submission is graded: each assignment of ``intake`` whose own code does not
    compile or import (``engine.preflight``), and each folder whose manifest cannot be read, is not
    graded: its jobs leave ``intake``, it is listed in ``intake.skipped`` with its cause, and the
    lines returned say so (the run then exits 2). Where nothing is left to grade: GraderError."""
    from attnkit.engine.preflight import check
    from attnkit.intake.jobs import Skipped

    problems = check([suites[name] for name in sorted({job.assignment for job in intake.jobs})])
    lines = [
        _("作业 {assignment} 的隐藏测试无法收集：{reason}").format(assignment=p.assignment, reason=p.where())
        if p.in_suite
        else _("作业 {assignment} 的评分代码有误，未评分：{problem}").format(assignment=p.assignment, problem=p.where())
        for p in problems
    ]
    lines += [_("作业文件夹 {folder} 的清单无法读取，未评分：{problem}").format(folder=folder, problem=problem) for folder, problem in unloadable]
    if not lines:
        return []
    failed = {p.assignment for p in problems}
    intake.jobs = [job for job in intake.jobs if job.assignment not in failed]
    if not intake.jobs:  # nothing sound to grade: the run stops here, with every cause
        raise GraderError("\n".join(lines))
    for name in sorted(failed):
        first = next(p for p in problems if p.assignment == name)
        intake.skipped.append(Skipped(name, _("评分代码有误，本作业未评分：{problem}").format(problem=first.where())))
    for folder, problem in unloadable:
        intake.skipped.append(Skipped(folder.name, _("清单无法读取，本作业未评分：{problem}").format(problem=problem)))
    return lines
