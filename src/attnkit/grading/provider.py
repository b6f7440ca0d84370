"""What a source of submissions answers the grading plugin (``plugin.GradingPlugin``): the
sandboxed class of a worker (``sandbox_provider.SandboxProvider``), one trusted file in this process
(``local_provider.LocalProvider``), or a test's own."""

from __future__ import annotations

from typing import Protocol

from attnkit.grading.student import Student


class Provider(Protocol):
    """Where the ``student`` fixture's submissions come from. A provider subclasses it: the
    first three methods are its own, the others have defaults that ask nothing of it (a
    trusted source in this process: no next chunk, no plan, no scope)."""

    def submission_ids(self) -> list[str]: ...
    def open(self, submission_id: str) -> Student: ...
    def close(self, submission_id: str) -> None: ...

    def more(self) -> list[str]:
        """The ids of the next submissions to grade in the same session, once every one so far is
        closed (``GradingPlugin._template_runs``); none: the session ends."""
        return []

    def learn(self, submission_id: str, key: str, proxy: Student) -> None:
        """After each test of a submission, with the calls it made (``proxy.calls``)."""
        return None

    def before_swaps(self, submission_id: str, failing: set[str]) -> None:
        """Before the submission's first swapped re-run; ``failing``: the grade ids that failed or may yet."""
        return None

    def scope_of(self, key: str) -> dict[str, list[bytes]] | None:
        """What a swapped-in reference may answer in test ``key`` (``attnkit.grading.scope``); None: unscoped."""
        return None
