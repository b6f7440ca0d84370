"""Record scores in the course's nbgrader gradebook, so `nbgrader export` and formgrader see them.

One writer (the grading parent process), SQLite underneath. nbgrader's ``add_submission`` copies
only the grade cells that exist at that moment, so the assignment's notebooks and every grade
cell (autograded checks and manually graded answers alike) are created from the source notebook
first. Our hidden tests score whole grade cells, so each autograded cell's ``auto_score`` is the
sum of its tests' points; manually graded cells are left for formgrader.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attnkit.engine import PROJECT_ROOT, atomic_write
from attnkit.notebook import Unsafe, digest_of, read_submitted

SOURCE = PROJECT_ROOT / "solutions"


def grade_cells(notebook: Path) -> list[dict[str, Any]]:
    """The nbgrader grade cells of a source notebook: id, points, cell type."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            found.append({"name": meta["grade_id"], "max_score": float(meta.get("points", 0)), "cell_type": cell["cell_type"]})
    return found


def record_grades(database: Path, all_results: list[dict[str, Any]], submitted: Path | None = None, source: Path = SOURCE) -> list[str]:
    """Create assignments, notebooks and grade cells, then each student's submission and scores.

    With ``submitted``, the graded notebooks are also copied to ``autograded/`` beside the
    database, where formgrader looks for them when a TA grades the free-text answers: read the
    way intake read them (no links, regular files, capped) and written only if their bytes are
    exactly those graded (results.json ``notebooks`` sha256). Returns warnings for the TA.
    """
    # nbgrader's Gradebook runs `alembic` on a new database: the venv's bin/ must be on PATH.
    os.environ["PATH"] = f"{Path(os.sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    import warnings

    from nbgrader.api import Gradebook, MissingEntry

    # nbgrader's own ORM code trips SQLAlchemy's autoflush warnings; they are not ours to fix.
    warnings.filterwarnings("ignore", module="sqlalchemy")
    warnings.filterwarnings("ignore", message=".*not in session.*")

    database.parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(f"sqlite:///{database.resolve()}") as gradebook:
        assignments = sorted({r["assignment"] for r in all_results})
        for assignment in assignments:
            gradebook.update_or_create_assignment(assignment)
            for notebook in sorted((source / assignment).glob("*.ipynb")):
                gradebook.update_or_create_notebook(notebook.stem, assignment)
                for cell in grade_cells(notebook):
                    gradebook.update_or_create_grade_cell(cell["name"], notebook.stem, assignment, max_score=cell["max_score"], cell_type=cell["cell_type"])
        for results in all_results:
            assignment = results["assignment"]
            gradebook.update_or_create_student(results["student_id"])
            try:
                gradebook.find_submission(assignment, results["student_id"])
            except MissingEntry:
                gradebook.add_submission(assignment, results["student_id"])
            for notebook in sorted((source / assignment).glob("*.ipynb")):
                for cell in grade_cells(notebook):
                    part = results["parts"].get(cell["name"])
                    if part is None:
                        continue  # a manually graded cell: formgrader's job
                    grade = gradebook.find_grade(cell["name"], notebook.stem, assignment, results["student_id"])
                    grade.auto_score = part["score"]
        gradebook.db.commit()
    warnings: list[str] = []
    if submitted is not None:
        for results in all_results:
            folder = submitted / results["student_id"] / results["assignment"]
            target = database.parent / "autograded" / results["student_id"] / results["assignment"]
            for notebook in results.get("notebooks", []):
                name = notebook.get("name", "")
                if not name or "/" in name or name.startswith("."):
                    continue
                try:
                    data = read_submitted(submitted, folder / name)
                except Unsafe as error:
                    warnings.append(f"未复制到 autograded/：{results['student_id']}/{name}：{error}")
                    continue
                if digest_of(data) != notebook.get("sha256"):
                    warnings.append(f"未复制到 autograded/：{results['student_id']}/{name}：文件在评分之后被改动过")
                    continue
                atomic_write(target / name, data)
    return warnings
