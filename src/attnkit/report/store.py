"""The OUT store: every file an output folder holds, read and written here only.

    OUT/.attnkit.lock                                  one run at a time (``output_lock``)
    OUT/students/<student>/<assignment>/results.json   a submission's record (``write_record``)
    OUT/students/<student>/<assignment>/feedback.html  its page, under MAX_FEEDBACK_BYTES
    OUT/grades.csv, OUT/report.html, OUT/skipped.json  the class (``write_class_outputs``)
    OUT/shard.json, OUT/shard.finished                 a ``--shard i/n`` run's manifest and marker (``report.shard_set``)

Every write is atomic (``files.atomic_write``), so a killed run leaves whole files and a
re-run finishes what it left (``repair_outputs``). Nothing here prints or parses arguments: the
console is pipeline/console.py's, the commands cli.py's and pipeline/'s. (The LMS bulk-feedback zips are lms_feedback.py's.)
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from collections.abc import Callable, Iterator, Mapping, Sequence

from attnkit import i18n
from attnkit.assignment.folder import Assignment
from attnkit.constants import STUDENTS_FOLDER, GraderError
from attnkit.report.pages import feedback_html, report_html
from attnkit.files import DurableBatch, atomic_write, csv_text, readable_json
from attnkit.i18n import _
from attnkit.report.isolation_level import class_line as isolation_line
from attnkit.records import ResultsJson, SubmissionRecord
from attnkit.report.results_json import MAX_FEEDBACK_BYTES, MAX_RESULTS_BYTES, fit, results_json

SHARD_FILE = "shard.json"
LOCK_FILE = ".attnkit.lock"


class Job(Protocol):
    """What the store needs of a ``records.Job`` (named structurally: the store imports nothing
    of the grading machinery)."""

    @property
    def student_id(self) -> str: ...
    @property
    def assignment(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...


def results_path(out: Path, job: Job | Mapping[str, Any]) -> Path:
    # A mapping is a record or a results.json; anything else a Job.
    student_id = job["student_id"] if isinstance(job, Mapping) else job.student_id
    assignment = job["assignment"] if isinstance(job, Mapping) else job.assignment
    return out / STUDENTS_FOLDER / student_id / assignment / "results.json"


def is_current(out: Path, job: Job) -> bool:
    try:
        return json.loads(results_path(out, job).read_text(encoding="utf-8")).get("fingerprint") == job.fingerprint
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """One run per output folder: a second run into the same folder stops at once and says why.

    An flock, so a run that dies (even by SIGKILL) releases it; the file names the holder."""
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK_FILE, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or _("另一个进程")
        handle.close()
        raise GraderError(
            _("{out} 正被另一个 attnkit 使用（{holder}）。同一输出文件夹一次只能有一个运行：请等它结束，或换一个 --out。").format(out=out, holder=holder)
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(_("进程 {pid}，开始于 {time}").format(pid=os.getpid(), time=time.strftime("%Y-%m-%d %H:%M:%S")) + "\n")
    handle.flush()
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def write_record(
    out: Path,
    record: SubmissionRecord,
    suites: dict[str, Assignment],
    add_facts: Callable[[ResultsJson], object] | None = None,
    batch: DurableBatch | None = None,
) -> ResultsJson:
    """A worker's record as results.json and feedback.html, each written once (through ``batch``
    if given): ``add_facts`` first puts in what comes from beside the submission (its lateness),
    known before the write."""
    results = results_json(record, suites[record["assignment"]])
    if add_facts is not None:
        add_facts(results)
    write_results(out, results, suites, batch)
    return results


def write_results(out: Path, results: ResultsJson, suites: dict[str, Assignment], batch: DurableBatch | None = None) -> None:
    """A submission's results.json and its feedback.html (the only writer of the two), each
    atomically: one after the other, or through ``batch`` (a class being graded). The page goes
    first, so that a run killed between the two never leaves a new results.json, which makes the
    submission current for the next run, beside an earlier run's page."""
    folder = results_path(out, results).parent
    write = batch.write if batch is not None else atomic_write
    write(folder / "feedback.html", bounded_feedback(results, suites[results["assignment"]]))
    write(folder / "results.json", readable_json(results))


