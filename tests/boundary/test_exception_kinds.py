"""Exceptions by kind, not by name (issue 41): the sandbox reports a student's exception with the
built-in classes among its bases, and the trusted side re-creates it from its fixed table as that
built-in class, so a ``class EmptyRowError(ValueError)`` raised on an empty row is a ValueError to
``pytest.raises(ValueError)``, to ``expect_value_error`` and to the diagnosis."""

from __future__ import annotations

import pytest
import torch

from attnkit.boundary import wire
from attnkit.boundary.outcome import MAX_BASES, Outcome, StudentRaised, builtin_bases, exception_kind, run_in_namespace, student_exception

SUBCLASSES = """
class EmptyRowError(ValueError):
    pass

class AttentionError(Exception):
    pass

class NoKeyError(AttentionError, ValueError):
    pass

class Both(KeyError, ValueError):
    pass

class Mine(Exception):
    pass

def raises(kind):
    raise {"empty": EmptyRowError, "two": NoKeyError, "both": Both, "mine": Mine, "plain": ValueError}[kind]("no key")
"""


def namespace() -> dict:
    space: dict = {}
    exec(compile(SUBCLASSES, "<submission>", "exec"), space)
    return space


@pytest.mark.parametrize(
    ("kind", "name", "counts_as"),
    [("empty", "EmptyRowError", "ValueError"), ("two", "NoKeyError", "ValueError"), ("plain", "ValueError", "ValueError"), ("mine", "Mine", "Mine")],
)
def test_an_outcome_carries_its_built_in_bases_and_counts_as_the_nearest(kind, name, counts_as):
    outcome = run_in_namespace(namespace(), "raises", (kind,), {})
    assert outcome.error_type == name  # the page still names the student's own class
    assert outcome.kind == counts_as
    assert outcome.bases == ([] if kind == "plain" else builtin_bases(namespace()["raises"].__globals__[name]("x")))


def test_a_subclass_of_value_error_is_re_created_as_a_value_error():
    outcome = run_in_namespace(namespace(), "raises", ("empty",), {})
    error = student_exception("scaled_attention", outcome.error_type or "", outcome.message, bases=outcome.bases)
    assert isinstance(error, ValueError) and isinstance(error, StudentRaised)
    assert error.type_name == "EmptyRowError" and str(error) == "no key"
    with pytest.raises(ValueError):
        raise error


def test_a_class_of_two_built_in_bases_is_both():
    outcome = run_in_namespace(namespace(), "raises", ("both",), {})
    error = student_exception("f", outcome.error_type or "", outcome.message, bases=outcome.bases)
    assert isinstance(error, KeyError) and isinstance(error, ValueError)


def test_a_class_of_no_built_in_base_but_exception_stays_a_student_exception():
    outcome = run_in_namespace(namespace(), "raises", ("mine",), {})
    error = student_exception("f", outcome.error_type or "", outcome.message, bases=outcome.bases)
    assert not isinstance(error, ValueError) and isinstance(error, StudentRaised)


def test_names_outside_the_table_pick_nothing_and_are_capped():
    """What crosses is names only: a name that is no class of the table gives no class, and a
    reply's list is cut (replies.py) to MAX_BASES."""
    assert exception_kind("Forged", ["os.system", "__import__", "object"]) == "Forged"
    error = student_exception("f", "Forged", "m", bases=["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
    assert not isinstance(error, (SystemExit, KeyboardInterrupt, GeneratorExit))
    assert len(builtin_bases(type("Deep", (ValueError,), {})())) <= MAX_BASES


def test_the_diagnosis_compares_exceptions_by_kind():
    from attnkit.grading.diagnosis import outcomes_match

    assert outcomes_match(Outcome(error_type="EmptyRowError", bases=["ValueError", "Exception", "BaseException"]), Outcome(error_type="ValueError"))
    assert not outcomes_match(Outcome(error_type="EmptyRowError", bases=["ValueError"]), Outcome(error_type="TypeError"))


@pytest.mark.e2e
def test_a_real_sandbox_sends_the_bases_and_the_driver_keeps_them():
    """Through a real zygote's sandbox: the reply carries the bases, the driver's decoding keeps
    them, and the proxy raises a ValueError."""
    from attnkit.boundary import operations
    from attnkit.boundary.policy import Limits
    from attnkit.driver.zygote_handle import Zygote

    zygote = Zygote(trusted=True)
    channel, _pid = zygote.spawn(Limits())
    try:
        channel.settimeout(30)
        assert wire.receive(channel)["ready"]
        wire.send(channel, operations.cell(SUBCLASSES))
        assert wire.receive(channel)["ok"]
        wire.send(channel, operations.call("raises", ("empty",), {}))
        reply = wire.receive(channel)
        assert reply["error_type"] == "EmptyRowError" and reply["bases"][0] == "ValueError", reply
        wire.send(channel, operations.call("raises", ("plain",), {}))
        assert "bases" not in wire.receive(channel), "a built-in class sends no bases: the wire is as before"
        wire.send(channel, operations.bye())
    finally:
        channel.close()
        zygote.close()

    from attnkit.driver.replies import ReplyDecoding

    decoded = ReplyDecoding._outcome(_Decoder(), reply)  # type: ignore[arg-type]
    assert decoded.kind == "ValueError" and decoded.bases[0] == "ValueError"
    assert torch.is_tensor(torch.zeros(1))  # torch imported for the zygote's warm-up, as in a worker


class _Decoder:
    """The state ``ReplyDecoding._outcome`` reads (a Submission's), for a call that is no MISSING."""

    _missing_because: dict = {}

    @staticmethod
    def _locate(where):
        return where
