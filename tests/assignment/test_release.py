"""Is the committed student release exactly what `python -m attnkit.course.release` makes, and leak-free?

The release is regenerated for real (nbgrader generate_assignment) in a temporary copy of the
course (nbgrader_config.py + solutions/), so the repository itself is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from attnkit.course.release import README_NAME, build_student_zip, student_readme
from commands import python_m

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch19-attention"
SOURCE_DIR = ROOT / "solutions" / ASSIGNMENT
RELEASE_DIR = ROOT / "assignments" / ASSIGNMENT
STUB = "# 在此作答\nraise NotImplementedError()"
TEXT_STUB = "在此作答。"


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    """Return a cell's nbgrader metadata ({} for an ordinary cell)."""
    return dict(cell.metadata.get("nbgrader", {}))


def solution_region(source: str) -> list[str]:
    """Return the non-blank lines between ### BEGIN SOLUTION and ### END SOLUTION."""
    inside, lines = False, []
    for line in source.splitlines():
        if "BEGIN SOLUTION" in line:
            inside = True
        elif "END SOLUTION" in line:
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def with_stub(source: str) -> str:
    """Return source with its solution region replaced by the stub, indented like BEGIN."""
    out, inside = [], False
    for line in source.splitlines():
        if "BEGIN SOLUTION" in line:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + stub_line for stub_line in STUB.splitlines())
        elif "END SOLUTION" in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def files_under(directory: Path) -> dict[str, bytes]:
    """Map relative path -> bytes for every file under directory."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary course copy after `python -m attnkit.course.release --root COPY --zip COPY/dist/...`."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy2(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    # The hidden suites name each assignment's student README (manifest.toml).
    shutil.copytree(ROOT / "autograder", course / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    result = python_m("attnkit.course.release", "--root", str(course), "--zip", str(course / "dist" / "student.zip"), cwd=course, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return course


@pytest.mark.e2e
def test_regenerating_gives_the_committed_release_byte_for_byte(regenerated: Path) -> None:
    """Does regenerating from solutions/ reproduce assignments/ exactly (no drift, no timestamps)?"""
    fresh = files_under(regenerated / "assignments" / ASSIGNMENT)
    committed = files_under(RELEASE_DIR)
    assert set(fresh) == set(committed) == {"attention.ipynb"}
    for name in fresh:
        assert fresh[name] == committed[name], f"{name} drifted: run `make release`"


@pytest.mark.e2e
def test_release_leaves_no_gradebook_behind(regenerated: Path) -> None:
    """Does the release use a throwaway gradebook, leaving no gradebook.db in the course?"""
    assert not (regenerated / "gradebook.db").exists()


def test_no_solution_reaches_the_release() -> None:
    """Is every solution cell of the release the stub, with no line of the model answer anywhere?"""
    source = nbformat.read(SOURCE_DIR / "attention.ipynb", as_version=4)
    release = nbformat.read(RELEASE_DIR / "attention.ipynb", as_version=4)
    released = {nbgrader_meta(c)["grade_id"]: c for c in release.cells if nbgrader_meta(c)}
    release_text = "\n".join(c.source for c in release.cells)
    solution_cells = [c for c in source.cells if nbgrader_meta(c).get("solution")]
    assert len(solution_cells) == 12
    for cell in solution_cells:
        grade_id = nbgrader_meta(cell)["grade_id"]
        out = released[grade_id]
        if cell.cell_type == "markdown":
            assert out.source == TEXT_STUB, grade_id
            for line in filter(None, (part.strip() for part in cell.source.splitlines())):
                assert line not in release_text, (grade_id, line)
            continue
        assert out.source == with_stub(cell.source), f"{grade_id}: release is not source + stub"
        assert "raise NotImplementedError()" in out.source
        answer = solution_region(cell.source)
        assert answer, f"{grade_id} has no BEGIN/END SOLUTION region"
        for line in answer:
            assert line not in out.source, (grade_id, line)
            if len(line) > 12:
                assert line not in release_text, (grade_id, line)


def test_release_mentions_no_grader_internals() -> None:
    """Is there no solution marker, hidden-test text or autograder mention in the release?"""
    text = (RELEASE_DIR / "attention.ipynb").read_text(encoding="utf-8")
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "MARK SCHEME"):
        assert marker not in text
    assert "autograder" not in text.lower()
    hidden_names = set()
    for path in (ROOT / "autograder").rglob("*.py"):
        hidden_names |= set(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    for name in hidden_names:
        assert name not in text, name


def test_autograded_points_sum_to_100() -> None:
    """Do the autograded check cells carry 100 points in both notebooks (manual cells extra)?"""
    for path in (SOURCE_DIR / "attention.ipynb", RELEASE_DIR / "attention.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        graded = [nbgrader_meta(c) for c in notebook.cells if nbgrader_meta(c).get("grade")]
        auto = [m for m in graded if not m.get("solution")]
        manual = [m for m in graded if m.get("solution")]
        assert sum(m["points"] for m in auto) == 100, path
        assert len(auto) == 9 and all(m["locked"] for m in auto)
        assert [m["points"] for m in manual] == [2, 2, 2, 2]


@pytest.mark.e2e
def test_student_zip_holds_only_the_release(regenerated: Path) -> None:
    """Does the student zip hold the released notebook and README only: no autograder/, no solutions/?"""
    with zipfile.ZipFile(regenerated / "dist" / "student.zip") as bundle:
        names = bundle.namelist()
        assert sorted(names) == sorted([f"{ASSIGNMENT}/attention.ipynb", f"{ASSIGNMENT}/{README_NAME}"])
        for name in names:
            parts = name.split("/")
            assert "autograder" not in parts and "solutions" not in parts
        assert bundle.read(f"{ASSIGNMENT}/attention.ipynb") == (RELEASE_DIR / "attention.ipynb").read_bytes()
        readme = bundle.read(f"{ASSIGNMENT}/{README_NAME}").decode("utf-8")
        assert "在此作答" in readme and "NotImplementedError" in readme
        for info in bundle.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)


def test_student_zip_is_reproducible(tmp_path: Path) -> None:
    """Does building the student zip twice from the same release give identical bytes?"""
    readme = student_readme(ROOT, ASSIGNMENT)
    first = build_student_zip(RELEASE_DIR, tmp_path / "a.zip", readme).read_bytes()
    second = build_student_zip(RELEASE_DIR, tmp_path / "b.zip", readme).read_bytes()
    assert first == second
