"""The hint ladder's texts (issue 53): every catalogue entry of every assignment ``discover()`` finds
has its three levels, in Chinese and in English (through the assignment's own catalogue), and they
climb: level 1 names a check and the chapter's section and gives no fix (no code), level 3 is the
fix (it shows the code to write)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from attnkit import i18n
from contract import ASSIGNMENTS

CJK = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
# What code looks like in a sentence: a call or an index, an assignment or comparison, an operator of
# the fix (~, @), a method or attribute (x.y), a keyword argument, a torch name.
CODE = re.compile(r"\w\(|\w\[|[=~@]|\.\w|\bdim\b|\btorch\b|\bsqrt\b|\braise\b|\breturn\b")
SECTION = re.compile(r"第 (\d+) 节")


@pytest.fixture
def english() -> Iterator[None]:
    before = i18n.language()
    i18n.set_language("en", export=False)
    try:
        yield
    finally:
        i18n.set_language(before, export=False)


def check_names(assignment_name: str) -> list[str]:
    """The names of the assignment's checks (its parts' titles, without the sections they cover), in the current language."""
    assignment = ASSIGNMENTS[assignment_name]
    return [re.split(r"（| \(", assignment.part_title(grade_id))[0] for grade_id in assignment.parts]


@pytest.mark.parametrize("name", list(ASSIGNMENTS))
def test_every_catalogue_entry_has_three_levels_in_chinese(name: str) -> None:
    assignment = ASSIGNMENTS[name]
    ladders = getattr(assignment.catalogue(), "HINTS", {})
    ids = [m.id for m in assignment.catalogue().MISTAKES]
    assert ids, "a catalogue with entries"
    assert not set(ladders) - set(ids), f"hints for no entry: {sorted(set(ladders) - set(ids))}"
    checks = check_names(name)
    for id_, entry in assignment.mistakes.items():
        assert len(entry["hints"]) == 3 and all(entry["hints"]), f"{id_}: three levels, none empty"
        nudge, explained, fix = entry["hints"]
        assert len({nudge, explained, fix}) == 3 and nudge != entry["zh"], f"{id_}: each level its own text, the nudge not the whole explanation"
        assert not CODE.search(nudge), f"{id_}: level 1 is a nudge, no code: {CODE.search(nudge)!r} in {nudge!r}"
        assert entry["section"] in nudge, f"{id_}: level 1 names the chapter's section {entry['section']}"
        assert any(f"「{check}」" in nudge for check in checks), f"{id_}: level 1 names the check that failed, one of {checks}"
        assert CODE.search(fix), f"{id_}: level 3 is the fix, with the code to write: {fix!r}"


@pytest.mark.parametrize("name", list(ASSIGNMENTS))
def test_every_catalogue_entry_has_three_levels_in_english(name: str, english: None) -> None:
    assignment = ASSIGNMENTS[name]
    checks = check_names(name)
    zh = {m.id: m for m in assignment.catalogue().MISTAKES}
    ladders = getattr(assignment.catalogue(), "HINTS", {})
    if not (assignment.folder / "locale").exists():
        # A course's own added assignment may ship no English (ARCHITECTURE.md: English is optional,
        # tests/report/test_i18n.py): its ladder is then shown as written, all three levels of it.
        for id_, entry in assignment.mistakes.items():
            assert list(entry["hints"]) == list(ladders[id_]), f"{id_}: without locale/, the ladder as written"
        return
    for id_, entry in assignment.mistakes.items():
        assert len(entry["hints"]) == 3, id_
        for level, (text, written) in enumerate(zip(entry["hints"], ladders[id_], strict=True), start=1):
            assert text and text != written and not CJK.search(text), f"{id_} level {level}: English, from the assignment's catalogue: {text!r}"
        nudge, _explained, fix = entry["hints"]
        assert not CODE.search(nudge), f"{id_}: level 1 is a nudge, no code: {nudge!r}"
        number = SECTION.search(zh[id_].section)
        assert number and re.search(rf"\bsections?\b[^.]*?\b{number.group(1)}\b", nudge, re.IGNORECASE), (
            f"{id_}: level 1 names section {zh[id_].section}: {nudge!r}"
        )
        assert any(f'"{check}"' in nudge for check in checks), f"{id_}: level 1 names the check, one of {checks}: {nudge!r}"
        assert CODE.search(fix), f"{id_}: level 3 shows the code to write: {fix!r}"
