"""Kept for ``pytest -p attnkit.plugin``: the grading plugin lives in ``attnkit.grading.plugin``."""

from attnkit.grading.plugin import *  # noqa: F403
