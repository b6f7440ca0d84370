"""nbgrader's lateness of each submission, known before its results.json is written.

``nbgrader export`` reports a submission's late penalty and its total after it. nbgrader computes
them when a submission is saved (``AssignLatePenalties``): the seconds between the submission's
timestamp and its due date (the assignment's, plus the student's extension), and the course's
``LateSubmissionPlugin`` applied to each notebook's score. Everything that needs is known before
the submission is graded but its score: the due dates, extensions, manual points and maxima are
read from the gradebook once per class (``GradebookLateness.read``), the timestamp from the
submission's folder as ``record_grades`` reads it, and the plugin from the course's
``nbgrader_config.py``. So each record is written once, with the lateness the gradebook will show
(``of``). After the gradebook has recorded the class, ``cli`` compares with what it really holds
(``gradebook_totals.class_lateness``) and writes again only a record that differs: a plugin that
is not a function of (student, score, seconds late) would, and then the gradebook is right.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.commands import tool_environment
from attnkit.records import ResultsJson


@dataclass
class SubmissionFacts:
    """What the gradebook holds (or will hold) of one submission besides attnkit's scores."""

    duedate: datetime.datetime | None
    timestamp: datetime.datetime | None
    # Per notebook of the assignment: its grade cells' names and the manual points a TA gave (by cell).
    notebooks: dict[str, list[str]] = field(default_factory=dict)
    manual: dict[str, float] = field(default_factory=dict)
    max_score: float = 0.0


@dataclass
class GradebookLateness:
    """nbgrader's lateness for the submissions of one class (``read``), computed per record (``of``)."""

    facts: dict[tuple[str, str], SubmissionFacts]
    plugin: Any  # the course's LateSubmissionPlugin instance

    @classmethod
    def read(
        cls,
        database: Path | str,
        submitted: Path | None,
        keys: list[tuple[str, str]],
        root: Path,
        timestamps: dict[tuple[str, str], datetime.datetime] | None = None,
        plugin: Any = None,
    ) -> GradebookLateness:
        """Due dates, extensions, manual points and maxima of ``keys`` (student, assignment), as
        the gradebook has them now (and the timestamps of ``submitted``, where given, or
        ``timestamps``: the service's clock for a submission not yet in ``submitted/``). The
        assignments must be registered already. ``database``: the gradebook's SQLite file or its
        URL (nbgrader's ``db_url``); ``plugin``: the course's late plugin when the caller holds
        one already (``course_late_plugin``)."""
        os.environ["PATH"] = tool_environment()["PATH"]
        from nbgrader.api import Gradebook, MissingEntry

        from attnkit.course.gradebook import submission_timestamp

        facts: dict[tuple[str, str], SubmissionFacts] = {}
        url = database if isinstance(database, str) else f"sqlite:///{database.resolve()}"
        with Gradebook(url) as gradebook:
            assignments: dict[str, Any] = {}
            for student, assignment in keys:
                if assignment not in assignments:
                    try:
                        assignments[assignment] = gradebook.find_assignment(assignment)
                    except MissingEntry:
                        assignments[assignment] = None
                found = assignments[assignment]
                timestamp = (timestamps or {}).get((student, assignment))
                if submitted is not None:
                    folder = submitted / student / assignment
                    if folder.is_dir() and not folder.is_symlink():
                        timestamp = submission_timestamp(submitted, folder)
                if found is None:
                    facts[(student, assignment)] = SubmissionFacts(None, timestamp)
                    continue
                duedate = found.duedate
                manual: dict[str, float] = {}
                try:
                    submission = gradebook.find_submission(assignment, student)
                except MissingEntry:
                    submission = None
                if submission is not None:
                    duedate = submission.duedate  # the assignment's plus this student's extension
                    manual = {g.name: float(g.manual_score) for nb in submission.notebooks for g in nb.grades if g.manual_score is not None}
                notebooks = {nb.name: [cell.name for cell in nb.grade_cells] for nb in found.notebooks}
                facts[(student, assignment)] = SubmissionFacts(duedate, timestamp, notebooks, manual, float(found.max_score))
        return cls(facts, plugin if plugin is not None else course_late_plugin(root))

    def of(self, results: ResultsJson) -> dict[str, Any] | None:
        """The ``late`` entry of this record as ``gradebook_totals.lateness`` will read it once
        the submission is recorded; None where the gradebook will not have it."""
        from attnkit.course.nbgrader_commands import kit_scores

        facts = self.facts.get((results["student_id"], results["assignment"]))
        if facts is None or results.get("not_graded") or not facts.notebooks:
            return None
        return late_entry(self.plugin, results["student_id"], facts, kit_scores(results))


def late_entry(plugin: Any, student: str, facts: SubmissionFacts, scores: dict[str, float]) -> dict[str, Any]:
    """nbgrader's lateness of one submission (``AssignLatePenalties``): the seconds between its
    timestamp and its due date (the student's extension included), the course's plugin applied to
    each notebook's score (the kit's ``scores`` per grade cell, a TA's manual points where given),
    each penalty clamped to [0, the notebook's score]; the total as ``nbgrader export`` computes it."""
    seconds_late = 0.0
    if facts.timestamp is not None and facts.duedate is not None and facts.timestamp > facts.duedate:
        seconds_late = (facts.timestamp - facts.duedate).total_seconds()
    score = penalty = 0.0
    for cells in facts.notebooks.values():
        notebook_score = sum(facts.manual[cell] if cell in facts.manual else scores.get(cell, 0.0) for cell in cells)
        score += notebook_score
        if seconds_late > 0:
            found = plugin.late_submission_penalty(student, notebook_score, seconds_late)
            if found is not None:
                penalty += min(max(float(found), 0.0), notebook_score)  # AssignLatePenalties._check_late_penalty
    return {
        "seconds_late": seconds_late,
        "penalty": penalty,
        "total": max(0.0, score - penalty),
        "max": facts.max_score,
        "timestamp": facts.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC") if facts.timestamp else "",
        "duedate": facts.duedate.strftime("%Y-%m-%d %H:%M:%S UTC") if facts.duedate else "",
        "manual": float(sum(facts.manual.values())) if facts.manual else None,
    }


def course_late_plugin(root: Path) -> Any:
    """The course's ``LateSubmissionPlugin`` instance, as ``nbgrader autograde`` makes it: the class
    ``AssignLatePenalties.plugin_class`` names in the course's ``nbgrader_config.py`` (nbgrader's
    own by default), configured from that file. ``course_config`` puts the course's folder on
    ``sys.path`` as nbgrader's apps put their working folder, so a plugin module kept beside
    ``nbgrader_config.py`` imports here too."""
    from nbgrader.preprocessors import AssignLatePenalties

    from attnkit.course.gradebook import course_config

    penalties = AssignLatePenalties(config=course_config(root))
    penalties.init_plugin()
    return penalties.plugin_inst
