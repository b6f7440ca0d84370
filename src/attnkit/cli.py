"""``attnkit grade | check | collect | merge``: the command line (README, "Commands")."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

# numpy's OpenBLAS starts a thread per CPU when it is imported; this process does no linear algebra
# and forks its workers, which must not inherit a half-copied thread pool (an idle pool also spins).
# Set, not defaulted: a TA's OPENBLAS_NUM_THREADS=8 would otherwise leave threads alive at the fork
# (tests/sandbox/test_fork_threads.py).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
if __name__ == "__main__":  # ``python -m attnkit.cli``; the ``attnkit`` script starts it in attnkit.launch
    from attnkit.driver import seed

    seed.start_for(sys.argv[1:])

# Only what the parser needs: ``attnkit --help`` and ``attnkit collect --help`` import no torch,
# nbformat or rich. The commands' modules come in ``import_commands``, once the arguments parsed.
from attnkit import __version__
from attnkit.constants import AUTOGRADER_ROOT, PROJECT_ROOT, STUDENTS_FOLDER, GraderError
from attnkit import cpu_account, i18n
from attnkit.i18n import _
from attnkit.course.settings import AttnkitCourse, AttnkitLimits, AttnkitServe, KitSettings, add_flags, command_line_values

if TYPE_CHECKING:
    from attnkit.assignment.folder import Assignment
    from attnkit.course.lateness import GradebookLateness
    from attnkit.intake.jobs import Intake
    from attnkit.course.lms_upload import Packed
    from attnkit.records import ResultsJson, SubmissionRecord
    from attnkit.report.shard_set import Plan


# The modules each command needs: grade and check grade (torch above all, through the engine's
# workers); the others only read and write files (no torch).
COMMAND_MODULES = {
    "grade": ("assignment.folder", "console", "engine.fan_out", "report.pages", "intake.jobs", "driver.seed", "report.store"),
    "check": ("assignment.folder", "console", "engine.fan_out", "report.pages", "intake.jobs", "driver.seed", "report.store"),
    "merge": ("assignment.folder", "console", "report.store", "report.shard_set"),
    "lms-feedback": ("assignment.folder", "console", "course.lms_upload", "report.store"),
    "collect": ("assignment.folder", "console", "intake.lms_collect"),
    "serve": ("service.serve",),
    "serve --hub": ("service.settings",),  # the hub side starts first; then "serve"'s
    "serve --status": ("service.status",),  # the database only: no engine, no torch
    "submit": ("service.http_submit",),
    "course": ("course.secure", "course.student_config"),
    "lms-sync": ("lms.passback",),  # no torch: the gradebook and HTTP
    "config": ("course.settings",),
}


def import_commands(command: str) -> None:
    """The modules ``command`` needs (``COMMAND_MODULES``). Their imports make some 200,000
    objects (torch's, for grade) and next to no garbage: the collections they would trigger walk
    an ever larger heap for nothing, a quarter of a second of every command's start. Once they
    are in, they are frozen out of the collector's view for good."""
    collecting = gc.isenabled()
    gc.disable()
    for name in COMMAND_MODULES[command]:
        importlib.import_module(f"attnkit.{name}")
    gc.freeze()
    if collecting:
        gc.enable()


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError("--shard takes i/n, e.g. 1/4") from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError("--shard i/n needs 1 <= i <= n")
    return index, count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnkit", description="Grade a class's notebooks with hidden test suites, in sandboxes.")
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    parser.add_argument("--verbose", action="store_true", help="more detail: each graded submission, and the traceback of a failure")
    language = argparse.ArgumentParser(add_help=False)
    language.add_argument(
        "--lang",
        choices=i18n.LANGUAGES,
        default=None,
        help=f"language of the console output, report.html and feedback pages (default: ${i18n.ENV_VARIABLE}, else zh)",
    )
    parser.add_argument("--lang", choices=i18n.LANGUAGES, default=None, dest="top_lang", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("grade", parents=[language], help="grade a class in nbgrader's layout")
    grade.add_argument("--submitted", type=Path, required=True, help="DIR/<student_id>/<assignment>/<notebook>.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="where grades.csv, report.html and per-student results go")
    grade.add_argument("--jobs", type=int, default=None, help="parallel workers (default: number of cores)")
    grade.add_argument("--assignment", default=None, help="only this assignment folder")
    grade.add_argument("--force", action="store_true", help="regrade even unchanged submissions")
    grade.add_argument("--shard", type=parse_shard, default=None, help="grade only slice i/n (merge later)")
    grade.add_argument("--gradebook", type=Path, default=None, help="also record scores in this nbgrader gradebook.db")
    grade.add_argument("--autograder", type=Path, default=AUTOGRADER_ROOT, help=argparse.SUPPRESS)
    add_flags(grade, AttnkitLimits)
    grade.add_argument("--quiet", action="store_true", help="no progress bar or table")
    grade.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the notebooks without an isolated sandbox where the OS gives none: only for notebooks you trust",
    )
    grade.add_argument("--insecure-course", action="store_true", help=INSECURE_HELP)

    check = commands.add_parser("check", parents=[language], help="grade one notebook (self-study) and print the feedback")
    check.add_argument("notebook", type=Path)
    check.add_argument("--out", type=Path, default=None, help="keep the outputs here (default: a temporary folder)")
    check.add_argument("--assignment", default=None, help="the assignment (default: the one whose notebook has this file's name)")

    intake = commands.add_parser(
        "collect", parents=[language], help="turn a Canvas, Moodle or Blackboard download (folder or zip) into submitted/<id>/<assignment>/"
    )
    intake.add_argument("sources", type=Path, nargs="+", help="the downloaded folder(s) or zip file(s)")
    intake.add_argument("--submitted", type=Path, required=True, help="where to put DIR/<student_id>/<assignment>/<notebook>.ipynb")
    intake.add_argument("--assignment", default=None, help="the assignment these files belong to (default: each file's, by its notebook's name)")
    intake.add_argument(
        "--lms", choices=["canvas", "moodle", "blackboard"], default=None, help="the LMS that made the download (default: detected once for the whole download)"
    )
    intake.add_argument("--timezone", default=None, help="the LMS's time zone for times a zip or Blackboard gives without one (IANA name; default UTC)")

    feedback = commands.add_parser(
        "lms-feedback", parents=[language], help="the LMS bulk-feedback zips of a graded class that `attnkit collect` placed (grade writes them too)"
    )
    feedback.add_argument("--submitted", type=Path, required=True, help="the submitted/ folder `attnkit collect` filled")
    feedback.add_argument("--out", type=Path, required=True, help="the graded output (of `attnkit grade` or `attnkit merge`)")

    serve = commands.add_parser("serve", parents=[language], help="grade each nbgrader submit as it arrives (docs/service.md); run from the course root")
    serve.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    serve.add_argument("--jobs", type=int, default=None, help="warm workers (default: number of cores)")
    serve.add_argument("--gradebook", type=Path, default=None, help="the course's gradebook.db (default: COURSE/gradebook.db)")
    serve.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on 127.0.0.1:PORT")
    serve.add_argument("--status", action="store_true", help="print the queue, what is in flight and the last hour, then exit")
    serve.add_argument("--replica-id", default="", help="this replica's name in a shared queue (default: host name and pid)")
    serve.add_argument(
        "--hub",
        action="store_true",
        help="also serve students' pages and submit over HTTP as a JupyterHub-managed service (docs/hub.md; the hub's JUPYTERHUB_* variables say where)",
    )
    serve.add_argument("--autograder", type=Path, default=AUTOGRADER_ROOT, help=argparse.SUPPRESS)
    add_flags(serve, AttnkitLimits, AttnkitServe)
    serve.add_argument("--insecure-course", action="store_true", help=INSECURE_HELP)

    course = commands.add_parser("course", parents=[language], help="the course folder's own care (attnkit course secure)")
    course_commands = course.add_subparsers(dest="course_command", required=True)
    secure = course_commands.add_parser(
        "secure",
        parents=[language],
        help="make the course's hidden parts (answers, hidden suites, gradebook, submissions, the service's folder) readable by you and the TA group only",
    )
    secure.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    add_flags(secure, AttnkitCourse)
    student_config = course_commands.add_parser(
        "student-config",
        parents=[language],
        help="the lines of the students' nbgrader_config.py (course id, exchange), printed or written into their environment (docs/student-environment.md)",
    )
    student_config.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    student_config.add_argument(
        "--into", type=Path, default=None, help="the students' virtualenv: write VENV/etc/jupyter/nbgrader_config.py there (default: print the lines)"
    )
    student_config.add_argument("--course-id", default=None, help="the course id, without reading a course (an image built away from it)")
    student_config.add_argument(
        "--exchange", default=None, help="the exchange's root (default: the course's Exchange.root, else nbgrader's /srv/nbgrader/exchange)"
    )

    configuration = commands.add_parser("config", parents=[language], help="print every setting of the kit, its value and where it came from")
    configuration.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    add_flags(configuration, AttnkitLimits, AttnkitServe, AttnkitCourse)

    submit = commands.add_parser(
        "submit", parents=[language], help="submit a notebook to the course's attnkit service in JupyterHub, from your own server (docs/hub.md)"
    )
    submit.add_argument("notebook", type=Path, help="the notebook to submit")
    submit.add_argument("--assignment", required=True, help="the assignment it is for (e.g. ch19-attention)")
    submit.add_argument("--url", default=None, help="the service's address (default: $ATTNKIT_SERVICE_URL, e.g. https://hub.example.edu/services/attnkit/)")

    sync = commands.add_parser(
        "lms-sync",
        parents=[language],
        help="post the gradebook's scores to the course's LMS (LTI 1.3 Assignment and Grade Services; docs/lms.md); run from the course root",
    )
    sync.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py with c.AttnkitLti; default: here)")
    sync.add_argument("--gradebook", type=Path, default=None, help="the course's gradebook.db (default: as attnkit serve finds it)")
    sync.add_argument("--dry-run", action="store_true", help="print, per student, what the LMS holds and what would be posted; post nothing")

    merge = commands.add_parser("merge", parents=[language], help="combine shard outputs into one grades.csv and report")
    merge.add_argument("shards", type=Path, nargs="+", help="the --out folders of the shards")
    merge.add_argument("--out", type=Path, required=True)
    merge.add_argument("--gradebook", type=Path, default=None, help="record the merged class in this nbgrader gradebook.db (once, nothing regraded)")
    merge.add_argument(
        "--submitted", type=Path, default=None, help="the class's submissions folder (default: the shards' own), read again to check the set against it"
    )
    return parser


INSECURE_HELP = (
    "start although other users can read the course's hidden parts (a single-user machine only; "
    "c.AttnkitCourse.single_user = True says the same); otherwise run `attnkit course secure` first"
)


def hidden_paths(*extra: Path) -> list[str]:
    """Folders never to be part of a sandbox's view, even where they lie on ``sys.path`` (the
    project's ``src/`` for an editable install): the whole project (grader, tests, solutions,
    gradebook), the submissions and the outputs. The sandbox's root is an allowlist of Python's
    own folders; a virtualenv kept inside the project still contributes its site-packages."""
    return [str(PROJECT_ROOT)] + [str(path.resolve()) for path in extra]


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


def report_lms_feedback(out: Path, submitted: Path, all_results: list[ResultsJson], quiet: bool) -> Packed:
    """Write the LMS bulk-feedback zips (``lms_feedback``) and say where they are and who is not in them."""
    from attnkit.course.lms_upload import write_lms_feedback

    from attnkit.console import print_lms_feedback

    packed = write_lms_feedback(out, submitted, all_results)
    print_lms_feedback(out, packed, quiet)
    return packed


def command_grade(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import torch

    from attnkit.assignment.folder import discover, solutions_beside
    from attnkit.console import LogProgress, console, grading_progress, print_graded, print_grade_end
    from attnkit.engine.fan_out import grade_jobs, shard_of
    from attnkit.files import DurableBatch
    from attnkit.intake.jobs import find_jobs
    from attnkit.driver.seed import take as take_seed
    from attnkit.report.shard_set import begin_shard, finish_shard
    from attnkit.report.store import is_current, read_results, repair_outputs, write_class_outputs, write_record, write_results

    # Workers are forked from here: never let this process start an OpenMP thread pool.
    torch.set_num_threads(1)
    secured: Path | None = getattr(args, "secured", None)  # main's secure_gradebook_course
    unloadable: list[tuple[Path, str]] = []  # assignment folders whose manifest cannot be read
    suites = discover(args.autograder, unloadable)
    intake = find_jobs(args.submitted, suites, args.assignment)
    if not intake.jobs and not intake.skipped and not unloadable:
        layout = i18n.join(_("<学号>/{assignment}/{notebook}").format(assignment=suite.name, notebook=suite.notebook) for suite in suites.values())
        raise GraderError(_("提交文件夹 {folder} 里没有任何学生文件夹（应为 {layout}），没有可评分的提交").format(folder=args.submitted, layout=layout))
    if args.shard is not None and args.gradebook is not None:
        # Shards run at once, and SQLite takes one writer: the merge records the whole class once.
        raise GraderError(
            _("--shard 与 --gradebook 不能同时使用：分片同时运行，成绩册只能有一个写入者。请在合并时记入：attnkit merge … --gradebook {gradebook}").format(
                gradebook=args.gradebook
            )
        )
    broken = set_aside_broken_assignments(intake, suites, unloadable)
    jobs = shard_of(intake.jobs, args.shard)
    skipped = [item.to_dict() for item in intake.skipped]
    todo = [job for job in jobs if args.force or not is_current(args.out, job)]
    # The course's settings where there is a course (its gradebook's folder), under the command line's.
    from attnkit.course.gradebook import course_root

    course = course_root(args.gradebook) if args.gradebook is not None else None
    limits = KitSettings.load(course, command_line_values(args)).limits.limits(trusted=args.no_isolation)
    workers = args.jobs or len(os.sched_getaffinity(0))
    args.out.mkdir(parents=True, exist_ok=True)
    begin_shard(args.out, args.shard, intake.jobs, jobs, suites, args.submitted, args.assignment, skipped)
    repair_outputs(args.out, suites)
    # Every fact from beside a submission is known before its record is written, so each
    # results.json and feedback.html is written once: the LMS's late flag (read at intake, in the
    # job) and, with a gradebook, nbgrader's lateness (its due dates read once, now).
    keys = [(job.student_id, job.assignment) for job in jobs]
    late_of = gradebook_lateness(args.gradebook, args.submitted, keys) if args.gradebook is not None else None
    job_of = {job.key: job for job in jobs}

    def add_facts(results: ResultsJson) -> bool:
        job = job_of.get(f"{results['student_id']}/{results['assignment']}")
        changed = set_fact(results, "lms_late", job.lms_late if job is not None else None)
        if late_of is not None:
            changed = set_fact(results, "late", late_of.of(results)) or changed
        return changed

    if not args.quiet:
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
    log_progress = LogProgress(len(todo), args.quiet)  # a batch log's periodic lines (no terminal, no bar)
    # The records' files are made durable a batch at a time (one sync of OUT's file system per
    # batch, not an fsync per file), each on disk within about half a second of its grading;
    # leaving the block commits what is pending, however it ends.
    with grading_progress(args.quiet) as progress, DurableBatch() as batch:
        task = progress.add_task("grade", total=len(todo))

        def on_record(record: SubmissionRecord) -> None:
            results = write_record(args.out, record, suites, add_facts, batch)
            written[f"{results['student_id']}/{results['assignment']}"] = results
            if args.verbose:
                print_graded(progress, results)
            progress.advance(task)
            progress.refresh()
            log_progress.advance()

        # The suites and the source notebooks they take points from (model answers), wherever they lie.
        hide = hidden_paths(args.submitted, args.out, args.autograder, solutions_beside(args.autograder), *([args.gradebook] if args.gradebook else []))
        grade_jobs(todo, args.autograder, workers, limits, hide, on_record, seed=take_seed(), every_turn=batch.commit_if_due)
    if not args.quiet:  # what follows the bar can take a minute under load: say what it is
        console.print(_("评分完毕；正在写出 grades.csv、report.html 与每名学生的反馈页面（{out}）…").format(out=args.out), markup=False, soft_wrap=True)
    # The class: what this run wrote (in memory) and, unchanged since an earlier run, what is on
    # disk; an unchanged record is written again only if a fact beside it changed since (a
    # re-collect's late flag, a due date moved in the gradebook).
    all_results: list[ResultsJson] = []
    for job in jobs:
        results = written.get(job.key) or read_results(args.out, job)
        if results is None:
            continue
        if job.key not in written and results["assignment"] in suites and add_facts(results):
            write_results(args.out, results, suites)
        all_results.append(results)
    not_graded = [r for r in all_results if r.get("not_graded")]
    totals = None
    if args.gradebook is not None:
        totals = record_class(args.gradebook, args.submitted, args.out, all_results, suites, args.quiet)
        if secured is not None:  # a gradebook this run made is the grader's, as secure makes it
            from attnkit.course.secure import GRADEBOOK_SUFFIXES, keep_private

            keep_private(secured, [args.gradebook.with_name(args.gradebook.name + suffix) for suffix in GRADEBOOK_SUFFIXES])
    write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped, totals)
    if args.shard is None:  # a shard holds part of the class: `attnkit lms-feedback` after the merge
        if not args.quiet and next(args.submitted.glob("*/*/lms.json"), None) is not None:  # placed by `attnkit collect`
            console.print(_("正在写出学习平台的批量反馈压缩包…"), markup=False, soft_wrap=True)
        report_lms_feedback(args.out, args.submitted, all_results, args.quiet)
    from attnkit.intake.lms_collect import read_roster  # the names an LMS gave, beside the ids

    print_grade_end(args.out, all_results, skipped, args.quiet, time.perf_counter() - started, read_roster(args.submitted))
    finish_shard(args.out, args.shard)
    # A shard that graded all it owns exits 0: what intake skipped is the whole class's news, told
    # once by the merge (an exit 1 from every shard would fail a Slurm array or an Indexed Job).
    incomplete = bool(not_graded or (skipped and args.shard is None))
    if incomplete:
        console.print(
            _("{not_graded} 份提交未能评分，{skipped} 项被跳过（见 report.html）").format(not_graded=len(not_graded), skipped=len(skipped)), markup=False
        )
    if broken:  # the grader's own code: said again last, where the TA looks
        for line in broken:
            print(line, file=sys.stderr)
        return 2
    return 1 if incomplete else 0


def secure_gradebook_course(args: argparse.Namespace) -> Path | None:
    """``attnkit grade --gradebook`` into a course's own gradebook (its folder is the course: the
    one ``course.gradebook.course_root`` finds): refused while another user can read the course's
    hidden parts (``course.secure``), unless ``--insecure-course``. The course root when checked."""
    if args.gradebook is None:
        return None
    from attnkit.course.secure import is_course, refuse_if_exposed

    root = args.gradebook.resolve().parent
    if not is_course(root):
        return None
    refuse_if_exposed(root, "attnkit grade", args.insecure_course)
    if args.insecure_course:
        return None
    if args.out.is_relative_to(root) and not args.out.exists():
        from attnkit.course.secure import keep_private

        args.out.mkdir(parents=True, mode=0o700)  # an OUT inside a secured course stays the grader's
        keep_private(root, [args.out])
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
    from attnkit.console import console
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
    from attnkit.console import console
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


def command_lms_sync(args: argparse.Namespace) -> int:
    """``attnkit lms-sync [--dry-run]`` (attnkit.lms.passback.sync)."""
    from attnkit.lms.passback import sync
    from attnkit.service.settings import gradebook_of

    return sync(args.course, gradebook_of(args.course, args.gradebook), args.dry_run)


def assignment_for(suites: dict[str, Assignment], name: str | None, notebook: str) -> Assignment:
    """``--assignment`` if given; else the assignment whose notebook is called ``notebook``, or
    the only one there is."""
    if name is not None:
        if name not in suites:
            raise GraderError(_("未知作业 {name}（已有：{known}）").format(name=name, known=i18n.join(suites)))
        return suites[name]
    matching = [suite for suite in suites.values() if suite.notebook == notebook] or (list(suites.values()) if len(suites) == 1 else [])
    if len(matching) != 1:
        raise GraderError(_("无法确定 {notebook} 属于哪项作业：请用 --assignment 指定（{known}）").format(notebook=notebook, known=i18n.join(suites)))
    return matching[0]


def command_check(args: argparse.Namespace) -> int:
    from attnkit.assignment.folder import discover
    from attnkit.console import print_check
    from attnkit.report.store import collect

    if not args.notebook.is_file():
        raise GraderError(_("找不到笔记本：{path}").format(path=args.notebook))
    assignment = assignment_for(discover(), args.assignment, args.notebook.name)
    with tempfile.TemporaryDirectory(prefix="attnkit-check-") as scratch:
        submitted = Path(scratch) / "submitted" / "me" / assignment.name
        submitted.mkdir(parents=True)
        shutil.copy(args.notebook, submitted / args.notebook.name)
        out = args.out or Path(scratch) / "out"
        # One's own notebook: it may run unisolated where the OS gives no sandbox, and says so.
        grade_args = build_parser().parse_args(
            [
                "grade",
                "--submitted",
                str(submitted.parents[1]),
                "--out",
                str(out),
                "--jobs",
                "1",
                "--quiet",
                "--force",
                "--no-isolation",
                "--lang",
                i18n.language(),
            ]
        )
        code = command_grade(grade_args)
        results = collect(out)[0]
        print_check(assignment, results, out / STUDENTS_FOLDER / "me" / assignment.name / "feedback.html" if args.out else None)
    return code


def command_merge(args: argparse.Namespace) -> int:
    from attnkit.assignment.folder import discover
    from attnkit.console import console, print_merge_plan
    from attnkit.report.shard_set import check_against_class, forget_unmerged, plan_merge
    from attnkit.report.store import check_shard_set, gather_shards, write_class_outputs

    started = time.perf_counter()
    suites = discover()
    plan = plan_merge(args.shards, getattr(args, "lang", None) or args.top_lang)
    submitted = args.submitted
    if plan is None:  # whole runs (two sections of a class, say): no shard set to prove
        check_shard_set(args.shards)
        all_results, skipped = gather_shards(args.shards, args.out)
    else:
        # The set's language is the merge's: its report speaks as its pages do.
        i18n.set_language(plan.language)
        submitted = submitted or (Path(plan.submitted) if plan.submitted else None)
        if submitted is not None and submitted.is_dir():
            from attnkit.intake.jobs import find_jobs

            check_against_class(plan, find_jobs(submitted, suites, plan.takes[0].shard.manifest.get("assignment")).jobs)
        else:
            console.print(_("未找到提交文件夹 {folder}：没有再对照它检查这组分片（可用 --submitted 指定）").format(folder=submitted), markup=False)
        # With a gradebook, nbgrader's lateness is known before each record lands in the merge's
        # folder (written once, as a grade run writes it).
        late_of = None
        if args.gradebook is not None:
            keys = [(student, assignment) for take in plan.takes for student, _slash, assignment in (key.rpartition("/") for key in take.keys)]
            late_of = gradebook_lateness(args.gradebook, submitted if submitted is not None and submitted.is_dir() else None, keys)
        all_results, skipped = gather_plan(plan, args.out, late_of, suites)
        print_merge_plan(plan)
    for key in forget_unmerged(args.out, [f"{r['student_id']}/{r['assignment']}" for r in all_results]):
        console.print(_("{key} 已不在合并的班级中：删去了上次合并留在 {out} 的结果").format(key=key, out=args.out), markup=False)
    if args.gradebook is not None:
        record_merged(args, all_results, suites, skipped, submitted, started)
    else:
        write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped)
    console.print(_("合并了 {count} 份结果，写入 {out}").format(count=len(all_results), out=args.out), markup=False)
    if skipped:
        console.print(_("{skipped} 项被跳过（见 report.html）").format(skipped=len(skipped)), markup=False)
    return 1 if skipped or any(r.get("not_graded") for r in all_results) else 0


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


