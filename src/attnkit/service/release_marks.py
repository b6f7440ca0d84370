"""The marks beside a page released after the due date (issue 51): rewritten as the page is.

A page withheld until the due date has marks that show nothing (``shown`` "after-due": no
function, no score, ``report.cell_marks``). When ``Delivery.release_after_due`` puts the full page
(or the attempt limit's) in its place, the ``<hash>.json`` beside it is written again from the
submission's results kept in the queue, so that the student's JupyterLab marks the cells once the
diagnosis is released, and not before. The ``--hub`` channel answers the same file
(``hub.ApiMarksHandler``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Protocol

from attnkit.assignment.folder import Assignment
from attnkit.report.cell_marks import marks_json
from attnkit.service import exchange
from attnkit.service.queue import Queue


class Releasing(Protocol):
    """What of ``delivery.Delivery`` the release reads."""

    queue: Queue
    course: exchange.Course
    suites: dict[str, Assignment]

    def limit_of(self, student: str, assignment: str, now: float) -> dict[str, Any]: ...


def place_release_marks(service: Releasing, row: Mapping[str, Any], assignment: str, released: bool) -> None:
    """The marks of ``row`` (a ``Queue.withheld_after_due`` row) as its released page shows it:
    ``released`` (its full page placed), every graded function's points and diagnoses; otherwise
    the attempt limit's page, nothing but the limit."""
    found = service.queue.find(int(row["id"]))
    results = json.loads(found["results"]) if found is not None and found["results"] else None
    shown = "released" if released and results is not None else "withheld"
    marks = marks_json(results, service.suites[assignment], shown, service.limit_of(row["student"], assignment, time.time()))
    exchange.place_marks(service.course, row["feedback"], json.dumps(marks, ensure_ascii=False).encode(), row["student"])
