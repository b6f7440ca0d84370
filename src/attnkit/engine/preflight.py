"""Before any submission is graded, the grader's own code of each assignment is checked.

A catalogue entry, a reference, a hook, a hidden test or a manifest that does not compile or
import is the grader's fault: found here, it is named (assignment, file, line, cause) and that
assignment is not graded, instead of every one of its students recorded 0/0 by a session that
broke on it (issue 37). Other assignments of the run are graded as usual; the run's exit code
says that something could not run.

:func:`check` runs in the CLI, before it forks its workers (a fork here would be one more to
keep single-threaded): what it imports (the assignment's modules, its catalogue's namespaces, the
suite's test modules) the workers then inherit instead of importing again. Nothing of it runs a
torch op. Per assignment, in order:

1. every ``.py`` file of the folder is compiled (a syntax error: its file and line);
2. every module of the package that is not a test is imported (``catalogue``, ``reference``,
   ``hooks``, ``messages``...), and each hook the manifest names is looked up;
3. the catalogue: its reference and each mistake's source (and variants) compiled and run as the
   diagnosis will run them;
4. the hidden suite collected by pytest, as a worker collects it, and its tests' points
   computed from the source notebook's grade cells (a grade id of no grade cell, say).
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.assignment.folder import MANIFEST, Assignment
from attnkit.constants import GraderError

# Where a traceback or pytest's report names a line: "path.py:12" or 'File "path.py", line 12'.
_LOCATION = re.compile(r'(?:File "(?P<file>[^"]+\.py)", line (?P<line>\d+))|(?P<file2>[^\s:"(]+\.py):(?P<line2>\d+)')


@dataclass(frozen=True)
class Problem:
    """One thing of an assignment's own code that cannot run."""

    assignment: str
    file: str  # the path, as found
    line: int | None
    cause: str

    def where(self) -> str:
        """``file:line: cause``."""
        return f"{self.file}:{self.line}: {self.cause}" if self.line else f"{self.file}: {self.cause}"

    def text(self) -> str:
        return f"{self.assignment}: {self.where()}"

    @property
    def in_suite(self) -> bool:
        """A hidden test's own file, or the suite's collection (else: the catalogue, the
        reference, a hook, a module they import)."""
        name = Path(self.file).name
        return name.startswith(("test_", "conftest")) or not name.endswith(".py")


def check(assignments: list[Assignment]) -> list[Problem]:
    """Every problem of ``assignments``' own code (empty: all can be graded)."""
    problems: list[Problem] = []
    for assignment in assignments:
        try:
            problems += _check_one(assignment)
        except Exception as error:  # whatever the check itself met is a cause too
            file, line = _where(assignment, error, assignment.folder)
            problems.append(Problem(assignment.name, file, line, f"{type(error).__name__}: {error}"[:500]))
    return problems


def _check_one(assignment: Assignment) -> list[Problem]:
    problems = _compile_files(assignment)
    if problems:  # a module that does not compile cannot be imported either: one cause, named once
        return problems
    problems = _import_modules(assignment) or _catalogue(assignment)
    return problems or _collect_suite(assignment)


def _python_files(assignment: Assignment) -> list[Path]:
    return sorted(p for p in assignment.folder.rglob("*.py") if "__pycache__" not in p.parts)


def _compile_files(assignment: Assignment) -> list[Problem]:
    problems = []
    for path in _python_files(assignment):
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except SyntaxError as error:
            problems.append(Problem(assignment.name, str(path), error.lineno, f"{type(error).__name__}: {error.msg}"))
        except (OSError, ValueError) as error:  # unreadable, or a NUL byte
            problems.append(Problem(assignment.name, str(path), None, f"{type(error).__name__}: {error}"))
    return problems


def _where(assignment: Assignment, error: BaseException, fallback: Path) -> tuple[str, int | None]:
    """The innermost line of the assignment's own files in ``error``'s traceback."""
    folder = str(assignment.folder)
    found: tuple[str, int | None] = (str(fallback), None)
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.startswith(folder):
            found = (frame.filename, frame.lineno)
    if isinstance(error, SyntaxError) and error.filename and error.filename.startswith(folder):
        found = (error.filename, error.lineno)
    return found


def _import_modules(assignment: Assignment) -> list[Problem]:
    problems = []
    for path in _python_files(assignment):
        if path.parent != assignment.folder or path.stem.startswith("test_") or path.stem in ("conftest", "__init__"):
            continue
        try:
            assignment.module(path.stem)
        except (Exception, SystemExit) as error:  # whatever an import raises is the cause
            file, line = _where(assignment, error, path)
            problems.append(Problem(assignment.name, file, line, f"{type(error).__name__}: {error}"[:500]))
    if problems:
        return problems
    manifest = assignment.folder / MANIFEST
    for key, target in assignment.hooks.items():
        try:
            hook = assignment.hook(key)
            if key == "warm_up" and isinstance(hook, str):
                compile(hook, f"{target} ({manifest.name}: hooks.{key})", "exec", dont_inherit=True)
        except (Exception, SystemExit) as error:  # a hook that cannot be found or compiled
            cause = f"hooks.{key} = {target!r}: {type(error).__name__}: {error}"
            problems.append(Problem(assignment.name, str(manifest), _line_of(manifest, f"{key} ="), cause[:500]))
    return problems


