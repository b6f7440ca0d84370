"""The command line's console output: the progress bar, the summary table, the closing lines of
``attnkit grade``, ``attnkit check``'s feedback and ``attnkit collect``'s placements (stderr through
rich, ``check`` on stdout). Imported by ``cli.py``'s commands, not at its start: ``--help`` needs
none of it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from attnkit.assignment.folder import Assignment
from attnkit.constants import STUDENTS_FOLDER
from attnkit.report.pages import causes, late_notice
from attnkit.i18n import _, ngettext
from attnkit.report.isolation_level import class_line as isolation_line

if TYPE_CHECKING:
    from attnkit.records import ResultsJson
    from attnkit.intake.lms_collect import Collected
    from attnkit.course.lms_upload import Packed
    from attnkit.report.shard_set import Plan

console = Console(stderr=True)


def late_cells(r: ResultsJson) -> tuple[str, str]:
    """The console's late penalty and total after it, as report.html shows them (``late_notice``
    says which source is shown: the gradebook's figures, or the LMS's flag without a penalty).
    The gradebook's maximum holds the manual points (nbgrader's free-text cells): the total says
    so, or 85/108 beside 85/100 reads as 23 points lost."""
    found, notice = r.get("late"), late_notice(r)
    total = f"{found['total']:g}/{found['max']:g}" if found else "-"
    if found and found["max"] > r.get("max_score", found["max"]):
        points = f"{found['max'] - r['max_score']:g}"
        if found.get("manual") is None:
            total += "\n" + _("其中 {points} 分\n人工评分待定").format(points=points)
        else:
            total += "\n" + _("含人工评分\n{manual}/{points}").format(manual=f"{found['manual']:g}", points=points)
    if notice and notice["source"] == "lms":
        return _("{lms} 标记迟交").format(lms=notice["lms"]), total
    return (f"{found['penalty']:g}", total) if found else ("-", "-")


def gradebook_columns(all_results: list[ResultsJson]) -> bool:
    """Whether the table shows the late penalty and the gradebook's total: when someone is late
    (``late_notice``) or has manual points already; else they repeat the score (the maximum's
    manual points are said once below the table, ``manual_pending``)."""
    return any(late_notice(r) or (r.get("late") or {}).get("manual") is not None for r in all_results)


def manual_pending(all_results: list[ResultsJson]) -> list[str]:
    """The lines under the table, one per assignment whose gradebook maximum holds manual points
    nobody graded yet."""
    pending: dict[str, tuple[float, float]] = {}
    for r in all_results:
        found = r.get("late")
        if found and found["max"] > r["max_score"] and found.get("manual") is None:
            pending.setdefault(r["assignment"], (found["max"] - r["max_score"], found["max"]))
    said = _("{assignment} 在成绩册里的满分是 {total} 分：另有 {points} 分由人工评分（formgrader），尚未评分；上表的分数不含这部分。")
    return [said.format(assignment=name, total=f"{total:g}", points=f"{points:g}") for name, (points, total) in sorted(pending.items())]


def student_cell(r: ResultsJson, names: Mapping[str, str]) -> str:
    """The student's id, and the name the LMS gave (roster.csv) where there is one."""
    name = names.get(r["student_id"], "")
    return f"{r['student_id']} {name}" if name else r["student_id"]


def short_names(assignments: set[str]) -> dict[str, str]:
    """Each assignment by the first part of its name ("ch19" of "ch19-attention") where that part
    tells it from the others; else by its whole name. The table's column stays narrow."""
    first = {name: name.split("-")[0] for name in assignments}
    return {name: short if list(first.values()).count(short) == 1 else name for name, short in first.items()}


