"""Name the student's misconception: replay a failed test's calls on the catalogue of mistakes.

A mistake is diagnosed for a failed test when its implementation, given exactly the inputs the
student's code was given, reproduces every one of the student's outcomes (same exception type,
or results equal within tolerance), while differing from the reference somewhere. NaN in the
mistake's result means "undefined here" (a softmax over nothing) and matches any student value.

A failed test may have stopped at a degenerate call (``causal_allowed(1)`` is ``[[False]]`` for
several different mistakes), so the catalogue's *probes* (inputs on which its mistakes all differ)
are replayed on the student's functions too and must be reproduced as well. When several mistakes
fit and some fit without the NaN wildcard, only those are named: the wildcard is a concession to
other styles of the same mistake, never a reason to prefer a looser explanation over an exact one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import BuiltinFunctionType, CodeType, FunctionType, ModuleType
from typing import Any

import torch

from attnkit.constants import GRADER_MARKERS
from attnkit.boundary import wire
from attnkit.assignment.mistakes import mistake_id_of
from attnkit.boundary.outcome import Call, Outcome, run_in_namespace

# Mistakes run in float32 like most tests; these tolerances sit well above float32 rounding
# (~1e-6 relative) and well below the differences the catalogue's mistakes make (>= 1e-2).
RTOL = 1e-3
ATOL = 1e-4


# The hidden tests use fixed inputs, so across a class the same calls are replayed on the same
# implementations again and again: remember the outcomes (bounded; keys are the inputs'
# fingerprints, ``wire.fingerprint``, and the implementation's identity below). Per process,
# cleared when full: an outcome is a function of its key (the implementation by its code and
# constants, the inputs by their wire bytes, which their fingerprint stands for).
_REPLAYS: dict[tuple[int, str, Any], Outcome] = {}
_REPLAYS_MAX = 20_000


def _replay(namespace: dict, call: Call, inputs: Any) -> Outcome:
    """``namespace[call.name]`` on ``call``'s inputs, whose fingerprint is ``inputs`` (fresh
    copies each time, as the wire would give them: an implementation must not see another's
    in-place edits), remembered."""
    key = (_identity(namespace), call.name, inputs)
    if key not in _REPLAYS:
        if len(_REPLAYS) >= _REPLAYS_MAX:
            _REPLAYS.clear()
        args, kwargs = wire.decode(wire.encode((call.args, call.kwargs)))
        _REPLAYS[key] = run_in_namespace(namespace, call.name, args, kwargs)
    return _REPLAYS[key]


# An implementation's identity for the replay cache: namespaces holding the same code (a catalogue
# loaded again from the same source, e.g. a copy of the suite) share one, so their replays are
# remembered; a namespace with anything that cannot be compared by value gets one of its own. Each
# namespace seen is kept alive, so its id() can never name a later one. Per process: ``_SEEN`` is
# cleared when full (with every cache keyed on its identities); ``_IDENTITIES`` never is, so an
# identity is never given to other contents (it grows with the distinct trusted implementations:
# the catalogue's reference, mistakes and variants).
_SEEN: dict[int, tuple[dict, int, dict | None]] = {}
_IDENTITIES: dict[tuple, int] = {}
_SEEN_MAX = 2_000


def _entry(namespace: dict) -> tuple[dict, int, dict | None]:
    entry = _SEEN.get(id(namespace))
    if entry is None or entry[0] is not namespace:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
            _REPLAYS.clear()
            _CAN_DIFFER.clear()
            _WIDENED.clear()
            _VERDICTS.clear()
        contents = _contents(namespace)
        try:
            if contents is not None:
                identity = _IDENTITIES.setdefault(tuple(sorted(contents.items(), key=lambda item: item[0])), len(_IDENTITIES))
            else:
                identity = -1 - len(_SEEN)
        except TypeError:  # something unhashable after all
            contents, identity = None, -1 - len(_SEEN)
        entry = _SEEN[id(namespace)] = (namespace, identity, contents)
    return entry


def _identity(namespace: dict) -> int:
    return _entry(namespace)[1]


def _contents(namespace: dict) -> dict[str, tuple] | None:
    """What a namespace's functions can see, by value: each function's code and defaults, each
    module's name, each plain constant; None when something cannot be compared that way."""
    contents: dict[str, tuple] = {}
    for name, value in namespace.items():
        if name.startswith("__"):
            continue
        if isinstance(value, FunctionType):
            if value.__closure__ is not None:
                return None
            contents[name] = ("function", value.__code__, value.__defaults__, tuple(sorted((value.__kwdefaults__ or {}).items())))
        elif isinstance(value, ModuleType):
            contents[name] = ("module", value.__name__)
        elif isinstance(value, BuiltinFunctionType):
            contents[name] = ("builtin", getattr(value, "__module__", None), value.__qualname__)
        elif _constant(value):
            contents[name] = ("constant", type(value).__name__, value)
        else:
            return None
    return contents


