"""What a hidden test is, read from its markers once per test rather than once per submission.

The hidden tests mark each test with ``grade_id`` (the grade cell it belongs to), ``weight`` (its
share of that cell's points), ``function`` (the student functions it grades) and ``depends_on``
(the ones those rely on); see :mod:`attnkit.grading.plugin`. A worker asks these for every test of every
submission, so each answer is computed once and kept:

- on the item itself (``item.stash``): for the life of the collected item, i.e. one pytest session;
- in ``_MARKERS``: per process, keyed on the test file, the test and its function object, so a
  suite re-imported after an edit (a new function object) is read again;
- ``_assignment_of_folder``: per process, as ``attnkit.assignment.folder`` keeps each folder's
  ``Assignment`` (its manifest and source notebook) for the process's life;
- ``_translated_title``: per process, keyed on the title text itself and the language; the
  catalogue under it is ``i18n.translations``'s (see there).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from attnkit import i18n
from attnkit.assignment.folder import MANIFEST, Assignment, of_path
from attnkit.constants import GraderError

# Per process, never invalidated: the key holds the test's function object, which a re-import replaces.
_MARKERS: dict[tuple, dict[str, Any]] = {}
# On the item (per pytest session: an item lives as long as its session's collection).
_ITEM_MARKERS = pytest.StashKey[dict[str, Any]]()
_ITEM_KEY = pytest.StashKey[str]()


def _marker_args(item: pytest.Item) -> dict[str, Any]:
    """The test's own markers, read once per test rather than for every submission: ``weight``
    and ``grade_id`` (closest), ``function`` and ``depends_on`` (all)."""
    found = item.stash.get(_ITEM_MARKERS, None)
    if found is not None:
        return found
    key = (str(item.path), test_key(item), getattr(item, "obj", None))  # a re-imported suite is another
    found = _MARKERS.get(key)
    if found is not None:
        item.stash[_ITEM_MARKERS] = found
    else:
        weight, grade_id = item.get_closest_marker("weight"), item.get_closest_marker("grade_id")
        found = _MARKERS[key] = {
            "weight": float(weight.args[0]) if weight else 1.0,
            "grade_id": str(grade_id.args[0]) if grade_id else "",
            "function": tuple(name for marker in item.iter_markers("function") for name in marker.args),
            "depends_on": tuple(name for marker in item.iter_markers("depends_on") for name in marker.args),
            "rests_on": _rests_on(item),
            "concept": str(concept.args[0]) if (concept := item.get_closest_marker("concept")) and concept.args else "",
        }
        item.stash[_ITEM_MARKERS] = found
    return found


def weight_of(item: pytest.Item) -> float:
    return float(_marker_args(item)["weight"])


def base_nodeid(item: pytest.Item) -> str:
    """The test's id without its submission parameter."""
    return item.nodeid.split("[")[0]


def test_key(item: pytest.Item) -> str:
    """The test and its parameters other than the submission: the same for every submission."""
    found = item.stash.get(_ITEM_KEY, None)
    if found is None:
        params = getattr(getattr(item, "callspec", None), "params", {})
        others = sorted((key, repr(value)) for key, value in params.items() if key != "student")
        found = item.stash[_ITEM_KEY] = base_nodeid(item) + (repr(others) if others else "")
    return found


def grade_id_of(item: pytest.Item) -> str:
    return str(_marker_args(item)["grade_id"])


def functions_of(item: pytest.Item) -> tuple[str, ...]:
    """The student functions this test grades (its own ``function`` markers)."""
    return tuple(_marker_args(item)["function"])


def dependencies_of(item: pytest.Item) -> tuple[str, ...]:
    """The student functions the graded ones rely on (``depends_on`` markers)."""
    return tuple(_marker_args(item)["depends_on"])


def _rests_on(item: pytest.Item) -> tuple[tuple[str, str, str], ...]:
    return tuple(
        (str(marker.args[0]), str(marker.args[1]) if len(marker.args) > 1 else str(marker.args[0]), str(marker.args[2]) if len(marker.args) > 2 else "")
        for marker in item.iter_markers("rests_on")
        if marker.args
    )


def rests_on_of(item: pytest.Item) -> tuple[tuple[str, str, str], ...]:
    """The grade cells whose concepts this test's concept rests on, closest marker first, each with
    that concept's name as the page says it and, optionally, how the test is then judged (a
    sentence of the assignment's domain, for the page; ``rests_on(part, concept, how)``
    markers; () for none): when the student
    failed a test of such a grade cell, a failure here is judged again against the student's own
    function (``attnkit.grading.own_loop``, issues 41 and 53: one slip costs its own concept only).
    The empty-row tests rest on the attention and on masking; the multi-head future tests on the
    multi-head part."""
    return tuple(_marker_args(item)["rests_on"])


def concept_of(item: pytest.Item) -> str:
    """The concept this test checks (``concept`` marker: a msgid of its assignment's domain; ""
    for none): what the page names where the test's part loses points (issue 41's charge per
    concept)."""
    return str(_marker_args(item)["concept"])


def assignment_of(item: pytest.Item) -> Assignment:
    found = _assignment_of_folder(str(item.path.parent))
    if found is None:
        raise GraderError(f"{item.nodeid}: a hidden test outside an assignment folder (no {MANIFEST} above it)")
    return found


@functools.cache
def _assignment_of_folder(folder: str) -> Assignment | None:
    # Asked for every test of every submission: the folder walk and path resolution run once.
    # Per process, never invalidated: it only finds the folder, and the Assignment it returns is
    # ``assignment._LOADED``'s, kept for the process too (see there).
    return of_path(Path(folder))


def item_points(items: list[pytest.Item]) -> dict[str, float]:
    """Base node id -> points: each assignment's grade-cell points split by its tests' weights."""
    by_assignment: dict[str, tuple[Assignment, dict[str, tuple[str, float]]]] = {}
    for item in items:
        assignment = assignment_of(item)
        _, weights = by_assignment.setdefault(assignment.name, (assignment, {}))
        weights[base_nodeid(item)] = (grade_id_of(item), weight_of(item))
    points: dict[str, float] = {}
    for assignment, weights in by_assignment.values():
        points.update(assignment.test_points(weights))
    return points


def title_of(item: pytest.Item) -> str:
    """The test's title: the first line of its docstring, translated in the assignment's own
    message domain (``locale/`` beside the test file), or its name."""
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    if first:
        return _translated_title(str(item.fspath), first, i18n.language())
    return getattr(item, "originalname", item.name)


@functools.cache
def _translated_title(test_file: str, title: str, language: str) -> str:
    # Asked for every test of every submission: the path resolution and lookup run once.
    # Per process, never invalidated: keyed on the title's own text and the language, so an edited
    # docstring is another key; the catalogue behind it is ``i18n.translations``'s (per process).
    return i18n.catalogue(Path(test_file).resolve().parent / "locale", i18n.ASSIGNMENT_DOMAIN).gettext(title)
