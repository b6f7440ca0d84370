"""`attnkit collect` takes identity only from what the LMS made, and keeps what the LMS said.

Issue 23's impersonations (a Canvas file a student named ``x_22222_assignsubmission_file_...``, a
Moodle folder ``Some Name_33333_assignsubmission_file_/`` inside one's own submission), a Moodle
submission holding two notebooks, and issue 25's intake fidelity (the TA machine's time zone, the
late flag, the roster, Blackboard's names, a renamed notebook). Every download is built here as the
LMS names it and goes through the real CLI.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import zipfile
from pathlib import Path

from commands import attnkit, tool_env

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "submitted"
ASSIGNMENT = "ch19-attention"
HOUR = 3600.0
BASE_TIME = 1_759_310_000.0  # 2025-10-01, a fixed moment: the order of files is the test's, not the clock's


def demo(student: str) -> bytes:
    return (DEMO / student / ASSIGNMENT / "attention.ipynb").read_bytes()


def collect(*args: str, tz: str = "UTC") -> subprocess.CompletedProcess:
    return attnkit("collect", *args, env=tool_env(TZ=tz))


def write(path: Path, data: bytes, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def placed(submitted: Path) -> dict[str, bytes]:
    return {p.parts[-3]: p.read_bytes() for p in submitted.glob(f"*/{ASSIGNMENT}/*.ipynb")}


def test_a_canvas_file_named_like_moodle_does_not_replace_a_classmate(tmp_path: Path) -> None:
    download = tmp_path / "canvas"
    write(download / "studentb_22222_902_attention.ipynb", demo("xiaolin"), BASE_TIME)
    # studenta uploaded "x_22222_assignsubmission_file_attention-9.ipynb"; Canvas prefixed it with hers.
    write(download / "studenta_11111_901_x_22222_assignsubmission_file_attention-9.ipynb", demo("sunmei"), BASE_TIME + HOUR)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 1, run.stdout + run.stderr
    assert placed(submitted) == {"22222": demo("xiaolin")}, "22222's own notebook stays; nothing is placed under a name a student chose"
    out = " ".join((run.stdout + run.stderr).split())
    assert "studenta_11111_901_x_22222" in out and "22222" in out and "冒充" in out
    assert "较早的重交" not in out, "22222's notebook is not called an earlier resubmission"


def test_a_moodle_folder_inside_ones_own_submission_is_data(tmp_path: Path) -> None:
    download = tmp_path / "moodle"
    write(download / "Some Name_33333_assignsubmission_file_" / "attention.ipynb", demo("xiaolin"), BASE_TIME)
    write(download / "Own Name_44444_assignsubmission_file_" / "Some Name_33333_assignsubmission_file_" / "attention-5.ipynb", demo("sunmei"), BASE_TIME + HOUR)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 1, run.stdout + run.stderr
    assert placed(submitted) == {"33333": demo("xiaolin")}
    out = " ".join((run.stdout + run.stderr).split())
    assert "Own Name_44444" in out and "冒充" in out


def test_a_moodle_submission_with_two_notebooks_is_refused_not_guessed(tmp_path: Path) -> None:
    download = tmp_path / "moodle.zip"
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr(zipfile.ZipInfo("Li Lei_55555_assignsubmission_file_/attention.ipynb", (2025, 10, 1, 9, 0, 0)), demo("sunmei"))
        archive.writestr(zipfile.ZipInfo("Li Lei_55555_assignsubmission_file_/attention (1).ipynb", (2025, 10, 1, 10, 0, 0)), demo("xiaolin"))
        archive.writestr(zipfile.ZipInfo("Wang Fang_66666_assignsubmission_file_/attention.ipynb", (2025, 10, 1, 9, 0, 0)), demo("wangfang"))
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 1, run.stdout + run.stderr
    assert placed(submitted) == {"66666": demo("wangfang")}, "neither of 55555's two notebooks is chosen for them"
    out = " ".join((run.stdout + run.stderr).split())
    assert "attention (1).ipynb" in out and "冲突" in out


def test_one_format_for_the_whole_download_never_file_by_file(tmp_path: Path) -> None:
    download = tmp_path / "mixed"
    write(download / "studentb_22222_902_attention.ipynb", demo("xiaolin"), BASE_TIME)
    write(download / "Li Lei_55555_assignsubmission_file_" / "attention.ipynb", demo("sunmei"), BASE_TIME)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 1 and placed(submitted) == {}, "a download of two LMSs is refused with the reason"
    assert "--lms" in run.stdout + run.stderr
    run = collect(str(download), "--submitted", str(submitted), "--lms", "canvas")
    assert run.returncode == 1 and placed(submitted) == {"22222": demo("xiaolin")}, "the TA named the format"


def canvas_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("xiaolin_1001_5001_attention.ipynb", (2025, 10, 1, 9, 30, 0)), demo("xiaolin"))
        archive.writestr(zipfile.ZipInfo("lileili_LATE_1002_5003_attention.ipynb", (2025, 10, 2, 9, 30, 0)), demo("lilei"))
    return path


def test_times_do_not_depend_on_the_ta_machines_time_zone(tmp_path: Path) -> None:
    download = canvas_zip(tmp_path / "canvas.zip")
    stamps = {}
    for tz in ("UTC", "Asia/Shanghai"):
        submitted = tmp_path / tz.replace("/", "-")
        run = collect(str(download), "--submitted", str(submitted), tz=tz)
        assert run.returncode == 0, run.stdout + run.stderr
        stamps[tz] = (submitted / "1001" / ASSIGNMENT / "timestamp.txt").read_text()
    assert stamps["UTC"] == stamps["Asia/Shanghai"] == "2025-10-01 09:30:00.000000 UTC\n"
    # The LMS's stated zone, given once: Canvas's server said 09:30 in Shanghai, 01:30 UTC.
    submitted = tmp_path / "shanghai-lms"
    run = collect(str(download), "--submitted", str(submitted), "--timezone", "Asia/Shanghai")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (submitted / "1001" / ASSIGNMENT / "timestamp.txt").read_text() == "2025-10-01 01:30:00.000000 UTC\n"


def test_the_late_flag_and_the_names_are_kept(tmp_path: Path) -> None:
    submitted = tmp_path / "submitted"
    run = collect(str(canvas_zip(tmp_path / "canvas.zip")), "--submitted", str(submitted))
    assert run.returncode == 0, run.stdout + run.stderr
    late = json.loads((submitted / "1002" / ASSIGNMENT / "lms.json").read_text(encoding="utf-8"))
    on_time = json.loads((submitted / "1001" / ASSIGNMENT / "lms.json").read_text(encoding="utf-8"))
    assert (late["lms"], late["late"], late["name"]) == ("canvas", True, "lileili")
    assert on_time["late"] is False and on_time["submitted_utc"] == "2025-10-01 09:30:00.000000 UTC"
    with open(tmp_path / "roster.csv", encoding="utf-8", newline="") as handle:
        roster = {row["student_id"]: row["name"] for row in csv.DictReader(handle)}
    assert roster == {"1001": "xiaolin", "1002": "lileili"}


def test_the_roster_is_formula_safe_and_keeps_earlier_rows(tmp_path: Path) -> None:
    download = tmp_path / "moodle"
    write(download / "=HYPERLINK(1+1) x_77777_assignsubmission_file_" / "attention.ipynb", demo("xiaolin"), BASE_TIME)
    submitted = tmp_path / "submitted"
    collect(str(canvas_zip(tmp_path / "canvas.zip")), "--submitted", str(submitted))
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 0, run.stdout + run.stderr
    with open(tmp_path / "roster.csv", encoding="utf-8", newline="") as handle:
        roster = {row["student_id"]: (row["name"], row["lms"]) for row in csv.DictReader(handle)}
    assert roster == {"1001": ("xiaolin", "canvas"), "1002": ("lileili", "canvas"), "77777": ("'=HYPERLINK(1+1) x", "moodle")}


def test_blackboards_download_is_read(tmp_path: Path) -> None:
    download = tmp_path / "gradebook"
    write(download / "Ch19 Attention_u2023001_attempt_2025-10-01-12-00-00_attention.ipynb", demo("sunmei"), BASE_TIME)
    write(
        download / "Ch19 Attention_u2023001_attempt_2025-10-01-12-00-00.txt",
        b"Name: Sun Mei (u2023001)\nAssignment: Ch19 Attention\nDate Submitted: ...\n",
        BASE_TIME,
    )
    # A later attempt is newer by Blackboard's own attempt time, whatever the student named the file.
    write(download / "Ch19 Attention_u2023001_attempt_2025-10-02-08-00-00_attention-0.ipynb", demo("xiaolin"), BASE_TIME - HOUR)
    write(download / "Ch19 Attention_u2023002_attempt_2025-10-01-12-00-00_attention.ipynb", demo("wangfang"), BASE_TIME)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted), "--lms", "blackboard")
    assert run.returncode == 0, run.stdout + run.stderr
    assert placed(submitted) == {"u2023001": demo("xiaolin"), "u2023002": demo("wangfang")}
    assert (submitted / "u2023001" / ASSIGNMENT / "timestamp.txt").read_text() == "2025-10-02 08:00:00.000000 UTC\n"
    with open(tmp_path / "roster.csv", encoding="utf-8", newline="") as handle:
        roster = {row["student_id"]: row["name"] for row in csv.DictReader(handle)}
    assert roster["u2023001"] == "Sun Mei"
    # Detected as Blackboard without --lms too.
    again = collect(str(download), "--submitted", str(tmp_path / "detected"))
    assert again.returncode == 0 and set(placed(tmp_path / "detected")) == {"u2023001", "u2023002"}, again.stdout + again.stderr


def test_a_renamed_notebook_is_stored_under_the_assignments_name_with_a_note(tmp_path: Path) -> None:
    download = tmp_path / "moodle"
    write(download / "Zhao Qiang_2001_assignsubmission_file_" / "Attention.ipynb", demo("zhaoqiang"), BASE_TIME)
    write(download / "Chen Jing_2002_assignsubmission_file_" / "attention (1).ipynb", demo("chenjing"), BASE_TIME)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 0, run.stdout + run.stderr
    assert (submitted / "2001" / ASSIGNMENT / "attention.ipynb").read_bytes() == demo("zhaoqiang")
    assert (submitted / "2002" / ASSIGNMENT / "attention.ipynb").read_bytes() == demo("chenjing")
    note = json.loads((submitted / "2002" / ASSIGNMENT / "lms.json").read_text(encoding="utf-8"))["notes"]
    assert note and "attention (1).ipynb" in note[0]
    assert "Attention.ipynb" in run.stdout + run.stderr, "the TA is told too"


def test_an_id_that_is_no_folder_of_its_own_places_nothing(tmp_path: Path) -> None:
    """Blackboard's usernames are whatever has no "_" or "/": does a username ".." (or "." or one
    with a control character) place a notebook outside submitted/, or stop the collect, while a
    classmate in the same download is placed as ever?"""
    download = tmp_path / "gradebook" / "inner"
    for username in ("..", ".", "u\x01x"):
        write(download / f"Ch19 Attention_{username}_attempt_2025-10-01-12-00-00_attention.ipynb", demo("sunmei"), BASE_TIME)
    write(download / "Ch19 Attention_u2023002_attempt_2025-10-01-12-00-00_attention.ipynb", demo("wangfang"), BASE_TIME)
    submitted = tmp_path / "out" / "submitted"
    run = collect(str(download), "--submitted", str(submitted), "--lms", "blackboard")
    assert placed(submitted) == {"u2023002": demo("wangfang")}, run.stdout + run.stderr
    assert not (tmp_path / "out" / ASSIGNMENT).exists() and not (submitted / ASSIGNMENT).exists()
    assert run.returncode == 1, run.stdout + run.stderr  # the unplaced files are reported


# -- issue 42: a second assignment, sub-folders a student made, resubmissions, one roster per class --
def test_with_two_assignments_each_file_goes_to_the_assignment_its_notebook_is_named_for(tmp_path: Path, second_assignment: str) -> None:
    """A course with a second assignment: collect works out each file's assignment from its
    notebook's name (no --assignment), and says "collect", never "grading", when it stops."""
    download = tmp_path / "canvas"
    softmax = (ROOT / "solutions" / second_assignment / "softmax.ipynb").read_bytes()
    write(download / "xiaolin_1001_5001_attention.ipynb", demo("xiaolin"), BASE_TIME)
    write(download / "xiaolin_1001_5002_softmax.ipynb", softmax, BASE_TIME)
    write(download / "lileili_1002_5003_Softmax (1).ipynb", softmax, BASE_TIME)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(str(p.relative_to(submitted)) for p in submitted.rglob("*.ipynb")) == [
        f"1001/{ASSIGNMENT}/attention.ipynb",
        f"1001/{second_assignment}/softmax.ipynb",
        f"1002/{second_assignment}/softmax.ipynb",
    ]
    assert (submitted / "1001" / ASSIGNMENT / "attention.ipynb").read_bytes() == demo("xiaolin")
    refused = collect(str(download), "--submitted", str(tmp_path / "other"), "--assignment", "ch99-none")
    assert refused.returncode == 2 and "无法收取" in refused.stderr and "无法评分" not in refused.stderr, refused.stderr
    # --assignment still narrows the collect to one assignment: the other's notebooks are reported.
    narrowed = collect(str(download), "--submitted", str(tmp_path / "narrowed"), "--assignment", ASSIGNMENT)
    assert narrowed.returncode == 1 and set(placed(tmp_path / "narrowed")) == {"1001"}, narrowed.stdout + narrowed.stderr


