"""Issue 55: diagnosis verdicts shared by submissions whose replies are byte-identical
(``diagnosis._VERDICTS``). A verdict seen before is given again only for the very same replies:
the same inputs, and outcomes equal in all that the comparisons read (the kind of exception, or
the value's wire bytes). Every verdict equals the one computed afresh, whatever came before it.
"""

from __future__ import annotations

import pytest
import torch

from contract import CH19
from attnkit.boundary import wire
from attnkit.boundary.outcome import Call, Outcome, run_in_namespace
from attnkit.grading import diagnosis
from attnkit.grading.plugin import _diagnosable

catalogue = CH19.catalogue()
REFERENCE = catalogue.reference_namespace()
MISTAKES = _diagnosable(catalogue)
FUNCTION_OF = {mistake.id: mistake.function for mistake in catalogue.MISTAKES}
# Inputs of the chapter's shape: (B=2, T=3, d=4), a causal pattern.
QUERY = torch.linspace(-1, 1, 24).reshape(2, 3, 4)
KEY = torch.linspace(1, -1, 24).reshape(2, 3, 4)
VALUE = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
ALLOWED = torch.tril(torch.ones(3, 3, dtype=torch.bool))
ARGS = (QUERY, KEY, VALUE)
KWARGS = {"allowed": ALLOWED}


def student_calls(namespace: dict) -> list[Call]:
    """The calls a failed test of ``scaled_attention`` recorded for a student whose function is
    ``namespace``'s: its outcome as the wire would deliver it."""
    outcome = run_in_namespace(namespace, "scaled_attention", *wire.decode(wire.encode((ARGS, KWARGS))))
    if not outcome.raised:
        outcome = Outcome(value=wire.decode(wire.encode(outcome.value)))
    return [Call("scaled_attention", ARGS, KWARGS, outcome)]


def afresh(calls: list[Call]) -> list[str]:
    """The verdict with nothing shared: computed as it was before verdicts were kept."""
    saved = dict(diagnosis._VERDICTS)
    diagnosis._VERDICTS.clear()
    original = diagnosis._verdict_key
    diagnosis._verdict_key = lambda *parts: None  # type: ignore[assignment]
    try:
        return diagnosis.diagnose(calls, REFERENCE, MISTAKES)
    finally:
        diagnosis._verdict_key = original  # type: ignore[assignment]
        diagnosis._VERDICTS.update(saved)


ATTENTION_MISTAKES = sorted(key for key, mistake_id in ((key, key.split("/")[0]) for key in MISTAKES) if FUNCTION_OF.get(mistake_id) == "scaled_attention")


def test_the_catalogue_gives_distinct_verdicts_here() -> None:
    """The test below means something only if its inputs tell several mistakes apart."""
    verdicts = {tuple(afresh(student_calls(MISTAKES[key]))) for key in ATTENTION_MISTAKES}
    assert len(verdicts) >= 4, verdicts


def test_a_shared_verdict_is_the_one_computed_afresh_in_any_order() -> None:
    """Every student, each mistake's in turn and then again in reverse, so that each is diagnosed
    right after every other: the shared verdict equals a fresh one each time (a key that left out
    the outcome, or its value's bytes, would hand the first student's verdict to the next)."""
    diagnosis._VERDICTS.clear()
    students = [REFERENCE, *(MISTAKES[key] for key in ATTENTION_MISTAKES)]
    for namespace in students + students[::-1]:
        calls = student_calls(namespace)
        assert diagnosis.diagnose(calls, REFERENCE, MISTAKES) == afresh(calls)
    assert diagnosis._VERDICTS, "nothing was shared"


def test_a_value_that_differs_in_one_element_is_not_shared() -> None:
    """Two students whose replies differ in one element's last bits get each their own verdict:
    the first's is kept, the second's is computed (and here differs)."""
    diagnosis._VERDICTS.clear()
    first = student_calls(MISTAKES[ATTENTION_MISTAKES[0]])
    expected = afresh(first)
    assert diagnosis.diagnose(first, REFERENCE, MISTAKES) == expected
    output, weights = first[0].outcome.value
    nudged = output.clone()
    nudged[0, 0, 0] += 1.0
    second = [Call("scaled_attention", ARGS, KWARGS, Outcome(value=(nudged, weights)))]
    assert diagnosis.diagnose(second, REFERENCE, MISTAKES) == afresh(second)
    assert afresh(second) != expected


# The mistakes that reply differently from the reference on these inputs.
DIFFERING = [key for key in ATTENTION_MISTAKES if afresh(student_calls(MISTAKES[key])) != afresh(student_calls(REFERENCE))]


@pytest.mark.parametrize("key", DIFFERING[:6])
def test_agreeing_shares_only_identical_replies(key: str) -> None:
    """``agreeing``: a mistake kept for one student's calls is not kept for another's that it
    does not reproduce, whichever came first."""
    mistake_id = key.split("/")[0]
    own = student_calls(MISTAKES[key])
    other = student_calls(REFERENCE)
    diagnosis._VERDICTS.clear()
    fresh_other = diagnosis.agreeing([mistake_id], other, MISTAKES, FUNCTION_OF)
    assert fresh_other == [], "the mistake must not reproduce the reference's reply here"
    diagnosis._VERDICTS.clear()
    assert diagnosis.agreeing([mistake_id], own, MISTAKES, FUNCTION_OF) == [mistake_id]
    assert diagnosis.agreeing([mistake_id], other, MISTAKES, FUNCTION_OF) == fresh_other
    assert diagnosis.agreeing([mistake_id], own, MISTAKES, FUNCTION_OF) == [mistake_id]
