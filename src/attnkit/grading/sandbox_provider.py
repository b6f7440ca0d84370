"""How a worker's pytest session gets its submissions: ``SandboxProvider``, the ``student``
fixture's source in a worker, which plans each assignment once on its source notebook (``Plan``,
``PLANNING``), then for each submission reads its notebooks again as intake did, asks the zygote
for a sandbox (``submission.Submission``), runs its cells and the plan's requests in two batches and
hands the tests a ``Student`` proxy; and the assignment's evidence panels for the page
(``evidence``). The session, the records and the pipes are worker.py's.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.assignment.folder import Assignment
from attnkit.constants import CRASHED
from attnkit.i18n import _
from attnkit.submitted_files import Unsafe, digest_of, display_name, read_submitted
from attnkit.source_analysis import place_of, redefinitions, with_skipped_definitions
from attnkit.notebook import CodeCell, parse_notebook, read_notebook
from attnkit.grading.plugin import Provider
from attnkit.boundary.policy import Limits
from attnkit.grading.student import LocalBackend, Student, request_of
from attnkit.boundary.outcome import Outcome
from attnkit.records import Job
from attnkit.driver.submission import SandboxDied, Submission, batch_frame
from attnkit.driver.zygote_handle import Zygote, frame_digest, held_batch_frame
from attnkit.grading.scope import record_inner_calls


@dataclass
class Failed:
    """A backend for a submission that could not run at all: every request fails with why."""

    reason: str

    def call(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        return Outcome(error_type=CRASHED, message=self.reason)

    def variable(self, name: str) -> Outcome:
        return Outcome(error_type=CRASHED, message=self.reason)


@dataclass
class Opened:
    job: Job
    student: Student
    session: Submission | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    # The evidence panels, when computed before the submission's swapped re-runs (``before_swaps``).
    early_evidence: dict[str, Any] | None = None


# The pseudo-submission whose tests, run on the assignment's own source notebook, tell what each
# test will ask a submission (``Plan``). Not a student id: intake refuses ids starting with ".".
PLANNING = ".plan"


@dataclass
class Plan:
    """Test key -> the requests (``call``/``get`` messages) the test made on the source notebook,
    each with its fingerprint (``wire.fingerprint``), and the batch that asks them all (encoded
    once per worker)."""

    tests: dict[str, list[tuple[Any, operations.Asked]]]
    requests: list[operations.Asked] = field(default_factory=list)
    batch: bytes = b""
    # The batch's digest (the plan's name for a zygote that holds it, ``Zygote.hold_plan``), and
    # the short frame that asks a sandbox forked holding it for the plan's requests.
    digest: str = ""
    held_batch: bytes = b""
    # Test key -> API name -> the arguments (``scope.wire_of_call``) of every call of that
    # function while the test ran on the source notebook, its own and those between the
    # notebook's functions: all that a swapped-in reference answers in that test (``scope``).
    inner: dict[str, dict[str, list[bytes]]] = field(default_factory=dict)

    @classmethod
    def of(cls, asked: dict[str, list[operations.Asked]], inner: dict[str, dict[str, list[bytes]]] | None = None) -> Plan:
        tests = {key: [(wire.fingerprint(request), request) for request in requests] for key, requests in asked.items()}
        requests = [request for entries in tests.values() for _wire, request in entries]
        batch = batch_frame(requests)
        digest = frame_digest(batch)
        return cls(tests, requests, batch, digest, held_batch_frame(digest), inner or {})

    def scope_of(self, key: str) -> dict[str, list[bytes]]:
        """What a swapped-in reference may answer in test ``key`` (nothing, for a test not planned)."""
        return self.inner.get(key, {})


# Per assignment name, for this worker's life, never invalidated: a worker serves one run
# (engine.grade_jobs starts its workers), and the suites do not change during a run. (An
# in-process caller grading an edited suite again must do so in a new process.)
_plans: dict[str, Plan] = {}


class SandboxProvider(Provider):
    """The ``student`` fixture's source in a worker: a sandbox per submission, from the zygote.

    Before the first submission of an assignment, its hidden tests run once on the assignment's
    source notebook (trusted, in this process) and every request they make is kept: the
    assignment's *plan*. Each submission's sandbox then answers all of the plan's requests in one
    batch right after its cells, and a test gets those answers for the very same requests
    (``Student.prefetched``) instead of a round trip each: one exchange with the sandbox instead
    of about eighty. Answers are the sandbox's, computed in the plan's order; nothing is taken
    from the source notebook but the questions."""

    def __init__(
        self,
        zygote: Zygote,
        jobs: list[Job],
        limits: Limits,
        api: tuple[str, ...],
        finished: Callable[[Opened], None],
        started: Callable[[Job], None] = lambda job: None,
        assignment: Assignment | None = None,
        more: Callable[[str], list[Job] | None] | None = None,
    ) -> None:
        self.zygote = zygote
        self.started = started  # tells the parent which submission a dying worker was on
        self.jobs = {job.key: job for job in jobs}
        self.limits = limits
        self.api = api
        self.finished = finished
        self.open_now: dict[str, Opened] = {}
        self.opened_any = False  # a submission's sandbox was asked for (its code may have run)
        self.fatal = ""  # set when grading itself cannot go on
        self.assignment = assignment
        self.plan: Plan | None = _plans.get(assignment.name) if assignment is not None else None
        self.planning: dict[str, list[operations.Asked]] = {}
        self.planning_inner: dict[str, dict[str, list[bytes]]] = {}
        self._inner_calls: list[tuple[str, bytes]] = []  # filled while planning (scope.record_inner_calls)
        self._more = more

    def more(self) -> list[str]:
        """The ids of the next submissions of this assignment to grade in the same session (the
        worker's next chunk), once every submission so far is closed; none: the session ends."""
        if self._more is None or self.assignment is None or self.open_now:
            return []
        jobs = self._more(self.assignment.name) or []
        self.jobs = {job.key: job for job in jobs}
        return list(self.jobs)

    def submission_ids(self) -> list[str]:
        can_plan = self.plan is None and self.assignment is not None and self.assignment.source.is_file()
        return ([PLANNING] if can_plan and self.jobs else []) + list(self.jobs)

    def learn(self, submission_id: str, key: str, proxy: Student) -> None:
        """After each test: on the source notebook, the requests it made become its plan."""
        if submission_id == PLANNING and not proxy.substitutes:
            self.planning[key] = [request_of(call) for call in proxy.calls]
            inner: dict[str, list[bytes]] = {}
            for name, encoded in self._inner_calls:
                inner.setdefault(name, []).append(encoded)
            self.planning_inner[key] = inner
        self._inner_calls.clear()

    def scope_of(self, key: str) -> dict[str, list[bytes]]:
        """The calls a swapped-in reference may answer in test ``key`` (``scope``): the plan's,
        or none where the assignment could not be planned (its reference then answers nothing)."""
        return self.plan.scope_of(key) if self.plan is not None else {}

    def _open_planning(self) -> Student:
        """The source notebook's code cells run here, as a sandbox would run a submission's
        (checks and skipped demos left out): a cell that fails (a stub, in a notebook without
        solutions) costs only what it defines, and the plan just asks less."""
        assert self.assignment is not None
        source = self.assignment.source
        cells = [cell.source for cell in read_notebook(source).cells if cell.runs_in_sandbox]
        # The notebook's own printing is not the TA's business.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            backend = LocalBackend.from_cells(cells, str(source))
        self._inner_calls.clear()
        record_inner_calls(backend.namespace, self.api, self._inner_calls)
        return Student(backend, api=self.api)

    def _prefetch(self, student: Student, session: Submission) -> None:
        """The plan's requests answered by this submission's sandbox, handed to its tests."""
        if not self.plan or not self.plan.requests:
            return
        # Once per zygote: from then on its sandboxes hold the plan's requests, decoded, and are
        # asked for them in a few bytes.
        self.zygote.hold_plan(self.plan.batch, self.plan.digest)
        held = session.plan == self.plan.digest
        outcomes = iter(session.prefetch(self.plan.requests, self.plan.held_batch if held else self.plan.batch))
        for key, entries in self.plan.tests.items():
            for (printed, _request), outcome in zip(entries, outcomes, strict=False):
                student.prefetched.setdefault(key, []).append((printed, outcome))

    def open(self, submission_id: str) -> Student:
        if submission_id == PLANNING:
            return self._open_planning()
        started = time.perf_counter()
        self.opened_any = True
        job = self.jobs[submission_id]
        self.started(job)
        cells: list[CodeCell] = []
        problems: list[str] = list(job.problems)
        notes: list[str] = list(job.notes)
        offset = 0
        for position, path in enumerate(job.notebooks):
            name = display_name(Path(path).name)
            # Read again the way intake did (no links, regular file, capped) and check that these
            # are the very bytes intake fingerprinted: the grade belongs to those bytes only.
            try:
                raw = read_submitted(Path(job.root), Path(path))
            except Unsafe as error:
                problems.append(_("{name}：{problem}").format(name=name, problem=error))
                continue
            if position < len(job.digests) and digest_of(raw) != job.digests[position]:
                problems.append(_("{name}：评分期间文件被改动过，未评分").format(name=name))
                continue
            notebook = parse_notebook(raw, Path(path))
            del raw
            if not notebook.readable:
                problems.append(_("{name}：{problem}").format(name=name, problem=notebook.problem))
                continue
            notes += [_("{name}：{problem}").format(name=name, problem=note) for note in notebook.notes]
            for cell in notebook.cells:
                cells.append(CodeCell(offset + cell.index, cell.source, cell.grade_id, cell.is_check, cell.skip, cell.section))
            offset += 10_000
        if not job.notebooks and not problems:
            problems.append(_("没有找到任何 .ipynb 笔记本"))
        cells, gave = with_skipped_definitions(cells, self.api)
        notes += [
            _(
                "skip-grading 单元格（{place}）评分时不运行其中的实验；但你的答案用到了它定义的 {names}，"
                "所以评分时运行了这些定义（和在 Jupyter 里从上到下运行时一样）"
            ).format(place=place_of(cell), names=_("、").join(names))
            for cell, names in gave
        ]
        notes += redefinition_notes(cells, self.api)
        session: Submission | None = None
        if cells:
            session = Submission(self.zygote, cells, self.limits)
            # A sandbox that cannot even boot is the grader's failure, not the student's: let it
            # propagate so the run stops with an error instead of handing out zeros.
            try:
                session.start()
            except (SandboxDied, OSError, RuntimeError) as error:
                import pytest

                # pytest.exit is how a fixture stops a session; run_chunk raises self.fatal after it.
                self.fatal = _("沙箱无法启动：{error}").format(error=error)
                pytest.exit(self.fatal, returncode=3)
            backend: Any = session
        else:
            backend = Failed(problems[-1] if problems else _("笔记本中没有任何代码"))
        student = Student(backend, api=self.api)
        if session is not None:
            self._prefetch(student, session)
        opened = Opened(job, student, session, problems, notes, started)
        self.open_now[submission_id] = opened
        return opened.student

    def before_swaps(self, submission_id: str, failing: set[str]) -> None:
        """Before the submission's first swapped re-run (``GradingPlugin._run_deferred``): the
        evidence panels now, while its sandbox has run no swapped call, should a part in
        ``failing`` (failed, or waiting for its re-run) call for them. A swapped call's sandbox
        must be replaced before it answers a plain one again (``Submission._forget_swaps``)."""
        opened = self.open_now.get(submission_id)
        if opened is None or opened.session is None or self.assignment is None:
            return
        tests = [{"status": "failed", "grade_id": grade_id} for grade_id in failing]
        if evidence_needed(self.assignment, tests):
            opened.early_evidence = evidence(self.assignment, opened.student, tests)

    def close(self, submission_id: str) -> None:
        if submission_id == PLANNING:
            if self.assignment is not None:
                self.plan = _plans[self.assignment.name] = Plan.of(self.planning, self.planning_inner)
                if self.plan.requests:  # before the first sandbox is forked: every one then holds it
                    self.zygote.hold_plan(self.plan.batch, self.plan.digest)
            return
        opened = self.open_now.pop(submission_id)
        try:
            self.finished(opened)
        finally:
            if opened.session is not None:
                opened.session.close()


def redefinition_notes(cells: list[CodeCell], api: tuple[str, ...]) -> list[str]:
    """One note per answer function defined in more than one cell that grading runs: which
    definition is graded (the last, as with Jupyter's "Run All") and where the others are."""
    notes = []
    for name, where in redefinitions(cells, api).items():
        places = _("、").join(place_of(cell) for cell in where)
        notes.append(
            _(
                "{name} 在 {count} 个单元格里都有定义（{places}）：评分时和 Jupyter 的“全部运行”一样按顺序运行单元格，"
                "后面的定义覆盖前面的，被评分的是最后一个（{last}）。如果后面那个只是实验时的改写，请把它删掉或改个名字"
            ).format(name=name, count=len(where), places=places, last=place_of(where[-1]))
        )
    return notes


def evidence_needed(assignment: Assignment, tests: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a failed part is one the assignment's ``evidence`` hook can explain."""
    return assignment.hook("evidence") is not None and any(t["status"] != "passed" and t["grade_id"] in assignment.heatmap_parts for t in tests)


def evidence(assignment: Assignment, student: Student, tests: Sequence[Mapping[str, Any]], early: dict[str, Any] | None = None) -> dict[str, Any]:
    """The assignment's ``evidence`` hook's panels for the feedback page, when a failed part is
    one its evidence can explain (empty otherwise). Its calls are not evidence for diagnosis.
    ``early``: the panels as computed before the swapped re-runs (``SandboxProvider.before_swaps``)."""
    hook = assignment.hook("evidence")
    if hook is None or not evidence_needed(assignment, tests):
        return {}
    if early is not None:
        return early
    calls_before = len(student.calls)
    try:
        return hook(student, assignment.catalogue().reference_namespace())
    finally:
        del student.calls[calls_before:]
