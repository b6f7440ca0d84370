"""The ``student`` object the hidden tests call: a recording proxy to one submission.

Tests write ``student.some_function(x)`` (a name of the assignment's API) and get back plain data (tensors, numbers,
tuples). Where the student's code actually runs is the backend's business: in a sandboxed child
process for grading (``attnkit.driver.submission``), or in this process for development. Every call and
its outcome is recorded so that, when a test fails, the diagnosis can replay the same calls on
the catalogue of known mistakes.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Callable, Iterable, Sequence

from attnkit.constants import CRASHED, MISSING, TIMEOUT
from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.i18n import _
from attnkit.boundary.outcome import (
    Call,
    Outcome,
    SandboxCrashed,
    StudentMissing,
    StudentTimeout,
    builtin_exception,
    read_variable,
    run_in_namespace,
    snapshot,
    student_exception,
)


class Backend(Protocol):
    def call(self, name: str, args: tuple, kwargs: dict) -> Outcome: ...
    def variable(self, name: str) -> Outcome: ...


# A backend may also offer ``call_with(name, args, kwargs, substitutes) -> Outcome``: the call runs
# with each name in ``substitutes`` bound, for that call only, to a stand-in that asks the trusted
# side for the reference function's result (tensors in, tensors out). Backends without it run the
# plain call.
Substitutes = dict[str, Callable[..., Any]]


@dataclass
class Student:
    """Proxy to one submission. Attribute access on an API name returns a callable."""

    backend: Backend
    # The assignment's student API (its manifest's ``functions``): the only names callable as
    # attributes, so a typo in a test is an AttributeError, not a call into the submission.
    api: tuple[str, ...] = ()
    calls: list[Call] = field(default_factory=list)
    # Set by the plugin while a test is re-run with reference dependencies: these names are the
    # trusted reference functions, both for the test's own direct calls and inside the student's
    # functions (for the duration of each call only).
    substitutes: Substitutes = field(default_factory=dict)
    # Answers fetched ahead in one batch (``Submission.prefetch``): per test, the requests that
    # the test made on the source notebook, each with this submission's outcome. A test that
    # makes one of its requests again, with the very same inputs, gets that outcome instead of a
    # round trip to the sandbox; anything else (inputs built from the student's own results, a
    # swapped re-run, diagnosis probes) is asked as usual.
    # Each request by its fingerprint (``wire.fingerprint``: equal exactly when the wire bytes are).
    prefetched: dict[str, list[tuple[Any, Outcome]]] = field(default_factory=dict)
    ahead: list[tuple[Any, Outcome]] = field(default_factory=list)
    # Set by the plugin while a test is judged again against the student's own function (its
    # ``rests_on`` concept failed its own tests): the test's checks read it and take their
    # expectations from the student's own results instead of the reference's.
    judged_by_own: str = ""
    # Answers a test's checks asked for ahead, in one round trip (``ask_ahead``), until the
    # test ends: a later call with the very same inputs takes its answer from here.
    asked_ahead: list[tuple[Any, Outcome]] = field(default_factory=list)

    def begin_test(self, key: str | None) -> None:
        """The test ``key`` starts (None: no test is running): its prefetched answers apply."""
        self.ahead = list(self.prefetched.get(key, ())) if key is not None else []
        self.asked_ahead.clear()

    def ask_ahead(self, calls: Sequence[tuple[str, tuple, dict]]) -> None:
        """Ask the sandbox now, in one batch, for ``calls`` (name, args, kwargs) that the caller
        is about to make one by one, with inputs that do not depend on any of their answers (a
        check that calls the student's function once per sub-problem, the page's panels): each
        later call with the very same inputs takes its answer from this batch instead of a round
        trip of its own. The sandbox answers in the order given, each call under the call limit
        and the submission's time budget, as if asked alone (``Submission.prefetch``); a call the
        batch did not reach is asked as usual. Nothing is asked ahead in a swapped run, or of a
        backend without batches (the in-process one), or for fewer than two calls."""
        prefetch = getattr(self.backend, "prefetch", None)
        if prefetch is None or self.substitutes or len(calls) < 2:
            return
        requests = [operations.call(name, snapshot(args), snapshot(kwargs)) for name, args, kwargs in calls]
        outcomes = prefetch(requests)
        self.asked_ahead.extend((wire.fingerprint(request), outcome) for request, outcome in zip(requests, outcomes, strict=False))

    def _asked(self, request: operations.Asked) -> Outcome | None:
        fingerprint = wire.fingerprint(request)
        for position, (asked, outcome) in enumerate(self.asked_ahead):
            if asked == fingerprint:
                del self.asked_ahead[position]
                return outcome
        return None

    def probe_many(self, calls: Sequence[tuple[str, tuple, dict]]) -> list[Outcome]:
        """``probe`` for each of ``calls``, in order; in one batch where the backend has them and
        no substitution is in force (diagnosis probes: inputs fixed by the catalogue)."""
        prefetch = getattr(self.backend, "prefetch", None)
        outcomes: list[Outcome] = []
        if prefetch is not None and not self.substitutes and len(calls) > 1:
            outcomes = list(prefetch([operations.call(name, snapshot(args), snapshot(kwargs)) for name, args, kwargs in calls]))
        return outcomes + [self.probe(name, args, kwargs) for name, args, kwargs in calls[len(outcomes) :]]

    def _prefetched(self, request: operations.Asked) -> Outcome | None:
        if not self.ahead or self.substitutes:
            return None
        fingerprint = wire.fingerprint(request)
        for position, (asked, outcome) in enumerate(self.ahead):
            if asked == fingerprint:
                del self.ahead[: position + 1]
                return outcome
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.api:
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the student's function ``name``; raise what it raised, as a mirrored class."""
        # Record what was sent as it was sent: a test may edit its tensors in place afterwards.
        args, kwargs = snapshot(args), snapshot(kwargs)
        if name in self.substitutes:
            # The test's own call to a substituted function: the reference answers, here, and it
            # is no evidence about the student (not recorded for diagnosis).
            return self._result(name, run_in_namespace(self.substitutes, name, args, kwargs))
        outcome = self._prefetched(operations.call(name, args, kwargs)) if self.ahead else None
        if outcome is None and self.asked_ahead and not self.substitutes:
            outcome = self._asked(operations.call(name, args, kwargs))
        if outcome is None:
            outcome = self._run(name, args, kwargs)
        self.calls.append(Call(name, args, kwargs, outcome))
        return self._result(name, outcome)

    def probe(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        """One unrecorded call (diagnosis probes), in the same substitution mode as the test."""
        if name in self.substitutes:
            return run_in_namespace(self.substitutes, name, snapshot(args), snapshot(kwargs))
        return self._run(name, snapshot(args), snapshot(kwargs))

    def _run(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        call_with = getattr(self.backend, "call_with", None)
        if self.substitutes and call_with is not None:
            return call_with(name, args, kwargs, self.substitutes)
        return self.backend.call(name, args, kwargs)

    def get(self, name: str) -> Any:
        """The value of a top-level variable of the submission (an answer cell)."""
        outcome = self._prefetched(operations.get(name)) if self.ahead else None
        if outcome is None:
            outcome = self.backend.variable(name)
        self.calls.append(Call(name, (), {}, outcome, is_variable=True))
        return self._result(name, outcome)

    @staticmethod
    def _result(name: str, outcome: Outcome) -> Any:
        if outcome.error_type is None:  # it returned
            return outcome.value
        if outcome.error_type == TIMEOUT:
            raise StudentTimeout(outcome.message)
        if outcome.error_type == MISSING:
            raise StudentMissing(outcome.message)
        if outcome.error_type == CRASHED:
            raise SandboxCrashed(outcome.message)
        raise student_exception(name, outcome.error_type, outcome.message, outcome.where, outcome.warnings, outcome.bases)


def request_of(call: Call) -> operations.Asked:
    """The request that would ask for ``call`` again."""
    return operations.get(call.name) if call.is_variable else operations.call(call.name, call.args, call.kwargs)


@dataclass
class LocalBackend:
    """Runs the code in *this* process. For trusted code only: the catalogue, the reference,
    and development of the hidden tests. Never for grading submissions."""

    namespace: dict

    @classmethod
    def from_source(cls, source: str) -> LocalBackend:
        namespace: dict = {"__name__": "__submission__"}
        # Registered like IPython registers a cell, so a failing line can be shown.
        linecache.cache["<submission>"] = (len(source), None, source.splitlines(True), "<submission>")
        exec(compile(source, "<submission>", "exec"), namespace)
        return cls(namespace)

    @classmethod
    def from_cells(cls, cells: Iterable[str], filename: str) -> LocalBackend:
        """Trusted cells run in order, each on its own, as a notebook's: a cell that raises costs
        only what it would have defined (a sandbox records it; here it is skipped)."""
        namespace: dict = {"__name__": "__main__"}
        for cell in cells:
            try:
                exec(compile(cell, filename, "exec"), namespace)
            except Exception:  # see the docstring
                pass
        return cls(namespace)

    def call(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        return run_in_namespace(self.namespace, name, args, kwargs)

    def call_with(self, name: str, args: tuple, kwargs: dict, substitutes: Substitutes) -> Outcome:
        """``call`` with ``substitutes`` bound for this call only, as the sandbox does it: the
        student's namespace gets stand-ins that forward plain data to the reference while the
        call runs and refuse afterwards (a stashed stand-in is useless), and the original
        bindings come back in ``finally``."""
        live: list[Substitutes] = [substitutes]
        saved = {key: self.namespace[key] for key in substitutes if key in self.namespace}
        for key in substitutes:
            self.namespace[key] = substitute_stub(key, live)
        try:
            return run_in_namespace(self.namespace, name, args, kwargs)
        finally:
            live.clear()
            for key in substitutes:
                if key in saved:
                    self.namespace[key] = saved[key]
                else:
                    self.namespace.pop(key, None)

    def variable(self, name: str) -> Outcome:
        return read_variable(self.namespace, name)


def substitute_stub(name: str, live: list[Substitutes]) -> Callable[..., Any]:
    """A stand-in for ``name`` that works only while ``live`` holds the substitutes (in-process
    development backend; the sandbox's stand-in asks the trusted side over its channel)."""

    def stub(*args: Any, **kwargs: Any) -> Any:
        if not live:
            raise RuntimeError(_("参考的 {name} 只在评分时的那一次调用中可用").format(name=name))
        outcome = run_in_namespace(live[0], name, snapshot(args), snapshot(kwargs))
        if outcome.raised:
            raise builtin_exception(outcome.error_type or "RuntimeError", outcome.message)
        return outcome.value

    stub.__name__ = stub.__qualname__ = name
    return stub
