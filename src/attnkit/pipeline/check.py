"""``attnkit check``: one notebook graded alone (self-study) by the grade pipeline, its feedback
printed."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from attnkit.assignment.folder import assignment_for, discover
from attnkit.constants import STUDENTS_FOLDER, GraderError
from attnkit.i18n import _
from attnkit.pipeline.console import print_check
from attnkit.pipeline.grade import GradeOptions, grade
from attnkit.report.store import collect


def check(notebook: Path, out: Path | None = None, assignment: str | None = None) -> int:
    """Grade ``notebook`` alone and print its feedback; ``out``: keep the outputs there (default: a
    temporary folder); ``assignment``: default, the one whose notebook has this file's name. The
    grade run's exit code."""
    if not notebook.is_file():
        raise GraderError(_("找不到笔记本：{path}").format(path=notebook))
    suite = assignment_for(discover(), assignment, notebook.name)
    with tempfile.TemporaryDirectory(prefix="attnkit-check-") as scratch:
        submitted = Path(scratch) / "submitted" / "me" / suite.name
        submitted.mkdir(parents=True)
        shutil.copy(notebook, submitted / notebook.name)
        into = out or Path(scratch) / "out"
        # One's own notebook: it may run unisolated where the OS gives no sandbox, and says so.
        code = grade(GradeOptions(submitted=submitted.parents[1], out=into, jobs=1, quiet=True, force=True, no_isolation=True))
        results = collect(into)[0]
        print_check(suite, results, into / STUDENTS_FOLDER / "me" / suite.name / "feedback.html" if out else None)
    return code
