"""``attnkit grade | check | collect | merge``: the command line (README, "Commands")."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

# The imports below (torch above all) make some 200,000 objects and next to no garbage: the
# collections they would trigger walk an ever larger heap for nothing, a quarter of a second of
# every command's start. Once they are in, they are frozen out of the collector's view for good.
_COLLECTING = gc.isenabled()
gc.disable()
# numpy's OpenBLAS starts a thread per CPU when it is imported; this process does no linear algebra
# and forks its workers, which must not inherit a half-copied thread pool (an idle pool also spins).
# Set, not defaulted: a TA's OPENBLAS_NUM_THREADS=8 would otherwise leave threads alive at the fork
# (tests/test_fork_threads.py).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
if __name__ == "__main__":  # ``python -m attnkit.cli``; the ``attnkit`` script starts it in attnkit.launch
    from attnkit import seed

    seed.start_for(sys.argv[1:])

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from attnkit import __version__
from attnkit.assignment import Assignment, discover, solutions_beside
from attnkit.constants import AUTOGRADER_ROOT, PROJECT_ROOT, STUDENTS_FOLDER, GraderError
from attnkit import i18n
from attnkit.i18n import _, ngettext
from attnkit.records import ResultsJson, SubmissionRecord
from attnkit.engine import grade_jobs, shard_of
from attnkit.intake import find_jobs
from attnkit.feedback import causes, late_notice
from attnkit.policy import DEFAULT_MEMORY_MB, Limits
from attnkit.seed import take as take_seed
from attnkit.store import (
    check_shard_set,
    collect,
    gather_shards,
    is_current,
    isolation_line,
    output_lock,
    record_shard,
    repair_outputs,
    rewrite_results,
    write_class_outputs,
    write_grades,
    write_record,
    write_report,
)

if TYPE_CHECKING:
    from attnkit.lms_feedback import Packed

gc.freeze()
if _COLLECTING:
    gc.enable()

console = Console(stderr=True)


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
    grade.add_argument("--cell-timeout", type=float, default=10.0, help="seconds per notebook cell")
    grade.add_argument("--call-timeout", type=float, default=10.0, help="seconds per call of a student function")
    grade.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB, help="memory per sandbox beyond the libraries")
    grade.add_argument("--quiet", action="store_true", help="no progress bar or table")
    grade.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the notebooks without an isolated sandbox where the OS gives none: only for notebooks you trust",
    )

    check = commands.add_parser("check", parents=[language], help="grade one notebook (self-study) and print the feedback")
    check.add_argument("notebook", type=Path)
    check.add_argument("--out", type=Path, default=None, help="keep the outputs here (default: a temporary folder)")
    check.add_argument("--assignment", default=None, help="the assignment (default: the one whose notebook has this file's name)")

    intake = commands.add_parser(
        "collect", parents=[language], help="turn a Canvas, Moodle or Blackboard download (folder or zip) into submitted/<id>/<assignment>/"
    )
    intake.add_argument("sources", type=Path, nargs="+", help="the downloaded folder(s) or zip file(s)")
    intake.add_argument("--submitted", type=Path, required=True, help="where to put DIR/<student_id>/<assignment>/<notebook>.ipynb")
    intake.add_argument("--assignment", default=None, help="the assignment these files belong to (default: the only one)")
    intake.add_argument(
        "--lms", choices=["canvas", "moodle", "blackboard"], default=None, help="the LMS that made the download (default: detected once for the whole download)"
    )
    intake.add_argument("--timezone", default=None, help="the LMS's time zone for times a zip or Blackboard gives without one (IANA name; default UTC)")

    feedback = commands.add_parser(
        "lms-feedback", parents=[language], help="the LMS bulk-feedback zips of a graded class that `attnkit collect` placed (grade writes them too)"
    )
    feedback.add_argument("--submitted", type=Path, required=True, help="the submitted/ folder `attnkit collect` filled")
    feedback.add_argument("--out", type=Path, required=True, help="the graded output (of `attnkit grade` or `attnkit merge`)")

    merge = commands.add_parser("merge", parents=[language], help="combine shard outputs into one grades.csv and report")
    merge.add_argument("shards", type=Path, nargs="+", help="the --out folders of the shards")
    merge.add_argument("--out", type=Path, required=True)
    return parser


def hidden_paths(*extra: Path) -> list[str]:
    """Folders never to be part of a sandbox's view, even where they lie on ``sys.path`` (the
    project's ``src/`` for an editable install): the whole project (grader, tests, solutions,
    gradebook), the submissions and the outputs. The sandbox's root is an allowlist of Python's
    own folders; a virtualenv kept inside the project still contributes its site-packages."""
    return [str(PROJECT_ROOT)] + [str(path.resolve()) for path in extra]


def late_cells(r: ResultsJson) -> tuple[str, str]:
    """The console's late penalty and total after it, as report.html shows them (``late_notice``
    says which source is shown: the gradebook's figures, or the LMS's flag without a penalty)."""
    found, notice = r.get("late"), late_notice(r)
    total = f"{found['total']:g}/{found['max']:g}" if found else "-"
    if notice and notice["source"] == "lms":
        return _("{lms} 标记迟交").format(lms=notice["lms"]), total
    return (f"{found['penalty']:g}", total) if found else ("-", "-")


def summary_table(all_results: list[ResultsJson]) -> Table:
    table = Table(title=_("评分结果"))
    late = any(r.get("late") or r.get("lms_late") for r in all_results)
    for column in (_("学生"), _("分数"), *((_("迟交扣分"), _("扣分后总分")) if late else ()), _("诊断"), _("问题")):
        table.add_column(column)
    for r in sorted(all_results, key=lambda r: r["student_id"]):
        score = _("未评分") if r.get("not_graded") else f"{r['score']:g}/{r['max_score']:g}"
        # Text, not str: an id or a problem written like rich markup ("[red]") is shown as written.
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    r["student_id"],
                    score,
                    *(late_cells(r) if late else ()),
                    ", ".join(r["diagnoses"]) or "-",
                    _("；").join(r["problems"])[:60] or "-",
                )
            )
        )
    return table


# The two class-level steps below join another source's lateness to the records (wiring, not
# storage: gradebook.py reaches nbgrader_course.py, which reads the store; store.py imports neither).
def add_lateness(out: Path, graded: list[ResultsJson], database: Path, suites: dict[str, Assignment]) -> None:
    """Each graded submission's late penalty and total after it, as the gradebook has them
    (``nbgrader export``'s figures), into its results.json and feedback.html."""
    from attnkit.gradebook_totals import lateness

    db_url = f"sqlite:///{database.resolve()}"
    for results in graded:
        found = lateness(db_url, results["student_id"], results["assignment"])
        if found is None or results.get("late") == found:
            continue
        results["late"] = found
        rewrite_results(out, results, suites)


def add_lms_lateness(out: Path, all_results: list[ResultsJson], submitted: Path, suites: dict[str, Assignment]) -> None:
    """The LMS's late flag of each submission ``attnkit collect`` placed (its lms.json), as
    ``lms_late`` into results.json and feedback.html; read every run, so a re-collect that
    changed only the flag is shown without regrading. Which lateness is shown: ``late_notice``."""
    from attnkit.lms_feedback import lms_lateness, lms_record

    for results in all_results:
        found = lms_lateness(lms_record(submitted, results["student_id"], results["assignment"]))
        if results.get("lms_late") == found:
            continue
        if found is None:
            results.pop("lms_late", None)
        else:
            results["lms_late"] = found
        if results["assignment"] in suites:
            rewrite_results(out, results, suites)


def report_lms_feedback(out: Path, submitted: Path, all_results: list[ResultsJson], quiet: bool) -> Packed:
    """Write the LMS bulk-feedback zips (``lms_feedback``) and say where they are and who is not in them."""
    from attnkit.lms_feedback import write_lms_feedback

    packed = write_lms_feedback(out, submitted, all_results)
    if not quiet:
        for path, count in sorted(packed.archives.items()):
            console.print(
                _("学习平台的批量反馈：{path}（{count} 名学生；上传方法见 README 的“Feedback back to Canvas or Moodle”）").format(path=path, count=count),
                soft_wrap=True,
                markup=False,
            )
    for where, reason in packed.left_out:
        console.print(_("未放入学习平台的反馈压缩包：{where}：{reason}").format(where=where, reason=reason), soft_wrap=True, markup=False)
    for lms, students in sorted(packed.by_hand.items()):
        console.print(
            _("{lms} 没有批量上传反馈文件的功能：{count} 名学生的 feedback.html 请在它的评分页面逐一附上（在 {folder} 里）").format(
                lms=lms, count=len(students), folder=out / STUDENTS_FOLDER
            ),
            soft_wrap=True,
            markup=False,
        )
    return packed


def command_grade(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import torch

    # Workers are forked from here: never let this process start an OpenMP thread pool.
    torch.set_num_threads(1)
    suites = discover(args.autograder)
    intake = find_jobs(args.submitted, suites, args.assignment)
    if not intake.jobs and not intake.skipped:
        layout = i18n.join(_("<学号>/{assignment}/{notebook}").format(assignment=suite.name, notebook=suite.notebook) for suite in suites.values())
        raise GraderError(_("提交文件夹 {folder} 里没有任何学生文件夹（应为 {layout}），没有可评分的提交").format(folder=args.submitted, layout=layout))
    jobs = shard_of(intake.jobs, args.shard)
    skipped = [item.to_dict() for item in intake.skipped]
    todo = [job for job in jobs if args.force or not is_current(args.out, job)]
    limits = Limits(cell_seconds=args.cell_timeout, call_seconds=args.call_timeout, memory_mb=args.memory_mb, trusted=args.no_isolation)
    workers = args.jobs or len(os.sched_getaffinity(0))
    args.out.mkdir(parents=True, exist_ok=True)
    record_shard(args.out, args.shard)
    repair_outputs(args.out, suites)
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
    # No refresh thread: workers are forked from this process, which must not run other threads.
    with Progress(
        TextColumn(_("评分")), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=args.quiet, auto_refresh=False
    ) as progress:
        task = progress.add_task("grade", total=len(todo))

        def on_record(record: SubmissionRecord) -> None:
            results = write_record(args.out, record, suites)
            if args.verbose:
                progress.console.print(
                    _("{student}/{assignment}：{score}/{max_score}（{seconds} 秒）").format(
                        student=results["student_id"],
                        assignment=results["assignment"],
                        score=f"{results['score']:g}",
                        max_score=f"{results['max_score']:g}",
                        seconds=f"{results['seconds']:.2f}",
                    ),
                    markup=False,
                )
            progress.advance(task)
            progress.refresh()

        # The suites and the source notebooks they take points from (model answers), wherever they lie.
        hide = hidden_paths(args.submitted, args.out, args.autograder, solutions_beside(args.autograder), *([args.gradebook] if args.gradebook else []))
        grade_jobs(todo, args.autograder, workers, limits, hide, on_record, seed=take_seed())
    all_results = collect(args.out, jobs)
    add_lms_lateness(args.out, all_results, args.submitted, suites)
    write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped)
    not_graded = [r for r in all_results if r.get("not_graded")]
    if args.gradebook is not None:
        from attnkit.gradebook import record_grades
        from attnkit.gradebook_totals import class_totals

        # Only what was really graded goes into the gradebook: no "not graded" zeros.
        graded = [r for r in all_results if not r.get("not_graded")]
        for warning in record_grades(args.gradebook, graded, args.submitted):
            console.print(warning, markup=False)
        # grades.csv again, now with the manual points and totals `nbgrader export` reports.
        totals = class_totals(args.gradebook, [(r["student_id"], r["assignment"]) for r in graded])
        write_grades(args.out, all_results, suites, totals)
        add_lateness(args.out, graded, args.gradebook, suites)
        write_report(args.out, all_results, suites, time.perf_counter() - started, skipped)
        if not args.quiet:
            manual = sum(1 for t in totals.values() if t["manual"] is not None)
            console.print(
                _("已记入 {gradebook}（{count} 份提交，其中 {manual} 份已有人工评分）；grades.csv 的 total 列与 nbgrader export 的 score 一致").format(
                    gradebook=args.gradebook, count=len(totals), manual=manual
                ),
                soft_wrap=True,
                markup=False,
            )
    if args.shard is None:  # a shard holds part of the class: `attnkit lms-feedback` after the merge
        report_lms_feedback(args.out, args.submitted, all_results, args.quiet)
    # Always printed, --quiet or not: these need the TA's attention.
    for r in not_graded:
        console.print(
            _("未评分：{student}/{assignment}：{reason}").format(student=r["student_id"], assignment=r["assignment"], reason=r["not_graded"]), markup=False
        )
    for item in skipped:
        console.print(_("已跳过：{where}：{reason}").format(where=item["where"], reason=item["reason"]), markup=False)
    if not args.quiet:
        console.print(summary_table(all_results))
        console.print(isolation_line(all_results))
        console.print(
            _("已写入 {csv} 与 {report}（{seconds} 秒）").format(
                csv=args.out / "grades.csv", report=args.out / "report.html", seconds=f"{time.perf_counter() - started:.1f}"
            ),
            markup=False,
        )
    if not_graded or skipped:
        console.print(
            _("{not_graded} 份提交未能评分，{skipped} 项被跳过（见 report.html）").format(not_graded=len(not_graded), skipped=len(skipped)), markup=False
        )
        return 1
    return 0


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
        if results.get("isolation") != "isolated":
            print(_("注意：本机无法建立隔离的沙箱，你的笔记本以你自己的权限运行（只检查自己信任的笔记本）。"))
        for grade_id in assignment.parts:
            scores: Mapping[str, Any] = results["parts"].get(grade_id, {})
            print(f"{assignment.part_title(grade_id):<24} {scores.get('score', 0):g}/{scores.get('max_score', 0):g}")
        tests = [dict(test) for test in results["tests"]]
        for cause in causes(tests):  # each runtime error once, before the tests it broke
            print(
                ngettext(
                    "从这里开始 {number}：你的 {function} 抛出了 {type}（{count} 项检查因此未通过）",
                    "从这里开始 {number}：你的 {function} 抛出了 {type}（{count} 项检查因此未通过）",
                    len(cause["tests"]),
                ).format(number=cause["number"], function=cause["function"], type=cause["type"], count=len(cause["tests"]))
            )
            if cause.get("text"):
                print("  " + _("出错的一行：{place}：{text}").format(place=cause["place"], text=cause["text"]))
            if cause.get("explanation"):
                print(f"  {cause['explanation']}")
        for test in tests:
            if test.get("cause"):
                print("  ✘ " + _("{name}：见「从这里开始 {number}」").format(name=test["name"], number=test["cause"]))
            elif test["status"] != "passed":
                print("  ✘ " + _("{name}：{output}").format(name=test["name"], output=test["output"]))
        for mistake in results["diagnoses"]:
            info = assignment.mistakes.get(mistake, {})
            print(_("诊断 {mistake}（{section}）：{explanation}").format(mistake=mistake, section=info.get("section", ""), explanation=info.get("text", "")))
        print(_("总分 {score}/{max_score}").format(score=f"{results['score']:g}", max_score=f"{results['max_score']:g}"))
        if args.out:
            print(_("反馈页面：{path}").format(path=out / STUDENTS_FOLDER / "me" / assignment.name / "feedback.html"))
    return code


def command_merge(args: argparse.Namespace) -> int:
    check_shard_set(args.shards)
    all_results, skipped = gather_shards(args.shards, args.out)
    write_class_outputs(args.out, all_results, discover(), 0.0, skipped)
    console.print(_("合并了 {count} 份结果，写入 {out}").format(count=len(all_results), out=args.out), markup=False)
    return 1 if skipped or any(r.get("not_graded") for r in all_results) else 0


def command_lms_feedback(args: argparse.Namespace) -> int:
    """The bulk-feedback zips of an output folder (after `merge`, or again after a TA's change)."""
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
    from attnkit.lms import collect as collect_download
    from attnkit.lms import timezone

    assignment = assignment_for(discover(), args.assignment, "")
    try:
        zone = timezone(args.timezone)
    except ValueError as error:
        raise GraderError(str(error)) from None
    found = collect_download(args.sources, args.submitted, assignment.name, [Path(assignment.notebook).stem], args.lms, zone)
    students = sorted({c.student_id for c in found.placed.values()})
    console.print(
        _("已放入 {notebooks} 份笔记本（{students} 名学生）到 {folder}").format(notebooks=len(found.placed), students=len(students), folder=args.submitted),
        markup=False,
    )
    for candidate in sorted(found.placed.values(), key=lambda c: c.origin):
        for note in candidate.notes:
            console.print("  " + _("{student}：{note}").format(student=candidate.student_id, note=note), soft_wrap=True, markup=False)
    for candidate in sorted(found.superseded, key=lambda c: c.origin):
        console.print("  " + _("较早的重交，未采用：{origin}").format(origin=candidate.origin), soft_wrap=True, markup=False)
    for origin, reason in sorted(found.unplaced):
        # soft_wrap: a path is never broken across lines, so it can be copied or grepped.
        console.print("  " + escape(_("无法放置：{origin}：{reason}").format(origin=origin, reason=reason)), soft_wrap=True, style="red")
    if found.unplaced:
        console.print(
            ngettext(
                "{count} 个文件无法放置（见上）；请手工处理后再评分。", "{count} 个文件无法放置（见上）；请手工处理后再评分。", len(found.unplaced)
            ).format(count=len(found.unplaced)),
            style="red",
            markup=False,
        )
        return 1
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
    i18n.set_language(getattr(args, "lang", None) or args.top_lang)
    leave_working_directory(args)
    command = {"grade": command_grade, "check": command_check, "merge": command_merge, "collect": command_collect, "lms-feedback": command_lms_feedback}[
        args.command
    ]
    try:
        if args.command in ("grade", "merge", "lms-feedback"):
            with output_lock(args.out):
                return command(args)
        return command(args)
    except GraderError as error:
        if args.verbose:
            console.print(traceback.format_exc(), markup=False, highlight=False)
        console.print(escape(_("无法评分：{reason}").format(reason=error)), soft_wrap=True, style="red")
        return 2
    except KeyboardInterrupt:
        # Every graded submission was written as it arrived; the next run skips those.
        console.print("\n" + _("已中断。已评完的提交都已保存；再次运行同一条命令即可从中断处继续（只评剩下的）。"), markup=False)
        return 130


def run() -> None:
    """Console entry point: ``main`` then a prompt exit. Everything is written and flushed by
    then; an orderly interpreter exit with torch loaded costs about a second per command."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
