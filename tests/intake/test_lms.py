"""`attnkit collect`: a Canvas and a Moodle download (folder and zip) become submitted/ and grade;
the grade gives back one bulk-feedback zip per LMS, named as that LMS's own importer reads it.

The downloads are made the way the LMSs name files, from the demo class's notebooks: a Canvas
flat folder with a resubmission (``attention-1.ipynb`` is the newer one), a Canvas zip, a Moodle
folder per student and a Moodle zip; plus what must not be placed (a PDF, a symlink, a zip-slip
entry, a foreign notebook name), each of which must be reported with a non-zero exit.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path, PurePosixPath

import pytest

import commands
from commands import run_command, tool_env

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "submitted"
ASSIGNMENT = "ch19-attention"


def demo(student: str) -> bytes:
    return (DEMO / student / ASSIGNMENT / "attention.ipynb").read_bytes()


def attnkit(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    return commands.attnkit(*args, env=tool_env(**({"COLUMNS": columns} if columns else {})))


def write(path: Path, data: bytes, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("lms")
    now = time.time()
    # Canvas, flat folder: 1001 submitted a broken notebook, then the perfect one (attention-1).
    canvas = base / "canvas"
    write(canvas / "xiaolin_1001_5001_attention.ipynb", demo("sunmei"), now - 7200)
    write(canvas / "xiaolin_1001_5002_attention-1.ipynb", demo("xiaolin"), now - 3600)
    write(canvas / "lileili_LATE_1002_5003_attention.ipynb", demo("lilei"), now - 600)
    write(canvas / "wangfang_1003_5004_report.pdf", b"%PDF-1.4", now)
    write(canvas / "chenjing_1004_5005_my_attention_final.ipynb", demo("chenjing"), now)
    (canvas / "zhao_1005_5006_attention.ipynb").symlink_to(DEMO / "zhaoqiang" / ASSIGNMENT / "attention.ipynb")
    # Canvas, zip of the same kind of names.
    canvas_zip = base / "canvas.zip"
    with zipfile.ZipFile(canvas_zip, "w") as archive:
        archive.writestr("wangfang_1003_5007_attention.ipynb", demo("wangfang"))
        archive.writestr("../../evil_1006_5008_attention.ipynb", demo("xiaolin"))
    # Moodle: one folder per student.
    moodle = base / "moodle"
    write(moodle / "Zhao Qiang_2001_assignsubmission_file_" / "attention.ipynb", demo("zhaoqiang"), now)
    write(moodle / "Chen Jing_2002_assignsubmission_file_" / "attention.ipynb", demo("chenjing"), now)
    write(moodle / "Chen Jing_2002_assignsubmission_onlinetext_" / "onlinetext.html", b"<p>hi</p>", now)
    # Moodle zip, folders inside.
    moodle_zip = base / "moodle.zip"
    with zipfile.ZipFile(moodle_zip, "w") as archive:
        archive.writestr("Sun Mei_2003_assignsubmission_file_/attention.ipynb", demo("xiaolin"))
    return {"base": base, "canvas": canvas, "canvas_zip": canvas_zip, "moodle": moodle, "moodle_zip": moodle_zip}


@pytest.fixture(scope="module")
def collected(downloads: dict[str, Path]) -> dict:
    # One LMS per collect: a class from two LMSs is collected twice into the same folder.
    submitted = downloads["base"] / "submitted"
    canvas = attnkit("collect", str(downloads["canvas"]), str(downloads["canvas_zip"]), "--submitted", str(submitted))
    moodle = attnkit("collect", str(downloads["moodle"]), str(downloads["moodle_zip"]), "--submitted", str(submitted))
    run = subprocess.CompletedProcess(canvas.args, max(canvas.returncode, moodle.returncode), canvas.stdout + moodle.stdout, canvas.stderr + moodle.stderr)
    return {"run": run, "submitted": submitted}


def test_every_notebook_lands_in_nbgraders_layout(collected: dict) -> None:
    submitted = collected["submitted"]
    placed = sorted(str(p.relative_to(submitted)) for p in submitted.rglob("*.ipynb"))
    assert placed == [f"{sid}/{ASSIGNMENT}/attention.ipynb" for sid in ("1001", "1002", "1003", "2001", "2002", "2003")]
    # The newest resubmission is kept, with nbgrader's timestamp.txt.
    assert (submitted / "1001" / ASSIGNMENT / "attention.ipynb").read_bytes() == demo("xiaolin")
    assert (submitted / "1001" / ASSIGNMENT / "timestamp.txt").read_text().strip().endswith("UTC")


def test_every_file_not_placed_is_reported_and_the_exit_code_says_so(collected: dict) -> None:
    run = collected["run"]
    assert run.returncode == 1, run.stderr
    out = " ".join(run.stderr.split())
    for name in ("report.pdf", "my_attention_final.ipynb", "zhao_1005_5006_attention.ipynb", "evil_1006_5008", "onlinetext.html"):
        assert name in out, name
    assert "符号链接" in out and "zip-slip" in out
    assert "xiaolin_1001_5001_attention.ipynb" in out, "the superseded resubmission is named"
    # Nothing escaped the target.
    assert not list(collected["submitted"].parent.parent.glob("**/evil*"))


@pytest.fixture(scope="module")
def graded(collected: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The collected class, graded (not --quiet: the console's table is part of what is checked)."""
    out = tmp_path_factory.mktemp("graded") / "graded"
    run = attnkit("grade", "--submitted", str(collected["submitted"]), "--out", str(out), "--jobs", "2", columns="200")
    return {"run": run, "out": out, "submitted": collected["submitted"]}