def summary_table(all_results: list[ResultsJson], names: Mapping[str, str] | None = None) -> Table:
    """The class at a glance, readable in an 80-column terminal: each diagnosis whole on its own
    line, the name roster.csv has under the id, an assignment column only when there are several
    (by its short name). A problem's text is not in the table (it would wrap into fragments):
    ``print_problems`` gives each one whole below it."""
    names = names or {}
    # One space between columns (the box's), none at the edges: 80 columns hold the longest diagnosis.
    table = Table(title=_("评分结果"), box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
    late = gradebook_columns(all_results)
    assignments = {r["assignment"] for r in all_results}
    short = short_names(assignments) if len(assignments) > 1 else {}
    table.add_column(_("学生"), overflow="fold", max_width=11)
    if short:
        table.add_column(_("作业"), no_wrap=True)
    table.add_column(_("分数"), no_wrap=True)
    if late:
        table.add_column(_("迟交扣分"), overflow="fold")
        table.add_column(_("总分"), overflow="fold", min_width=12)
    table.add_column(_("诊断"), no_wrap=True, min_width=max((len(d) for r in all_results for d in r["diagnoses"]), default=1))
    for r in sorted(all_results, key=lambda r: (r["student_id"], r["assignment"])):
        score = _("未评分") if r.get("not_graded") else f"{r['score']:g}/{r['max_score']:g}"
        name = names.get(r["student_id"], "")
        # Text, not str: an id or a problem written like rich markup ("[red]") is shown as written.
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    r["student_id"] + (f"\n{name}" if name else ""),
                    *((short[r["assignment"]],) if short else ()),
                    score + (" *" if r["problems"] else ""),
                    *(late_cells(r) if late else ()),
                    "\n".join(r["diagnoses"]) or "-",
                )
            )
        )
    return table


def summary(all_results: list[ResultsJson], names: Mapping[str, str] | None = None) -> Padding:
    """The table as the console prints it: one space in from the edge, as a row's id then stands
    between spaces (" 1002 ") for a TA's grep."""
    return Padding(summary_table(all_results, names), (0, 0, 0, 1))


def print_problems(all_results: list[ResultsJson], names: Mapping[str, str], to: Console = console) -> None:
    """The problems of the rows the table marks "*", each whole on a line of its own (a path is
    never broken, so it can be copied or grepped)."""
    for r in sorted(all_results, key=lambda r: (r["student_id"], r["assignment"])):
        if r["problems"]:
            said = _("{student}/{assignment} 的问题：{problems}")
            to.print(
                "  " + said.format(student=student_cell(r, names), assignment=r["assignment"], problems=_("；").join(r["problems"])),
                soft_wrap=True,
                markup=False,
            )


def grading_progress(quiet: bool) -> Progress:
    """The progress bar of ``attnkit grade``, advanced and refreshed by hand. No refresh thread:
    workers are forked from this process, which must not run other threads."""
    return Progress(TextColumn(_("评分")), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=quiet, auto_refresh=False)


# Seconds between two progress lines in a batch log (a Slurm or Kubernetes job's output file).
PROGRESS_SECONDS_VARIABLE = "ATTNKIT_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0