def record_merged(
    args: argparse.Namespace,
    all_results: list[ResultsJson],
    suites: dict[str, Assignment],
    skipped: list[dict[str, str]],
    submitted: Path | None,
    started: float,
) -> None:
    """The merged class into the gradebook once, then grades.csv and the report in their full
    form (manual points, late penalty, totals), as ``attnkit grade --gradebook`` writes them."""
    from attnkit.report.store import write_class_outputs

    folder = submitted if submitted is not None and submitted.is_dir() else None
    totals = record_class(args.gradebook, folder, args.out, all_results, suites, quiet=False)
    write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped, totals)


def command_lms_feedback(args: argparse.Namespace) -> int:
    """The bulk-feedback zips of an output folder (after `merge`, or again after a TA's change)."""
    from attnkit.assignment.folder import discover
    from attnkit.console import console
    from attnkit.report.store import collect

    if not args.submitted.is_dir():
        raise GraderError(_("找不到提交文件夹：{folder}").format(folder=args.submitted))
    suites = discover()
    all_results = [r for r in collect(args.out) if r.get("assignment") in suites]
    if not all_results:
        raise GraderError(_("{out} 里没有评分结果（先运行 attnkit grade）").format(out=args.out))
    add_lms_lateness(args.out, all_results, args.submitted, suites)
    packed = report_lms_feedback(args.out, args.submitted, all_results, quiet=False)
    if not packed.archives:
        console.print(_("没有写出任何压缩包：这些提交不是 attnkit collect 从 Canvas 或 Moodle 收取的"), markup=False)
    return 1 if packed.left_out else 0


