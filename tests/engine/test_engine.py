"""The grading engine end to end: real notebooks, real sandboxes, the real `attnkit grade` command."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import commands
from commands import BIN, run_command, tool_env
from contract import code_cell

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PERFECT = ROOT / "examples" / "submitted" / "xiaolin" / "ch19-attention" / "attention.ipynb"
ASSIGNMENT = "ch19-attention"


def attnkit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The console script, as a TA types it."""
    return commands.attnkit(*args, script=True, timeout=timeout)


def notebook() -> dict:
    return json.loads(PERFECT.read_text(encoding="utf-8"))


def cell_of(nb: dict, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def submit(folder: Path, student: str, content: dict | str | None, name: str = "attention.ipynb") -> None:
    target = folder / student / ASSIGNMENT
    target.mkdir(parents=True, exist_ok=True)
    if content is not None:
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        (target / name).write_text(text, encoding="utf-8")


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def results(out: Path, student: str) -> dict:
    return json.loads((out / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))


def build_class(submitted: Path) -> None:
    submit(submitted, "perfect", notebook())
    # Metadata stripped (a student's editor dropped nbgrader's cell metadata), cells reordered.
    stripped = notebook()
    for cell in stripped["cells"]:
        cell["metadata"] = {}
    submit(submitted, "stripped", stripped)
    # The masks cell moved after its use, an extra cell, a duplicated (and later fixed) function.
    edited = notebook()
    masks = cell_of(edited, "causal_allowed")
    edited["cells"].remove(masks)
    edited["cells"].append(masks)
    broken_copy = dict(cell_of(edited, "scaled_attention"), source="def scaled_attention(q, k, v, allowed=None):\n    return None\n")
    edited["cells"].insert(0, broken_copy)
    edited["cells"].append(code_cell("print('我的额外实验')"))
    # An extra experiment that fails at run time, inside a helper of the student's own.
    experiment = "def my_experiment():\n    import torch\n    return torch.ones(2, 3) @ torch.ones(2, 3)\n\nmy_experiment()\n"
    edited["cells"].append(code_cell(experiment))
    submit(submitted, "edited", edited)
    # A syntax error in the multi-head cell: the other parts still score.
    syntax = notebook()
    cell_of(syntax, "multi_head_attention")["source"] = "def multi_head_attention(x, w_q\n    oops"
    submit(submitted, "syntax", syntax)
    # The function cell deleted altogether.
    deleted = notebook()
    deleted["cells"].remove(cell_of(deleted, "padding_allowed"))
    submit(submitted, "deleted", deleted)
    submit(submitted, "invalid", "{ this is not json")
    submit(submitted, "empty", {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    submit(submitted, "missing", None)


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("engine")
    submitted, out = base / "submitted", base / "out"
    build_class(submitted)
    before = hashes(submitted)
    run = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--gradebook", str(base / "gradebook.db"))
    return {"base": base, "submitted": submitted, "out": out, "run": run, "before": before}


def test_batch_completes_and_every_student_has_a_row(graded: dict) -> None:
    """Does one run grade everyone, broken notebooks included, and exit 0?"""
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    rows = list(csv.DictReader((graded["out"] / "grades.csv").open(encoding="utf-8")))
    assert sorted(r["student_id"] for r in rows) == sorted(["perfect", "stripped", "edited", "syntax", "deleted", "invalid", "empty", "missing"])
    assert all(r["max_score"] == "100" for r in rows)
    assert list(rows[0])[:4] == ["student_id", "assignment", "score", "max_score"] and "check_multi_head" in rows[0]


def test_results_json_follows_gradescopes_schema(graded: dict) -> None:
    """Does results.json carry score, max_score, tests[name, score, max_score, output, status] and diagnoses?"""
    r = results(graded["out"], "perfect")
    assert r["score"] == r["max_score"] == 100
    assert r["diagnoses"] == []
    for test in r["tests"]:
        assert {"name", "score", "max_score", "output", "status", "diagnoses"} <= set(test)
        assert test["status"] == "passed"


@pytest.mark.parametrize("student", ["perfect", "stripped", "edited"])
def test_edited_reordered_or_stripped_notebooks_still_score_full(graded: dict, student: str) -> None:
    """Do stripped metadata, reordered and duplicated cells and extra cells cost nothing?"""
    assert results(graded["out"], student)["score"] == 100


def test_a_syntax_error_costs_only_its_part(graded: dict) -> None:
    """Does a syntax error in one function's cell lose only what depends on that function?"""
    r = results(graded["out"], "syntax")
    assert 0 < r["score"] < 100
    assert r["parts"]["check_scaled_attention"]["score"] == 20
    assert r["parts"]["check_multi_head"]["score"] == 0
    assert any(c["error_type"] == "SyntaxError" for c in r["cells"])


def test_a_failing_cell_shows_the_students_line(graded: dict) -> None:
    """Does a cell that fails show the student's own failing line (the innermost one of theirs,
    in a helper they wrote) and a syntax error its line, on the page, with the section title?"""
    edited = results(graded["out"], "edited")
    failed = [c for c in edited["cells"] if c["error_type"] == "RuntimeError"]
    assert failed and failed[0]["line"] == 3 and failed[0]["text"] == "return torch.ones(2, 3) @ torch.ones(2, 3)", failed
    page = (graded["out"] / "students" / "edited" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert "出错的是这个单元格的第 3 行" in page and "return torch.ones(2, 3) @ torch.ones(2, 3)" in page
    syntax = [c for c in results(graded["out"], "syntax")["cells"] if c["error_type"] == "SyntaxError"]
    assert syntax and syntax[0]["text"].startswith("def multi_head_attention(x, w_q"), syntax


def test_a_deleted_function_is_named(graded: dict) -> None:
    """Is a deleted function reported as missing, by name, while the rest scores?"""
    r = results(graded["out"], "deleted")
    assert r["parts"]["check_scaled_attention"]["score"] == 20
    assert any("padding_allowed" in t["output"] and t["status"] == "failed" for t in r["tests"])


@pytest.mark.parametrize("student, reason", [("invalid", "JSON"), ("empty", "没有任何代码"), ("missing", ".ipynb")])
def test_unreadable_submissions_score_zero_with_a_reason(graded: dict, student: str, reason: str) -> None:
    """Do an invalid file, an empty notebook and a missing notebook get 0 and a reason?"""
    r = results(graded["out"], student)
    assert r["score"] == 0 and r["max_score"] == 100
    assert any(reason in problem for problem in r["problems"]), r["problems"]
    assert (graded["out"] / "students" / student / ASSIGNMENT / "feedback.html").is_file()


def test_submissions_are_never_modified(graded: dict) -> None:
    """Are the submitted files byte-identical after grading?"""
    assert hashes(graded["submitted"]) == graded["before"]


def test_pages_are_written_in_chinese(graded: dict) -> None:
    """Do the feedback page and the class report exist and speak the chapter's language?"""
    page = (graded["out"] / "students" / "syntax" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert "多头注意力" in page and "SyntaxError" in page
    report = (graded["out"] / "report.html").read_text(encoding="utf-8")
    assert "分数分布" in report and "无法正常运行的提交" in report and "invalid" in report


def test_the_gradebook_exports_the_class(graded: dict) -> None:
    """Does `nbgrader export` read our scores back out of the gradebook?"""
    export = graded["base"] / "export.csv"
    run_command([BIN / "nbgrader", "export", "--db", f"sqlite:///{graded['base'] / 'gradebook.db'}", "--to", str(export)], check=True, cwd=graded["base"])
    rows = {r["student_id"]: r for r in csv.DictReader(export.open(encoding="utf-8"))}
    assert float(rows["perfect"]["raw_score"]) == 100
    assert float(rows["invalid"]["raw_score"]) == 0
    assert len(rows) == 8
    # formgrader reads the notebooks it shows for manual grading from autograded/.
    assert (graded["base"] / "autograded" / "perfect" / ASSIGNMENT / "attention.ipynb").is_file()


def test_a_rerun_regrades_only_what_changed(graded: dict) -> None:
    """Does a re-run skip unchanged submissions, regrade a changed one, and --force regrade all?"""
    submitted, out = graded["submitted"], graded["out"]
    again = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1")
    assert "0 份需要评分" in again.stderr, again.stderr[-2000:]
    changed = notebook()
    cell_of(changed, "scaled_attention")["source"] = "def scaled_attention(query, key, value, allowed=None):\n    raise NotImplementedError()\n"
    submit(submitted, "perfect", changed)
    third = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1")
    assert "1 份需要评分" in third.stderr, third.stderr[-2000:]
    assert results(out, "perfect")["score"] < 100
    forced = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--force")
    assert "8 份需要评分" in forced.stderr
    submit(submitted, "perfect", notebook())


def test_an_interrupted_run_resumes(tmp_path: Path) -> None:
    """If grading is killed half-way, does the next run keep what was done and finish the rest?"""
    submitted, out = tmp_path / "submitted", tmp_path / "out"
    for index in range(12):
        submit(submitted, f"s{index:02d}", notebook())
    process = subprocess.Popen(
        [str(BIN / "attnkit"), "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1", "--quiet"], env=tool_env(), start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.glob("students/*/*/results.json"))) < 2:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done_before = {p: p.stat().st_mtime_ns for p in out.glob("students/*/*/results.json")}
    assert 2 <= len(done_before) < 12
    resumed = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2")
    assert resumed.returncode == 0
    assert f"{12 - len(done_before)} 份需要评分" in resumed.stderr
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in done_before.items())
    assert len(list(out.glob("students/*/*/results.json"))) == 12
    assert not list(out.rglob("*.tmp")), "no half-written files are left behind"


def test_grading_that_cannot_run_exits_non_zero(tmp_path: Path) -> None:
    """Is a missing submissions folder an error of the grader (non-zero), not a student's zero?"""
    run = attnkit("grade", "--submitted", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert run.returncode != 0 and "nowhere" in run.stderr


def affinity_probe() -> dict:
    """The perfect notebook and a last cell that fails, naming the CPUs its sandbox may run on."""
    nb = notebook()
    probe = "import os\nraise RuntimeError(f'cpus={sorted(os.sched_getaffinity(0))}')\n"
    nb["cells"].append(code_cell(probe))
    return nb


def cpus_of_sandboxes(out: Path, students: list[str]) -> list[list[int]]:
    seen = []
    for student in students:
        messages = [cell.get("message", "") for cell in results(out, student)["cells"]]
        probe = next(m for m in messages if m.startswith("cpus="))
        seen.append(json.loads(probe.removeprefix("cpus=")))
    return seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least two CPUs")
def test_workers_that_fill_the_cpus_each_keep_to_one(tmp_path: Path) -> None:
    """With as many workers as CPUs, does each sandbox run on its worker's one CPU (no wake-ups
    across CPUs at every request), while a single worker's sandboxes may use them all?"""
    allowed = sorted(os.sched_getaffinity(0))
    # At least one submission per worker: grade_jobs starts no more workers than submissions.
    students = [f"s{number}" for number in range(max(4, len(allowed)))]
    for student in students:
        submit(tmp_path / "submitted", student, affinity_probe())
    for jobs in (len(allowed), 1):
        out = tmp_path / f"out-{jobs}"
        run = attnkit("grade", "--submitted", str(tmp_path / "submitted"), "--out", str(out), "--jobs", str(jobs), "--quiet")
        assert run.returncode == 0, run.stderr[-3000:]
        assert all(results(out, student)["score"] == 100 for student in students)
        seen = cpus_of_sandboxes(out, students)
        if jobs == 1:
            assert seen == [allowed] * len(students), seen
        else:
            assert all(len(cpus) == 1 and cpus[0] in allowed for cpus in seen), seen