class LogProgress:
    """Where stderr is no terminal (a batch log) the bar draws nothing until it ends: instead, a
    line every ``ATTNKIT_PROGRESS_SECONDS`` (30 s by default) with graded/total and the rate, and
    one at the end."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done = total, 0
        self.active = not quiet and not console.is_terminal and total > 0
        try:
            self.every = float(os.environ.get(PROGRESS_SECONDS_VARIABLE, DEFAULT_PROGRESS_SECONDS))
        except ValueError:
            self.every = DEFAULT_PROGRESS_SECONDS
        self.started = self.last = time.monotonic()

    def advance(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.active and (now - self.last >= self.every or self.done == self.total):
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else 0.0
            console.print(
                _("评分进度：{done}/{total}（每分钟 {rate} 份，约剩 {left} 分钟）").format(
                    done=self.done, total=self.total, rate=f"{rate * 60:.1f}", left=f"{left / 60:.1f}"
                ),
                markup=False,
                soft_wrap=True,
            )


def print_merge_plan(plan: Plan) -> None:
    """What ``attnkit merge`` takes from each shard, one line each."""
    for take in plan.takes:
        console.print(
            _("分片 {shard}（{folder}）：取它拥有的 {count} 份结果").format(shard=take.shard.name, folder=take.shard.folder, count=len(take.keys))
            + (_("；另有 {count} 份不属于它的旧结果未取（已不在班级中的学生，或更早的分法）").format(count=take.not_taken) if take.not_taken else ""),
            markup=False,
            soft_wrap=True,
        )


def print_graded(progress: Progress, results: ResultsJson) -> None:
    """``--verbose``: one graded submission, above the progress bar."""
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


def print_lms_feedback(out: Path, packed: Packed, quiet: bool) -> None:
    """Where the LMS bulk-feedback zips are and who is not in them."""
    if not quiet:
        for path, count in sorted(packed.archives.items()):
            console.print(
                _("学习平台的批量反馈：{path}（{count} 名学生；上传方法见 docs/tas.md 的“Feedback back to Canvas or Moodle”）").format(path=path, count=count),
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


def print_grade_end(
    out: Path, all_results: list[ResultsJson], skipped: list[dict[str, Any]], quiet: bool, seconds: float, names: Mapping[str, str] | None = None
) -> None:
    """The closing lines of ``attnkit grade``: what was not graded or skipped (always: these need
    the TA's attention), then unless quiet the table, the isolation and where the outputs are."""
    for r in all_results:
        if r.get("not_graded"):
            console.print(
                _("未评分：{student}/{assignment}：{reason}").format(student=r["student_id"], assignment=r["assignment"], reason=r["not_graded"]),
                markup=False,
            )
    for item in skipped:
        console.print(_("已跳过：{where}：{reason}").format(where=item["where"], reason=item["reason"]), markup=False)
    if not quiet:
        console.print(summary(all_results, names))
        for line in [] if gradebook_columns(all_results) else manual_pending(all_results):
            console.print(line, markup=False, soft_wrap=True)
        print_problems(all_results, names or {})
        console.print(isolation_line(all_results))
        console.print(
            _("已写入 {csv} 与 {report}（{seconds} 秒）").format(csv=out / "grades.csv", report=out / "report.html", seconds=f"{seconds:.1f}"),
            markup=False,
        )


def print_check(assignment: Assignment, results: ResultsJson, page: Path | None) -> None:
    """``attnkit check``'s feedback on stdout: the parts, each runtime error once before the tests
    it broke, the failed tests, the diagnoses, the total and (with ``--out``) the page."""
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
    if page is not None:
        print(_("反馈页面：{path}").format(path=page))


def print_collected(found: Collected, submitted: Path) -> None:
    """What ``attnkit collect`` placed, each placement's notes, the older resubmissions left
    aside and (in red) every file it could not place."""
    students = sorted({c.student_id for c in found.placed.values()})
    console.print(
        _("已放入 {notebooks} 份笔记本（{students} 名学生）到 {folder}").format(notebooks=len(found.placed), students=len(students), folder=submitted),
        markup=False,
    )
    for candidate in sorted(found.placed.values(), key=lambda c: c.origin):
        for note in candidate.notes:
            console.print("  " + _("{student}：{note}").format(student=candidate.student_id, note=note), soft_wrap=True, markup=False)
    for candidate in sorted(found.superseded, key=lambda c: c.origin):
        console.print("  " + _("较早的重交，未采用：{origin}").format(origin=candidate.origin), soft_wrap=True, markup=False)
    for candidate, previous in sorted(found.replaced, key=lambda item: item[0].origin):
        folder = submitted / candidate.student_id / candidate.assignment / f"{candidate.notebook}.ipynb"
        console.print(
            "  " + _("已替换：{path}（之前收取的版本 {previous}；现在是 {origin}）").format(path=folder, previous=previous or "-", origin=candidate.origin),
            soft_wrap=True,
            markup=False,
        )
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


def print_error(error: BaseException, traceback_text: str | None, command: str = "grade") -> None:
    """A ``GraderError``'s reason in red (with ``--verbose`` after its traceback), said of the
    command that stopped: collect places files, it grades nothing."""
    if traceback_text is not None:
        console.print(traceback_text, markup=False, highlight=False)
    said = _("无法收取：{reason}") if command == "collect" else _("无法评分：{reason}")
    console.print(escape(said.format(reason=error)), soft_wrap=True, style="red")
