"""The plugin's own test loop: every submission of a session of plain ``student`` tests, in turn.

:class:`attnkit.grading.plugin.GradingPlugin` takes these methods from :class:`OwnLoop`: open each
submission, run its tests in order (a failed test whose dependency failed waits for its re-run
with the reference swapped in, ``_Deferred``), record them, close it. pytest's own loop, with the
plugin's hooks, does the same for a session that holds anything else. The hooks, the record of
one test and the swapped call itself are :mod:`attnkit.grading.plugin`'s.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from attnkit.i18n import _
from attnkit.grading import charges
from attnkit.boundary.outcome import Call, Outcome, StudentRaised
from attnkit.grading.markers import assignment_of, dependencies_of, functions_of, grade_id_of, rests_on_of, test_key
from attnkit.grading.outcomes import TestResult, failure_message, only_failed_functions
from attnkit.grading.student import Student

if TYPE_CHECKING:
    from attnkit.assignment.folder import Assignment
    from attnkit.grading.provider import Provider


def _plain_student_test(item: pytest.Item) -> bool:
    """A test function of the ``student`` fixture alone, with nothing pytest would do around it."""
    return (
        isinstance(item, pytest.Function)
        and set(item.fixturenames) <= {"student", "request"}
        and set(getattr(getattr(item, "callspec", None), "params", {})) == {"student"}
        and not any(item.get_closest_marker(name) for name in ("skip", "skipif", "xfail", "usefixtures", "filterwarnings"))
    )


class _Skipped:
    """What ``GradingPlugin._within_test`` returns for a test that skipped itself."""


_SKIPPED = _Skipped()


def unfinished(error: BaseException, swappable: Iterable[str]) -> bool:
    """A function the test checks itself (none of ``swappable``, the test's dependencies) raised
    NotImplementedError from its own body: an unfinished stub (the release's ``raise
    NotImplementedError()``). Nothing swapped in for what it depends on can finish it, so the test
    is not run again with the references swapped in: the re-run would fail the same way, at the
    cost of a sandbox forked or replaced for it, and the page would blame the function's own code
    instead of saying it is not finished. A dependency's stub is another matter: the reference
    takes its place in the re-run, as for any failed dependency."""
    return (
        isinstance(error, StudentRaised)
        and error.type_name == "NotImplementedError"
        and isinstance(error.where, dict)
        and error.where.get("function") == error.function
        and error.function not in set(swappable)
    )


@dataclass
class _Deferred:
    """A failed test waiting for its re-run with references swapped in: its plain run's failure,
    and the calls that run made (its diagnosis, should the re-run not happen)."""

    item: pytest.Function
    error: BaseException
    calls: list[Any]
    # Dependencies that passed their own tests but may be where the failure starts
    # (``attnkit.grading.charges``): each is swapped in alone; the first with which it passes is charged.
    suspects: tuple[str, ...] = ()
    # A part its concept rests on whose tests come later (``OwnLoop._judged_by_own``), with that
    # concept: judged at the close should its own failure stand after the charge trials.
    rests_later: tuple[str, str] | None = None


@dataclass
class _BySlip:
    """A failed test whose concept rests on a part the student failed, and whose failure the
    catalogue already explains by a slip named in that part: it is judged at the submission's
    close, once every name agrees with every test of its function (``OwnLoop._judge_slips``)."""

    item: pytest.Function
    result: TestResult
    part: str
    concept: str
    calls: list[Call]  # its plain run's, diagnosed in full should the names not stand
    # Recorded before the part it rests on had run (``OwnLoop._judged_by_own``): judged only if
    # that part failed after all, its failure (and diagnosis) standing otherwise.
    later: bool = False


def _passed(result: TestResult) -> None:
    """A failure recorded while its judgement waited, now judged passed: full points, and no
    diagnosis or error of its own on the page (the slip's box names only the parts it cost)."""
    result["status"] = "passed"
    result["score"] = result["max_score"]
    result["diagnoses"] = []
    result["error"] = {}


class OwnLoop:
    """The test loop of :class:`attnkit.grading.plugin.GradingPlugin` (its state is set up there)."""

    if TYPE_CHECKING:
        provider: Provider
        results: dict[str, list[TestResult]]
        failed_functions: dict[str, dict[str, str]]
        fatal: str
        template: bool
        suite_state: tuple | None
        plain_suites: set[tuple]  # plugin._PLAIN_SUITES
        _positions: dict[str, int]
        _last_of_part: dict[str, int]  # each grade cell's last test in the session's order
        _deferred: list[_Deferred]
        _unnarrowed: list[tuple[int, TestResult, list[str], Assignment]]
        _recorded_at: dict[int, int]
        _failed_parts: dict[str, set[str]]
        _by_slip: dict[str, list[_BySlip]]

        def open(self, submission_id: str) -> Student: ...

        swapped: dict[str, dict[str, str]]

        def record(
            self, item: pytest.Item, submission_id: str, message: str | None, diagnose: bool, error: BaseException | None = None, charged: bool = False
        ) -> None: ...
        def _charge_suspects(self, item: pytest.Function, error: BaseException, proxy: Student, submission_id: str) -> tuple[str, ...]: ...
        def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]: ...
        def _swap_for(self, item: pytest.Item, submission_id: str) -> dict[str, str]: ...
        def _plain_call(self, item: pytest.Function) -> None: ...
        def _swapped_call(self, item: pytest.Function, swap: dict[str, str]) -> None: ...
        def _failed_by(self, submission_id: str, position: int) -> dict[str, str]: ...
        def agree(self, submission_id: str) -> None: ...
        def diagnose(self, proxy: Student, assignment: Assignment) -> list[str]: ...
        @staticmethod
        def _probe_once(proxy: Student) -> Callable[[str, tuple, dict], Outcome]: ...
        @staticmethod
        def _probes_once(proxy: Student) -> Callable[[list[tuple[str, tuple, dict]]], list[Outcome]]: ...

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """Run a session of ``student`` tests ourselves: open each submission, run its tests in
        order, record them, close it, exactly as pytest's own loop with this plugin's hooks would,
        less pytest's per-test protocol (setup, call and teardown reports, their hooks, the
        environment variable per phase), which costs more than most tests and ends up in no
        result. A session with anything else in it (other fixtures, skip or xfail markers,
        collection errors) runs in pytest's own loop."""
        plain = not session.testsfailed and bool(session.items) and all(_plain_student_test(item) for item in session.items)
        if self.template and not plain:
            # Only a suite that changed under a running process gets here: its items are one
            # submission's, and pytest's loop would grade nobody else.
            self.fatal = _("隐藏测试在评分期间被改动过，请重新运行")
            pytest.exit(self.fatal, returncode=3)
        if not plain:
            return None
        if self.suite_state is not None:
            self.plain_suites.add(self.suite_state)
        self._positions = {test_key(item): position for position, item in enumerate(session.items)}
        self._last_of_part = {grade_id_of(item): position for position, item in enumerate(session.items)}
        if self.template:
            runs = self._template_runs(session.items)
        else:
            runs = ((str(item.callspec.params["student"]), item) for item in session.items)  # type: ignore[attr-defined]
        submission_id: str | None = None
        opened: Student | BaseException | None = None
        # The collector runs between submissions, not inside them: what a submission's tests leave
        # in cycles (a failure's traceback and frames) is garbage once it is closed, and the
        # automatic collections a busy worker triggers kept walking everything the chunk holds.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for current, item in runs:
                if current is None or item is None:  # the submissions so far are done: close before asking for more
                    self._run_deferred(submission_id, opened)
                    self._close(submission_id, opened)
                    submission_id, opened = None, None
                    continue
                if current != submission_id:
                    self._run_deferred(submission_id, opened)
                    self._close(submission_id, opened)
                    submission_id, opened = current, None
                    try:
                        opened = self.open(current)
                    except Exception as error:  # pytest too fails each test's setup with it
                        opened = error
                if isinstance(opened, BaseException):
                    self.record(item, current, failure_message(opened), diagnose=False, error=opened)
                    continue
                # Opened just above; and a plain session holds test functions only.
                assert opened is not None and isinstance(item, pytest.Function)
                self._run(item, opened, current)
            self._run_deferred(submission_id, opened)
        finally:
            self._deferred.clear()
            self._unnarrowed.clear()
            self._close(submission_id, opened)
            if collecting:
                gc.enable()
        return True

    def _template_runs(self, items: list[pytest.Item]) -> Iterator[tuple[str | None, pytest.Item | None]]:
        """(submission, test) for every submission and each of the session's tests, in order; then,
        while the provider has more submissions of this suite for the same session (its optional
        ``more()``: the worker's next chunk), theirs: a worker keeps one session for its whole
        class. ``(None, None)`` between rounds."""
        submission_ids = list(self.provider.submission_ids())
        while submission_ids:
            for submission_id in submission_ids:
                for item in items:
                    yield submission_id, item
            yield None, None
            submission_ids = list(self.provider.more())

    def _close(self, submission_id: str | None, opened: Student | BaseException | None) -> None:
        if submission_id is not None:
            self.agree(submission_id)  # before the provider takes the results
            self._judge_slips(submission_id, opened)
        if submission_id is not None and isinstance(opened, Student):
            self.provider.close(submission_id)
        if submission_id is not None:
            gc.collect(1)

    def _run(self, item: pytest.Function, proxy: Student, submission_id: str) -> None:
        """One test on one submission, as ``pytest_runtest_call``, ``pytest_pyfunc_call`` and
        ``pytest_runtest_makereport`` below do it in pytest's loop, except that a re-run with the
        reference swapped in waits (``_Deferred``) until the submission's other tests are done."""
        item.funcargs = {"student": proxy}
        error = self._within_test(item, functools.partial(self._plain_call, item))
        if error is _SKIPPED:
            return  # no result, as in pytest's loop (its own report)
        assert not isinstance(error, _Skipped)
        if error is not None and self._may_swap(item, error, submission_id):
            self._deferred.append(_Deferred(item, error, list(proxy.calls)))
            return
        if error is not None and self._judged_by_own(item, error, proxy, submission_id):
            return
        suspects = self._charge_suspects(item, error, proxy, submission_id) if error is not None else ()
        if suspects:
            assert error is not None
            self._deferred.append(_Deferred(item, error, list(proxy.calls), suspects))
            return
        self.record(item, submission_id, failure_message(error) if error is not None else None, diagnose=True, error=error)

    def _judged_by_own(self, item: pytest.Function, error: BaseException, proxy: Student, submission_id: str) -> bool:
        """Charge per concept (issue 41): a failed test whose concept rests on a part the student
        already failed (its ``rests_on`` marker: masking rests on the attention itself) is judged
        against the student's own function instead of the reference. Returns whether it was
        recorded. Only failures of the student's results are judged again, never an unfinished
        stub, a timeout, a crash or a missing function.

        Two standards, the first that applies:

        1. *The slip the catalogue reproduces.* When a mistake named in that part (the student's
           own function there, reproduced call for call) also reproduces every call of this
           test, the student did this test's concept exactly as the reference does it, on top of
           that one slip: it is recorded failed for now and, at the submission's close, passed
           if the name still agrees with every test of its function (``_judge_slips``). No call
           to the sandbox: the catalogue's implementation ran in this process. This reaches
           slips whose own attention is no row-by-row standard (a softmax over the queries,
           which also leaves a key no query may see at NaN).
        2. *The student's own function.* The test is run again with ``Student.judged_by_own``
           set: its checks take their expectations from the student's own results (ch19:
           their attention over the allowed keys, behind a real-work gate).

        Passed, it is recorded as passed, saying so: the slip is charged once, in its own part."""
        resting = rests_on_of(item)
        if not resting:
            return False
        if isinstance(error, StudentRaised):
            if error.type_name == "NotImplementedError":
                return False
        elif not isinstance(error, (AssertionError, pytest.fail.Exception)):
            return False
        failed = self._failed_parts.get(submission_id, set())
        for part, concept, _how in resting:  # the first part it rests on that the student failed
            if part in failed:
                if self._by_named_slip(item, error, proxy, submission_id, part, concept):
                    return True
                return self._by_own_function(item, proxy, submission_id, part, concept)
        # A part it rests on whose tests come later in the session (the multi-head part, after the
        # multi-head future tests, issue 53): recorded failed now, diagnosed as any failure, and
        # judged at the close (``_judge_slips``) if that part turns out failed.
        position = self._positions.get(test_key(item), 0)
        later = [(part, concept) for part, concept, _how in resting if self._last_of_part.get(part, -1) > position]
        if not later:
            return False
        part, concept = later[0]
        suspects = self._charge_suspects(item, error, proxy, submission_id)
        if suspects:  # a dependency may be where it starts: the charge trials first (``_run_deferred``)
            self._deferred.append(_Deferred(item, error, list(proxy.calls), suspects, rests_later=(part, concept)))
            return True
        self.record(item, submission_id, failure_message(error), diagnose=True, error=error)
        result = self.results[submission_id][-1]
        self._by_slip.setdefault(submission_id, []).append(_BySlip(item, result, part, concept, list(proxy.calls), later=True))
        return True

    def _slips_named_in(self, submission_id: str, part: str) -> set[str]:
        """The mistakes named on the failed tests of ``part`` so far."""
        return {d for result in self.results.get(submission_id, []) if result["grade_id"] == part and result["status"] != "passed" for d in result["diagnoses"]}

    def _by_named_slip(self, item: pytest.Function, error: BaseException, proxy: Student, submission_id: str, part: str, concept: str) -> bool:
        """Standard 1 of ``_judged_by_own``: record the failure with its diagnosis, to be judged at
        the close, when this test's diagnosis is only slips named in ``part``."""
        named = self._slips_named_in(submission_id, part)
        if not named:
            return False
        assignment = assignment_of(item)
        found = self._reproducing(proxy, assignment, named)
        if not found:
            return False
        self.record(item, submission_id, failure_message(error), diagnose=False, error=error)
        result = self.results[submission_id][-1]
        position = self._positions.get(test_key(item), 0)
        result["diagnoses"] = only_failed_functions(found, assignment, self._failed_by(submission_id, position))
        if self._deferred:  # a test before it may yet fail: narrowed again then
            self._unnarrowed.append((position, result, found, assignment))
        self._by_slip.setdefault(submission_id, []).append(_BySlip(item, result, part, concept, list(proxy.calls)))
        return True

    def _reproducing(self, proxy: Student, assignment: Assignment, named: set[str]) -> list[str]:
        """The mistakes of ``named`` that reproduce the test's calls and the catalogue's probes
        (``diagnosis.diagnose`` over those alone: the one slip of the part, not the whole
        catalogue, is what standard 1 asks about)."""
        from attnkit.assignment.mistakes import mistake_id_of
        from attnkit.grading.diagnosis import diagnose

        catalogue = assignment.catalogue()
        every = catalogue.diagnosable_namespaces() if hasattr(catalogue, "diagnosable_namespaces") else catalogue.mistake_namespaces()
        among = {key: namespace for key, namespace in every.items() if mistake_id_of(key) in named}
        probes = catalogue.probes() if hasattr(catalogue, "probes") else None
        return diagnose(proxy.calls, catalogue.reference_namespace(), among, probes, self._probe_once(proxy), self._probes_once(proxy))

    def _by_own_function(self, item: pytest.Function, proxy: Student, submission_id: str, part: str, concept: str) -> bool:
        """Standard 2 of ``_judged_by_own``: the test again with ``Student.judged_by_own`` set."""
        calls = list(proxy.calls)
        again = self._within_test(item, functools.partial(self._own_reference_call, item, proxy, concept))
        if again is not None:
            proxy.calls = calls  # the plain run's failure stands, diagnosed on its own calls
            return False
        self.record(item, submission_id, None, diagnose=False)
        self._mark_judged_by_own(self.results[submission_id][-1], item, part, concept)
        return True

    def _judge_slips(self, submission_id: str, opened: Student | BaseException | None) -> None:
        """At a submission's close, after ``agree``: each test waiting on standard 1 of
        ``_judged_by_own`` passes when its diagnosis still stands and is still a slip named in
        the part it rests on; otherwise it is judged by the student's own function (standard 2)
        while the sandbox is still open, and its failure stands if that does not pass either."""
        waiting = self._by_slip.pop(submission_id, [])
        for pending in waiting:
            result = pending.result
            if pending.later and pending.part not in self._failed_parts.get(submission_id, set()):
                continue  # the part it rests on passed: its own failure stands, as recorded
            named = self._slips_named_in(submission_id, pending.part)
            # Standard 1 only where the slip was named before the test ran (its part came first):
            # a slip of a part graded later (the multi-head part's) may break this test's own
            # concept (a mask inverted in multi_head_attention leaks), so only the student's own
            # function, behind its gate, judges it.
            if not pending.later and result["diagnoses"] and set(result["diagnoses"]) <= named:
                self._mark_judged_by_own(result, pending.item, pending.part, pending.concept)
                _passed(result)
                continue
            if not isinstance(opened, Student):
                continue
            pending.item.funcargs = {"student": opened}
            again = self._within_test(pending.item, functools.partial(self._own_reference_call, pending.item, opened, pending.concept))
            if again is None:
                self._mark_judged_by_own(result, pending.item, pending.part, pending.concept)
                _passed(result)
                continue
            # Its failure stands: diagnosed on its own calls over the whole catalogue, as any
            # failure is, keeping only names that survived the agreement on other tests (a name
            # that agrees with no test but this one is worse than none).
            opened.calls = pending.calls
            standing = {d for other in self.results.get(submission_id, []) if other is not result for d in other["diagnoses"]}
            found = [d for d in self.diagnose(opened, assignment_of(pending.item)) if d in standing]
            result["diagnoses"] = only_failed_functions(found, assignment_of(pending.item), self.failed_functions.get(submission_id, {}))

    @staticmethod
    def _mark_judged_by_own(result: TestResult, item: pytest.Function, part: str, concept: str) -> None:
        """The page's note on a test judged against the student's own function, and its charge."""
        assignment = assignment_of(item)
        where = part
        if part in assignment.parts:
            where = _("第 {number} 部分「{title}」").format(number=assignment.part_number(part), title=assignment.part_title(part))
        how = next((how for resting, _concept, how in rests_on_of(item) if resting == part and how), "")
        if how:  # the test says how it is judged then (issue 53)
            result["output"] = _("这一项按你自己的{concept}结果评判：你的实现没有通过{where}，那里已经扣分；同一个错误不在这里再扣一次。{how}").format(
                concept=assignment._(concept), where=where, how=assignment._(how)
            )
        else:
            result["output"] = _(
                "这一项按你自己的{concept}结果评判：你的实现没有通过{where}，那里已经扣分；同一个错误不在这里再扣一次。"
                "这一项检查的是它自己的内容，标准换成了你自己的函数算出的{concept}结果，而不是参考答案的数值。"
            ).format(concept=assignment._(concept), where=where)
        result["charge"] = {"judged_by_own": part}

    @staticmethod
    def _own_reference_call(item: pytest.Function, proxy: Student, concept: str) -> None:
        proxy.judged_by_own = concept
        try:
            item.obj(**{name: item.funcargs[name] for name in item._fixtureinfo.argnames})
        finally:
            proxy.judged_by_own = ""

    def _within_test(self, item: pytest.Function, body: Callable[[], object]) -> BaseException | _Skipped | None:
        """Run ``body`` inside the test's hooks; the failure it raised, ``_SKIPPED``, or None."""
        hooks = self.pytest_runtest_call(item)
        next(hooks)
        try:
            body()
        except pytest.skip.Exception:
            return _SKIPPED
        except (KeyboardInterrupt, pytest.exit.Exception):
            raise
        except BaseException as failure:  # a failed test (pytest.fail included)
            return failure
        finally:
            next(hooks, None)
        return None

    def _may_swap(self, item: pytest.Function, error: BaseException, submission_id: str) -> bool:
        """Whether the failed ``item`` may be re-run with references swapped in: a dependency
        has failed its own tests, or one of its tests is itself waiting for such a re-run."""
        if isinstance(error, (pytest.skip.Exception, pytest.fail.Exception)) or not isinstance(error, Exception):
            return False
        if unfinished(error, dependencies_of(item)):
            return False
        failed = self.failed_functions.get(submission_id, {})
        waiting = {name for deferred in self._deferred for name in functions_of(deferred.item)}
        return any(name in failed or name in waiting for name in dependencies_of(item))

    def _run_deferred(self, submission_id: str | None, opened: Student | BaseException | None) -> None:
        """The submission's swapped re-runs, in the session's order, once its plain runs are all
        done. Every call that does not swap then comes before any that does, so the sandbox
        rarely has to be replaced after one (``Submission._forget_swaps``): all tests of a
        function come before the tests that depend on it, so each re-run still sees its
        dependencies' final results. The results are then put back in the session's order, and
        each one's diagnoses narrowed to the functions failed up to it, as if run in turn."""
        deferred, self._deferred = self._deferred, []
        unnarrowed, self._unnarrowed = self._unnarrowed, []
        if submission_id is None or not isinstance(opened, Student) or not deferred:
            self._recorded_at = {}
            return
        swapped_yet = False
        pending: list[tuple[TestResult, str]] = []
        for waiting in deferred:
            item = waiting.item
            swap = self._swap_for(item, submission_id)
            if (swap or waiting.suspects) and not swapped_yet:
                # The provider's own plain calls (a feedback page's evidence) go before the first
                # swapped one too: for the parts that failed or may yet fail.
                failing = {result["grade_id"] for result in self.results.get(submission_id, []) if result["status"] != "passed"}
                self.provider.before_swaps(submission_id, failing | {grade_id_of(later.item) for later in deferred})
                swapped_yet = True
            charged = self._charge_trials(item, waiting.suspects, opened) if waiting.suspects and not swap else ""
            if charged:  # its own failure, its points charged to the dependency below
                opened.calls = waiting.calls
                self.record(item, submission_id, failure_message(waiting.error), diagnose=False, error=waiting.error, charged=True)
                pending.append((self.results[submission_id][-1], charged))
                continue
            if not swap:  # the dependency it waited for passed after all (or none was charged): its own failure stands
                opened.calls = waiting.calls
                self.record(item, submission_id, failure_message(waiting.error), diagnose=True, error=waiting.error)
                if waiting.rests_later:  # and is judged at the close, should the part it rests on fail
                    part, concept = waiting.rests_later
                    result = self.results[submission_id][-1]
                    self._by_slip.setdefault(submission_id, []).append(_BySlip(item, result, part, concept, list(waiting.calls), later=True))
                continue
            item.funcargs = {"student": opened}
            error = self._within_test(item, functools.partial(self._swapped_call, item, swap))
            if error is _SKIPPED:
                continue
            assert not isinstance(error, _Skipped)
            self.record(item, submission_id, failure_message(error) if error is not None else None, diagnose=True, error=error)
        recorded_at, self._recorded_at = self._recorded_at, {}
        self.results.get(submission_id, []).sort(key=lambda result: recorded_at[id(result)])
        for position, result, diagnoses, assignment in unnarrowed:
            result["diagnoses"] = only_failed_functions(diagnoses, assignment, self._failed_by(submission_id, position))
        if pending:
            charges.apply(self.results[submission_id], pending, assignment_of(deferred[0].item))

    def _charge_trials(self, item: pytest.Function, suspects: tuple[str, ...], opened: Student) -> str:
        """The first of ``suspects`` with the reference for which alone the failed ``item`` passes
        (``attnkit.grading.charges``), or ""."""
        for name in suspects:
            item.funcargs = {"student": opened}
            error = self._within_test(item, functools.partial(self._swapped_call, item, {name: ""}))
            self.swapped.pop(item.nodeid, None)
            opened.substitutes = {}
            if error is None:
                return name
        return ""