def _constant(value: object) -> bool:
    if value is None or type(value) in (bool, int, float, str, bytes):
        return True
    return type(value) is tuple and all(_constant(item) for item in value)


# (mistake, reference, called names) -> whether the mistake can give another outcome than the
# reference on a call of those names. Per process, keyed on ``_SEEN``'s identities and cleared
# with it: the answer is a function of the two implementations' code.
_CAN_DIFFER: dict[tuple[int, int, frozenset], bool] = {}


def _can_differ(mistake: dict, reference: dict, names: frozenset) -> bool:
    """Can ``mistake`` answer any call of ``names`` differently from ``reference``? Not when none
    of what it changes (a function, a constant) is reachable from those names through the globals
    their code reads: it then runs exactly the reference's code, and a mistake that never differs
    from the reference is never diagnosed. Only catalogue entries that can explain the failed
    calls are replayed. (True whenever this cannot be known.)"""
    _, mistake_identity, mine = _entry(mistake)
    _, reference_identity, theirs = _entry(reference)
    key = (mistake_identity, reference_identity, names)
    if key not in _CAN_DIFFER:
        if mine is None or theirs is None:
            _CAN_DIFFER[key] = True
        else:
            changed = {name for name in mine.keys() | theirs.keys() if mine.get(name) != theirs.get(name)}
            _CAN_DIFFER[key] = bool(changed & _reachable(mistake, names))
    return _CAN_DIFFER[key]


def _reachable(namespace: dict, names: Iterable[str]) -> set[str]:
    """``names`` and every global their functions' code (nested code included) reads, transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        value = namespace.get(name)
        if isinstance(value, FunctionType):
            codes = [value.__code__]
            while codes:
                code = codes.pop()
                todo.extend(code.co_names)
                codes.extend(const for const in code.co_consts if isinstance(const, CodeType))
    return seen


# A candidate tensor (always a replayed outcome, remembered across the class in ``_REPLAYS``) is
# compared with many students: its float64 copy and where it is defined are made once. Each entry
# holds its tensor, so the id() it is kept under can never name another. Per process, cleared
# when full or with ``_SEEN``; a replayed tensor is never changed in place (fresh copies are
# what implementations see).
_WIDENED: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
_WIDENED_MAX = 20_000


def _widened(candidate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``candidate`` in float64, its NaN entries left out; the mask of the rest (None: no NaN)."""
    entry = _WIDENED.get(id(candidate))
    if entry is None or entry[0] is not candidate:
        if len(_WIDENED) >= _WIDENED_MAX:
            _WIDENED.clear()
        expected = candidate.to(torch.float64)
        defined = ~torch.isnan(expected)
        entry = _WIDENED[id(candidate)] = (candidate, expected, None) if bool(defined.all()) else (candidate, expected[defined], defined)
    return entry[1], entry[2]


def values_match(student: object, candidate: object) -> bool:
    """Do two decoded values agree (tensors within tolerance, NaN in ``candidate`` = wildcard)?"""
    if isinstance(candidate, torch.Tensor) or isinstance(student, torch.Tensor):
        if not (isinstance(candidate, torch.Tensor) and isinstance(student, torch.Tensor)):
            return False
        if tuple(student.shape) != tuple(candidate.shape):
            return False
        if candidate.dtype == torch.bool or student.dtype == torch.bool:
            return candidate.dtype == student.dtype and torch.equal(candidate, student)
        expected, defined = _widened(candidate)
        got = student.to(torch.float64)
        if defined is not None:
            got = got[defined]
        return bool(torch.allclose(got, expected, rtol=RTOL, atol=ATOL))
    if isinstance(candidate, (list, tuple)) and isinstance(student, (list, tuple)):
        return len(candidate) == len(student) and all(values_match(s, c) for s, c in zip(student, candidate, strict=False))
    if isinstance(candidate, dict) and isinstance(student, dict):
        return candidate.keys() == student.keys() and all(values_match(student[k], candidate[k]) for k in candidate)
    return type(student) is type(candidate) and student == candidate


