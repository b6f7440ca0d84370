"""The records that cross a process boundary, typed: what intake hands the workers (``Job``), what
a worker sends back for each submission (``SubmissionRecord``, over its result pipe between the
messages of ``attnkit.engine.messages``) and what the CLI writes from it (``ResultsJson``, each
submission's results.json, read again by the store, the gradebook, Gradescope and the LMS zips).

Plain data only (``dict``/``list``/``str``/numbers: they go through a pipe and into JSON), typed
as ``TypedDict`` so that mypy checks every key a producer writes and a reader reads. A key that
only some records have is ``NotRequired``; ``tests/report/test_records.py`` grades real submissions and
checks that their records hold exactly the keys declared here. This module imports nothing of
attnkit's: every side may import it.
"""

# No ``from __future__ import annotations``: a TypedDict reads ``NotRequired`` at run time
# (``__optional_keys__``, which tests/report/test_records.py checks), and a string annotation hides it.
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict


@dataclass
class Job:
    """One student's submission of one assignment (intake -> engine -> worker, pickled to the worker)."""

    student_id: str
    assignment: str
    notebooks: list[str]  # paths below ``root``, in the order they run (regular files at intake)
    fingerprint: str
    root: str = ""  # the submissions folder: nothing above it is followed
    digests: list[str] = field(default_factory=list)  # sha256 of each notebook's bytes at intake
    problems: list[str] = field(default_factory=list)  # found at intake (student-facing, in the run's language)
    notes: list[str] = field(default_factory=list)
    # The assignment's notebook name when the student's file had another ("attention (1).ipynb"
    # -> "attention.ipynb"): what results.json's notebooks[].stored_as says autograded/ holds.
    graded_as: str = ""
    # What the LMS said about lateness (``intake.lms_record.lms_lateness`` of the lms.json that
    # ``attnkit collect`` left beside the notebook), read at intake so that the record is written
    # once with it. Not part of the fingerprint: a re-collect that changed only the flag rewrites
    # the record without regrading.
    lms_late: dict[str, str] | None = None
    # The submission's own id, on every message about it between the parent and a worker (the
    # service's queue row id; in a grade run its place, given by ``engine.fan_out.FanOut``): a
    # record is taken only for the job it names, never another one of the same student (issue 50).
    id: int = 0

    @property
    def key(self) -> str:
        return f"{self.student_id}/{self.assignment}"


class HiddenTestRecord(TypedDict):
    """One hidden test's result, its one definition: ``grading.outcomes.TestResult`` is this type;
    the plugin makes it (``test_result``), charges and diagnosis adjust it, the worker sends it."""

    name: str
    nodeid: str
    grade_id: str
    max_score: float
    score: float
    status: str  # "passed" | "failed"
    output: str
    diagnoses: list[str]
    substituted: list[str]
    functions: list[str]
    error: dict[str, Any]
    charge: dict[str, Any]  # points moved where the failure starts (attnkit.grading.charges); {} when none
    concept: str  # the concept the test checks, as the page names it (its ``concept`` marker, translated); "" for none


class CellRecord(TypedDict):
    """One code cell's run (every field of ``sandbox.CellRun``) with the section it sits in."""

    index: int
    grade_id: str
    ok: bool
    error_type: str
    message: str
    output: str
    seconds: float
    line: int
    text: str
    # The function in another cell the error came from: its name, line in its own cell, that
    # line's text and that cell's section (issue 53: every line number counts in the cell it names).
    inner: NotRequired[dict[str, Any]]
    section: str


class NotebookRecord(TypedDict):
    """A graded notebook: what the gradebook may copy to autograded/ (these bytes, under ``stored_as``)."""

    name: str
    sha256: str
    stored_as: str


class RecordBase(TypedDict):
    """The keys every submission record has, graded or not."""

    student_id: str
    assignment: str
    fingerprint: str  # empty in a "not graded" record: the next run tries it again
    tests: list[HiddenTestRecord]
    problems: list[str]
    notes: list[str]


class SubmissionRecord(RecordBase):
    """A worker's record of one submission (``worker.SubmissionRecords.finished``), or the
    parent's "not graded" one for a submission that killed or stalled its worker even alone
    (``engine.not_graded_record``). A graded record has every key but ``not_graded``; a "not
    graded" one has only ``RecordBase``'s and ``not_graded``."""

    notebooks: NotRequired[list[NotebookRecord]]
    cells: NotRequired[list[CellRecord]]
    sandbox: NotRequired[dict[str, Any]]  # ``sandbox.Submission.describe``
    evidence: NotRequired[dict[str, Any]]  # the assignment's ``evidence`` hook's panels
    seconds: NotRequired[float]
    not_graded: NotRequired[str]  # why (only in a "not graded" record)


# The keys only a graded record has, and the one only a "not graded" record has.
GRADED_ONLY = frozenset({"notebooks", "cells", "sandbox", "evidence", "seconds"})
NOT_GRADED_ONLY = frozenset({"not_graded"})
# The keys a record gains on its way through the worker's result pipe: none (issue 50: the worker's
# pid and the job's id travel on the message around it, ``worker_messages.record`` / ``from_worker``).
SENT_BY_WORKER: frozenset[str] = frozenset()


class PartScore(TypedDict):
    score: float
    max_score: float


class ResultsTest(TypedDict):
    """A test as results.json shows it (``scoring.results_json``): Gradescope's keys, then ours;
    ``substituted``, ``functions``, ``error``, ``charge`` and ``concept`` only when not empty."""

    name: str
    score: float
    max_score: float
    output: str
    status: str
    grade_id: str
    diagnoses: list[str]
    substituted: NotRequired[list[str]]
    functions: NotRequired[list[str]]
    error: NotRequired[dict[str, Any]]
    charge: NotRequired[dict[str, Any]]
    concept: NotRequired[str]


class ResultsJson(TypedDict):
    """A submission's results.json (``scoring.results_json``, written by ``store.write_record``):
    Gradescope's keys first, then ours. ``late`` (nbgrader's lateness, ``course.lateness``) and
    ``lms_late`` (the LMS's flag, from the job) are there when a gradebook or lms.json has them."""

    score: float
    max_score: float
    output_format: str
    tests: list[ResultsTest]
    diagnoses: list[str]
    student_id: str
    assignment: str
    fingerprint: str
    parts: dict[str, PartScore]
    problems: list[str]
    notes: list[str]
    cells: list[CellRecord]  # the cells that failed, their texts cut
    sandbox: dict[str, Any]
    isolation: str  # ``isolation_level.level``
    evidence: dict[str, Any]
    seconds: float
    notebooks: list[NotebookRecord]
    not_graded: str  # empty when graded
    late: NotRequired[dict[str, Any]]  # ``course.lateness.GradebookLateness.of`` (= ``gradebook_totals.lateness``)
    lms_late: NotRequired[dict[str, str]]  # ``intake.lms_record.lms_lateness``
    hints: NotRequired[dict[str, int]]  # the service's hint ladder (issue 53): the level each diagnosis's page shows


# The keys that come from beside the submission (a gradebook, lms.json, the service's hint ladder), not from grading it.
ADDED_LATER = frozenset({"late", "lms_late", "hints"})