def command_collect(args: argparse.Namespace) -> int:
    """Place an LMS download; exit 1 if any file could not be placed (each one is listed)."""
    from attnkit.assignment.folder import discover
    from attnkit.console import print_collected
    from attnkit.intake.lms_collect import collect as collect_download
    from attnkit.intake.lms_collect import timezone

    suites = discover()
    # Each file's assignment is the one whose notebook it is named after (--assignment: this one only).
    chosen = [assignment_for(suites, args.assignment, "")] if args.assignment else list(suites.values())
    try:
        zone = timezone(args.timezone)
    except ValueError as error:
        raise GraderError(str(error)) from None
    found = collect_download(args.sources, args.submitted, {suite.name: [Path(suite.notebook).stem] for suite in chosen}, args.lms, zone)
    print_collected(found, args.submitted)
    if found.unplaced:
        return 1
    return 0


def command_submit(args: argparse.Namespace) -> int:
    """POST a notebook to the hub service with the user's own token ($JUPYTERHUB_API_TOKEN, which
    JupyterHub gives every single-user server): the service takes the user from the hub, not from here."""
    import urllib.error

    from attnkit.service.http_submit import Refused, post_notebook, read_notebook

    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    url = args.url or os.environ.get("ATTNKIT_SERVICE_URL", "")
    if not token or not url:
        raise GraderError(_("需要 JUPYTERHUB_API_TOKEN（JupyterHub 里的服务器自带）和服务地址（--url 或 ATTNKIT_SERVICE_URL）"))
    try:
        answer = post_notebook(url, token, args.assignment, read_notebook(args.notebook))
    except Refused as refused:
        raise GraderError(_("无法提交：{reason}").format(reason=refused)) from None
    except urllib.error.HTTPError as error:
        reason = error.read(4096).decode("utf-8", "replace").strip()
        raise GraderError(_("评分服务拒绝了这次提交（HTTP {code}）：{reason}").format(code=error.code, reason=reason)) from None
    except (OSError, ValueError) as error:
        raise GraderError(_("无法提交：{reason}").format(reason=error)) from None
    print(json.dumps(answer, ensure_ascii=False))
    return 0


