"""A shard set that proves itself (issue 38, docs/shards.md): `attnkit merge` refuses, naming the
shard and the command that fixes it, a set that is unfinished, still running, cut from another
class listing, graded in another language or stale; it takes from each shard only the students
that shard owns; a late student moves nobody else; a stray folder is the merge's news, not every
shard's exit 1; `merge --gradebook` writes the grades.csv `grade --gradebook` writes.

Four students of the demo class in two shards (`--jobs 1`); each test works on a copy of the
graded set, so a refusal in one cannot leak into another.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from attnkit import __version__
from attnkit.engine.fan_out import shard_of
from attnkit.records import Job
from attnkit.report.store import TOTAL_COLUMNS, output_lock
from notebooks import wait_in_last_cell
from commands import ROOT, attnkit, start_attnkit, tool_env

DEMO = ROOT / "examples" / "submitted"
ASSIGNMENT = "ch19-attention"
# Hashed into the two shards as: sunmei -> 1; lilei, xiaolin, zhaoqiang -> 2 (checked below).
STUDENTS = ("lilei", "sunmei", "xiaolin", "zhaoqiang")
LATE = "chenjing"  # -> shard 1


# Two of shard 2's three students end their notebook with a cell that waits (the same grade, more
# time): whichever order the shard grades them in, once its first results.json is written at
# least one of these is still being graded for SLOW_SECONDS, so ``interrupt`` lands half way
# instead of racing the shard's last two submissions (≈ 0.1 s).
SLOW = ("xiaolin", "zhaoqiang")
SLOW_SECONDS = 2


def grade_shard(submitted: Path, out: Path, index: int, *extra: str, count: int = 2) -> subprocess.CompletedProcess[str]:
    progress = tool_env(ATTNKIT_PROGRESS_SECONDS="0")  # a line per graded submission: the log is no terminal
    return attnkit("grade", "--submitted", submitted, "--out", out, "--jobs", "1", "--shard", f"{index}/{count}", *extra, env=progress)


def merge(base: Path, *extra: str, out: str = "merged") -> subprocess.CompletedProcess[str]:
    return attnkit("merge", base / "shard1", base / "shard2", "--out", base / out, *extra)


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "grades.csv", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def results_files(out: Path) -> dict[str, tuple[int, int]]:
    """student -> (inode, mtime_ns) of its results.json: rewritten only when regraded."""
    found = {}
    for path in out.glob(f"students/*/{ASSIGNMENT}/results.json"):
        info = path.stat()
        found[path.parent.parent.name] = (info.st_ino, info.st_mtime_ns)
    return found


def test_the_students_hash_into_the_shards_this_file_expects() -> None:
    from attnkit.report.shard_set import owner

    assert {student: owner(student, 2) for student in (*STUDENTS, LATE)} == {"sunmei": 1, LATE: 1, "lilei": 2, "xiaolin": 2, "zhaoqiang": 2}


def test_a_student_added_late_moves_nobody_else() -> None:
    """Membership by a hash of the student id: every student keeps their shard when one is added
    (by position in the sorted class, everyone after the newcomer moved)."""
    names = [f"s{number:03d}" for number in range(0, 200, 2)]

    def slices(students: list[str]) -> dict[str, int]:
        jobs = [Job(student, ASSIGNMENT, [], "") for student in sorted(students)]
        return {job.student_id: index for index in range(1, 5) for job in shard_of(jobs, (index, 4))}

    before, after = slices(names), slices([*names, "s051"])
    assert sorted(after) == sorted([*names, "s051"]), "every student in exactly one shard"
    assert {student: after[student] for student in names} == before
    assert all(len([s for s in before if before[s] == index]) > 0 for index in range(1, 5))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("shard-set")
    for student in STUDENTS:
        shutil.copytree(DEMO / student / ASSIGNMENT, base / "submitted" / student / ASSIGNMENT)
    for student in SLOW:
        wait_in_last_cell(base / "submitted" / student / ASSIGNMENT / "attention.ipynb", SLOW_SECONDS)
    for index in (1, 2):
        run = grade_shard(base / "submitted", base / f"shard{index}", index)
        assert run.returncode == 0, run.stderr[-3000:]
        (base / f"shard{index}.log").write_text(run.stderr, encoding="utf-8")
    return base


@pytest.fixture
def copy(graded: Path, tmp_path: Path) -> Path:
    """A copy of the graded set (submitted/, shard1/, shard2/) to change; its shards read the
    copy's submitted/ from their next run on."""
    base = tmp_path / "set"
    shutil.copytree(graded, base, ignore=shutil.ignore_patterns("merged"))
    return base