def bounded_feedback(results: ResultsJson, assignment: Assignment) -> str:
    """The feedback page, under MAX_FEEDBACK_BYTES: escaping can make the page several times
    larger than results.json, so the texts are cut further (a copy) until it fits."""
    page = feedback_html(results, assignment)
    budget = MAX_RESULTS_BYTES
    while len(page.encode()) > MAX_FEEDBACK_BYTES and budget > 1_000:
        budget //= 2
        page = feedback_html(fit(json.loads(json.dumps(results)), budget), assignment)
    return page


def read_results(out: Path, job: Job) -> ResultsJson | None:
    """``job``'s results.json as an earlier run wrote it, or None."""
    try:
        found = json.loads(results_path(out, job).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None  # type: ignore[return-value]  # written by write_results


def collect(out: Path, jobs: Sequence[Job] | None = None) -> list[ResultsJson]:
    """Every results.json under ``out`` (or just those of ``jobs``)."""
    paths = [results_path(out, job) for job in jobs] if jobs is not None else sorted((out / STUDENTS_FOLDER).glob("*/*/results.json"))
    collected = []
    for path in paths:
        try:
            collected.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return collected


def repair_outputs(out: Path, suites: dict[str, Assignment]) -> None:
    """Finish what a killed run left: its half-written temporaries go, and a results.json whose
    feedback.html was not written yet gets its page (the submission itself is not regraded), as
    does one whose page reads empty.

    Safe only because this run holds OUT's lock: no other attnkit is writing there."""
    for temporary in out.rglob(".*.tmp"):
        temporary.unlink(missing_ok=True)
    for path in (out / STUDENTS_FOLDER).glob("*/*/results.json"):
        page = path.parent / "feedback.html"
        if not page.is_file() or page.stat().st_size == 0:
            try:
                results = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # unreadable: is_current() is False for it, so it is regraded anyway
            if results.get("assignment") in suites:
                atomic_write(path.parent / "feedback.html", bounded_feedback(results, suites[results["assignment"]]))


# Columns added when a gradebook is used: what `nbgrader export` reports for the same student.
TOTAL_COLUMNS = ["manual_score", "late_penalty", "total", "total_max", "total_source"]


def part_columns(all_results: list[ResultsJson], suites: dict[str, Assignment]) -> list[str]:
    """grades.csv's part columns: the grade ids of the assignments in the class, in notebook order."""
    present = {r["assignment"] for r in all_results}
    shown = [suite for suite in suites.values() if suite.name in present] or list(suites.values())
    return list(dict.fromkeys(grade_id for suite in shown for grade_id in suite.parts))


def grades_csv(all_results: list[ResultsJson], suites: dict[str, Assignment], totals: dict[tuple[str, str], dict[str, Any]] | None = None) -> str:
    """One row per submission. With ``totals`` (read back from the gradebook), the row also has
    the manual points a TA entered in formgrader and the total `nbgrader export` reports;
    ``total_source`` says whether that total came from the gradebook or from attnkit alone. A
    part column of another assignment than the row's is empty."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    parts = part_columns(all_results, suites)
    writer.writerow(["student_id", "assignment", "score", "max_score", *parts, *(TOTAL_COLUMNS if totals is not None else [])])
    for r in sorted(all_results, key=lambda r: (r["student_id"], r["assignment"])):
        own = suites[r["assignment"]].parts if r["assignment"] in suites else r["parts"]
        scored: Mapping[str, Mapping[str, Any]] = r["parts"]
        row = [
            csv_text(r["student_id"]),
            csv_text(r["assignment"]),
            f"{r['score']:g}",
            f"{r['max_score']:g}",
            *(f"{scored.get(part, {}).get('score', 0):g}" if part in own else "" for part in parts),
        ]
        if totals is not None:
            found = totals.get((r["student_id"], r["assignment"]))
            if found is None:
                row += ["", "0", f"{r['score']:g}", f"{r['max_score']:g}", "attnkit"]
            else:
                manual = "" if found["manual"] is None else f"{found['manual']:g}"
                row += [manual, f"{found['penalty']:g}", f"{found['total']:g}", f"{found['max']:g}", "gradebook"]
        writer.writerow(row)
    return buffer.getvalue()


def write_grades(out: Path, all_results: list[ResultsJson], suites: dict[str, Assignment], totals: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
    atomic_write(out / "grades.csv", grades_csv(all_results, suites, totals))


def write_report(out: Path, all_results: list[ResultsJson], suites: dict[str, Assignment], seconds: float, skipped: list[dict[str, str]]) -> None:
    atomic_write(out / "report.html", report_html(all_results, suites, seconds, skipped, isolation_line(all_results)))


def write_class_outputs(
    out: Path,
    all_results: list[ResultsJson],
    suites: dict[str, Assignment],
    seconds: float,
    skipped: list[dict[str, str]] | None = None,
    totals: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> None:
    skipped = skipped or []
    atomic_write(out / "skipped.json", json.dumps(skipped, ensure_ascii=False, indent=1))
    write_grades(out, all_results, suites, totals)
    write_report(out, all_results, suites, seconds, skipped)


def read_skipped(out: Path) -> list[dict[str, str]]:
    try:
        found = json.loads((out / "skipped.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def check_shard_set(folders: list[Path]) -> None:
    """Whole runs to merge (two sections of a class, say; none of them a shard, whose sets
    ``report.shard_set.plan_merge`` checks): each an ``attnkit grade`` output."""
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise GraderError(_("找不到要合并的文件夹：{folders}").format(folders=i18n.join(missing)))
    empty = [str(f) for f in folders if not (f / "grades.csv").is_file()]
    if empty:
        raise GraderError(_("不是 attnkit grade 的输出（没有 grades.csv）：{folders}").format(folders=i18n.join(empty)))


def gather_shards(folders: list[Path], out: Path) -> tuple[list[ResultsJson], list[dict[str, str]]]:
    """Every submission's results.json and feedback.html of ``folders`` copied into ``out`` (a
    later folder's wins), with their skipped items once each: what `merge` writes the class from."""
    all_results: dict[tuple[str, str], ResultsJson] = {}
    skipped: list[dict[str, str]] = []
    for shard in folders:
        for item in read_skipped(shard):
            if item not in skipped:
                skipped.append(item)
        for results in collect(shard):
            key = (results["student_id"], results["assignment"])
            all_results[key] = results
            copy_pages(results_path(shard, results).parent, results_path(out, results).parent)
    return list(all_results.values()), skipped


def copy_results(
    shard: Path, out: Path, key: str, add_facts: Callable[[ResultsJson], object] | None = None, suites: dict[str, Assignment] | None = None
) -> ResultsJson:
    """One submission's results.json and feedback.html (``key``: student/assignment) from a
    shard's folder into ``out``; its results, read. With ``add_facts`` (the merge's gradebook
    lateness), a record that gains a fact is written with it (once) instead of copied."""
    student_id, _slash, assignment = key.rpartition("/")
    source = results_path(shard, {"student_id": student_id, "assignment": assignment}).parent
    target = results_path(out, {"student_id": student_id, "assignment": assignment}).parent
    results: ResultsJson = json.loads((source / "results.json").read_text(encoding="utf-8"))
    if add_facts is not None and suites is not None and results["assignment"] in suites and add_facts(results):
        write_results(out, results, suites)
    else:
        copy_pages(source, target)
    return results


def copy_pages(source: Path, target: Path) -> None:
    """A submission's results.json and feedback.html from one output folder's ``source`` into
    another's ``target`` (nothing when they are the same folder)."""
    if source.resolve() == target.resolve():
        return
    target.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "feedback.html"):
        if (source / name).is_file():
            atomic_write(target / name, (source / name).read_text(encoding="utf-8"))
