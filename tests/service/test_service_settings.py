"""Where the service finds its queue and gradebook: the command line, the environment, the course (one precedence)."""

from __future__ import annotations

from pathlib import Path


def test_the_queue_and_the_gradebook_are_where_the_option_the_environment_or_the_course_says(tmp_path: Path, monkeypatch) -> None:
    """--queue-url, else $ATTNKIT_QUEUE_URL (a Kubernetes Secret), else c.AttnkitServe.queue_url,
    else SQLite in the course; the gradebook from --gradebook, else nbgrader's db_url."""
    from attnkit.service.settings import gradebook_of, queue_url_of

    monkeypatch.delenv("ATTNKIT_QUEUE_URL", raising=False)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    assert queue_url_of(tmp_path) is None and gradebook_of(tmp_path) == tmp_path / "gradebook.db"
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.AttnkitServe.queue_url = 'postgresql://config/q'\nc.CourseDirectory.db_url = 'postgresql+psycopg://config/g'\n"
    )
    assert queue_url_of(tmp_path) == "postgresql://config/q" and gradebook_of(tmp_path) == "postgresql+psycopg://config/g"
    monkeypatch.setenv("ATTNKIT_QUEUE_URL", "postgresql://secret/q")
    assert queue_url_of(tmp_path) == "postgresql://secret/q"
    assert queue_url_of(tmp_path, "postgresql://option/q") == "postgresql://option/q"
    assert gradebook_of(tmp_path, tmp_path / "other.db") == tmp_path / "other.db"
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.db_url = 'sqlite:///book.db'\n")
    assert gradebook_of(tmp_path) == tmp_path / "book.db", "relative to the course, where nbgrader runs"


def test_what_stops_the_service_is_the_services_own_failure_never_a_submissions() -> None:
    """Issue 48: the boundary around each folder and submission (``Inbound.consider``,
    ``Service.on_behalf_of``) lets only the grader's failures (``GraderError``: a suite, a sandbox,
    the recorder) and the database's stop the service (exit 2); whatever a student's files can make
    the code raise is that submission's ``refused``/``failed``."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from attnkit.constants import GraderError
    from attnkit.service.faults import is_the_services

    for error in (GraderError("suite"), sqlite3.OperationalError("database is locked"), OperationalError("SELECT 1", {}, Exception("down"))):
        assert is_the_services(error), error
    student_made = [
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        IsADirectoryError(21, "Is a directory"),
        OverflowError("date value out of range"),
        ValueError("bad timestamp"),
        PermissionError(13, "Permission denied"),
        RecursionError(),
        MemoryError(),
    ]
    assert not any(is_the_services(error) for error in student_made)
