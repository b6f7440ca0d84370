"""Kept for courses whose ``nbgrader_config.py`` names ``attnkit.nbgrader_course.KitAutoGrades``,
``KitFeedbackExporter`` or ``configure``: they live in ``attnkit.course.nbgrader_commands``."""

from attnkit.course.nbgrader_commands import KitAutoGrades, KitFeedbackExporter, SafeMarkup, configure

__all__ = ["KitAutoGrades", "KitFeedbackExporter", "SafeMarkup", "configure"]
