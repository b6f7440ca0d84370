"""``attnkit grade | check | merge``: the command line of design.md's contract."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from attnkit.engine import (
    ASSIGNMENT,
    DEFAULT_AUTOGRADER,
    PROJECT_ROOT,
    STUDENTS_FOLDER,
    GradingError,
    Job,
    atomic_write,
    find_jobs,
    grade_jobs,
    grader_digest,
    is_current,
    results_path,
    shard_of,
)
from attnkit.feedback import causes, feedback_html, load_catalogue, report_html
from attnkit.isolation import describe as describe_isolation
from attnkit.sandbox import Limits
from attnkit.scoring import MAX_FEEDBACK_BYTES, MAX_RESULTS_BYTES, PARTS, fit, results_json

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
    parser = argparse.ArgumentParser(prog="attnkit", description="Grade the attention chapter's notebooks in sandboxes.")
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("grade", help="grade a class in nbgrader's layout")
    grade.add_argument("--submitted", type=Path, required=True, help="DIR/<student_id>/<assignment>/<notebook>.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="where grades.csv, report.html and per-student results go")
    grade.add_argument("--jobs", type=int, default=None, help="parallel workers (default: number of cores)")
    grade.add_argument("--assignment", default=None, help="only this assignment folder")
    grade.add_argument("--force", action="store_true", help="regrade even unchanged submissions")
    grade.add_argument("--shard", type=parse_shard, default=None, help="grade only slice i/n (merge later)")
    grade.add_argument("--gradebook", type=Path, default=None, help="also record scores in this nbgrader gradebook.db")
    grade.add_argument("--autograder", type=Path, default=DEFAULT_AUTOGRADER, help=argparse.SUPPRESS)
    grade.add_argument("--cell-timeout", type=float, default=10.0, help="seconds per notebook cell")
    grade.add_argument("--call-timeout", type=float, default=10.0, help="seconds per call of a student function")
    grade.add_argument("--memory-mb", type=int, default=2048, help="memory per sandbox beyond the libraries")
    grade.add_argument("--quiet", action="store_true", help="no progress bar or table")
    grade.add_argument(
        "--no-isolation", action="store_true",
        help="run the notebooks without an isolated sandbox where the OS gives none: only for notebooks you trust",
    )

    check = commands.add_parser("check", help="grade one notebook (self-study) and print the feedback")
    check.add_argument("notebook", type=Path)
    check.add_argument("--out", type=Path, default=None, help="keep the outputs here (default: a temporary folder)")

    merge = commands.add_parser("merge", help="combine shard outputs into one grades.csv and report")
    merge.add_argument("shards", type=Path, nargs="+", help="the --out folders of the shards")
    merge.add_argument("--out", type=Path, required=True)
    return parser


def hidden_paths(*extra: Path) -> list[str]:
    """What a sandbox must not see: the whole project (grader, tests, solutions, gradebook), the
    submissions and the outputs. The sandbox keeps its Python trees (the venv) visible itself."""
    return [str(PROJECT_ROOT)] + [str(path.resolve()) for path in extra]


def write_record(out: Path, record: dict[str, Any], catalogue: dict) -> dict[str, Any]:
    results = results_json(record)
    folder = results_path(out, record).parent
    atomic_write(folder / "results.json", json.dumps(results, ensure_ascii=False, indent=1))
    atomic_write(folder / "feedback.html", bounded_feedback(results, catalogue))
    return results


def bounded_feedback(results: dict[str, Any], catalogue: dict) -> str:
    """The feedback page, under MAX_FEEDBACK_BYTES: escaping can make the page several times
    larger than results.json, so the texts are cut further (a copy) until it fits."""
    page = feedback_html(results, catalogue)
    budget = MAX_RESULTS_BYTES
    while len(page.encode()) > MAX_FEEDBACK_BYTES and budget > 1_000:
        budget //= 2
        page = feedback_html(fit(json.loads(json.dumps(results)), budget), catalogue)
    return page


def collect(out: Path, jobs: list[Job] | None = None) -> list[dict[str, Any]]:
    """Every results.json under ``out`` (or just those of ``jobs``)."""
    paths = [results_path(out, job) for job in jobs] if jobs is not None else sorted((out / STUDENTS_FOLDER).glob("*/*/results.json"))
    collected = []
    for path in paths:
        try:
            collected.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return collected


# OWASP, CSV injection: a cell starting with one of these is a formula to a spreadsheet; a
# leading single quote makes it text. Only text cells are escaped: our scores stay numbers.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_START) else value


def grades_csv(all_results: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student_id", "assignment", "score", "max_score", *PARTS])
    for r in sorted(all_results, key=lambda r: (r["student_id"], r["assignment"])):
        writer.writerow([csv_text(r["student_id"]), csv_text(r["assignment"]), f"{r['score']:g}", f"{r['max_score']:g}",
                         *(f"{r['parts'].get(part, {}).get('score', 0):g}" for part in PARTS)])
    return buffer.getvalue()


def isolation_line(all_results: list[dict[str, Any]]) -> str:
    return describe_isolation([r.get("sandbox", {}).get("isolation", []) for r in all_results])


def write_class_outputs(out: Path, all_results: list[dict[str, Any]], catalogue: dict, seconds: float, skipped: list[dict[str, str]] | None = None) -> None:
    skipped = skipped or []
    atomic_write(out / "skipped.json", json.dumps(skipped, ensure_ascii=False, indent=1))
    atomic_write(out / "grades.csv", grades_csv(all_results))
    atomic_write(out / "report.html", report_html(all_results, catalogue, seconds, skipped, isolation_line(all_results)))


def read_skipped(out: Path) -> list[dict[str, str]]:
    try:
        found = json.loads((out / "skipped.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def summary_table(all_results: list[dict[str, Any]]) -> Table:
    table = Table(title="评分结果")
    for column in ("学生", "分数", "诊断", "问题"):
        table.add_column(column)
    for r in sorted(all_results, key=lambda r: r["student_id"]):
        score = "未评分" if r.get("not_graded") else f"{r['score']:g}/{r['max_score']:g}"
        # Text, not str: an id or a problem written like rich markup ("[red]") is shown as written.
        table.add_row(*(Text(cell) for cell in (r["student_id"], score, ", ".join(r["diagnoses"]) or "-", "；".join(r["problems"])[:60] or "-")))
    return table


def command_grade(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import torch

    # Workers are forked from here: never let this process start an OpenMP thread pool.
    torch.set_num_threads(1)
    if not (args.autograder / "catalogue.py").is_file():
        raise GradingError(f"hidden test suite not found at {args.autograder}")
    digest = grader_digest(args.autograder)
    intake = find_jobs(args.submitted, args.assignment, digest)
    if not intake.jobs and not intake.skipped:
        raise GradingError(f"提交文件夹 {args.submitted} 里没有任何学生文件夹（应为 <学号>/{ASSIGNMENT}/attention.ipynb），没有可评分的提交")
    jobs = shard_of(intake.jobs, args.shard)
    skipped = [item.to_dict() for item in intake.skipped]
    todo = [job for job in jobs if args.force or not is_current(args.out, job)]
    catalogue = load_catalogue(args.autograder)
    limits = Limits(cell_seconds=args.cell_timeout, call_seconds=args.call_timeout, memory_mb=args.memory_mb, trusted=args.no_isolation)
    workers = args.jobs or len(os.sched_getaffinity(0))
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.quiet:
        console.print(f"{len(jobs)} 份提交；{len(jobs) - len(todo)} 份未变化，跳过；{len(todo)} 份需要评分（{workers} 个进程）")
    # No refresh thread: workers are forked from this process, which must not run other threads.
    with Progress(TextColumn("评分"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=args.quiet, auto_refresh=False) as progress:
        task = progress.add_task("grade", total=len(todo))

        def on_record(record: dict[str, Any]) -> None:
            write_record(args.out, record, catalogue)
            progress.advance(task)
            progress.refresh()

        hide = hidden_paths(args.submitted, args.out, args.autograder, *([args.gradebook] if args.gradebook else []))
        grade_jobs(todo, args.autograder, workers, limits, hide, on_record)
    all_results = collect(args.out, jobs)
    write_class_outputs(args.out, all_results, catalogue, time.perf_counter() - started, skipped)
    not_graded = [r for r in all_results if r.get("not_graded")]
    if args.gradebook is not None:
        from attnkit.gradebook import record_grades

        # Only what was really graded goes into the gradebook: no "not graded" zeros.
        warnings = record_grades(args.gradebook, [r for r in all_results if not r.get("not_graded")], args.submitted)
        for warning in warnings:
            console.print(warning, markup=False)
    # Always printed, --quiet or not: these need the TA's attention.
    for r in not_graded:
        console.print(f"未评分：{r['student_id']}/{r['assignment']}：{r['not_graded']}", markup=False)
    for item in skipped:
        console.print(f"已跳过：{item['where']}：{item['reason']}", markup=False)
    if not args.quiet:
        console.print(summary_table(all_results))
        console.print(isolation_line(all_results))
        console.print(f"已写入 {args.out / 'grades.csv'} 与 {args.out / 'report.html'}（{time.perf_counter() - started:.1f} 秒）")
    if not_graded or skipped:
        console.print(f"{len(not_graded)} 份提交未能评分，{len(skipped)} 项被跳过（见 report.html）", markup=False)
        return 1
    return 0


def command_check(args: argparse.Namespace) -> int:
    if not args.notebook.is_file():
        raise GradingError(f"no such notebook: {args.notebook}")
    with tempfile.TemporaryDirectory(prefix="attnkit-check-") as scratch:
        submitted = Path(scratch) / "submitted" / "me" / "ch19-attention"
        submitted.mkdir(parents=True)
        shutil.copy(args.notebook, submitted / args.notebook.name)
        out = args.out or Path(scratch) / "out"
        # One's own notebook: it may run unisolated where the OS gives no sandbox, and says so.
        grade_args = build_parser().parse_args(
            ["grade", "--submitted", str(submitted.parents[1]), "--out", str(out), "--jobs", "1", "--quiet", "--force", "--no-isolation"]
        )
        code = command_grade(grade_args)
        results = collect(out)[0]
        if results.get("isolation") != "isolated":
            print("注意：本机无法建立隔离的沙箱，你的笔记本以你自己的权限运行（只检查自己信任的笔记本）。")
        for part, title in PARTS.items():
            scores = results["parts"].get(part, {})
            print(f"{title:<24} {scores.get('score', 0):g}/{scores.get('max_score', 0):g}")
        tests = [dict(test) for test in results["tests"]]
        for cause in causes(tests):  # each runtime error once, before the tests it broke
            print(f"从这里开始 {cause['number']}：你的 {cause['function']} 抛出了 {cause['type']}（{len(cause['tests'])} 项检查因此未通过）")
            if cause.get("text"):
                print(f"  出错的一行：{cause['place']}：{cause['text']}")
            if cause.get("explanation"):
                print(f"  {cause['explanation']}")
        for test in tests:
            if test.get("cause"):
                print(f"  ✘ {test['name']}：见「从这里开始 {test['cause']}」")
            elif test["status"] != "passed":
                print(f"  ✘ {test['name']}：{test['output']}")
        catalogue = load_catalogue(DEFAULT_AUTOGRADER)
        for mistake in results["diagnoses"]:
            info = catalogue.get(mistake, {})
            print(f"诊断 {mistake}（{info.get('section', '')}）：{info.get('zh', '')}")
        print(f"总分 {results['score']:g}/{results['max_score']:g}")
        if args.out:
            print(f"反馈页面：{out / STUDENTS_FOLDER / 'me' / ASSIGNMENT / 'feedback.html'}")
    return code


def command_merge(args: argparse.Namespace) -> int:
    all_results: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: list[dict[str, str]] = []
    for shard in args.shards:
        for item in read_skipped(shard):
            if item not in skipped:
                skipped.append(item)
        for results in collect(shard):
            key = (results["student_id"], results["assignment"])
            all_results[key] = results
            source = results_path(shard, results).parent
            target = results_path(args.out, results).parent
            if source.resolve() != target.resolve():
                target.mkdir(parents=True, exist_ok=True)
                for name in ("results.json", "feedback.html"):
                    if (source / name).is_file():
                        atomic_write(target / name, (source / name).read_text(encoding="utf-8"))
    write_class_outputs(args.out, list(all_results.values()), load_catalogue(DEFAULT_AUTOGRADER), 0.0, skipped)
    console.print(f"合并了 {len(all_results)} 份结果，写入 {args.out}")
    return 1 if skipped or any(r.get("not_graded") for r in all_results.values()) else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"grade": command_grade, "check": command_check, "merge": command_merge}[args.command](args)
    except GradingError as error:
        console.print(f"[red]无法评分：{error}[/red]")
        return 2


def run() -> None:
    """Console entry point: ``main`` then a prompt exit. Everything is written and flushed by
    then; an orderly interpreter exit with torch loaded costs about a second per command."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
