"""What a call to a submission did, in the terms both sides of the trust boundary speak.

The sandbox runs a student's function with ``run_in_namespace`` (or reads a variable with
``read_variable``) and sends back an ``Outcome``: the value, or the name and message of what it
raised, with the built-in classes among its bases (``bases``: a student's ``class
EmptyRowError(ValueError)`` is a ValueError). The trusted side records each call as a ``Call`` and
re-creates a student's exception as a trusted class (``student_exception``) with the same built-in
base, so a hidden test can write ``pytest.raises(ValueError)`` and a subclass counts as its base;
nothing of the student's exception object crosses, only names, which pick classes from a fixed table.
"""

from __future__ import annotations

import builtins
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from attnkit.constants import MAX_MESSAGE, MISSING
from attnkit.boundary import wire
from attnkit.i18n import _
from attnkit.boundary.explain import MAX_WARNINGS, student_frame, warning_text


class StudentRaised(Exception):
    """Mixin on every exception that a student's function raised (re-created on our side)."""

    type_name: str = "Exception"
    bases: list[str] = []  # the built-in classes the student's own class derives from
    function: str = ""
    where: dict | None = None
    warnings: list[str] = []


class StudentTimeout(Exception):
    """The student's call did not return within its time limit."""


class StudentMissing(Exception):
    """The submission does not define the function or variable."""


class SandboxCrashed(Exception):
    """The process running the student's code died (exit, kill, memory)."""


# Built-in exception types the tests may want to catch (``pytest.raises(ValueError)``). The class
# is chosen from this trusted table by name; nothing of the student's exception object crosses.
_MIRRORED = (
    "ValueError",
    "TypeError",
    "RuntimeError",
    "IndexError",
    "KeyError",
    "AssertionError",
    "NotImplementedError",
    "ZeroDivisionError",
    "AttributeError",
    "NameError",
    "ArithmeticError",
    "LookupError",
    "MemoryError",
    "RecursionError",
    "OverflowError",
    "UnboundLocalError",
)
# A fixed table built at import (not a cache): each mirrored builtin's Student subclass.
_MIRROR_CLASSES: dict[str, type[StudentRaised]] = {name: type(f"Student{name}", (getattr(builtins, name), StudentRaised), {}) for name in _MIRRORED}


# At most this many built-in bases cross with an exception (a class of the student's has a few).
MAX_BASES = 8


def builtin_bases(error: BaseException) -> list[str]:
    """The built-in exception classes ``error``'s own class derives from, nearest first (its own
    name is the Outcome's ``error_type``); empty for a built-in class itself."""
    if _is_builtin(type(error)):
        return []
    return [cls.__name__ for cls in type(error).__mro__[1:] if _is_builtin(cls)][:MAX_BASES]


def _is_builtin(cls: type) -> bool:
    # By identity, not by ``__module__``: a class defined where ``__name__`` is unset claims "builtins".
    return getattr(builtins, cls.__name__, None) is cls