def command_serve(args: argparse.Namespace) -> int:
    """The on-submit service (attnkit.service.serve); ``--status`` only reads its database."""
    from attnkit.service import settings
    from attnkit.service.status import status

    hub_process = None
    if args.hub and not args.status and (args.course / "nbgrader_config.py").is_file():
        # First thing, before the course's config (a second), torch and the suites (seconds):
        # JupyterHub serves nothing, its login page included, until its managed service answers
        # (issue 49). The hub side reads the course itself once it answers; a second service on
        # the course stops at the course's lock below, its hub side at the hub side's own.
        from attnkit.service import hub_process as hub_side
        from attnkit.service.http_submit import hub_missing

        if hub_missing():
            raise GraderError(hub_missing())
        listening = hub_side.listen()
        given_queue = getattr(args, "AttnkitServe.queue_url") or ""  # the hub side reads the course's own once it answers
        hub_process = hub_side.start(args.course, args.autograder, settings.state_folder(args.course), "", given_queue, sys.stderr, listening)
        import_commands("serve")
    if args.status:
        # What would stop the service at its start said first, then the queue (read without the
        # configuration's queue_url when the configuration itself is what is broken).
        from attnkit.service.status import problems

        found = problems(args.course, args.autograder)
        try:
            queue_url = KitSettings.load(args.course, command_line_values(args)).serve.queue_url or None
        except GraderError:
            queue_url = getattr(args, "AttnkitServe.queue_url") or None
        for problem in found:
            print(_("无法启动：{problem}").format(problem=problem))
        print(status(args.course, queue_url))
        return 2 if found else 0
    kit_settings = KitSettings.load(args.course, command_line_values(args))
    queue_url = kit_settings.serve.queue_url or None
    from attnkit.course.secure import refuse_if_exposed

    refuse_if_exposed(args.course, "attnkit serve", args.insecure_course)  # before torch: a refusal says so at once
    import torch

    from attnkit.service import serve

    from attnkit.assignment.folder import solutions_beside
    from attnkit.driver.seed import take as take_seed

    torch.set_num_threads(1)  # workers are forked from here, as in grade
    course = settings.load_course(args.course)
    gradebook = settings.gradebook_of(args.course, args.gradebook)
    limits = kit_settings.limits.limits()
    hide = hidden_paths(args.course, course.exchange, args.autograder, solutions_beside(args.autograder))
    workers = args.jobs or len(os.sched_getaffinity(0))
    service = serve.Service(
        course,
        args.autograder,
        workers,
        limits,
        hide,
        gradebook,
        args.metrics_port,
        take_seed(),
        queue_url=queue_url,
        replica=args.replica_id,
        lease_seconds=kit_settings.serve.lease_seconds,
        metrics_host=kit_settings.serve.metrics_host,
        hub=args.hub,
        hub_process=hub_process,
    )
    return serve.serve(service)