def test_a_notebook_name_two_assignments_share_is_asked_about_naming_the_file(tmp_path: Path) -> None:
    """Two assignments whose notebooks share a name: the file is not guessed into either; the
    reason names the file and asks for --assignment."""
    from attnkit.intake.lms_collect import collect as collect_download

    download = tmp_path / "canvas"
    write(download / "xiaolin_1001_5001_attention.ipynb", demo("xiaolin"), BASE_TIME)
    found = collect_download([download], tmp_path / "submitted", {"ch19-attention": ["attention"], "ch19-redo": ["attention"]})
    assert not found.placed and not list((tmp_path / "submitted").rglob("*.ipynb"))
    [(origin, reason)] = found.unplaced
    assert origin.endswith("xiaolin_1001_5001_attention.ipynb") and "attention.ipynb" in reason and "--assignment" in reason
    assert "ch19-attention" in reason and "ch19-redo" in reason


def test_a_folder_a_student_made_is_placed_beside_a_folder_that_poses_as_a_classmate(tmp_path: Path) -> None:
    """Moodle: a notebook inside a folder the student made in her own submission ("homework/",
    "ch19 作业/") is hers, placed with a note; a folder inside a submission named as another
    student's Moodle folder is refused, side by side in one download."""
    download = tmp_path / "moodle"
    write(download / "Li Lei_44444_assignsubmission_file_" / "homework" / "attention.ipynb", demo("lilei"), BASE_TIME)
    write(download / "Wang Fang_55555_assignsubmission_file_" / "ch19 作业" / "attention.ipynb", demo("wangfang"), BASE_TIME)
    write(download / "Some Name_33333_assignsubmission_file_" / "attention.ipynb", demo("xiaolin"), BASE_TIME)
    write(download / "Own Name_66666_assignsubmission_file_" / "Some Name_33333_assignsubmission_file_" / "attention.ipynb", demo("sunmei"), BASE_TIME)
    submitted = tmp_path / "submitted"
    run = collect(str(download), "--submitted", str(submitted))
    out = " ".join((run.stdout + run.stderr).split())
    assert placed(submitted) == {"44444": demo("lilei"), "55555": demo("wangfang"), "33333": demo("xiaolin")}, out
    assert run.returncode == 1 and "Own Name_66666" in out and "冒充" in out, out
    notes = json.loads((submitted / "55555" / ASSIGNMENT / "lms.json").read_text(encoding="utf-8"))["notes"]
    assert any("ch19 作业" in note for note in notes), notes
    assert "homework" in out and "ch19 作业" in out, "the TA is told where each was found"