def _line_of(path: Path, text: str) -> int | None:
    """The first line of ``path`` that holds ``text`` (None: none does)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return next((number for number, line in enumerate(lines, start=1) if text in line), None)


def _catalogue(assignment: Assignment) -> list[Problem]:
    """Each mistake's source (and variants) compiled and run after the reference, as diagnosis
    runs them; a problem is located at the line of the catalogue that holds the source's text."""
    catalogue = assignment.catalogue()
    path = Path(str(catalogue.__file__))
    reference = getattr(catalogue, "CATALOGUE", None)
    reference_path = Path(getattr(reference, "reference", assignment.folder / "reference.py"))
    problems: list[Problem] = []
    try:
        reference_source = reference_path.read_text(encoding="utf-8")
        namespace: dict[str, Any] = {"__name__": "__attnkit_catalogue__"}
        exec(compile(reference_source, str(reference_path), "exec", dont_inherit=True), namespace)
    except (Exception, SystemExit) as error:  # the reference's own failure
        file, line = _where(assignment, error, reference_path)
        return [Problem(assignment.name, file, line, f"{type(error).__name__}: {error}"[:500])]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    for mistake in getattr(catalogue, "MISTAKES", ()):
        for number, source in enumerate((mistake.source, *mistake.variants)):
            label = mistake.id if number == 0 else f"{mistake.id} (variant {number})"
            at = text.find(source) if source else -1
            first = text.count("\n", 0, at) + 1 if at >= 0 else _line_of(path, f'"{mistake.id}"')
            try:
                code = compile(source, f"{path} ({label})", "exec", dont_inherit=True)
                exec(code, {"__name__": "__attnkit_catalogue__", **namespace})
            except (Exception, SystemExit) as error:  # the mistake's own failure
                inner = error.lineno if isinstance(error, SyntaxError) else _inner_line(error, f"{path} ({label})")
                line = first + inner - 1 if first is not None and inner and at >= 0 else first
                cause = error.msg if isinstance(error, SyntaxError) else str(error)
                problems.append(Problem(assignment.name, str(path), line, f"mistake {label}: {type(error).__name__}: {cause}"[:500]))
    if not problems:
        try:
            catalogue.reference_namespace()
            variants = getattr(catalogue, "diagnosable_namespaces", None)
            variants() if variants is not None else catalogue.mistake_namespaces()
        except (Exception, SystemExit) as error:  # what diagnosis would raise, if the checks above missed it
            file, line = _where(assignment, error, path)
            problems.append(Problem(assignment.name, file, line, f"{type(error).__name__}: {error}"[:500]))
    return problems


def _inner_line(error: BaseException, filename: str) -> int | None:
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == filename]
    return lines[-1] if lines else None


class _Collector:
    """A pytest plugin that keeps what collection reports failed, and the points of the items."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.problems: list[Problem] = []

    def pytest_collectreport(self, report: Any) -> None:
        if not report.failed:
            return
        text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
        folder = str(self.assignment.folder)
        file, line = str(self.assignment.folder / (report.nodeid or ".")), None
        for match in _LOCATION.finditer(text):
            found = match.group("file") or match.group("file2")
            if found and (found.startswith(folder) or (self.assignment.folder / found).is_file()):
                file, line = str(self.assignment.folder / found) if not found.startswith("/") else found, int(match.group("line") or match.group("line2"))
        last = text.strip().splitlines()[-1] if text.strip() else ""
        self.problems.append(Problem(self.assignment.name, file, line, last[:500]))

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        from attnkit.grading.markers import grade_id_of, item_points, weight_of

        try:
            item_points(items)
        except GraderError as error:
            # The first test the points cannot be given to (a grade id of no grade cell, a weight
            # that is not positive), located at its ``def``; else the folder.
            culprit = next((item for item in items if grade_id_of(item) not in self.assignment.parts or weight_of(item) <= 0), None)
            file, line = (str(culprit.path), int(culprit.location[1] or 0) + 1) if culprit is not None else (str(self.assignment.folder), None)
            self.problems.append(Problem(self.assignment.name, file, line, str(error)[:500]))


def _collect_suite(assignment: Assignment) -> list[Problem]:
    import pytest

    from attnkit.grading import plugin as plugin_module

    folder = str(assignment.folder)
    collector = _Collector(assignment)
    args = [folder, "--collect-only", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:terminal", "-c", os.devnull, "--rootdir", folder, "-o", "addopts="]
    code = pytest.main(args, plugins=[plugin_module, collector])
    if not collector.problems and code not in (0, 5):  # 5: no tests collected
        collector.problems.append(Problem(assignment.name, folder, None, f"pytest could not collect the hidden tests (exit {int(code)})"))
    if not collector.problems and code == 5:
        collector.problems.append(Problem(assignment.name, folder, None, "no hidden test was collected"))
    return collector.problems
