"""pytest's view of tests/: tests/course/ is a course (a second assignment's hidden suite), graded
by tests/test_plugin_assignment.py through attnkit, never collected as the project's own tests."""

collect_ignore = ["course"]

import os

# This process forks grader workers itself (tests/test_worker_session.py, as the engine does):
# like `attnkit grade` (cli.py), it keeps numpy's OpenBLAS and torch's OpenMP pools at one thread
# from the start, so that no thread of theirs is alive at a fork. Set before any test module
# imports numpy or torch.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
