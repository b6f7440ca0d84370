"""A scoped reference: in a swapped re-run, the reference answers only its own test's inputs.

A test whose dependency failed is re-run with the reference swapped in for that dependency
(``plugin.GradingPlugin.pytest_pyfunc_call``). The student's code then runs with a stand-in that
asks the trusted side for the reference's result (``swapped_calls.SwappedCalls._answer_callback``). Left
open, that stand-in answers *any* input: a student could call it on every hidden input the sandbox
holds (the plan's requests) and carry the answers out, or make the trusted worker compute a
16000x16000 attention. So each swapped-in function is a :class:`ScopedReference`: it answers a call
only if its arguments are ones the same test passes to that function when it runs on the
assignment's source notebook (recorded while planning, ``sandbox_provider.Plan.inner``), compared as values
after binding them to the reference's signature. Every other call raises :class:`OutOfScope`, and
the test fails with :data:`OUT_OF_SCOPE` whatever the student's code made of the refusal.

The trusted side's work is bounded by the same rule: an answered call is one the test itself made
on the source notebook, whose cost the planning run already paid once (T_q x T_k included); a
refused one costs the comparison, which first checks shapes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch

from attnkit.boundary import wire
from attnkit.i18n import N_, _

# Values equal up to float rounding: a correct multi-head function that projects with ``x @ w``
# where the source notebook has ``torch.matmul`` hands the reference the same inputs, differing
# only in the last bits.
RELATIVE_TOLERANCE = 1e-5
ABSOLUTE_TOLERANCE = 1e-6

OUT_OF_SCOPE = N_("代入参考的 {name} 重新运行这一项时，你的代码用本项测试从未使用过的输入调用了 {name}：参考实现只回答这一项自己的输入，因此这一项不得分")


class OutOfScope(RuntimeError):
    """A swapped-in reference was called with inputs its test never passes it."""


def wire_of_call(args: tuple | list, kwargs: dict) -> bytes | None:
    """One call's arguments as kept in the plan (None: not plain data, so never answered)."""
    try:
        return wire.encode({"args": list(args), "kwargs": dict(kwargs)})
    except wire.Unsupported:
        return None


def record_inner_calls(namespace: dict, names: Iterable[str], sink: list[tuple[str, bytes]]) -> None:
    """Wrap each function ``names`` in ``namespace`` (the source notebook's, run in-process while
    planning) so that every call of it, a test's own and those of the notebook's other functions
    alike, appends ``(name, wire_of_call(...))`` to ``sink``. Functions look their callees up in
    the namespace when they run, so the wrapper sees the calls between them."""
    for name in names:
        function = namespace.get(name)
        if callable(function):
            namespace[name] = _recording(name, function, sink)


def _recording(name: str, function: Callable[..., Any], sink: list[tuple[str, bytes]]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        encoded = wire_of_call(args, kwargs)  # before the call: it may edit its inputs in place
        if encoded is not None:
            sink.append((name, encoded))
        return function(*args, **kwargs)

    recorded.__name__ = recorded.__qualname__ = name
    return recorded


class ScopedReference:
    """The reference ``function`` answering only the planned arguments ``planned`` (wire forms
    from :func:`wire_of_call`); ``refused`` counts the calls it turned away."""

    def __init__(self, name: str, function: Callable[..., Any], planned: Iterable[bytes]) -> None:
        self.name = name
        self.function = function
        self.refused = 0
        try:
            self._signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):
            self._signature = None
        self._planned: list[dict] = []
        self._exact: set[Any] = set()  # fingerprints (``wire.fingerprint``)
        for encoded in dict.fromkeys(planned):
            call = wire.decode(encoded)
            bound = self._bound(tuple(call["args"]), call["kwargs"])
            if bound is not None:
                self._planned.append(bound)
                self._exact.add(wire.fingerprint(bound))

    def _bound(self, args: tuple, kwargs: dict) -> dict | None:
        """The arguments by parameter name, defaults filled in: ``f(q, k, v, None)`` and
        ``f(q, k, v)`` are one call. None where they do not fit the signature."""
        if self._signature is None:
            return {"args": list(args), "kwargs": dict(kwargs)}
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return dict(bound.arguments)

    def allows(self, args: tuple, kwargs: dict) -> bool:
        bound = self._bound(args, kwargs)
        if bound is None:
            return False
        try:
            if wire.fingerprint(bound) in self._exact:
                return True
        except wire.Unsupported:
            return False
        return any(_close(bound, planned) for planned in self._planned)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.allows(args, kwargs):
            self.refused += 1
            raise OutOfScope(_("参考的 {name} 只回答这一项测试自己的输入").format(name=self.name))
        return self.function(*args, **kwargs)


def _close(value: Any, planned: Any) -> bool:
    """Same structure, same shapes and dtypes, values equal up to rounding."""
    if isinstance(planned, torch.Tensor):
        if not isinstance(value, torch.Tensor) or value.shape != planned.shape or value.dtype != planned.dtype:
            return False
        if planned.is_floating_point():
            return bool(torch.allclose(value, planned, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE, equal_nan=True))
        return bool(torch.equal(value, planned))
    if isinstance(planned, dict):
        return isinstance(value, dict) and value.keys() == planned.keys() and all(_close(value[k], planned[k]) for k in planned)
    if isinstance(planned, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(planned) and all(map(_close, value, planned))
    return type(value) is type(planned) and value == planned


def scoped(reference: dict[str, Callable[..., Any]], names: Iterable[str], planned: dict[str, list[bytes]] | None) -> dict[str, Any]:
    """The substitutes for a swapped re-run: each of ``names`` from ``reference``, scoped to the
    test's planned calls (``planned``: name -> wire forms). ``planned`` None: unscoped, for the
    development backend only (no plan, trusted code)."""
    if planned is None:
        return {name: reference[name] for name in names}
    return {name: ScopedReference(name, reference[name], planned.get(name, ())) for name in names}


def refusals(substitutes: dict[str, Any]) -> list[str]:
    """The swapped-in names that turned a call away (their test must fail)."""
    return [name for name, function in substitutes.items() if isinstance(function, ScopedReference) and function.refused]


def out_of_scope_message(names: list[str]) -> str:
    return _(OUT_OF_SCOPE).format(name=_("、").join(names))
