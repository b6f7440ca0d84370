"""nbgrader's own commands on a course that `attnkit grade --gradebook` has graded.

A temporary copy of the course (nbgrader_config.py, solutions/, assignments/) and three students
of the demo class (one with nbgrader's timestamp.txt). After a real `attnkit grade`, the real
`nbgrader generate_assignment --force`, `autograde`, `generate_feedback` and `export` run on it,
and formgrader's REST API is queried on a real Jupyter server started headless (stopped by PID).
Nothing is mocked; the SQLite gradebook is the one nbgrader reads.

One student (zhaoqiang) also wrote markup aimed at the TA's browser into a markdown cell (the
issue's payloads); the autograded notebook is rendered with formgrader's own template.
"""

from __future__ import annotations

import csv
import hashlib
import html.parser
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from commands import BIN, run_command, tool_env

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch19-attention"
STUDENTS = ("xiaolin", "lilei", "zhaoqiang")
MANUAL = {"manual_q1_values", "manual_q3_zero_score", "manual_q9_empty_row", "manual_q10_no_causal"}
TOKEN = "attnkit-test-token"
# What a student writes for the TA's browser: a script that reaches the Jupyter API, an event
# handler, a javascript: link, an SVG attachment (with its own script), raw HTML in a raw cell.
MARKER = "attnkitPwned"
PAYLOAD = (
    f"我的解释。<script>fetch('/api/terminals', {{method: 'POST'}}).then({MARKER})</script>\n\n"
    f'<img src=x onerror="{MARKER}()"> [看这里](javascript:{MARKER}()) ![图](attachment:evil.svg)'
)
EVIL_SVG = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIG9ubG9hZD0iYXR0bmtpdFB3bmVkKCkiLz4="  # <svg onload=attnkitPwned()>