@pytest.mark.e2e
def test_a_complete_set_merges_saying_what_it_takes_from_each_shard(graded: Path) -> None:
    log = (graded / "shard2.log").read_text(encoding="utf-8")
    assert "3/3" in log, "a shard in a batch log prints graded/total"
    run = merge(graded)
    assert run.returncode == 0, run.stderr
    assert sorted(row["student_id"] for row in rows(graded / "merged")) == sorted(STUDENTS)
    assert f"1/2 ({graded / 'shard1'})" in run.stderr.replace("（", " (").replace("）", ")")
    assert f"2/2 ({graded / 'shard2'})" in run.stderr.replace("（", " (").replace("）", ")")


@pytest.mark.e2e
def test_a_late_student_is_graded_by_one_shard_and_a_set_from_two_listings_is_refused(copy: Path) -> None:
    shutil.copytree(DEMO / LATE / ASSIGNMENT, copy / "submitted" / LATE / ASSIGNMENT)
    untouched = results_files(copy / "shard2")
    assert grade_shard(copy / "submitted", copy / "shard1", 1).returncode == 0
    refused = merge(copy)
    assert refused.returncode == 2, refused.stderr
    assert str(copy / "shard2") in refused.stderr and not (copy / "merged" / "grades.csv").exists()
    # Shard 2 again: the class grew, but none of its students moved, so none is regraded.
    again = grade_shard(copy / "submitted", copy / "shard2", 2)
    assert again.returncode == 0 and results_files(copy / "shard2") == untouched
    merged = merge(copy)
    assert merged.returncode == 0, merged.stderr
    assert sorted(row["student_id"] for row in rows(copy / "merged")) == sorted([*STUDENTS, LATE])


def interrupt(copy: Path, out: Path, *extra: str) -> None:
    """Start shard 2/2 into ``out`` and kill its process group once it wrote its first result."""
    started = time.time_ns()
    process = start_attnkit("grade", "--submitted", copy / "submitted", "--out", out, "--jobs", "1", "--shard", "2/2", *extra, log=copy / "interrupted.log")
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if any(p.stat().st_mtime_ns > started for p in out.glob(f"students/*/{ASSIGNMENT}/results.json")):
                break
            time.sleep(0.05)
        assert process.poll() is None, "the shard ended before it could be interrupted:\n" + (copy / "interrupted.log").read_text()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.e2e
def test_an_interrupted_shard_is_unfinished_not_foreign_and_not_merged(copy: Path) -> None:
    # A regrade (--force) cancelled half way in a folder that holds an older complete run.
    interrupt(copy, copy / "shard2", "--force")
    refused = merge(copy)
    assert refused.returncode == 2 and not (copy / "merged" / "grades.csv").exists(), refused.stderr
    assert str(copy / "shard2") in refused.stderr and "--shard 2/2" in refused.stderr, refused.stderr
    # The same in a fresh folder: an unfinished shard, whose command is given, not "not an attnkit output".
    shutil.rmtree(copy / "shard2")
    interrupt(copy, copy / "shard2")
    fresh = merge(copy)
    assert fresh.returncode == 2 and "--shard 2/2" in fresh.stderr and "grades.csv" not in fresh.stderr, fresh.stderr
    # Run again, it resumes and the set merges.
    assert grade_shard(copy / "submitted", copy / "shard2", 2).returncode == 0
    assert merge(copy).returncode == 0


@pytest.mark.e2e
def test_a_shard_still_running_is_refused(copy: Path) -> None:
    with output_lock(copy / "shard1"):  # the very lock a running `attnkit grade` holds
        refused = merge(copy)
    assert refused.returncode == 2 and str(copy / "shard1") in refused.stderr, refused.stderr
    assert not (copy / "merged" / "grades.csv").exists()


@pytest.mark.e2e
def test_a_submission_changed_since_its_shard_graded_it_is_refused_as_stale(copy: Path) -> None:
    notebook = copy / "submitted" / "xiaolin" / ASSIGNMENT / "attention.ipynb"
    notebook.write_bytes((copy / "submitted" / "lilei" / ASSIGNMENT / "attention.ipynb").read_bytes())
    refused = merge(copy, "--submitted", str(copy / "submitted"))
    assert refused.returncode == 2, refused.stderr
    assert str(copy / "shard2") in refused.stderr and "--shard 2/2" in refused.stderr and "xiaolin" in refused.stderr, refused.stderr
    assert not (copy / "merged" / "grades.csv").exists()


@pytest.mark.e2e
def test_shards_graded_in_another_language_are_refused(copy: Path) -> None:
    assert grade_shard(copy / "submitted", copy / "shard2", 2, "--lang", "en").returncode == 0
    refused = merge(copy)
    assert refused.returncode == 2 and str(copy / "shard1") in refused.stderr and str(copy / "shard2") in refused.stderr, refused.stderr
    assert not (copy / "merged" / "grades.csv").exists()
    # Nor is a set merged into another language than its own.
    assert grade_shard(copy / "submitted", copy / "shard1", 1, "--lang", "en").returncode == 0
    other = merge(copy, "--lang", "zh")
    assert other.returncode == 2 and "--lang" in other.stderr, other.stderr
    assert merge(copy, "--lang", "en").returncode == 0


