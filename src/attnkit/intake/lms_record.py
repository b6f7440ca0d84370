"""``lms.json``, read back: what ``attnkit collect`` wrote beside a notebook it placed (the LMS, its
ids for the student and the file, the late flag). Intake reads it into each job (the LMS's late
flag, shown on the pages), the LMS feedback zips read it for the names the LMS matches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnkit.i18n import _
from attnkit.submitted_files import Unsafe, read_submitted

RECORD = "lms.json"


def read_record(submitted: Path, student: str, assignment: str) -> dict[str, Any] | str | None:
    """The ``lms.json`` of one submission, read as intake reads (no link followed, capped): the
    record if it is about this very student, None if there is none, else why it is not used."""
    folder = submitted / student / assignment
    if not (folder / RECORD).exists() and not (folder / RECORD).is_symlink():
        return None
    try:
        record = json.loads(read_submitted(submitted, folder / RECORD, limit=64 * 1024).decode("utf-8"))
    except (Unsafe, OSError, ValueError) as error:
        return _("lms.json 无法读取：{error}").format(error=error)
    if not isinstance(record, dict) or record.get("student_id") != student:
        return _("lms.json 记录的不是这名学生（它不是 attnkit collect 为这个文件夹写的），未采用")
    return record


def lms_record(submitted: Path, student: str, assignment: str) -> dict[str, Any] | None:
    """``read_record``'s record, or None (no record, or one not used)."""
    found = read_record(submitted, student, assignment)
    return found if isinstance(found, dict) else None


def lms_lateness(record: dict[str, Any] | None) -> dict[str, str] | None:
    """What the LMS said about lateness, for the pages: its flag (Canvas's ``_LATE_``) and the time."""
    if not record or record.get("late") is not True:
        return None
    lms, when = record.get("lms"), record.get("submitted_utc")
    lms = lms if isinstance(lms, str) else ""
    when = when if isinstance(when, str) else ""
    return {"lms": lms_title(lms), "submitted_utc": when[:40]}


def lms_title(lms: str) -> str:
    return {"canvas": "Canvas", "moodle": "Moodle", "blackboard": "Blackboard"}.get(lms, lms[:20])
