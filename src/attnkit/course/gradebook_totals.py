"""What the course's nbgrader gradebook reports back: a submission's lateness (``lateness``,
``class_lateness``) and the class's totals as ``nbgrader export`` computes them (``totals_of``).

Apart from ``gradebook`` (which records into the gradebook, with ``nbgrader_commands``'s
preprocessors) so that ``nbgrader_commands`` can read lateness without importing ``gradebook``:
no import cycle (tests/cli/test_import_graph.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnkit.commands import tool_environment


def lateness(db_url: str, student: str, assignment: str) -> dict[str, Any] | None:
    """How late one submission is and what that costs, as the gradebook (and so ``nbgrader
    export``) has it: seconds late, the penalty, the total after it and its maximum. None if the
    gradebook has no such submission."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gradebook:
        try:
            return _lateness_of(gradebook.find_submission(assignment, student))
        except MissingEntry:
            return None


def class_lateness(database: Path, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """``lateness`` of each (student, assignment) the gradebook has, in one session."""
    os.environ["PATH"] = tool_environment()["PATH"]
    from nbgrader.api import Gradebook, MissingEntry

    found: dict[tuple[str, str], dict[str, Any]] = {}
    if not database.is_file():
        return found
    with Gradebook(f"sqlite:///{database.resolve()}") as gradebook:
        for student, assignment in keys:
            try:
                found[(student, assignment)] = _lateness_of(gradebook.find_submission(assignment, student))
            except MissingEntry:
                continue
    return found


def _lateness_of(submission: Any) -> dict[str, Any]:
    penalty = float(submission.late_submission_penalty or 0.0)
    manual = [g.manual_score for nb in submission.notebooks for g in nb.grades if g.manual_score is not None]
    return {
        "seconds_late": float(submission.total_seconds_late or 0.0),
        "penalty": penalty,
        "total": max(0.0, float(submission.score) - penalty),  # as nbgrader export computes it
        "max": float(submission.max_score),
        "timestamp": submission.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC") if submission.timestamp else "",
        "duedate": submission.duedate.strftime("%Y-%m-%d %H:%M:%S UTC") if submission.duedate else "",
        # The points a TA entered in formgrader (None: none yet), for "n 分人工评分待定".
        "manual": float(sum(manual)) if manual else None,
    }


def totals_of(lateness: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, float | None]]:
    """What ``nbgrader export`` reports per (student, assignment), from ``class_lateness``'s records
    (one gradebook session serves both): the total after late penalty, its maximum, the manual
    points a TA entered (None if none) and the penalty."""
    return {key: {name: found[name] for name in ("total", "max", "manual", "penalty")} for key, found in lateness.items()}
