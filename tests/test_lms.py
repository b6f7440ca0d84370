"""`attnkit collect`: a Canvas and a Moodle download (folder and zip) become submitted/ and grade.

The downloads are made the way the LMSs name files, from the demo class's notebooks: a Canvas
flat folder with a resubmission (``attention-1.ipynb`` is the newer one), a Canvas zip, a Moodle
folder per student and a Moodle zip; plus what must not be placed (a PDF, a symlink, a zip-slip
entry, a foreign notebook name), each of which must be reported with a non-zero exit.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEMO = ROOT / "examples" / "submitted"
ASSIGNMENT = "ch19-attention"


def demo(student: str) -> bytes:
    return (DEMO / student / ASSIGNMENT / "attention.ipynb").read_bytes()


def attnkit(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "attnkit", *args], capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)


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
    run = subprocess.CompletedProcess(canvas.args, max(canvas.returncode, moodle.returncode), canvas.stdout + moodle.stdout,
                                      canvas.stderr + moodle.stderr)
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


@pytest.mark.e2e
def test_the_collected_class_grades(collected: dict, tmp_path: Path) -> None:
    out = tmp_path / "graded"
    run = attnkit("grade", "--submitted", str(collected["submitted"]), "--out", str(out), "--jobs", "2", "--quiet")
    assert run.returncode == 0, run.stderr[-3000:]
    with open(out / "grades.csv", encoding="utf-8", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"1001", "1002", "1003", "2001", "2002", "2003"}
    assert float(rows["1001"]["score"]) == 100, "the newer resubmission was graded"
    assert float(rows["2003"]["score"]) == 100
    assert 0 < float(rows["1002"]["score"]) < 100
