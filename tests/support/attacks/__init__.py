"""Attack notebooks for tests/cli/test_adversarial.py.

Each attacker is a real submission: the release notebook (stubs) or the solution notebook, with
one or more attack cells inserted after the imports cell, or a graded function replaced. The
attack code itself lives in :mod:`attacks.cells`; this module only assembles notebooks with
nbformat and writes a class in nbgrader's layout (``DIR/<student_id>/<assignment>/*.ipynb``).

Probe cells report what they could do by ending with
``raise RuntimeError("ADVPROBE:<name>:<json>")``: the grader records a failing cell's message in
results.json ``cells``, so the test reads the sandbox's own account of what worked.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = ROOT / "solutions" / "ch19-attention" / "attention.ipynb"
RELEASE = ROOT / "assignments" / "ch19-attention" / "attention.ipynb"
ASSIGNMENT = "ch19-attention"
PROBE_PREFIX = "ADVPROBE:"


def load(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def grade_id(cell: nbformat.NotebookNode) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def with_cells(notebook: nbformat.NotebookNode, sources: list[str], after_code_cell: int = 0) -> nbformat.NotebookNode:
    """A copy with plain code cells inserted after the ``after_code_cell``-th code cell (0: imports)."""
    notebook = copy.deepcopy(notebook)
    code_positions = [i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    at = code_positions[after_code_cell] + 1
    notebook.cells[at:at] = [nbformat.v4.new_code_cell(source) for source in sources]
    return notebook


def replace_cell(notebook: nbformat.NotebookNode, cell_grade_id: str, source: str) -> nbformat.NotebookNode:
    """A copy whose nbgrader cell ``cell_grade_id`` holds ``source`` instead (metadata kept)."""
    notebook = copy.deepcopy(notebook)
    matches = [cell for cell in notebook.cells if grade_id(cell) == cell_grade_id]
    assert len(matches) == 1, f"{cell_grade_id}: {len(matches)} cells"
    matches[0].source = source
    return notebook


def cell_source(notebook: nbformat.NotebookNode, cell_grade_id: str) -> str:
    return next(cell.source for cell in notebook.cells if grade_id(cell) == cell_grade_id)


def write(notebook: nbformat.NotebookNode | str | bytes, folder: Path, name: str = "attention.ipynb") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    elif isinstance(notebook, str):
        path.write_text(notebook, encoding="utf-8")
    else:
        nbformat.write(notebook, str(path))
    return path


@dataclass
class Student:
    """One submission of the class: how to build it, and what it is measured against."""

    student_id: str
    build: Callable[[], nbformat.NotebookNode | str | bytes]
    base: str  # "solution" | "release" | "garbage" | "none": the same notebook without the attack
    attack: str  # one line: what it tries
    tags: set[str] = field(default_factory=set)


def write_class(folder: Path, students: list[Student]) -> dict[str, Path]:
    return {s.student_id: write(s.build(), folder / s.student_id / ASSIGNMENT) for s in students}


def probes(results: dict) -> dict[str, dict]:
    """``{name: report}`` from the ADVPROBE cells recorded in one results.json."""
    found = {}
    for cell in results.get("cells", []):
        message = str(cell.get("message", ""))
        if message.startswith(PROBE_PREFIX):
            name, _, payload = message[len(PROBE_PREFIX) :].partition(":")
            found[name] = json.loads(payload)
    return found
