"""What a graded submission becomes in the service: its results and page (as ``attnkit grade``
writes them, ``report``), placed in the exchange as the assignment's policy allows (``policies``:
attempts per window, visibility, hints), its lateness as ``nbgrader export`` will say it
(``course.lateness``), its row delivered; and the pages withheld until a due date, released once
it has passed."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.assignment.folder import Assignment
from attnkit.i18n import _
from attnkit.records import Job, ResultsJson, SubmissionRecord
from attnkit.report.cell_marks import marks_json
from attnkit.report.results_json import results_json
from attnkit.report.store import bounded_feedback
from attnkit.service import exchange
from attnkit.service.due_dates import DueDates
from attnkit.service.metrics import Metrics
from attnkit.service.policies import (
    DEFAULT,
    Policy,
    after_due_reason,
    ladder_levels,
    limit_reason,
    next_feedback_at,
    not_graded_page,
    released_at_due,
    scores_page,
    withheld_page,
)
from attnkit.service.queue import Queue, Row, is_url


@dataclass
class InFlight:
    """A submission a worker grades: its row, its job, and the copy graded."""

    row: Row
    job: Job
    staged: Path  # the copy graded: attempts/<inbound>/<student>/<assignment>
    sent: float = field(default_factory=time.time)  # when a worker was given it


class Delivery:
    """Records to pages for the course's assignments (``suites``) under their ``policies``."""

    def __init__(
        self,
        course: exchange.Course,
        attempts: Path,
        suites: dict[str, Assignment],
        policies: dict[str, Policy],
        queue: Queue,
        gradebook: Path | str | None,
        metrics: Metrics,
        emit: Callable[..., None],
    ) -> None:
        self.course = course
        self.attempts = attempts
        self.suites = suites
        self.policies = policies
        self.queue = queue
        self.gradebook = gradebook
        self.dues = DueDates(gradebook)
        self.metrics = metrics
        self.emit = emit
        self.late_plugin: Any = None  # the course's LateSubmissionPlugin, made at the first late submission
        self.policies_placed = True  # the public policies file (``place_policies``); False: placed again at the resume

    def deliver(self, flight: InFlight, record: SubmissionRecord) -> None:
        """The record as results, its page placed as the policy allows, the row delivered."""
        row = flight.row
        received = time.time()
        # The results and the page as `attnkit grade` writes them (report.store), kept in the
        # database and the exchange only: no graded/ folder, no fsync on the feedback's way.
        suite = self.suites[row.assignment]
        results = results_json(record, suite)
        if not flight.job.notebooks and not results.get("not_graded"):
            # No notebook was read (a link, none, several): not graded, never a 0 over the student's score.
            results["not_graded"] = "; ".join(results["problems"]) or _("提交里没有可评分的内容")
        late = self.lateness(row, results)
        if late is not None:
            results["late"] = late
        policy = self.policies.get(row.assignment, DEFAULT)
        if policy.hints == "ladder" and results["diagnoses"] and not results.get("not_graded"):
            # The next level of each diagnosis's hints, from what this student's earlier pages
            # showed (the queue's: it survives a restart; one in flight per student, so no other
            # page of theirs is being delivered meanwhile). The scores are untouched.
            results["hints"] = ladder_levels(results["diagnoses"], self.queue.hints_seen(row.student, row.assignment))
        full = bounded_feedback(results, suite).encode()
        now = time.time()
        shown, page = self.page_for(row, results, policy, full, now)
        if shown != "full":  # kept with the submission's copy: released in place after the due date
            (self.attempts / row.inbound / "feedback.html").write_bytes(full)
        notebooks = sorted(p.name for p in flight.staged.glob("*.ipynb")) or [self.suites[row.assignment].notebook]
        course_id = self.course.course_id
        names = [exchange.feedback_name(flight.staged, course_id, row.student, row.assignment, Path(notebook).stem, row.timestamp) for notebook in notebooks]
        for name in names:
            exchange.place_feedback(self.course, name, page, row.student)
        graded = not results.get("not_graded")
        score = results["score"] if graded else None
        if not self.queue.deliver(row.id, dict(results), names[0], shown, score, results["max_score"], now, hints=results.get("hints")):
            return
        self.place_marks(names, results, row.assignment, shown, row.student, now)
        latency = time.time() - row.noticed
        self.metrics.graded += 1
        self.metrics.observe(latency)
        self.emit(
            "delivered",
            id=row.id,
            student=row.student,
            assignment=row.assignment,
            attempt=self.queue.row(row.id).attempt,
            score=score,
            max_score=results["max_score"],
            shown=shown,
            hints=results.get("hints", {}),
            latency=round(latency, 4),
            # Where the time went: waiting for a worker, grading, the page written and delivered.
            waited=round(flight.sent - row.noticed, 4),
            grading=round(received - flight.sent, 4),
            delivering=round(time.time() - received, 4),
            layer=results.get("isolation", ""),
            not_graded=results.get("not_graded", ""),
        )

    def lateness(self, row: Row, results: ResultsJson) -> dict[str, Any] | None:
        """What ``nbgrader export`` will say of this submission's lateness once the recorder has
        saved it (``course.lateness``, the path ``attnkit grade`` takes too): its due date with the
        student's extension, the course's own ``LateSubmissionPlugin`` class, each notebook's
        penalty clamped. None when it is not late by the assignment's due date (an extension only
        moves it later) or there is no due date; the gradebook is asked only then.
        The submission's time is the service's (``row.noticed``: when it saw the folder complete,
        the recorder writes the same into ``submitted/``), never the student's own timestamp.txt."""
        import datetime

        from attnkit.course.lateness import GradebookLateness, course_late_plugin
        from attnkit.course.nbgrader_commands import kit_scores
        from attnkit.service.queue.postgres import engine_url

        due = self.dues.of(row.assignment)
        if due is None or row.noticed <= due or self.gradebook is None:
            return None
        if self.late_plugin is None:
            self.late_plugin = course_late_plugin(self.course.root)
        key = (row.student, row.assignment)
        noticed = datetime.datetime.fromtimestamp(row.noticed, tz=datetime.UTC).replace(tzinfo=None)  # nbgrader's naive UTC
        gradebook = engine_url(str(self.gradebook)) if is_url(str(self.gradebook)) else Path(self.gradebook)
        lateness = GradebookLateness.read(gradebook, None, [key], self.course.root, timestamps={key: noticed}, plugin=self.late_plugin)
        facts = lateness.facts[key]
        if not facts.notebooks:
            # The assignment's notebooks are not in the gradebook yet (a due date set by `nbgrader db
            # assignment add`; the recorder registers them with this first record): one notebook
            # holding the suite's grade cells, as the recorder will register it.
            facts.notebooks = {Path(self.suites[row.assignment].notebook).stem: sorted(kit_scores(results))}
            facts.max_score = float(results["max_score"])
            if facts.duedate is None:
                facts.duedate = datetime.datetime.fromtimestamp(due, tz=datetime.UTC).replace(tzinfo=None)
        late = lateness.of(results)
        if late is None or late["seconds_late"] <= 0:
            return None
        return late

    def page_for(self, row: Row, results: ResultsJson, policy: Policy, full: bytes, now: float) -> tuple[str, bytes]:
        """What the student sees of this graded submission, as the assignment's policy says. One
        that could not be graded says so at once, whatever the policy: it shows no score, it is no
        attempt (``shown`` "not-graded" is not counted), and the gradebook keeps the earlier one."""
        if results.get("not_graded"):
            return "not-graded", not_graded_page(row.assignment, results["not_graded"]).encode()
        if policy.visibility == "after-due":
            due = self.dues.of(row.assignment)
            if due is None or now < due:
                return "after-due", withheld_page(row.assignment, after_due_reason(due)).encode()
        if policy.attempts:
            next_at = next_feedback_at(policy, self.queue.shown_times(row.student, row.assignment, now - policy.window_seconds))
            if next_at is not None:
                return "withheld", withheld_page(row.assignment, limit_reason(policy, next_at)).encode()
        if policy.visibility == "scores":
            return "scores", scores_page(results, self.suites.get(row.assignment)).encode()
        return "full", full

    def place_marks(self, names: list[str], results: ResultsJson | None, assignment: str, shown: str, student: str, now: float) -> None:
        """The marks beside the pages ``names`` (``report.cell_marks``) as a page ``shown`` shows them,
        given to ``student`` alone; the extension reads them (the ``--hub`` channel through
        ``hub.ApiMarksHandler``)."""
        marks = json.dumps(marks_json(results, self.suites[assignment], shown, self.limit_of(student, assignment, now)), ensure_ascii=False).encode()
        for name in names:
            exchange.place_marks(self.course, name, marks, student)

    def limit_of(self, student: str, assignment: str, now: float) -> dict[str, Any]:
        """The attempts the assignment's window allows and when the student's counted ones were
        delivered (the lab extension says from these how many are left and when the next comes)."""
        policy = self.policies.get(assignment, DEFAULT)
        counted = self.queue.shown_times(student, assignment, now - policy.window_seconds) if policy.attempts else []
        return {"attempts": policy.attempts, "window_seconds": policy.window_seconds, "counted": counted}

    def place_policies(self) -> None:
        """The public policies file (``exchange.place_policies``): the attempts per window of each assignment."""
        policies = {name: self.policies.get(name, DEFAULT) for name in self.suites}
        public = {name: {"attempts": p.attempts, "window_seconds": p.window_seconds} for name, p in policies.items()}
        try:
            exchange.place_policies(self.course, json.dumps({"format": 1, "assignments": public}).encode())
        except OSError as error:  # a full disk at the start: placed again when the service resumes (``probe``)
            self.policies_placed = False
            self.emit("policies-not-placed", reason=f"{type(error).__name__}: {error}")
            return
        self.policies_placed = True

    def release_after_due(self) -> None:
        """Pages withheld until the due date, once it has passed: each becomes the page ``full``
        visibility under the same attempt limit would have given it when it was delivered
        (``policies.released_at_due``: the limit holds under after-due, issue 48): its full page in
        place of its withheld one, or, past the limit in its window, the limit's page, saying why.
        Every submission has its own page: no other is touched."""
        for assignment, policy in self.policies.items():
            due = self.dues.of(assignment) if policy.visibility == "after-due" else None
            if due is None or time.time() < due:
                continue
            pages = self.queue.withheld_after_due(assignment)
            for _student, group in itertools.groupby(pages, key=lambda page: page["student"]):
                mine = list(group)
                for row, next_at in zip(mine, released_at_due(policy, [(float(r["finished"]), r["shown"]) for r in mine]), strict=True):
                    if row["shown"] != "after-due":
                        continue
                    if next_at is None:
                        kept = self.attempts / row["inbound"] / "feedback.html"
                        if kept.is_file():
                            exchange.place_feedback(self.course, row["feedback"], kept.read_bytes(), row["student"])
                        if self.queue.release_shown(row["id"], "released"):
                            self.emit("released", id=row["id"], assignment=assignment)
                    else:
                        exchange.place_feedback(self.course, row["feedback"], withheld_page(assignment, limit_reason(policy, next_at)).encode(), row["student"])
                        if self.queue.release_shown(row["id"], "withheld"):
                            self.emit("withheld", id=row["id"], assignment=assignment, reason="attempts", next=round(next_at, 3))
                    # Its marks with it: the diagnosis on the cells once released, nothing of it before.
                    found = self.queue.find(int(row["id"]))
                    results = json.loads(found["results"]) if found is not None and found["results"] else None
                    shown = "released" if next_at is None and results is not None else "withheld"
                    self.place_marks([row["feedback"]], results, assignment, shown, row["student"], time.time())
