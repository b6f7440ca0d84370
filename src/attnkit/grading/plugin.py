"""pytest plugin: the ``student`` fixture, per-test points, curated messages and diagnoses.

The hidden tests mark each test with ``@pytest.mark.grade_id("check_...")`` (the grade cell of the
source notebook it belongs to) and ``@pytest.mark.weight(n)`` (its share of that cell's points;
module-level ``pytestmark`` works too), and call the submission only through the ``student``
fixture. Points come from the source notebook alone (see ``attnkit.assignment.folder``).

Each function is graded on its own: a test marks the student functions it grades with
``@pytest.mark.function(name, ...)`` and the student functions that those call (or that the test
feeds them) with ``@pytest.mark.depends_on(name, ...)``. Tests run after the tests of their
dependencies; when a dependency has failed one of its own tests, a failing dependent test is run
again with the trusted reference in the dependency's place (for each call only, see
``Student.substitutes``), and its result says so. One pytest session can grade many submissions:
the fixture is parametrised over the provider's submission ids with session scope, so pytest runs
every test for one submission, tears its sandbox down, then moves to the next. Once a session has
shown that a suite's tests are all plain ``student`` tests (see :func:`_plain_student_test`), later
sessions of that suite in the same process collect each test once, for the first submission only,
and the plugin's own loop runs those items for every submission: collecting a test per submission
cost more than running it.

Register this module as a plugin (``-p attnkit.grading.plugin``, or pass it in ``plugins=``) for the
fixture, plus a :class:`GradingPlugin` instance for the submissions and the results.

This module holds the hooks; the loop itself is :mod:`attnkit.grading.own_loop`. What a test is (its markers, points, title) is
:mod:`attnkit.grading.markers`; what a student reads about it (the result record, the curated messages)
is :mod:`attnkit.grading.outcomes`; the in-process development provider is :mod:`attnkit.grading.local_provider`.

Development use (trusted code only, runs in-process)::

    pytest -p attnkit.grading.plugin autograder/<assignment> --attnkit-source solutions/<assignment>/<notebook>.ipynb
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast
from collections.abc import Callable, Iterator

import pytest
from _pytest.reports import TestReport

from attnkit.grading import charges
from attnkit.assignment.folder import Assignment
from attnkit.constants import GraderError
from attnkit.i18n import _
from attnkit.grading.local_provider import LocalProvider
from attnkit.grading.markers import (
    assignment_of,
    base_nodeid,
    concept_of,
    dependencies_of,
    functions_of,
    grade_id_of,
    item_points,
    test_key,
    title_of,
)
from attnkit.grading.outcomes import (
    TestResult,
    test_result,
    error_info,
    fail_out_of_scope,
    failure_message,
    only_failed_functions,
    substitution_note,
    swapped_failure,
)
from attnkit.grading.own_loop import OwnLoop, _BySlip, _Deferred
from attnkit.grading.provider import Provider
from attnkit.boundary.outcome import Call, Outcome, StudentRaised
from attnkit.grading.student import Student


# Suites a session in this process found to hold only plain ``student`` tests, by the paths the
# session was asked to collect and the state of the Python files under them: later sessions of the
# very same files collect each of their tests once (see the module's docstring). An edited, added
# or removed file is another suite, learned again. Per process (a worker keeps one for its whole
# class); keyed on the files' state, so it never needs invalidating.
_PLAIN_SUITES: set[tuple] = set()


def _suite_state(config: pytest.Config) -> tuple:
    """The paths ``config`` collects from, and each Python file's path, size and change times."""
    start = config.invocation_params.dir
    paths = sorted({str((start / str(arg).split("::")[0]).resolve()) for arg in config.args})
    files = []
    for path in paths:
        if os.path.isfile(path):
            info = os.stat(path)
            files.append((path, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
            continue
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__" and not name.startswith("."))
            for name in sorted(names):
                if name.endswith(".py"):
                    info = os.stat(os.path.join(folder, name))
                    files.append((os.path.join(folder, name), info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return (tuple(paths), tuple(files))


def _diagnosable(catalogue: Any) -> dict[str, dict]:
    """The mistakes diagnosis replays: with their variants when the catalogue has them."""
    variants = getattr(catalogue, "diagnosable_namespaces", None)
    return variants() if variants is not None else catalogue.mistake_namespaces()


class GradingPlugin(OwnLoop):
    """Collects per-submission results; registered once per pytest session."""

    def __init__(self, provider: Provider, results: dict[str, list[TestResult]] | None = None) -> None:
        self.provider = provider
        # Submission id -> its test results, in the session's order. ``results``: a dict the
        # provider's side reads them from as each submission closes (``worker.SubmissionRecords``).
        self.results: dict[str, list[TestResult]] = {} if results is None else results
        # Base node id -> the test's points (from the source notebook, split by weight).
        self.points: dict[str, float] = {}
        self.fatal = ""  # the suite and its source notebook disagree: grading stops
        # Per submission: student function -> grade_id of the first of its own tests it failed.
        self.failed_functions: dict[str, dict[str, str]] = {}
        # Per submission: student function -> the position (in the session's order) of that test,
        # so a test recorded out of order (``_Deferred``) still names the first one.
        self._failed_at: dict[str, dict[str, int]] = {}
        # nodeid[submission] -> the dependencies swapped for the reference in that test's run.
        self.swapped: dict[str, dict[str, str]] = {}
        # The plugin's own loop: each test's position in the session's order (by ``test_key``),
        # the current submission's swapped re-runs still to run, and its diagnoses before they
        # were narrowed to the functions failed so far (narrowed again once every test is in).
        self._positions: dict[str, int] = {}
        self._last_of_part: dict[str, int] = {}  # own loop: each grade cell's last test (``OwnLoop._judged_by_own``)
        self._deferred: list[_Deferred] = []
        self._unnarrowed: list[tuple[int, TestResult, list[str], Assignment]] = []
        self._recorded_at: dict[int, int] = {}  # id(result) -> its test's position
        # Per submission: the grade cells with a failed test (a test that ``rests_on`` one of them
        # is judged again against the student's own function when it fails).
        self._failed_parts: dict[str, set[str]] = {}
        # Per submission, until it closes: failed tests the catalogue's named slip explains, to be
        # judged once the names agree with every test (``own_loop.OwnLoop._judge_slips``).
        self._by_slip: dict[str, list[_BySlip]] = {}
        # Per submission, until it closes: its assignment and each recorded test's result and calls.
        self._evidence: dict[str, tuple[Assignment, list[tuple[TestResult, list[Call]]]]] = {}
        # Whether this session collected each test once, for its first submission only, and the
        # state of its suite's files (``_suite_state``) when it was collected.
        self.template = False
        self.suite_state: tuple | None = None
        # The loop adds to it (own_loop needs no import of this module: no cycle).
        self.plain_suites: set[tuple] = _PLAIN_SUITES

    # -- the fixture ---------------------------------------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "student" in metafunc.fixturenames:
            ids = self.provider.submission_ids()
            if self.suite_state is None:
                self.suite_state = _suite_state(metafunc.config)
            self.template = self.suite_state in self.plain_suites and bool(ids)
            if self.template:
                ids = ids[:1]  # the loop runs these items for every submission
            metafunc.parametrize("student", ids, ids=ids, indirect=True, scope="session")

    def open(self, submission_id: str) -> Student:
        proxy = self.provider.open(submission_id)
        proxy.submission_id = submission_id  # type: ignore[attr-defined]
        return proxy

    # -- results -------------------------------------------------------------------------------
    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", "weight(n): this test's share of its grade cell's points")
        config.addinivalue_line("markers", "grade_id(name): the notebook grade cell it belongs to")
        config.addinivalue_line("markers", "function(*names): the student functions this test grades")
        config.addinivalue_line("markers", "depends_on(*names): student functions the graded ones rely on")
        config.addinivalue_line("markers", "rests_on(grade_id, concept): the part whose concept this test's concept rests on, and its name")
        config.addinivalue_line("markers", "concept(name): the concept this test checks, as the page names it where a part loses points")

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Each test after the tests of its dependencies (otherwise in file order), so that a
        dependency's own result is known when a dependent test runs."""
        last_own: dict[str, int] = {}
        for index, item in enumerate(items):
            for name in functions_of(item):
                last_own[name] = index

        def key(pair: tuple[int, pytest.Item]) -> float:
            index, item = pair
            after = [last_own[name] for name in dependencies_of(item) if name in last_own]
            return max([index, *[position + 0.5 for position in after]])

        items[:] = [item for _, item in sorted(enumerate(items), key=key)]
        try:
            self.points = item_points(items)
        except GraderError as error:
            self.fatal = str(error)
            pytest.exit(self.fatal, returncode=3)

    # -- the test loop -------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        proxy = item.funcargs.get("student") if isinstance(item, pytest.Function) else None
        if not isinstance(proxy, Student):
            yield
            return
        key = test_key(item)
        proxy.calls = []
        proxy.substitutes = {}
        proxy.begin_test(key)
        try:
            yield
        finally:
            proxy.begin_test(None)
            self.provider.learn(getattr(proxy, "submission_id", ""), key, proxy)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """Run the test; when it fails and a dependency failed its own tests, run it again with
        the reference in the dependency's place (the second run's result is the test's)."""
        proxy = pyfuncitem.funcargs.get("student")
        if not isinstance(proxy, Student):
            return None
        try:
            self._plain_call(pyfuncitem)
            return True
        except (AssertionError, Exception) as error:
            if isinstance(error, (pytest.skip.Exception, pytest.fail.Exception)):
                raise
            swap = self._swap_for(pyfuncitem, str(getattr(proxy, "submission_id", "")))
            if not swap:
                raise
        self._swapped_call(pyfuncitem, swap)
        return True

    def _swap_for(self, item: pytest.Item, submission_id: str) -> dict[str, str]:
        """The item's dependencies that failed their own tests (name -> that test's grade id)."""
        failed = self.failed_functions.get(submission_id, {})
        return {name: failed[name] for name in dependencies_of(item) if name in failed}

    @staticmethod
    def _plain_call(item: pytest.Function) -> None:
        item.obj(**{name: item.funcargs[name] for name in item._fixtureinfo.argnames})

    def _swapped_call(self, item: pytest.Function, swap: dict[str, str]) -> None:
        """The test again, with the reference (scoped to the test's own inputs) for ``swap``."""
        proxy = cast(Student, item.funcargs["student"])  # as pytest_pyfunc_call and _run checked
        proxy.calls = []
        proxy.substitutes = self.scoped_reference(item, swap)
        self.swapped[item.nodeid] = swap
        try:
            self._plain_call(item)
        except Exception as error:
            fail_out_of_scope(proxy.substitutes, error)
            raise
        fail_out_of_scope(proxy.substitutes)

    def scoped_reference(self, item: pytest.Function, swap: dict[str, str]) -> dict[str, Any]:
        """The reference functions swapped in for ``swap``'s names, each answering only the calls
        this test makes of it on the source notebook (``attnkit.grading.scope``; the provider's plan).
        A provider without plans (the development backend, trusted code) gets them unscoped."""
        from attnkit.grading import scope

        reference = assignment_of(item).catalogue().reference_namespace()
        return scope.scoped(reference, swap, self.provider.scope_of(test_key(item)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> TestReport | None:
        """Our own report for a submission's test: the student's message, never pytest's
        traceback (which would show the test's source, and costs a re-parse of the test file per
        failure: most of the grading time for a notebook of stubs)."""
        callspec = getattr(item, "callspec", None)
        submission_id = callspec and callspec.params.get("student")
        excinfo = call.excinfo
        if submission_id is None or (excinfo is not None and excinfo.errisinstance(pytest.skip.Exception)):
            return None  # pytest's own report
        failed = excinfo is not None
        message = failure_message(excinfo.value) if excinfo is not None else None
        report = TestReport(
            item.nodeid,
            item.location,
            {},
            "failed" if failed else "passed",
            message,
            call.when,  # type: ignore[arg-type]  # an item's own phases: never "collect"
            [],
            call.duration,
            call.start,
            call.stop,
            user_properties=item.user_properties,
        )
        if call.when == "call" or (call.when == "setup" and failed):
            error = excinfo.value if excinfo is not None else None
            self.record(item, str(submission_id), message, diagnose=call.when == "call", error=error)
        return report

    def record(
        self, item: pytest.Item, submission_id: str, message: str | None, diagnose: bool, error: BaseException | None = None, charged: bool = False
    ) -> None:
        """One test's result for one submission. ``charged``: a failure whose points go to a
        dependency (``attnkit.grading.charges``): not a failure of the functions the test grades."""
        points = self.points[base_nodeid(item)]
        assignment = assignment_of(item)
        swapped = self.swapped.pop(item.nodeid, {})
        proxy = item.funcargs.get("student") if isinstance(item, pytest.Function) else None
        if swapped and message is not None:
            message, error = swapped_failure(message, error)
        output = message or ""
        if message is not None and isinstance(proxy, Student) and not isinstance(error, StudentRaised) and not swapped:
            # A wrong value, not an exception: still show what the student's code warned about.
            warned = list(dict.fromkeys(w for call in proxy.calls for w in call.outcome.warnings))[:3]
            if warned:
                output += "\n" + _("你的代码运行时发出了警告：{warnings}").format(warnings=_("；").join(warned))
        if swapped:
            output = substitution_note(swapped, message is None, assignment) + output
        result = test_result(
            name=title_of(item),
            nodeid=base_nodeid(item),
            grade_id=grade_id_of(item),
            max_score=points,
            score=0.0 if message is not None else points,
            status="failed" if message is not None else "passed",
            output=output,
            substituted=list(swapped),
            functions=list(functions_of(item)),
            error=error_info(error) if error is not None else {},
            concept=assignment._(concept_of(item)) if concept_of(item) else "",
        )
        position = self._positions.get(test_key(item), len(self.results.get(submission_id, [])))
        if message is not None and not charged:
            self._failed_parts.setdefault(submission_id, set()).add(result["grade_id"])
            failed = self.failed_functions.setdefault(submission_id, {})
            failed_at = self._failed_at.setdefault(submission_id, {})
            for name in functions_of(item):
                if position < failed_at.get(name, position + 1):
                    failed[name], failed_at[name] = result["grade_id"], position
        if message is not None and diagnose and isinstance(proxy, Student):
            diagnoses = self.diagnose(proxy, assignment)
            result["diagnoses"] = only_failed_functions(diagnoses, assignment, self._failed_by(submission_id, position))
            if self._deferred and diagnoses:  # a test before it may yet fail: narrowed again then
                self._unnarrowed.append((position, result, diagnoses, assignment))
        if self._positions:  # the plugin's own loop, which may record out of order
            self._recorded_at[id(result)] = position
        if isinstance(proxy, Student):
            proxy.substitutes = {}
            if self._positions:  # the own loop: every test's calls, passed ones too (``agree``)
                self._evidence.setdefault(submission_id, (assignment, []))[1].append((result, list(proxy.calls)))
        self.results.setdefault(submission_id, []).append(result)

    def agree(self, submission_id: str) -> None:
        """Take back each diagnosis of the submission's results that its mistake does not
        reproduce on every call the tests made of its function (``diagnosis.agreeing``), calls of
        tests that ran the reference in that function's place left out. Once per submission,
        when all its tests are recorded; nothing to do (no replay) when nothing was named."""
        assignment, evidence = self._evidence.pop(submission_id, (None, []))
        named = list(dict.fromkeys(d for result, _calls in evidence for d in result["diagnoses"]))
        if not named or assignment is None:
            return
        from attnkit.grading.diagnosis import agreeing

        catalogue = assignment.catalogue()
        function_of = {mistake.id: mistake.function for mistake in getattr(catalogue, "MISTAKES", ())}
        namespaces = _diagnosable(catalogue)
        kept = set()
        for mistake_id in named:
            # The tests that named it have had their calls replayed on it already: the others'.
            calls = [
                call
                for result, recorded in evidence
                if mistake_id not in result["diagnoses"]
                for call in recorded
                if call.name == function_of.get(mistake_id) and call.name not in result["substituted"]
            ]
            kept.update(agreeing([mistake_id], calls, namespaces, function_of))
        for result, _calls in evidence:
            result["diagnoses"] = [d for d in result["diagnoses"] if d in kept]

    def _failed_by(self, submission_id: str, position: int) -> dict[str, str]:
        """The submission's failed functions whose first failed test is at ``position`` or before."""
        failed_at = self._failed_at.get(submission_id, {})
        return {name: grade_id for name, grade_id in self.failed_functions.get(submission_id, {}).items() if failed_at.get(name, position) <= position}

    def _charge_suspects(self, item: pytest.Function, error: BaseException, proxy: Student, submission_id: str) -> tuple[str, ...]:
        """The dependencies a failed ``item`` may be charged to (``attnkit.grading.charges``): none unless
        every dependency passed its own tests (none failed, none waiting for its re-run)."""
        if isinstance(error, (pytest.skip.Exception, pytest.fail.Exception)) or not isinstance(error, Exception):
            return ()
        if isinstance(error, StudentRaised) and error.type_name == "NotImplementedError":
            return ()  # a stub: nothing of a dependency's to charge
        dependencies = list(dependencies_of(item))
        failed = self.failed_functions.get(submission_id, {})
        waiting = {name for deferred in self._deferred for name in functions_of(deferred.item)}
        if not dependencies or any(name in failed or name in waiting for name in dependencies):
            return ()
        if charges.raised_in(error) in dependencies:
            return charges.suspects(dependencies, error, None)
        planned = self.provider.scope_of(test_key(item))
        wrong = None if planned is None else [name for name in dependencies if self._wrong_on_its_inputs(item, proxy, name, planned.get(name, []))]
        return charges.suspects(dependencies, error, wrong)

    def _wrong_on_its_inputs(self, item: pytest.Function, proxy: Student, name: str, wires: list[bytes]) -> bool:
        """Whether the student's ``name`` goes wrong on an input this test hands it on the source
        notebook (the plan's scope), as the reference answers it."""
        from attnkit.boundary import wire

        reference = assignment_of(item).catalogue().reference_namespace().get(name)
        probe = self._probe_once(proxy)
        for encoded in dict.fromkeys(wires):
            call = wire.decode(encoded)
            try:
                expected = reference(*call["args"], **call["kwargs"]) if reference is not None else None
            except Exception:
                continue  # not an input the reference answers: no evidence either way
            fresh = wire.decode(encoded)
            if charges.differs(probe(name, tuple(fresh["args"]), fresh["kwargs"]), expected):
                return True
        return False

    def diagnose(self, proxy: Student, assignment: Assignment) -> list[str]:
        from attnkit.grading.diagnosis import diagnose

        catalogue = assignment.catalogue()
        probes = catalogue.probes() if hasattr(catalogue, "probes") else None
        return diagnose(proxy.calls, catalogue.reference_namespace(), _diagnosable(catalogue), probes, self._probe_once(proxy), self._probes_once(proxy))

    @staticmethod
    def _probe_once(proxy: Student) -> Callable[[str, tuple, dict], Outcome]:
        """``proxy.probe``, each probe input run once per submission and substitution mode:
        every failed test of a function asks for the same probes. The cache lives on the proxy:
        per submission, gone with its sandbox."""
        cache: dict[tuple, Outcome] = proxy.__dict__.setdefault("_probe_outcomes", {})

        def run(name: str, args: tuple, kwargs: dict) -> Outcome:
            key = GradingPlugin._probe_key(proxy, name, args, kwargs)
            if key not in cache:
                cache[key] = proxy.probe(name, args, kwargs)
            return cache[key]

        return run

    @staticmethod
    def _probe_key(proxy: Student, name: str, args: tuple, kwargs: dict) -> tuple:
        """A probe's place in the submission's cache: the substitution mode, the name, the inputs."""
        from attnkit.boundary import wire

        return (tuple(sorted(proxy.substitutes)), name, wire.fingerprint((args, kwargs)))

    @staticmethod
    def _probes_once(proxy: Student) -> Callable[[list[tuple[str, tuple, dict]]], list[Outcome]]:
        """``_probe_once`` for many probes: those not yet run for this submission (and
        substitution mode) asked in one batch (``Student.probe_many``), in the order given."""
        cache: dict[tuple, Outcome] = proxy.__dict__.setdefault("_probe_outcomes", {})

        def run_many(asked: list[tuple[str, tuple, dict]]) -> list[Outcome]:
            keys = [GradingPlugin._probe_key(proxy, name, args, kwargs) for name, args, kwargs in asked]
            missing = {key: call for key, call in zip(keys, asked, strict=True) if key not in cache}
            for key, outcome in zip(missing, proxy.probe_many(list(missing.values())), strict=True):
                cache[key] = outcome
            return [cache[key] for key in keys]

        return run_many


@pytest.fixture(scope="session")
def student(request: pytest.FixtureRequest) -> Iterator[Student]:
    """The submission under test (parametrised by GradingPlugin over its provider's ids)."""
    plugin = next(p for p in request.config.pluginmanager.get_plugins() if isinstance(p, GradingPlugin))
    proxy = plugin.open(request.param)
    try:
        yield proxy
    finally:
        plugin.provider.close(request.param)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--attnkit-source", default=None, help="trusted .py/.ipynb to run the hidden tests against in-process")


def pytest_configure(config: pytest.Config) -> None:
    source = config.getoption("--attnkit-source", default=None)
    if source and not config.pluginmanager.has_plugin("attnkit-grading"):
        config.pluginmanager.register(GradingPlugin(LocalProvider(Path(source))), "attnkit-grading")