def command_course(args: argparse.Namespace) -> int:
    """``attnkit course secure`` (attnkit.course.secure), ``attnkit course student-config`` (attnkit.course.student_config)."""
    if args.course_command == "student-config":
        from attnkit.course.student_config import command_student_config

        return command_student_config(args.course, args.into, args.course_id, args.exchange)
    from attnkit.course.secure import command_secure

    return command_secure(args.course, getattr(args, "AttnkitCourse.ta_group"))


def command_config(args: argparse.Namespace) -> int:
    """``attnkit config``: every setting, its value and where it came from (attnkit.course.settings)."""
    from attnkit.course.settings import print_settings

    print_settings(KitSettings.load(args.course if (args.course / "nbgrader_config.py").is_file() else None, command_line_values(args)))
    return 0


def leave_working_directory(args: argparse.Namespace) -> None:
    """The grader must not depend on the folder it was started in: a TA's shell may sit in one
    the grader's user cannot even enter (a checkout under a root-only ``mktemp -d``), where
    pytest, which goes back to its starting folder at the end of a session, would fail. The
    paths given are made absolute against it, then every command runs from ``/``."""
    for name, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, name, value.absolute())
        elif isinstance(value, list) and value and all(isinstance(item, Path) for item in value):
            setattr(args, name, [item.absolute() for item in value])
    try:
        os.chdir("/")
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import_commands(f"serve {'--status' if args.status else '--hub'}" if args.command == "serve" and (args.status or args.hub) else args.command)
    i18n.set_language(getattr(args, "lang", None) or args.top_lang)
    leave_working_directory(args)
    command = {
        "grade": command_grade,
        "check": command_check,
        "merge": command_merge,
        "collect": command_collect,
        "lms-feedback": command_lms_feedback,
        "serve": command_serve,
        "submit": command_submit,
        "course": command_course,
        "lms-sync": command_lms_sync,
        "config": command_config,
    }[args.command]
    from attnkit.console import console, print_error
    from attnkit.report.store import output_lock

    try:
        if args.command == "grade":  # before the output's lock makes OUT: a refused run makes nothing
            args.secured = secure_gradebook_course(args)
        if args.command in ("grade", "merge", "lms-feedback"):
            with output_lock(args.out):
                return command(args)
        return command(args)
    except GraderError as error:
        print_error(error, traceback.format_exc() if args.verbose else None, args.command)
        return 2
    except KeyboardInterrupt:
        # Every graded submission was written as it arrived; the next run skips those.
        console.print("\n" + _("已中断。已评完的提交都已保存；再次运行同一条命令即可从中断处继续（只评剩下的）。"), markup=False)
        return 130


def run() -> None:
    """Console entry point: ``main`` then a prompt exit. Everything is written and flushed by
    then; an orderly interpreter exit with torch loaded costs about a second per command."""
    code = main()
    cpu_account.own("parent")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
