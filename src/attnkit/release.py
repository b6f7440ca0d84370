"""Regenerate the student release ``assignments/`` from the nbgrader source ``solutions/``.

Usage::

    python -m attnkit.release                 # regenerate assignments/ch19-attention/
    python -m attnkit.release --zip PATH      # ... and build the student bundle at PATH

The release is made by the real ``nbgrader generate_assignment NAME --force`` (run from the course
root, whose ``nbgrader_config.py`` maps nbgrader's source/release steps onto ``solutions/`` and
``assignments/``), with a throwaway gradebook so no ``gradebook.db`` is left behind. The result is
then normalised (no outputs, no execution counts, no timing or machine-specific metadata, one JSON
formatting) so that regenerating an unchanged source gives byte-identical files.

The student bundle holds only what nbgrader released (the notebooks in ``assignments/NAME/``) plus
a short README in Chinese: never ``solutions/`` or ``autograder/``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

import nbformat

ASSIGNMENT = "ch19-attention"
SOURCE_DIR = "solutions"
RELEASE_DIR = "assignments"
DEFAULT_ROOT = Path(__file__).resolve().parents[2]

# Metadata that records when or where a notebook was run, never what it teaches.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")
VOLATILE_NOTEBOOK_METADATA = ("widgets", "celltoolbar", "toc", "varInspector")
# Text that must never appear in a released file.
FORBIDDEN_IN_RELEASE = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "autograder")

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can carry: no real time
README_NAME = "README_学生.md"
STUDENT_README = """\
# 第 19 章 注意力机制 · 练习（学生版）

本压缩包只有练习笔记本 `attention.ipynb`，不含参考答案和评分测试。

## 开始

1. 安装 Python 3.11 或更新版本，以及 `torch`、`matplotlib`、`jupyterlab`（或 `notebook`）。
2. 解压后在本文件夹运行 `jupyter lab`，打开 `attention.ipynb`。

## 作答

- 写着 `# 在此作答` 和 `raise NotImplementedError()` 的单元格由你补全：删掉这两行，写上代码。
- 不要改函数名、参数名和变量名，也不要删除、复制或拆分单元格：评分按单元格识别。
- 每个函数之后的“自检”单元格只做少量公开检查。提交后，隐藏的评分测试会用更多输入检查同一部分，
  并说明错在哪里；自检全部通过不等于满分。
- 写着“在此作答。”的文字单元格是简答题，由助教人工评阅。
- `allowed` 是布尔张量，`True` = 可以访问，`False` = 屏蔽。

## 提交前

选择 *Restart Kernel and Run All Cells*，确认从上到下运行没有错误；如果你的 Jupyter 装有 nbgrader，
也可以点 *Validate*。然后按课程要求提交 `attention.ipynb`（文件名保持不变）。
"""


class ReleaseError(RuntimeError):
    """Raised when the release cannot be generated or would leak solution material."""


def tool_environment() -> dict[str, str]:
    """Return the environment for nbgrader: this interpreter's ``bin/`` first on PATH.

    nbgrader's gradebook runs the ``alembic`` command, which lives next to the interpreter.
    """
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def nbgrader_command() -> list[str]:
    """Return the command that runs nbgrader from this interpreter's environment."""
    script = Path(sys.executable).parent / "nbgrader"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "nbgrader"]


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
        result = subprocess.run(
            command, cwd=root, env=tool_environment(), capture_output=True, text=True
        )
    if result.returncode != 0:
        raise ReleaseError(
            f"nbgrader generate_assignment failed ({result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        )


def release_notebooks(release_dir: Path) -> list[Path]:
    """Return the released notebooks in name order (checkpoints excluded)."""
    return sorted(
        path
        for path in release_dir.rglob("*.ipynb")
        if ".ipynb_checkpoints" not in path.parts
    )


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


def generate_release(root: Path = DEFAULT_ROOT, assignment: str = ASSIGNMENT) -> Path:
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
    return sorted(
        path
        for path in release_dir.rglob("*")
        if path.is_file() and ".ipynb_checkpoints" not in path.parts
    )


def _zip_entry(name: str) -> zipfile.ZipInfo:
    """Return a zip entry header with a fixed date and mode, so the bundle is reproducible."""
    info = zipfile.ZipInfo(name, date_time=ZIP_TIMESTAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def write_zip(destination: Path, entries: Iterable[tuple[str, bytes]]) -> None:
    """Write ``(name, data)`` entries to ``destination`` atomically."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    with zipfile.ZipFile(partial, "w") as bundle:
        for name, data in entries:
            bundle.writestr(_zip_entry(name), data)
    partial.replace(destination)


def build_student_zip(release_dir: Path, destination: Path) -> Path:
    """Bundle the released notebooks of one assignment and the student README into a zip."""
    check_release(release_dir)
    folder = release_dir.name
    entries = [(f"{folder}/{README_NAME}", STUDENT_README.encode("utf-8"))]
    for path in release_files(release_dir):
        entries.append((f"{folder}/{path.relative_to(release_dir).as_posix()}", path.read_bytes()))
    write_zip(destination, entries)
    return destination


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.release",
        description="Regenerate assignments/ from solutions/ with nbgrader, deterministically.",
    )
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="course root holding nbgrader_config.py (default: this repository)")
    parser.add_argument("--assignment", default=ASSIGNMENT,
                        help=f"assignment name (default: {ASSIGNMENT})")
    parser.add_argument("--zip", type=Path, metavar="PATH",
                        help="also build the student bundle (released notebooks + README) at PATH")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = parse_args(argv)
    try:
        release_dir = generate_release(args.root, args.assignment)
        print(f"released {len(release_notebooks(release_dir))} notebook(s) to {release_dir}")
        if args.zip is not None:
            bundle = build_student_zip(release_dir, args.zip.resolve())
            print(f"student bundle: {bundle}")
    except ReleaseError as error:
        print(f"release failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
