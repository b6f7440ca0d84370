"""Names and numbers shared by several modules, stated once.

Where the project lives, the markers a failed call carries across the sandbox boundary, the
sizes of text kept from a submission, and the one exception for the grader's
own failures.
"""

from __future__ import annotations

from pathlib import Path

# The project folder (an editable install, as `make` makes it): hidden suites, source notebooks
# and releases live beside the package, never inside what a student can see.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
AUTOGRADER_ROOT = PROJECT_ROOT / "autograder"
SOLUTIONS_ROOT = PROJECT_ROOT / "solutions"
RELEASE_ROOT = PROJECT_ROOT / "assignments"

# Per-student outputs live under OUT/students/<id>/<assignment>/: a student id is data, and no id
# can then collide with a class-level file (grades.csv, report.html) of OUT itself.
STUDENTS_FOLDER = "students"

# An Outcome's or CellRun's error_type when no exception of the student's explains the failure.
TIMEOUT = "__timeout__"  # the call or cell ran past its deadline
CRASHED = "__crashed__"  # the process running the student's code died
MISSING = "__missing__"  # the submission does not define the name
GRADER_MARKERS = (TIMEOUT, CRASHED, MISSING)

MAX_MESSAGE = 2_000  # characters kept of one exception message from student code


class GraderError(Exception):
    """Grading itself cannot run (never a student's doing): the run stops with this message and
    a non-zero exit, instead of handing out zeros. Across a process boundary it travels as the
    message ``worker_messages.fatal(str(error))`` and is raised again on the other side."""


def broken_python(path: Path, error: BaseException) -> str:
    """What is wrong with the Python file ``path`` (a course's ``nbgrader_config.py``, a hidden
    test) as one line naming the file, the line and the error: a SyntaxError's own line, else the
    deepest line of ``path`` in the traceback (a NameError at its exec, say)."""
    import traceback

    from attnkit.i18n import _

    line: int | None = None
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename).resolve() == path.resolve():
        line = error.lineno
    else:
        frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename and Path(frame.filename).resolve() == path.resolve()]
        line = frames[-1].lineno if frames else None
    message = error.msg if isinstance(error, SyntaxError) else str(error)
    return _("{path} 第 {line} 行有错误（{kind}：{message}）：改正后再启动").format(path=path, line=line or "?", kind=type(error).__name__, message=message)