def run(course: Path, *command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_command(command, cwd=course, timeout=timeout)


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return run(course, str(BIN / "nbgrader"), *args)


def grade(course: Path) -> subprocess.CompletedProcess:
    result = run(course, str(BIN / "attnkit"), "grade", "--submitted", "submitted", "--out", "graded", "--jobs", "2", "--gradebook", "gradebook.db")
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def export(course: Path) -> dict[str, dict[str, str]]:
    result = nbgrader(course, "export", "--to", "export.csv")
    assert result.returncode == 0, result.stdout + result.stderr
    return csv_rows(course / "export.csv")


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "assignments", course / "assignments")
    for student in STUDENTS:
        shutil.copytree(ROOT / "examples" / "submitted" / student / ASSIGNMENT, course / "submitted" / student / ASSIGNMENT)
    (course / "submitted" / "lilei" / ASSIGNMENT / "timestamp.txt").write_text("2026-03-01 08:30:00.000000 UTC\n")
    (course / "submitted" / "lilei" / ASSIGNMENT / "notes.txt").write_text("一份学生自己的文件\n")
    hostile = course / "submitted" / "zhaoqiang" / ASSIGNMENT / "attention.ipynb"
    notebook = json.loads(hostile.read_text(encoding="utf-8"))
    notebook["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "source": PAYLOAD, "attachments": {"evil.svg": {"image/svg+xml": EVIL_SVG}}})
    notebook["cells"].insert(2, {"cell_type": "raw", "metadata": {"format": "text/html"}, "source": f"<script>{MARKER}()</script>"})
    hostile.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    grade(course)
    return course


@pytest.mark.e2e
def test_grades_are_in_the_gradebook_with_timestamps(course: Path) -> None:
    rows, exported = csv_rows(course / "graded" / "grades.csv"), export(course)
    assert set(exported) == set(STUDENTS)
    for student in STUDENTS:
        assert float(exported[student]["score"]) == float(rows[student]["total"]) == float(rows[student]["score"])
        assert rows[student]["total_source"] == "gradebook" and float(rows[student]["total_max"]) == float(exported[student]["max_score"]) == 108
    assert exported["lilei"]["timestamp"].startswith("2026-03-01 08:30:00")
    assert exported["xiaolin"]["timestamp"], "a submission without timestamp.txt keeps its file time"


@pytest.mark.e2e
def test_autograded_holds_what_nbgrader_autograde_would(course: Path) -> None:
    """Beside each notebook: timestamp.txt (the student's own, or the recorded time) and the
    submission's other files; the notebook carries attnkit's results for generate_feedback."""
    autograded = course / "autograded"
    assert (autograded / "lilei" / ASSIGNMENT / "timestamp.txt").read_text().startswith("2026-03-01 08:30:00")
    assert (autograded / "lilei" / ASSIGNMENT / "notes.txt").read_text() == "一份学生自己的文件\n"
    exported = export(course)
    for student in STUDENTS:
        folder = autograded / student / ASSIGNMENT
        stamp = (folder / "timestamp.txt").read_text().strip()
        assert stamp.endswith(" UTC") and stamp[:19] == exported[student]["timestamp"][:19], student
        carried = json.loads((folder / "attention.ipynb").read_text(encoding="utf-8"))["metadata"]["attnkit"]["results"]
        results = json.loads((course / "graded" / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
        assert carried["score"] == results["score"] and carried["diagnoses"] == results["diagnoses"]


class Markup(html.parser.HTMLParser):
    """What a browser would run: script bodies, on* handlers, and script URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.handlers: list[str] = []
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        for name, value in attrs:
            if name.startswith("on"):
                self.handlers.append(f"{tag} {name}={value}")
            script_url = value and value.strip().lower().startswith(("javascript:", "data:text/html", "data:image/svg"))
            if name in ("href", "src", "action", "formaction", "xlink:href") and script_url:
                self.urls.append(f"{tag} {name}={value}")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def formgrade_page(course: Path, student: str) -> str:
    """The page formgrader's SubmissionHandler renders from autograded/ (its exporter and template)."""
    code = f"""
import sys
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config
from nbgrader.server_extensions.formgrader import handlers
c = Config()
c.HTMLExporter.template_name = "formgrade"
c.HTMLExporter.extra_template_basedirs = [handlers.template_path]
resources = {{"assignment_id": "{ASSIGNMENT}", "notebook_id": "attention", "submission_id": "s", "index": 0, "total": 1,
             "base_url": "", "student": "{student}", "last_name": None, "first_name": None, "notebook_path": "x"}}
html, _ = HTMLExporter(config=c).from_filename(sys.argv[1], resources=resources)
sys.stdout.write(html)
"""
    result = run(course, sys.executable, "-c", code, str(course / "autograded" / student / ASSIGNMENT / "attention.ipynb"))
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.e2e
def test_formgrader_page_runs_no_student_markup(course: Path) -> None:
    """Rendered as formgrader renders it, the student's markdown, raw cell and attachment run nothing."""
    page = formgrade_page(course, "zhaoqiang")
    assert "我的解释" in page, "the student's text is still shown to the TA"
    found = Markup()
    found.feed(page)
    assert not [s for s in found.scripts if MARKER in s or "/api/terminals" in s], "a student's script is in a <script>"
    assert not [h for h in found.handlers if MARKER in h], found.handlers
    assert not found.urls, found.urls
    assert EVIL_SVG not in page


@pytest.mark.e2e
def test_generate_assignment_force_keeps_the_release(course: Path) -> None:
    before = tree(course / "assignments")
    result = nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    assert tree(course / "assignments").keys() == before.keys()
    assert (course / "assignments" / ASSIGNMENT / "attention.ipynb").is_file()


@pytest.mark.e2e
def test_autograde_gives_the_same_scores_and_deletes_nothing(course: Path) -> None:
    submitted = tree(course / "submitted")
    before = csv_rows(course / "graded" / "grades.csv")
    result = nbgrader(course, "autograde", ASSIGNMENT, "--force")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert tree(course / "submitted") == submitted
    for student in STUDENTS:
        assert (course / "autograded" / student / ASSIGNMENT / "attention.ipynb").is_file()
    exported = export(course)
    for student in STUDENTS:
        assert float(exported[student]["score"]) == float(before[student]["score"]), student
    assert exported["lilei"]["timestamp"].startswith("2026-03-01 08:30:00")


@pytest.mark.e2e
def test_generate_feedback_writes_the_kits_page(course: Path) -> None:
    """nbgrader's feedback for each student is the kit's page: its score, parts and diagnoses."""
    result = nbgrader(course, "generate_feedback", ASSIGNMENT, "--force")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for student in STUDENTS:
        page = (course / "feedback" / student / ASSIGNMENT / "attention.html").read_text(encoding="utf-8")
        results = json.loads((course / "graded" / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
        assert f'<p class="score" id="score">{results["score"]:g} / {results["max_score"]:g}</p>' in page, student
        assert "Content-Security-Policy" in page and "<script" not in page
        for diagnosis in results["diagnoses"]:
            assert f'data-diagnosis="{diagnosis}"' in page, (student, diagnosis)
    # nbgrader autograde (the test above) rebuilt autograded/ by its own rules: it copies the
    # submission's timestamp.txt, and only lilei's submission has one.
    assert (course / "feedback" / "lilei" / ASSIGNMENT / "timestamp.txt").read_text().startswith("2026-03-01 08:30:00")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def api(port: int, path: str, method: str = "GET", body: dict | None = None) -> object:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/formgrader/api/{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read().decode())


@pytest.fixture(scope="module")
def formgrader(course: Path) -> object:
    port = free_port()
    log = open(course / "formgrader.log", "w")
    server = subprocess.Popen(
        [
            str(BIN / "jupyter"),
            "server",
            "--no-browser",
            "--allow-root",
            f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={course}",
        ],
        cwd=course,
        env=tool_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                api(port, "status")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError((course / "formgrader.log").read_text()[-3000:]) from None
                time.sleep(0.5)
        yield port
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()


@pytest.mark.e2e
def test_formgrader_flags_only_the_free_text_cells(course: Path, formgrader: int) -> None:
    submissions = api(formgrader, f"submitted_notebooks/{ASSIGNMENT}/attention")
    assert {s["student"] for s in submissions} == set(STUDENTS)
    for submission in submissions:
        grades = api(formgrader, f"grades?submission_id={submission['id']}")
        flagged = {g["name"] for g in grades if g["needs_manual_grade"]}
        assert flagged <= MANUAL, f"{submission['student']}: autograded cells flagged {flagged - MANUAL}"
        assert all(g["auto_score"] is not None for g in grades if g["name"] not in MANUAL)


@pytest.mark.e2e
def test_manual_points_reach_grades_csv_and_export_alike(course: Path, formgrader: int) -> None:
    submission = next(s for s in api(formgrader, f"submitted_notebooks/{ASSIGNMENT}/attention") if s["student"] == "lilei")
    grade_id = next(g["id"] for g in api(formgrader, f"grades?submission_id={submission['id']}") if g["name"] == "manual_q1_values")
    saved = api(formgrader, f"grade/{grade_id}", "PUT", {"manual_score": 2, "extra_credit": None})
    assert saved["manual_score"] == 2
    grade(course)  # nothing to regrade; the totals are read back from the gradebook
    rows, exported = csv_rows(course / "graded" / "grades.csv"), export(course)
    assert rows["lilei"]["manual_score"] == "2"
    assert float(rows["lilei"]["total"]) == float(rows["lilei"]["score"]) + 2
    for student in STUDENTS:
        assert float(rows[student]["total"]) == float(exported[student]["score"]), student
    # A re-run of attnkit keeps the TA's score.
    assert api(formgrader, f"grade/{grade_id}")["manual_score"] == 2


@pytest.mark.e2e
def test_a_refused_cell_change_stops_before_touching_the_release(course: Path) -> None:
    source = course / "solutions" / ASSIGNMENT / "attention.ipynb"
    original = source.read_bytes()
    notebook = json.loads(original)
    notebook["cells"].append(
        {
            "cell_type": "markdown",
            "metadata": {
                "nbgrader": {"grade": True, "grade_id": "manual_extra", "locked": False, "points": 1, "schema_version": 3, "solution": True, "task": False}
            },
            "source": "新题",
        }
    )
    source.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    before = tree(course / "assignments")
    try:
        result = nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    finally:
        source.write_bytes(original)
    assert result.returncode != 0
    assert "manual_extra" in result.stderr and "nbgrader db assignment remove" in result.stderr
    assert tree(course / "assignments") == before


@pytest.mark.e2e
def test_a_failing_generate_assignment_leaves_the_release_as_it_was(course: Path) -> None:
    """nbgrader --force deletes the release before it fails on a notebook it cannot read; it is put back."""
    source = course / "solutions" / ASSIGNMENT / "attention.ipynb"
    original = source.read_bytes()
    notebook = json.loads(original)
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "check_masking":
            cell["metadata"]["nbgrader"]["schema_version"] = 99  # "a newer nbgrader": it refuses
    source.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    before = tree(course / "assignments")
    try:
        result = nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    finally:
        source.write_bytes(original)
    assert result.returncode != 0
    assert "已恢复原样" in result.stderr
    assert tree(course / "assignments") == before


@pytest.mark.parametrize(
    ("variables", "gradebook"),
    [
        ((), "graded/demo-gradebook.db"),  # the demo class: a gradebook of its own
        (("OUT=elsewhere",), "elsewhere/demo-gradebook.db"),
        (("SUBMITTED=submitted",), "gradebook.db"),  # a real class: the course's gradebook
        (("GRADEBOOK=course.db",), "course.db"),  # said explicitly: that one
    ],
)
def test_the_demo_class_never_enters_the_course_gradebook(variables: tuple[str, ...], gradebook: str) -> None:
    # --no-print-directory: under `make test` (MAKELEVEL set) make would end with "Leaving directory".
    result = run_command(["make", "--no-print-directory", "-n", "grade", *variables], cwd=ROOT, env=os.environ, timeout=60)
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip().splitlines()[-1]
    assert command.endswith(f"--gradebook {gradebook}"), command


# -- a renamed upload in nbgrader's view ------------------------------------------------------------
RENAMED = {"browser_copy": "attention (1).ipynb", "other_case": "Attention.ipynb"}


@pytest.fixture(scope="module")
def renamed_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A course whose students uploaded the notebook under another name, graded with the gradebook."""
    course = tmp_path_factory.mktemp("renamed")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "assignments", course / "assignments")
    for student, name in RENAMED.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        shutil.copy(ROOT / "examples" / "submitted" / "lilei" / ASSIGNMENT / "attention.ipynb", folder / name)
    grade(course)
    return course


@pytest.mark.parametrize("student", sorted(RENAMED))
@pytest.mark.e2e
def test_a_renamed_notebook_is_in_autograded_under_the_assignments_name(renamed_course: Path, student: str) -> None:
    """autograded/ holds the graded bytes as attention.ipynb (results.json's stored_as), so that
    nbgrader's generate_feedback finds it and writes the kit's page for this student."""
    results = json.loads((renamed_course / "graded" / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
    assert results["notebooks"][0]["stored_as"] == "attention.ipynb" and results["notebooks"][0]["name"] == RENAMED[student]
    stored = renamed_course / "autograded" / student / ASSIGNMENT / "attention.ipynb"
    assert stored.is_file(), sorted(p.name for p in stored.parent.iterdir()) if stored.parent.is_dir() else "no autograded folder"
    assert json.loads(stored.read_text(encoding="utf-8"))["metadata"]["attnkit"]["results"]["score"] == results["score"]
    result = nbgrader(renamed_course, "generate_feedback", ASSIGNMENT, "--student", student, "--force")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = (renamed_course / "feedback" / student / ASSIGNMENT / "attention.html").read_text(encoding="utf-8")
    assert f'<p class="score" id="score">{results["score"]:g} / {results["max_score"]:g}</p>' in page
    for diagnosis in results["diagnoses"]:
        assert f'data-diagnosis="{diagnosis}"' in page, diagnosis
