"""Submissions over HTTP (attnkit.service.http_submit) on real files and a real queue database: the
student id a hub name may give, the spooled copy and its notice, and what the loop takes from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.submitted_files import MAX_SUBMITTED_BYTES
from attnkit.service.exchange import parse_name
from attnkit.service.http_submit import SPOOL, Refused, spool, student_id, take_spooled
from attnkit.service.queue import QUEUED
from attnkit.service.queue.sqlite import SqliteQueue

NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


@pytest.mark.parametrize("name", ["", ".hidden", "ana+ch19", "../ana", "ana/b", "an\x00a", "a\nb", "x" * 101])
def test_a_hub_name_that_cannot_be_a_student_id_is_refused(name: str) -> None:
    with pytest.raises(Refused):
        student_id(name)


def test_the_student_id_is_the_hub_name_or_what_the_course_maps_it_to() -> None:
    assert student_id("ana") == "ana"
    assert student_id("ana@example.edu", {"ana@example.edu": "s2026001"}) == "s2026001"
    with pytest.raises(Refused):
        student_id("ana", {"ana": "bo+1"})  # a mapping is checked as well


def test_spool_keeps_the_copy_under_the_assignments_own_name_then_the_notice(tmp_path: Path) -> None:
    spooled = spool(tmp_path, "ana", "ch19-attention", "attention.ipynb", NOTEBOOK, now=1_800_000_000.5)
    copy = tmp_path / "attempts" / spooled.name / "ana" / "ch19-attention"
    assert sorted(p.name for p in copy.iterdir()) == ["attention.ipynb", "timestamp.txt"]
    assert (copy / "attention.ipynb").read_bytes() == NOTEBOOK
    assert spooled.timestamp == "2027-01-15 08:00:00.500000 UTC" == (copy / "timestamp.txt").read_text()
    assert [p.name for p in (tmp_path / SPOOL).iterdir()] == [f"{spooled.name}.json"]
    # Never an exchange folder's name: neither channel can take the other's row.
    assert spooled.name.startswith("http+ana+ch19-attention+") and parse_name(spooled.name) is None
    assert spool(tmp_path, "ana", "ch19-attention", "attention.ipynb", NOTEBOOK).name != spooled.name


def test_spool_refuses_an_empty_notebook_and_one_over_intakes_cap(tmp_path: Path) -> None:
    with pytest.raises(Refused):
        spool(tmp_path, "ana", "a", "n.ipynb", b"")
    with pytest.raises(Refused):
        spool(tmp_path, "ana", "a", "n.ipynb", b" " * (MAX_SUBMITTED_BYTES + 1))
    assert not (tmp_path / "attempts").exists() and not (tmp_path / SPOOL).exists()


def test_the_loop_queues_each_notice_once_and_drops_one_without_its_copy(tmp_path: Path) -> None:
    queue = SqliteQueue(tmp_path / "service.db")
    first = spool(tmp_path, "ana", "ch19-attention", "attention.ipynb", NOTEBOOK)
    second = spool(tmp_path, "bo", "ch19-attention", "attention.ipynb", NOTEBOOK)
    orphan = tmp_path / SPOOL / "http+cy+x+1+ff.json"  # a notice whose copy is gone
    orphan.write_text('{"name": "http+cy+x+1+ff", "student": "cy", "assignment": "x", "timestamp": "t"}')

    def notice(name: str, student: str, assignment: str, timestamp: str, noticed: float) -> None:
        queue.notice(name, student, assignment, timestamp, noticed)

    taken = take_spooled(tmp_path, notice)
    assert sorted(t.name for t in taken) == sorted([first.name, second.name])
    assert list((tmp_path / SPOOL).iterdir()) == []
    rows = {row["inbound"]: row for row in queue.db.execute("SELECT * FROM submissions")}
    assert set(rows) == {first.name, second.name}
    assert rows[first.name]["student"] == "ana" and rows[first.name]["state"] == QUEUED
    assert rows[first.name]["timestamp"] == first.timestamp
    # A crash after the row but before the notice's removal: taken again, queued once.
    (tmp_path / SPOOL / f"{first.name}.json").write_text(
        f'{{"name": "{first.name}", "student": "ana", "assignment": "ch19-attention", "timestamp": "{first.timestamp}"}}'
    )
    take_spooled(tmp_path, notice)
    assert queue.db.execute("SELECT COUNT(*) FROM submissions").fetchone()[0] == 2