@pytest.mark.e2e
def test_shards_graded_by_another_grader_are_refused(copy: Path) -> None:
    """A hidden suite edited between two shards' runs: the shards' results are not comparable."""
    suites = copy / "course" / "autograder"
    shutil.copytree(ROOT / "autograder", suites, ignore=shutil.ignore_patterns("__pycache__"))
    edited = suites / "ch19_attention" / "test_ch19_1_scaled_attention.py"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n# edited after shard 1 was graded\n", encoding="utf-8")
    assert grade_shard(copy / "submitted", copy / "shard2", 2, "--autograder", str(suites)).returncode == 0
    refused = merge(copy)
    assert refused.returncode == 2 and str(copy / "shard1") in refused.stderr and str(copy / "shard2") in refused.stderr, refused.stderr
    assert refused.stderr.count(f"attnkit {__version__} {ASSIGNMENT} ") == 2, "each grader named"
    assert not (copy / "merged" / "grades.csv").exists()


@pytest.mark.e2e
def test_a_removed_student_is_not_taken_from_a_leftover_results_json(copy: Path) -> None:
    assert merge(copy).returncode == 0  # a merge of the class as it was, into the same folder
    before = (copy / "merged" / "grades.csv").read_text(encoding="utf-8")
    shutil.rmtree(copy / "submitted" / "xiaolin")
    # The shards still list xiaolin: the class they were cut from is not the class now.
    stale = merge(copy, "--submitted", str(copy / "submitted"))
    assert stale.returncode == 2 and "xiaolin" in stale.stderr, stale.stderr
    assert (copy / "merged" / "grades.csv").read_text(encoding="utf-8") == before, "a refused merge writes nothing"
    for index in (1, 2):
        assert grade_shard(copy / "submitted", copy / f"shard{index}", index).returncode == 0
    assert (copy / "shard2" / "students" / "xiaolin" / ASSIGNMENT / "results.json").is_file(), "the leftover is there"
    merged = merge(copy)
    assert merged.returncode == 0, merged.stderr
    assert sorted(row["student_id"] for row in rows(copy / "merged")) == sorted(set(STUDENTS) - {"xiaolin"})
    assert not (copy / "merged" / "students" / "xiaolin").exists()


@pytest.mark.e2e
def test_a_stray_folder_is_the_merges_news_not_every_shards_exit_1(copy: Path) -> None:
    (copy / "submitted" / "lilei" / "ch20-transformer").mkdir()
    for index in (1, 2):
        run = grade_shard(copy / "submitted", copy / f"shard{index}", index)
        assert run.returncode == 0, (index, run.stderr[-2000:])
    merged = merge(copy)
    assert merged.returncode == 1 and "ch20-transformer" in (copy / "merged" / "report.html").read_text(encoding="utf-8"), merged.stderr
    assert len(rows(copy / "merged")) == len(STUDENTS)


@pytest.mark.e2e
def test_merge_records_the_gradebook_once_in_the_form_grade_writes(copy: Path) -> None:
    refused = grade_shard(copy / "submitted", copy / "shard1", 1, "--gradebook", str(copy / "shardbook" / "gradebook.db"))
    assert refused.returncode == 2 and "merge" in refused.stderr, refused.stderr
    (copy / "book").mkdir()
    merged = merge(copy, "--gradebook", str(copy / "book" / "gradebook.db"))
    assert merged.returncode == 0, merged.stderr
    # One unsharded run with its own gradebook: the same grades.csv, totals and all.
    (copy / "wholebook").mkdir()
    whole = attnkit("grade", "--submitted", copy / "submitted", "--out", copy / "whole", "--jobs", "2", "--gradebook", copy / "wholebook" / "gradebook.db")
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert list(rows(copy / "merged")[0])[-len(TOTAL_COLUMNS) :] == TOTAL_COLUMNS
    assert (copy / "merged" / "grades.csv").read_text(encoding="utf-8") == (copy / "whole" / "grades.csv").read_text(encoding="utf-8")


def test_a_shard_from_an_older_attnkit_is_refused_with_its_command(tmp_path: Path) -> None:
    """shard.json of format 1 (index and count only) says nothing of the class, the grader or
    the students: it cannot prove itself, so it is regraded (a resume), not trusted."""
    from attnkit.constants import GraderError
    from attnkit.report.shard_set import plan_merge

    for index in (1, 2):
        folder = tmp_path / f"shard{index}"
        folder.mkdir()
        (folder / "grades.csv").write_text("student_id,assignment,score,max_score\n", encoding="utf-8")
        (folder / "shard.json").write_text(json.dumps({"index": index, "count": 2}), encoding="utf-8")
    with pytest.raises(GraderError, match="--shard 1/2"):
        plan_merge([tmp_path / "shard1", tmp_path / "shard2"], None)