def test_a_replaced_notebook_is_reported(tmp_path: Path) -> None:
    """A second collect after a resubmission replaces the notebook and says so; an unchanged one is not mentioned."""
    submitted = tmp_path / "submitted"
    first = collect(str(canvas_zip(tmp_path / "canvas.zip")), "--submitted", str(submitted))
    assert first.returncode == 0 and "已替换" not in first.stderr, first.stderr
    again = tmp_path / "again.zip"
    with zipfile.ZipFile(again, "w") as archive:
        archive.writestr(zipfile.ZipInfo("xiaolin_1001_5009_attention-1.ipynb", (2025, 10, 3, 9, 30, 0)), demo("sunmei"))
        archive.writestr(zipfile.ZipInfo("lileili_LATE_1002_5003_attention.ipynb", (2025, 10, 2, 9, 30, 0)), demo("lilei"))
    run = collect(str(again), "--submitted", str(submitted))
    assert run.returncode == 0, run.stdout + run.stderr
    out = " ".join(run.stderr.split())
    assert placed(submitted)["1001"] == demo("sunmei")
    assert "已替换" in out and f"1001/{ASSIGNMENT}/attention.ipynb" in out and "2025-10-01 09:30:00" in out, out
    assert "xiaolin_1001_5009_attention-1.ipynb" in out and "1002/" not in out, out


def test_the_roster_belongs_to_one_submitted_folder(tmp_path: Path) -> None:
    """Two classes collected into folders that share a parent: each folder's names are its own."""
    from attnkit.intake.lms_collect import read_roster

    moodle = tmp_path / "moodle"
    write(moodle / "Zhao Qiang_2001_assignsubmission_file_" / "attention.ipynb", demo("zhaoqiang"), BASE_TIME)
    assert collect(str(canvas_zip(tmp_path / "canvas.zip")), "--submitted", str(tmp_path / "class-a")).returncode == 0
    assert collect(str(moodle), "--submitted", str(tmp_path / "class-b")).returncode == 0
    assert read_roster(tmp_path / "class-a") == {"1001": "xiaolin", "1002": "lileili"}
    assert read_roster(tmp_path / "class-b") == {"2001": "Zhao Qiang"}
    with open(tmp_path / "roster.csv", encoding="utf-8", newline="") as handle:
        rows = {(row["submitted"], row["student_id"]) for row in csv.DictReader(handle)}
    assert rows == {("class-a", "1001"), ("class-a", "1002"), ("class-b", "2001")}
