"""Regenerate the student release ``assignments/`` from the nbgrader source ``solutions/``.

Usage::

    python -m attnkit.course.release                         # regenerate assignments/<each>/
    python -m attnkit.course.release --assignment NAME --zip PATH   # one, and its student bundle

The release is made by the real ``nbgrader generate_assignment NAME --force`` (run from the course
root, whose ``nbgrader_config.py`` maps nbgrader's source/release steps onto ``solutions/`` and
``assignments/``), with a throwaway gradebook so no ``gradebook.db`` is left behind. The result is
then normalised (no outputs, no execution counts, no timing or machine-specific metadata, one JSON
formatting) so that regenerating an unchanged source gives byte-identical files.

The student bundle holds only what nbgrader released (the notebooks in ``assignments/NAME/``) plus
the assignment's README for students (its manifest's ``release_readme``): never ``solutions/`` or
``autograder/``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Sequence

import nbformat

from attnkit.commands import nbgrader_command, tool_environment
from attnkit.constants import PROJECT_ROOT
from attnkit.files import write_zip

SOURCE_DIR = "solutions"
RELEASE_DIR = "assignments"
DEFAULT_ROOT = PROJECT_ROOT

# Metadata that records when or where a notebook was run, never what it teaches.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")
VOLATILE_NOTEBOOK_METADATA = ("widgets", "celltoolbar", "toc", "varInspector")
# Text that must never appear in a released file.
FORBIDDEN_IN_RELEASE = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "autograder")

README_NAME = "README_学生.md"


class ReleaseError(RuntimeError):
    """Raised when the release cannot be generated or would leak solution material."""


def run_generate_assignment(root: Path, assignment: str) -> None:
    """Run ``nbgrader generate_assignment ASSIGNMENT --force`` in ``root`` with a temporary db."""
    if not (root / "nbgrader_config.py").is_file():
        raise ReleaseError(f"{root} is not the course root: nbgrader_config.py is missing")
    if not (root / SOURCE_DIR / assignment).is_dir():
        raise ReleaseError(f"no source assignment {root / SOURCE_DIR / assignment}")
    with tempfile.TemporaryDirectory(prefix="attnkit-release-") as tmp:
        command = [
            *nbgrader_command(),
            "generate_assignment",
            assignment,
            "--force",
            f"--CourseDirectory.root={root}",
            f"--db=sqlite:///{Path(tmp) / 'gradebook.db'}",
            "--log-level=WARN",
        ]
        result = subprocess.run(command, cwd=root, env=tool_environment(), capture_output=True, text=True)
    if result.returncode != 0:
        raise ReleaseError(f"nbgrader generate_assignment failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


def release_notebooks(release_dir: Path) -> list[Path]:
    """Return the released notebooks in name order (checkpoints excluded)."""
    return sorted(path for path in release_dir.rglob("*.ipynb") if ".ipynb_checkpoints" not in path.parts)


def normalise_notebook(path: Path) -> None:
    """Rewrite one notebook without outputs, counts or run-time metadata, in one formatting."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    for key in VOLATILE_NOTEBOOK_METADATA:
        notebook.metadata.pop(key, None)
    notebook.metadata.get("language_info", {}).pop("version", None)
    text = nbformat.writes(notebook)
    if not text.endswith("\n"):
        text += "\n"
    data = text.encode("utf-8")
    if path.read_bytes() != data:
        path.write_bytes(data)
    path.chmod(0o644)


def check_release(release_dir: Path) -> None:
    """Refuse a release in which solution or grader text survived."""
    for path in sorted(p for p in release_dir.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        for marker in FORBIDDEN_IN_RELEASE:
            if marker.lower() in text.lower():
                raise ReleaseError(f"{path} contains {marker!r}: it must not reach students")


def source_assignments(root: Path) -> list[str]:
    """The assignments of a course: the folders of its ``solutions/``."""
    folder = root / SOURCE_DIR
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else []


def generate_release(root: Path, assignment: str) -> Path:
    """Regenerate ``root/assignments/ASSIGNMENT`` deterministically and return its path."""
    root = root.resolve()
    run_generate_assignment(root, assignment)
    release_dir = root / RELEASE_DIR / assignment
    for notebook in release_notebooks(release_dir):
        normalise_notebook(notebook)
    check_release(release_dir)
    return release_dir


def release_files(release_dir: Path) -> list[Path]:
    """Return every released file of one assignment (checkpoints excluded), in name order."""
    return sorted(path for path in release_dir.rglob("*") if path.is_file() and ".ipynb_checkpoints" not in path.parts)


def student_readme(root: Path, assignment: str) -> str:
    """The README for students that the assignment's manifest names (``release_readme``)."""
    from attnkit.assignment.folder import discover
    from attnkit.constants import GraderError

    try:
        suite = discover(root / "autograder").get(assignment)
    except GraderError as error:
        raise ReleaseError(str(error)) from None
    if suite is None:
        raise ReleaseError(f"no hidden suite for {assignment} under {root / 'autograder'} (its manifest names the student README)")
    readme = suite.release_readme
    if not readme:
        raise ReleaseError(f"autograder/{assignment}/manifest.toml names no release_readme for the student bundle")
    return readme


def build_student_zip(release_dir: Path, destination: Path, readme: str) -> Path:
    """Bundle the released notebooks of one assignment and the student README into a zip."""
    check_release(release_dir)
    folder = release_dir.name
    entries = [(f"{folder}/{README_NAME}", readme.encode("utf-8"))]
    for path in release_files(release_dir):
        entries.append((f"{folder}/{path.relative_to(release_dir).as_posix()}", path.read_bytes()))
    return write_zip(destination, entries)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.course.release",
        description="Regenerate assignments/ from solutions/ with nbgrader, deterministically.",
    )
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="course root holding nbgrader_config.py (default: this repository)")
    parser.add_argument("--assignment", default=None, help="assignment name (default: every folder of solutions/)")
    parser.add_argument("--zip", type=Path, metavar="PATH", help="also build the student bundle (released notebooks + README) at PATH")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = parse_args(argv)
    names = [args.assignment] if args.assignment else source_assignments(args.root)
    try:
        if not names:
            raise ReleaseError(f"no assignment in {args.root / SOURCE_DIR}")
        if args.zip is not None and len(names) != 1:
            raise ReleaseError(f"a student bundle holds one assignment: choose one with --assignment ({', '.join(names)})")
        for name in names:
            release_dir = generate_release(args.root, name)
            print(f"released {len(release_notebooks(release_dir))} notebook(s) to {release_dir}")
            if args.zip is not None:
                bundle = build_student_zip(release_dir, args.zip.resolve(), student_readme(args.root, name))
                print(f"student bundle: {bundle}")
    except ReleaseError as error:
        print(f"release failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
