"""The LMS tests' fixtures (tests/support/lms_course.py builds their course)."""

from lms_course import lms_course

__all__ = ["lms_course"]
