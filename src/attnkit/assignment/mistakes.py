"""The machinery of a catalogue of known mistakes; each assignment's ``catalogue.py`` holds the
mistakes themselves.

A mistake is the reference with exactly one function replaced. :meth:`Catalogue.mistake_namespaces`
execs the reference source and then the mistake's ``def`` into one fresh namespace, so reference
functions that call the replaced one use the mistaken version: a later part that fails only
because of an earlier function is diagnosed as that earlier mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class Mistake:
    id: str  # part of the results.json contract: may be added, never renamed
    section: str  # where the textbook explains it (a msgid of the assignment's domain)
    function: str  # the one student function it replaces
    source: str  # self-contained (imports what it uses): it also works pasted into a notebook
    zh: str  # the explanation, a msgid of the assignment's domain (English: its locale/en/…/assignment.po)
    # Other implementations of the same mistake (e.g. Softmax over each wrong axis, not only one):
    # each is replayed like ``source`` and, when it reproduces the student's outcomes, named by ``id``.
    variants: tuple[str, ...] = ()


class Catalogue:
    """A reference source file and the mistakes of its functions."""

    def __init__(self, reference: Path, mistakes: tuple[Mistake, ...]) -> None:
        self.reference = reference
        self.mistakes = mistakes
        self._by_id = {mistake.id: mistake for mistake in mistakes}
        if len(self._by_id) != len(mistakes):
            raise ValueError("two mistakes share an id")

    def by_id(self, mistake_id: str) -> Mistake:
        return self._by_id[mistake_id]

    def reference_source(self) -> str:
        return self.reference.read_text(encoding="utf-8")

    def reference_namespace(self) -> dict:
        """The reference functions, in a fresh namespace (built once)."""
        return self._reference

    def mistake_namespaces(self) -> dict[str, dict]:
        """id -> the reference with that one mistake's function replaced (built once)."""
        return self._mistakes

    def diagnosable_namespaces(self) -> dict[str, dict]:
        """``mistake_namespaces`` and one namespace per variant, keyed ``id/n`` (see
        :func:`mistake_id_of`): what diagnosis replays."""
        return self._diagnosable

    # The namespaces below are built once per Catalogue object, which lives as long as its
    # Assignment (``assignment._LOADED``: per process): the reference file a run grades with does
    # not change during it.
    @cached_property
    def _diagnosable(self) -> dict[str, dict]:
        source = self.reference_source()
        found = dict(self._mistakes)
        for mistake in self.mistakes:
            for number, variant in enumerate(mistake.variants, start=1):
                found[f"{mistake.id}/{number}"] = _exec(source, variant)
        return found

    @cached_property
    def _reference(self) -> dict:
        return _exec(self.reference_source())

    @cached_property
    def _mistakes(self) -> dict[str, dict]:
        source = self.reference_source()
        return {mistake.id: _exec(source, mistake.source) for mistake in self.mistakes}


def _exec(*sources: str) -> dict:
    namespace: dict = {"__name__": "__attnkit_catalogue__"}
    for index, source in enumerate(sources):
        exec(compile(source, f"<catalogue {index}>", "exec"), namespace)
    return namespace


def mistake_id_of(key: str) -> str:
    """The mistake id of a :meth:`Catalogue.diagnosable_namespaces` key (a variant's ``id/n``)."""
    return key.split("/", 1)[0]
