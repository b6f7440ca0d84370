"""The LMS tests' course (tests/lms/): a real nbgrader gradebook (SQLite, through nbgrader's own API), a course
folder whose nbgrader_config.py registers it on a real LTI 1.3 platform (``lti_platform``, on
lti1p3platform) on 127.0.0.1, and the tool's JWKS served over HTTP where the platform fetches it."""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from lti_platform import Platform, free_port

ASSIGNMENT = "ch19-attention"
AUTO_MAX, MANUAL_MAX = 10.0, 5.0


def serve_jwks(key_path: Path) -> tuple[ThreadingHTTPServer, str]:
    """The tool's JWKS at http://127.0.0.1:PORT/lti/jwks, made by attnkit.lms.keys as the service serves it."""
    from attnkit.lms.keys import jwks

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            data = json.dumps(jwks(key_path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{port}/lti/jwks"


def write_config(root: Path, settings: dict[str, object]) -> None:
    lines = ["c = get_config()", "c.CourseDirectory.course_id = 'ch19'"]
    lines += [f"c.AttnkitLti.{name} = {value!r}" for name, value in settings.items()]
    (root / "nbgrader_config.py").write_text("\n".join(lines) + "\n")


def add_submissions(gradebook: Path, scores: dict[str, tuple[float, float | None]], due: datetime.datetime | None = None) -> None:
    """``scores``: student -> (autograded points, manual points or None: not graded yet), in nbgrader's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{gradebook}") as book:
        try:
            book.find_assignment(ASSIGNMENT)
        except MissingEntry:
            book.add_assignment(ASSIGNMENT, duedate=due)
            book.add_notebook("attention", ASSIGNMENT)
            book.add_grade_cell("check_scaled_attention", "attention", ASSIGNMENT, max_score=AUTO_MAX, cell_type="code")
            book.add_grade_cell("explain_scale", "attention", ASSIGNMENT, max_score=MANUAL_MAX, cell_type="markdown")
        for student, (auto, manual) in scores.items():
            try:
                book.find_student(student)
            except MissingEntry:
                book.add_student(student)
            book.add_submission(ASSIGNMENT, student, timestamp=datetime.datetime(2026, 12, 1, 12, 0))
            set_points(book, student, auto, manual)


def set_points(book: object, student: str, auto: float, manual: float | None) -> None:
    auto_grade = book.find_grade("check_scaled_attention", "attention", ASSIGNMENT, student)  # type: ignore[attr-defined]
    auto_grade.auto_score = auto
    auto_grade.needs_manual_grade = False
    manual_grade = book.find_grade("explain_scale", "attention", ASSIGNMENT, student)  # type: ignore[attr-defined]
    manual_grade.manual_score = manual
    manual_grade.needs_manual_grade = manual is None
    book.db.commit()  # type: ignore[attr-defined]


def grade_by_ta(gradebook: Path, student: str, auto: float, manual: float | None) -> None:
    """A regrade or a TA's manual points, as formgrader writes them."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{gradebook}") as book:
        set_points(book, student, auto, manual)


@dataclass
class LmsCourse:
    root: Path
    gradebook: Path
    platform: Platform
    jwks_url: str
    printed: list[str]  # everything `attnkit lms-sync` printed in this module (no secret may be in it)


def lms_course_at(root: Path) -> tuple[LmsCourse, ThreadingHTTPServer]:
    """alice (10 + 4), bob (7, manual points not graded yet), carol (10 + 5) enrolled on the
    platform; dave graded here but not on the LMS's roster. Student ids are the emails' local parts."""
    import os

    from attnkit.commands import tool_environment

    os.environ["PATH"] = tool_environment()["PATH"]  # nbgrader's Gradebook runs alembic
    root.mkdir()
    key = root / ".attnkit-serve" / "lti-tool-key.pem"
    jwks_server, jwks_url = serve_jwks(key)
    platform = Platform(jwks_url)
    for user, name in (("8f1c-alice", "alice"), ("8f1c-bob", "bob"), ("8f1c-carol", "carol")):
        platform.enrol(user, f"{name}@uni.example.edu", f"S-{name}")
    write_config(root, platform.settings() | {"student_id": "email_local", "backoff": 0.05, "backoff_max": 0.2, "retries": 2, "timeout": 3.0})
    gradebook = root / "gradebook.db"
    add_submissions(gradebook, {"alice": (10.0, 4.0), "bob": (7.0, None), "carol": (10.0, 5.0), "dave": (3.0, 1.0)})
    return LmsCourse(root, gradebook, platform, jwks_url, []), jwks_server


@pytest.fixture(scope="module")
def lms_course(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LmsCourse]:
    """One course for a test module, its tests in the order of a term (each builds on the last)."""
    course, jwks_server = lms_course_at(tmp_path_factory.mktemp("lms") / "course")
    try:
        yield course
    finally:
        course.platform.stop()
        jwks_server.shutdown()
        jwks_server.server_close()
