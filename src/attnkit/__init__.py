"""attnkit: a sandboxed, diagnosing autograder that hosts textbook assignments (autograder/<package>/)."""

__version__ = "0.1.0"
