"""The kit's feedback reaches students through nbgrader's own exchange, as a course runs it.

Two unix users are created for the test (useradd; removed at the end). The instructor (root)
releases the assignment into an exchange folder in a temporary directory; each student fetches
it, writes answers (a demo submission: one with a catalogued mistake, one correct), executes the
notebook with a real kernel (jupyter nbconvert --execute) and submits. After the due date moves
past the first submission, the second student submits late. The instructor collects, grades with
``attnkit grade --gradebook``, then runs nbgrader's generate_feedback and release_feedback, and
each student runs ``nbgrader fetch_feedback``. What they fetch must be the kit's page: the
diagnosis for the one with the mistake, the late penalty (nbgrader's LateSubmissionPlugin,
``zero``) and the total after it for the late one. Nothing is mocked.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from devtools import CHROMIUM, FLAGS  # the one Chromium command line of the browser tests
from PIL import Image

from ta_machine import lend_to_others

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ASSIGNMENT = "ch19-attention"
DEMO = ROOT / "examples" / "submitted"

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.browser, pytest.mark.e2e]

# Each student's answers: a demo submission. wangfang masks by multiplying (catalogued).
ANSWERS = {"mistake": "wangfang", "late": "xiaolin"}


def clean_env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "LANG": "C.UTF-8"}


# What the students run is this checkout's (its venv's nbgrader and jupyter, the interpreter they
# start): where the checkout or the interpreter lies in a folder others cannot pass (a clone under
# `mktemp -d`, pyenv under root's 0700 home), ta_machine.lend_to_others lends them, inside a private
# mount namespace of the student's command only.
LENT = [Path(os.path.realpath(sys.executable)).parents[1], BIN.parent]


def as_user(user: str, home: Path, *command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command run by the student's own unix user, from their home, with a clean environment."""
    argv = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in clean_env(home).items()), *command]
    result = subprocess.run(lend_to_others(argv, LENT), cwd=home, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{user}: {' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def instructor(course: Path, *command: str, timeout: float = 900) -> subprocess.CompletedProcess:
    # A wide console: the summary table's rows stay one line each.
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", COLUMNS="200")
    result = subprocess.run(list(command), cwd=course, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def nbgrader_utc(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


@pytest.fixture(scope="module")
def exchange_run() -> dict:
    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.fail("this test creates unix users: run it as root (useradd)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-exchange-"))
    base.chmod(0o755)  # the students must reach their homes and the exchange below it
    suffix = f"{os.getpid() % 100000}"
    users = {role: f"ak{role[0]}{suffix}" for role in ANSWERS}  # e.g. akm12345, akl12345
    homes = {role: base / "home" / users[role] for role in ANSWERS}
    exchange = base / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)
    course = base / "course"
    course.mkdir()
    created: list[str] = []
    try:
        (base / "home").mkdir()
        (base / "home").chmod(0o755)
        for role, user in users.items():
            subprocess.run(["useradd", "--create-home", "--home-dir", str(homes[role]), "--shell", "/bin/sh", user], check=True, capture_output=True)
            created.append(user)
            (homes[role] / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = 'ch19'\n")
        shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", course / "solutions")
        shutil.copytree(ROOT / "assignments", course / "assignments")
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(exchange)!r}\nc.LateSubmissionPlugin.penalty_method = 'zero'  # a late submission scores 0\n")
        nbgrader = str(BIN / "nbgrader")
        due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(hours=1)
        instructor(course, nbgrader, "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(due)}")
        instructor(course, nbgrader, "release_assignment", ASSIGNMENT)
        # As the docs say an instructor does on a shared host: else `attnkit grade --gradebook` refuses.
        instructor(course, str(BIN / "attnkit"), "course", "secure")

        for role, user in users.items():
            home = homes[role]
            as_user(user, home, nbgrader, "fetch_assignment", ASSIGNMENT)
            notebook = home / ASSIGNMENT / "attention.ipynb"
            assert notebook.is_file(), f"{user} fetched no notebook"
            notebook.write_bytes((DEMO / ANSWERS[role] / ASSIGNMENT / "attention.ipynb").read_bytes())  # the student's answers
            shutil.chown(notebook, user, user)
            as_user(
                user,
                home,
                str(BIN / "jupyter"),
                "nbconvert",
                "--to",
                "notebook",
                "--execute",
                "--inplace",
                "--allow-errors",
                "--ExecutePreprocessor.timeout=120",
                str(notebook),
            )
            executed = json.loads(notebook.read_text(encoding="utf-8"))
            assert any(cell.get("outputs") for cell in executed["cells"] if cell["cell_type"] == "code"), "a real kernel ran it"
            if role == "late":
                # The due date passes between the two submissions.
                passed = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
                instructor(course, nbgrader, "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(passed)}")
                time.sleep(1.5)
            as_user(user, home, nbgrader, "submit", ASSIGNMENT)

        instructor(course, nbgrader, "collect", ASSIGNMENT)
        graded_run = instructor(
            course, str(BIN / "attnkit"), "grade", "--submitted", "submitted", "--out", "graded", "--jobs", "2", "--gradebook", "gradebook.db"
        )
        instructor(course, nbgrader, "generate_feedback", ASSIGNMENT)
        instructor(course, nbgrader, "release_feedback", ASSIGNMENT)
        fetched = {}
        for role, user in users.items():
            as_user(user, homes[role], nbgrader, "fetch_feedback", ASSIGNMENT)
            pages = sorted((homes[role] / ASSIGNMENT / "feedback").glob("*/attention.html"))
            assert len(pages) == 1, f"{user} fetched {pages}"
            fetched[role] = pages[0]
        exported = instructor(course, nbgrader, "export", "--to", str(course / "export.csv"))
        assert exported.returncode == 0
        yield {"course": course, "users": users, "fetched": fetched, "base": base, "console": graded_run.stdout + graded_run.stderr}
    finally:
        for user in created:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def graded(run: dict, role: str, name: str) -> Path:
    return run["course"] / "graded" / "students" / run["users"][role] / ASSIGNMENT / name


def test_fetched_feedback_is_the_kits_page_with_the_diagnosis(exchange_run: dict) -> None:
    """The student with the mistake fetches the kit's page: diagnosis, scores per part, heatmaps."""
    page = exchange_run["fetched"]["mistake"].read_text(encoding="utf-8")
    results = json.loads(graded(exchange_run, "mistake", "results.json").read_text(encoding="utf-8"))
    assert results["diagnoses"] == ["mask_by_multiplying"]
    assert 'data-diagnosis="mask_by_multiplying"' in page
    assert 'data-heatmap="causal-student"' in page
    assert f'<p class="score" id="score">{results["score"]:g} / {results["max_score"]:g}</p>' in page
    # What `make grade` wrote for the student (what `make check` shows them) is what they fetched.
    assert page == graded(exchange_run, "mistake", "feedback.html").read_text(encoding="utf-8")
    assert 'id="late"' not in page, "submitted before the due date"


def test_fetched_feedback_of_the_late_student_shows_the_penalty(exchange_run: dict) -> None:
    """The late student's page says how much lateness cost and the total after it, as nbgrader export has it."""
    import csv

    with open(exchange_run["course"] / "export.csv", encoding="utf-8", newline="") as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle)}
    user = exchange_run["users"]["late"]
    page = exchange_run["fetched"]["late"].read_text(encoding="utf-8")
    results = json.loads(graded(exchange_run, "late", "results.json").read_text(encoding="utf-8"))
    assert results["score"] > 0
    penalty, total = float(exported[user]["late_submission_penalty"]), float(exported[user]["score"])
    assert penalty > 0 and total == 0.0, exported[user]
    assert 'id="late"' in page
    assert f"迟交扣分：{penalty:g} 分" in page and f"扣分后的总分（nbgrader 成绩册）：{total:g} / {float(exported[user]['max_score']):g}" in page
    assert page == graded(exchange_run, "late", "feedback.html").read_text(encoding="utf-8")
    report = (exchange_run["course"] / "graded" / "report.html").read_text(encoding="utf-8")
    assert '<td class="late">' + f"{penalty:g}</td>" in report
    row = next(line for line in exchange_run["console"].splitlines() if user in line)
    assert "迟交扣分" in exchange_run["console"] and f"{penalty:g}" in row and f"{total:g}/{float(exported[user]['max_score']):g}" in row, row
    on_time = exchange_run["users"]["mistake"]
    assert float(exported[on_time]["late_submission_penalty"]) == 0.0


def test_screenshot_of_a_fetched_feedback_page(exchange_run: dict, tmp_path: Path) -> None:
    """The late student's fetched page in headless Chromium: the late notice and the scores render."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    shot = tmp_path / "fetched.png"
    page = exchange_run["fetched"]["late"]
    subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), "Chromium wrote no screenshot"
    if (ROOT / "tests" / "artifacts").is_dir():
        shutil.copy(shot, ROOT / "tests" / "artifacts" / "nbgrader-fetched-feedback.png")
    image = Image.open(shot).convert("RGB")
    raw = image.tobytes()
    pixels = [tuple(raw[i : i + 3]) for i in range(0, len(raw), 3)]
    # The late notice is drawn in the page's problem colours (a red border on a pale red box).
    assert sum(1 for r, g, b in pixels if r > 150 and g < 60 and b < 60) > 200, "no red late notice rendered"
    assert sum(1 for r, g, b in pixels if r + g + b < 150) > 2000, "no dark (rendered) text"