@pytest.mark.e2e
def test_the_collected_class_grades(graded: dict) -> None:
    run, out = graded["run"], graded["out"]
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out / "grades.csv", encoding="utf-8", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"1001", "1002", "1003", "2001", "2002", "2003"}
    assert float(rows["1001"]["score"]) == 100, "the newer resubmission was graded"
    assert float(rows["2003"]["score"]) == 100
    assert 0 < float(rows["1002"]["score"]) < 100


# -- the way back: each LMS's bulk upload of feedback files --------------------------------------
CANVAS_ZIP = "lms-feedback-canvas-ch19-attention.zip"
MOODLE_ZIP = "lms-feedback-moodle-ch19-attention.zip"


def canvas_reads(name: str) -> tuple[str, str] | None:
    """(user id, file id) as Canvas's Upload Submissions reads a file of the zip
    (Assignment#infer_comment_context_from_filename: the base name split at "_", its first two
    all-digit fields)."""
    fields = [part for part in PurePosixPath(name).name.split("_") if re.fullmatch(r"[0-9]+", part)]
    return (fields[0], fields[1]) if len(fields) >= 2 else None


def moodle_reads(name: str, participants: set[str]) -> tuple[str, str] | None:
    """(participant id, file name) as Moodle's "Upload multiple feedback files in a zip" reads an
    entry (assignfeedback_file_zip_importer::is_valid_filename_for_import: each path part
    exploded at "_" into at most 5 fields; the first whose 2nd field is a participant, with a
    plugin in fields 3 and 4, names the student; the rest is the file's name)."""
    parts = name.split("/")
    while parts:
        info = parts.pop(0).split("_", 4)
        if len(info) < 4 or not info[1].isdigit() or info[1] not in participants:
            continue
        if (info[2], info[3]) not in (("assignsubmission", "file"), ("assignfeedback", "file")):
            continue
        return info[1], "/".join([info[4] if len(info) == 5 else "", *parts]).lstrip("/")
    return None


def zip_entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def page_of(graded: dict, student: str) -> bytes:
    return (graded["out"] / "students" / student / ASSIGNMENT / "feedback.html").read_bytes()


@pytest.mark.e2e
def test_grade_writes_canvas_bulk_feedback_named_as_canvas_reads_it(graded: dict) -> None:
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    entries = zip_entries(graded["out"] / CANVAS_ZIP)
    # The ids of each student's placed (newest) file, as the download named it.
    assert sorted(entries) == ["lileili_LATE_1002_5003_feedback.html", "wangfang_1003_5007_feedback.html", "xiaolin_1001_5002_feedback.html"]
    for name, data in entries.items():
        user, file_id = canvas_reads(name)
        assert data == page_of(graded, user), name
        record = json.loads((graded["submitted"] / user / ASSIGNMENT / "lms.json").read_text(encoding="utf-8"))
        assert record["lms_file_id"] == file_id, "the file of the submission Canvas holds now"
    assert CANVAS_ZIP in " ".join(graded["run"].stderr.split())


@pytest.mark.e2e
def test_grade_writes_moodle_bulk_feedback_named_as_moodle_reads_it(graded: dict) -> None:
    entries = zip_entries(graded["out"] / MOODLE_ZIP)
    assert sorted(entries) == [
        "Chen Jing_2002_assignsubmission_file_/feedback.html",
        "Sun Mei_2003_assignsubmission_file_/feedback.html",
        "Zhao Qiang_2001_assignsubmission_file_/feedback.html",
    ]
    for name, data in entries.items():
        participant, file_name = moodle_reads(name, {"2001", "2002", "2003"})
        assert file_name == "feedback.html" and data == page_of(graded, participant), name


