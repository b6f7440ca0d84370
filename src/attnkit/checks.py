"""Kept for assignment folders that import ``attnkit.checks``: it lives in ``attnkit.assignment.checks``."""

from attnkit.assignment.checks import *  # noqa: F403
