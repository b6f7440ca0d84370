"""Kept for assignment folders that import ``attnkit.mistakes``: it lives in ``attnkit.assignment.mistakes``."""

from attnkit.assignment.mistakes import *  # noqa: F403
