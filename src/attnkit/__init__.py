"""attnkit: sandboxed, diagnosing autograder for the attention chapter."""

__version__ = "0.1.0"
