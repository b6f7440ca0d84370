"""Small edits of a submission's notebook that tests need (its content as a student wrote it is
the attack and fairness modules' business: ``attacks``, ``fair_submissions``)."""

from __future__ import annotations

from pathlib import Path

import nbformat


def wait_in_last_cell(notebook: Path, seconds: float) -> None:
    """Append a code cell that sleeps ``seconds``: the same grade, graded that much later. A test
    that stops a run "half way" after its first result needs the rest to take a while."""
    book = nbformat.read(notebook, as_version=4)
    book.cells.append(nbformat.v4.new_code_cell(f"import time\ntime.sleep({seconds})"))
    nbformat.write(book, notebook)


def wait_in_cell_defining(notebook: Path, name: str, seconds: float) -> None:
    """Sleep ``seconds`` at the start of the code cell that defines ``name``: the same grade,
    with a window in which that cell (what the grade needs) is running."""
    book = nbformat.read(notebook, as_version=4)
    (cell,) = [cell for cell in book.cells if cell.cell_type == "code" and f"def {name}(" in cell.source]
    cell.source = f"import time\ntime.sleep({seconds})\n" + cell.source
    nbformat.write(book, notebook)
