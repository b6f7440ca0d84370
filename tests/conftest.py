"""pytest's view of tests/: tests/course/ is a course (a second assignment's hidden suite), graded
by tests/test_plugin_assignment.py through attnkit, never collected as the project's own tests."""

collect_ignore = ["course"]