def outcomes_match(student: Outcome, candidate: Outcome) -> bool:
    if student.raised or candidate.raised:
        return student.kind == candidate.kind  # a subclass of ValueError counts as a ValueError
    return values_match(student.value, candidate.value)


def _has_nan(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point() and bool(torch.isnan(value).any())
    if isinstance(value, (list, tuple)):
        return any(_has_nan(item) for item in value)
    if isinstance(value, dict):
        return any(_has_nan(item) for item in value.values())
    return False


def _exact(student: Outcome, candidate: Outcome) -> bool:
    """A match that did not need the NaN wildcard."""
    return student.raised or candidate.raised or not _has_nan(candidate.value) or _has_nan(student.value)


def _diagnosable(calls: Iterable[Call]) -> list[Call]:
    relevant = [call for call in calls if not call.is_variable]
    # An unfinished stub or a crash is not a misconception.
    if any(call.outcome.error_type in ("NotImplementedError", *GRADER_MARKERS) for call in relevant):
        return []
    return relevant


# Verdicts shared by the submissions whose replies are byte-identical: most of a class makes the
# same few mistakes, and the same inputs give the same outputs, so ``diagnose`` and ``agreeing``
# would compare the same outcomes with the same replays again and again. A verdict is a function
# of what the comparisons read (the implementations by their identities, ``_entry``; each call's
# name and inputs by their fingerprint; each outcome by what ``outcomes_match`` and ``_exact``
# read of it: the kind of exception it raised, or its value's fingerprint, equal exactly when the
# wire bytes are), so a key seen before gives the same answer without a single comparison. Per
# process, bounded, cleared with ``_SEEN`` (whose identities its keys hold).
_VERDICTS: dict[tuple, Any] = {}
_VERDICTS_MAX = 20_000


def _outcome_print(outcome: Outcome) -> tuple:
    """All that diagnosis reads of a student's outcome, as a hashable (``wire.Unsupported`` or
    TypeError where its value has no fingerprint)."""
    return ("raised", outcome.kind) if outcome.raised else ("value", wire.fingerprint(outcome.value))


def _verdict_key(*parts: Any) -> tuple | None:
    """``parts`` as a key of ``_VERDICTS``, None (no sharing) where one cannot be hashed."""
    try:
        hash(parts)
    except TypeError:
        return None
    return parts


def _remember(key: tuple | None, verdict: Any) -> None:
    if key is not None:
        if len(_VERDICTS) >= _VERDICTS_MAX:
            _VERDICTS.clear()
        _VERDICTS[key] = verdict


Probe = Callable[[str, tuple, dict], Outcome]


# Runs many probes at once (in one batch to the sandbox), their outcomes in order.
ProbeMany = Callable[[list[tuple[str, tuple, dict]]], list[Outcome]]


def probe_calls(calls: Iterable[Call], probes: Mapping[str, list[tuple[tuple, dict]]], run: Probe, run_many: ProbeMany | None = None) -> list[Call]:
    """The catalogue's probe inputs for every function the failed test called, run on the
    student's function by ``run`` (through the sandbox), or all at once by ``run_many``."""
    names = list(dict.fromkeys(call.name for call in calls if not call.is_variable))
    asked = [(name, args, kwargs) for name in names for args, kwargs in probes.get(name, [])]
    outcomes = run_many(asked) if run_many is not None else [run(name, args, kwargs) for name, args, kwargs in asked]
    return [Call(name, args, kwargs, outcome) for (name, args, kwargs), outcome in zip(asked, outcomes, strict=True)]


def diagnose(
    calls: Iterable[Call],
    reference: dict,
    mistakes: Mapping[str, dict],
    probes: Mapping[str, list[tuple[tuple, dict]]] | None = None,
    run: Probe | None = None,
    run_many: ProbeMany | None = None,
) -> list[str]:
    """Ids of the mistakes whose implementations reproduce all of ``calls``' outcomes (and the
    student's outcomes on the probe inputs, when ``probes`` and ``run`` are given; ``run_many``:
    all of them at once)."""
    relevant = _diagnosable(calls)
    if not relevant:
        return []
    if probes and run is not None:
        relevant = _diagnosable(relevant + probe_calls(relevant, probes, run, run_many))
        if not relevant:
            return []

    inputs = [wire.fingerprint((call.args, call.kwargs)) for call in relevant]
    names = frozenset(call.name for call in relevant)
    try:
        replies = tuple((call.name, data, _outcome_print(call.outcome)) for call, data in zip(relevant, inputs, strict=True))
        key = _verdict_key("diagnose", _identity(reference), tuple((mistake_id, _identity(namespace)) for mistake_id, namespace in mistakes.items()), replies)
    except (wire.Unsupported, TypeError):
        key = None
    if key is not None and key in _VERDICTS:
        return list(_VERDICTS[key])
    expected: list[Outcome] | None = None
    found, exact = [], []
    for mistake_id, namespace in mistakes.items():
        if not _can_differ(namespace, reference, names):
            continue  # it would run only the reference's code on these calls
        outcomes = []
        for call, data in zip(relevant, inputs, strict=False):  # stops at the first outcome it does not reproduce
            got = _replay(namespace, call, data)
            if not outcomes_match(call.outcome, got):
                break
            outcomes.append(got)
        if len(outcomes) < len(relevant):
            continue  # most mistakes stop here: no need to compare them with the reference too
        if expected is None:
            expected = [_replay(reference, call, data) for call, data in zip(relevant, inputs, strict=False)]
        if any(not outcomes_match(got, ref) for got, ref in zip(outcomes, expected, strict=False)):
            found.append(mistake_id)
            if all(_exact(call.outcome, got) for call, got in zip(relevant, outcomes, strict=False)):
                exact.append(mistake_id)
    # A variant of a mistake (``id/n``) is named by its mistake's id, once.
    verdict = list(dict.fromkeys(mistake_id_of(mistake_id) for mistake_id in exact or found))
    _remember(key, tuple(verdict))
    return verdict


def agreeing(ids: Iterable[str], calls: Iterable[Call], mistakes: Mapping[str, dict], function_of: Mapping[str, str]) -> list[str]:
    """The ids of ``ids`` whose mistake reproduces the student's outcome on every recorded call of
    its function (``calls``: every test's, passed tests included, never one that ran the reference
    in that function's place), by one of its variants. A name given for one failed test is taken
    back when the same mistake would have failed a test the student passed, or raised where the
    student returned (an empty-row check over the wrong axis raises for a padded key, which the
    student's padding test did not): a name must agree with every test of its function."""
    by_function: dict[str, dict[Any, Call]] = {}
    for call in calls:
        if call.is_variable or call.outcome.error_type in ("NotImplementedError", *GRADER_MARKERS):
            continue
        by_function.setdefault(call.name, {}).setdefault(wire.fingerprint((call.args, call.kwargs)), call)
    kept = []
    for mistake_id in ids:
        function = function_of.get(mistake_id)
        recorded = by_function.get(function or "", {})
        variants = [namespace for key, namespace in mistakes.items() if mistake_id_of(key) == mistake_id]
        try:
            replies = tuple((data, _outcome_print(call.outcome)) for data, call in recorded.items())
            key = _verdict_key("agreeing", mistake_id, function, tuple(_identity(namespace) for namespace in variants), replies)
        except (wire.Unsupported, TypeError):
            key = None
        if key is not None and key in _VERDICTS:
            agrees = _VERDICTS[key]
        else:
            agrees = (
                function is None
                or not variants
                or any(all(outcomes_match(call.outcome, _replay(namespace, call, data)) for data, call in recorded.items()) for namespace in variants)
            )
            _remember(key, agrees)
        if agrees:
            kept.append(mistake_id)
    return kept