def mirrored_kinds(type_name: str, bases: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names of the trusted table's built-in classes an exception is an instance of: its own
    name if the table has it, else each of its built-in bases the table has (nearest first)."""
    if type_name in _MIRROR_CLASSES:
        return (type_name,)
    return tuple(dict.fromkeys(name for name in bases if name in _MIRROR_CLASSES))


def exception_kind(type_name: str | None, bases: list[str] | tuple[str, ...] = ()) -> str | None:
    """What an exception counts as: the nearest built-in class of the table (``EmptyRowError``
    deriving from ValueError counts as ValueError), else its own name."""
    kinds = mirrored_kinds(type_name or "", bases)
    return kinds[0] if kinds else type_name


def _mirror_class(type_name: str, bases: list[str] | tuple[str, ...]) -> type[StudentRaised]:
    kinds = mirrored_kinds(type_name, bases)
    if not kinds:
        return type("StudentException", (StudentRaised,), {})
    if len(kinds) == 1:
        return _MIRROR_CLASSES[kinds[0]]
    try:  # a class of several built-in bases (KeyError and ValueError, say) is each of them
        return type("Student" + "".join(kinds), tuple(_MIRROR_CLASSES[kind] for kind in kinds), {})
    except TypeError:  # bases Python cannot combine: the nearest one
        return _MIRROR_CLASSES[kinds[0]]


def student_exception(
    function: str, type_name: str, message: str, where: dict | None = None, warnings: list[str] | None = None, bases: list[str] | None = None
) -> StudentRaised:
    """Re-create the student's exception as a trusted class with the same builtin bases (its own
    class's name, or for a class of the student's, the built-in classes it derives from)."""
    cls = _mirror_class(type_name, bases or [])
    error = cls(message)
    error.type_name = type_name
    error.function = function
    error.where = where
    error.warnings = list(warnings or [])
    error.bases = list(bases or [])
    return error


@dataclass
class Outcome:
    """What one call did: returned ``value``, or raised ``error_type`` with ``message``."""

    value: Any = None
    error_type: str | None = None
    message: str = ""
    # Where in the student's own code it failed ({function, line, text, cell_text}, plus section and
    # cell once the trusted side has found the cell), and the warnings the call raised.
    where: dict | None = None
    warnings: list[str] = field(default_factory=list)
    # For an exception of the student's own class, the built-in classes it derives from (nearest
    # first): a subclass of ValueError counts as a ValueError (``kind``).
    bases: list[str] = field(default_factory=list)

    @property
    def raised(self) -> bool:
        return self.error_type is not None

    @property
    def kind(self) -> str | None:
        """What the exception counts as (``exception_kind``); None when the call returned."""
        return exception_kind(self.error_type, self.bases)


@dataclass
class Call:
    """One recorded call to the submission (inputs exactly as sent, outcome as received)."""

    name: str
    args: tuple
    kwargs: dict
    outcome: Outcome
    is_variable: bool = False


def run_in_namespace(namespace: dict, name: str, args: tuple, kwargs: dict, plain: bool = True) -> Outcome:
    """Call ``namespace[name]``. With ``plain`` (in this process) the result is turned into plain
    data here; the sandbox passes ``plain=False`` and encodes it once, when it replies."""
    function = namespace.get(name)
    if not callable(function):
        return Outcome(error_type=MISSING, message=_("没有找到函数 {name}").format(name=name))
    # Every warning of this call, even one Python or torch already showed once (torch warns about
    # x.T once per process): the feedback shows them beside a failure.
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = function(*args, **kwargs)
            outcome = Outcome(value=wire.decode(wire.encode(result)) if plain else result)
        except wire.Unsupported as error:
            outcome = unreadable(name, error)
        except Exception as error:  # the student's own exception, reported by name and message
            outcome = Outcome(
                error_type=type(error).__name__, message=str(error)[:MAX_MESSAGE], where=student_frame(error.__traceback__), bases=builtin_bases(error)
            )
        finally:
            torch.set_warn_always(warn_always)
    seen = dict.fromkeys(warning_text(w.message, w.category, w.filename, w.lineno) for w in caught)
    outcome.warnings = list(seen)[:MAX_WARNINGS]
    return outcome


def read_variable(namespace: dict, name: str, plain: bool = True) -> Outcome:
    """Read a top-level variable (as plain data with ``plain``)."""
    if name not in namespace:
        return Outcome(error_type=MISSING, message=_("没有找到变量 {name}").format(name=name))
    try:
        return Outcome(value=wire.decode(wire.encode(namespace[name])) if plain else namespace[name])
    except wire.Unsupported as error:
        return unreadable(name, error)


def unreadable(name: str, error: Exception) -> Outcome:
    return Outcome(error_type="TypeError", message=_("{name} 的值无法读取（只能返回张量、数字、字符串及其元组/列表）：{error}").format(name=name, error=error))


def snapshot(value: Any) -> Any:
    """A copy the caller cannot change afterwards (tests edit tensors in place between calls)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(item) for item in value)
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    return value


def builtin_exception(type_name: str, message: str) -> Exception:
    """A plain built-in exception of that name (RuntimeError for anything else)."""
    cls = getattr(builtins, type_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(message)
