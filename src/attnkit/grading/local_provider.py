"""The development provider: one trusted source file run in this process, no sandbox.

``pytest -p attnkit.grading.plugin autograder/<assignment> --attnkit-source solutions/<assignment>/<notebook>.ipynb``
grades the reference (or any trusted .py/.ipynb) with the hidden suite, and the unit tests use it
to run the plugin without workers. Never give it a submission: the code runs with the grader's rights.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.assignment.folder import discover
from attnkit.grading.provider import Provider
from attnkit.grading.student import LocalBackend, Student


def notebook_source(path: Path) -> list[str]:
    """The code cells of a notebook (or the whole of a .py file), in order."""
    if path.suffix == ".py":
        return [path.read_text(encoding="utf-8")]
    from attnkit.notebook import read_notebook

    return [cell.source for cell in read_notebook(path).cells]


class LocalProvider(Provider):
    """One trusted source file run in this process. Never use it on a submission."""

    def __init__(self, path: Path, api: tuple[str, ...] | None = None) -> None:
        self.path = path
        if api is None:  # the source notebook of solutions/<assignment>/: that assignment's API
            found = discover().get(path.resolve().parent.name)
            api = found.functions if found else ()
        self.api = api

    def submission_ids(self) -> list[str]:
        return [self.path.stem]

    def open(self, submission_id: str) -> Student:
        return Student(LocalBackend.from_cells(notebook_source(self.path), str(self.path)), api=self.api)

    def close(self, submission_id: str) -> None:
        pass
