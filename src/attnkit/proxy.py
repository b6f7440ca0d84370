"""Kept for assignment folders written before the package had sub-packages (``from attnkit.proxy
import StudentRaised``): the outcome of a call lives in ``attnkit.boundary.outcome``, the hidden
tests' ``student`` proxy in ``attnkit.grading.student``."""

from attnkit.boundary.outcome import Call, Outcome, SandboxCrashed, StudentMissing, StudentRaised, StudentTimeout
from attnkit.grading.student import LocalBackend, Student

__all__ = ["Call", "LocalBackend", "Outcome", "SandboxCrashed", "Student", "StudentMissing", "StudentRaised", "StudentTimeout"]