@pytest.mark.e2e
def test_lms_feedback_command_rewrites_the_zips(graded: dict, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    shutil.copytree(graded["out"], out)
    (out / CANVAS_ZIP).unlink()
    run = attnkit("lms-feedback", "--submitted", str(graded["submitted"]), "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    assert zip_entries(out / CANVAS_ZIP) == zip_entries(graded["out"] / CANVAS_ZIP)


@pytest.mark.e2e
def test_the_canvas_late_flag_is_shown_where_lateness_is(graded: dict) -> None:
    """1002's download name says _LATE_: its page, report.html and the console say so; 1001's do not."""
    late = page_of(graded, "1002").decode()
    assert 'id="late" data-late-source="lms"' in late and "Canvas" in late
    assert 'id="late"' not in page_of(graded, "1001").decode()
    results = json.loads((graded["out"] / "students" / "1002" / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
    assert results["lms_late"]["lms"] == "Canvas" and results["lms_late"]["submitted_utc"].endswith("UTC")
    report = (graded["out"] / "report.html").read_text(encoding="utf-8")
    rows = {student: next(row for row in report.split("<tr>") if f">{student}</a>" in row) for student in ("1001", "1002")}
    assert '<td class="late">Canvas 标记迟交</td>' in rows["1002"]
    assert '<td class="late"></td>' in rows["1001"]
    console = next(line for line in graded["run"].stderr.splitlines() if " 1002 " in line)
    assert "Canvas 标记迟交" in console, graded["run"].stderr[-3000:]


def record(folder: Path, **fields: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lms.json").write_text(json.dumps(fields), encoding="utf-8")
    (folder.parents[2] / "out" / "students" / folder.parent.name / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
    (folder.parents[2] / "out" / "students" / folder.parent.name / ASSIGNMENT / "feedback.html").write_text(f"page of {folder.parent.name}")


def test_no_record_can_send_a_page_to_a_classmates_slot(tmp_path: Path) -> None:
    """Records a student could have slipped into her own folder (the nbgrader exchange copies any
    file she submits) name only her own slot, whatever they claim; a name is never read for an id."""
    from attnkit.course.lms_upload import write_lms_feedback

    submitted = tmp_path / "submitted"
    record(submitted / "1001" / ASSIGNMENT, lms="canvas", student_id="1001", name="alice", late=False, lms_file_id="5001")
    # 1002 claims to be 1001, with 1001's file: refused, and said so.
    record(submitted / "1002" / ASSIGNMENT, lms="canvas", student_id="1001", name="alice", late=False, lms_file_id="5001")
    # 1003's name holds digit fields and an underscore ("1001_5001"): a stand-in is used for it.
    record(submitted / "1003" / ASSIGNMENT, lms="canvas", student_id="1003", name="1001_5001", late=False, lms_file_id="5003")
    record(submitted / "1004" / ASSIGNMENT, lms="canvas", student_id="1004", name="1001", late=True, lms_file_id="5004")
    # Non-ASCII digits are digits to Python's \d, not to Canvas: no slot.
    record(submitted / "1005" / ASSIGNMENT, lms="canvas", student_id="1005", name="eve", late=False, lms_file_id="٥٠٠٥")
    # Blackboard has no bulk upload: counted for the TA, in no zip.
    record(submitted / "1006" / ASSIGNMENT, lms="blackboard", student_id="1006", name="", late=None)
    results = [{"student_id": s, "assignment": ASSIGNMENT} for s in ("1001", "1002", "1003", "1004", "1005", "1006")]
    packed = write_lms_feedback(tmp_path / "out", submitted, results)
    entries = zip_entries(tmp_path / "out" / CANVAS_ZIP)
    assert {canvas_reads(name) for name in entries} == {("1001", "5001"), ("1003", "5003"), ("1004", "5004")}
    for name, data in entries.items():
        assert data.decode() == f"page of {canvas_reads(name)[0]}", name
    assert sorted(where for where, _reason in packed.left_out) == [f"1002/{ASSIGNMENT}", f"1005/{ASSIGNMENT}"]
    assert packed.by_hand == {"Blackboard": [f"1006/{ASSIGNMENT}"]}
    assert not (tmp_path / "out" / MOODLE_ZIP).exists()


@pytest.mark.browser
@pytest.mark.e2e
def test_the_late_notice_is_on_the_page_a_browser_shows(graded: dict, tmp_path: Path) -> None:
    """1002's page as headless Chromium builds it: the notice names Canvas and the submission time,
    and takes nothing off the score (Canvas applies its own policy)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    page = graded["out"] / "students" / "1002" / ASSIGNMENT / "feedback.html"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = run_command([chromium, *flags, "--dump-dom", page.as_uri()], env=os.environ, timeout=120).stdout
    notice = re.search(r'<div class="problem late" id="late" data-late-source="lms">(.*?)</div>', dom)
    assert notice, dom[:2000]
    results = json.loads((page.parent / "results.json").read_text(encoding="utf-8"))
    assert "Canvas 把这份提交标记为迟交" in notice[1] and results["lms_late"]["submitted_utc"] in notice[1]
    assert f'<p class="score" id="score">{results["score"]:g} / {results["max_score"]:g}</p>' in dom


@pytest.mark.e2e
def test_grade_says_what_it_does_after_the_bar_and_names_the_students(graded: dict) -> None:
    """Issue 42: after the progress bar, grade says what it writes (pages, then the LMS zips)
    instead of sitting silent; the table shows roster.csv's names under the ids."""
    said = graded["run"].stderr
    assert "评分完毕；正在写出 grades.csv、report.html 与每名学生的反馈页面" in said, said[-3000:]
    assert "正在写出学习平台的批量反馈压缩包" in said, said[-3000:]
    assert said.index("评分完毕") < said.index("正在写出学习平台") < said.index("评分结果"), said[-3000:]
    lines = said.splitlines()
    row = lines.index(next(line for line in lines if " 1001 " in line))
    assert lines[row + 1].split()[0] == "xiaolin", "\n".join(lines[row - 2 : row + 3])
