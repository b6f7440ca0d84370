"""nbgrader configuration: the repository root is the nbgrader course ``ch19``.

nbgrader's ``source`` step is ``solutions/`` (model answers between BEGIN/END SOLUTION) and its
``release`` step is ``assignments/`` (what students get), so ``nbgrader generate_assignment
ch19-attention``, ``nbgrader validate`` and ``nbgrader export`` work from this directory with no
extra setup. ``make release`` (``python -m attnkit.course.release``) wraps ``generate_assignment`` and
makes its output deterministic.
"""

import os

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

_ROOT = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = _ROOT
c.CourseDirectory.course_id = "ch19"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
# The gradebook is local state (gitignored); `attnkit.course.release` passes its own throwaway --db.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(_ROOT, "gradebook.db")

# What replaces a model answer in the released notebook (the notebooks are in Chinese).
c.ClearSolutions.code_stub = {"python": "# 在此作答\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "在此作答。"

# `nbgrader autograde` grades with attnkit's hidden suite (same scores as `make grade`), and
# `nbgrader generate_assignment` stops with a message instead of deleting the release when it
# would refuse a change (see src/attnkit/course/nbgrader_commands.py).
try:
    from attnkit.course.nbgrader_commands import configure as _attnkit_configure
except ImportError:  # nbgrader run outside the course's venv: plain nbgrader behaviour
    pass
else:
    _attnkit_configure(c, _ROOT)
