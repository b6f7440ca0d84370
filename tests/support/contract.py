"""The chapter-19 assignment as the tests see it: its manifest, and its grade cells' points read
from the source notebook (the one place they are stated; the engine reads them the same way); a
submission made from the source notebook, and what of a record a student is shown and scored on."""

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnkit.assignment.folder import Assignment, discover

ROOT = Path(__file__).resolve().parents[2]
# The suites folders the meta-tests check: the project's own (what `make grade` grades) and the
# tests' course (tests/support/course/: a second, small assignment, never graded by `make grade`).
SUITES_FOLDERS = (ROOT / "autograder", ROOT / "tests" / "support" / "course" / "autograder")


def _every_assignment() -> dict[str, Assignment]:
    found: dict[str, Assignment] = {}
    for folder in SUITES_FOLDERS:
        for name, assignment in discover(folder).items():
            assert name not in found, f"two suites for {name}: {found[name].folder} and {assignment.folder}"
            found[name] = assignment
    return found


# Every assignment folder discover() finds, by name: the meta-tests are parametrised over these.
ASSIGNMENTS = _every_assignment()
CH19 = ASSIGNMENTS["ch19-attention"]

# The autograded grade cells of attention.ipynb and their points (the design's total: 100).
GRADE_POINTS = {grade_id: part.points for grade_id, part in CH19.parts.items()}


def code_cell(source: str) -> dict[str, Any]:
    """A code cell as a student adds one, not yet run (without an id, as older tools write them:
    intake takes both)."""
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


def write_submission(folder: Path, student: str, override: str) -> None:
    """``folder/<student>/ch19-attention/attention.ipynb``: the source notebook, with ``override``
    (if any) as a last code cell (a later definition wins)."""
    notebook = json.loads(CH19.source.read_text(encoding="utf-8"))
    if override:
        notebook["cells"].append(code_cell(override))
    target = folder / student / CH19.name
    target.mkdir(parents=True)
    (target / CH19.notebook).write_text(json.dumps(notebook), encoding="utf-8")


def comparable(record: dict) -> dict[str, Any]:
    """What a student is shown and scored on (not timings)."""
    return {
        "tests": [(t["nodeid"], t["status"], t["score"], t["output"], t.get("diagnoses"), t.get("substituted")) for t in record["tests"]],
        "cells": [(c["index"], c["ok"], c["error_type"], c["message"], c["output"]) for c in record["cells"]],
        "problems": record["problems"],
    }


@contextlib.contextmanager
def own_imports(package: str) -> Iterator[None]:
    """Around a pytest session of a suite whose package name (``warmup_softmax``) another folder
    in this process also has (the tests' course, a copy of it in tmp_path): its modules come from
    its own folder, and whatever was imported under that name before is back afterwards, as is
    sys.path (pytest's prepend import puts the suite's parent there)."""

    def ours(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    path = list(sys.path)
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        sys.path[:] = path
