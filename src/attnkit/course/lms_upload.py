"""The way back to the LMS: each student's feedback.html in the bulk-upload zip that LMS reads.

``attnkit collect`` left ``lms.json`` beside each notebook it placed (the LMS, its ids for the
student and the file, the late flag). After grading, one zip per LMS and assignment,
``OUT/lms-feedback-<lms>-<assignment>.zip``, holds every student's page under the name that LMS's
own importer matches back to that student:

- Moodle, *Upload multiple feedback files in a zip* (``assignfeedback_file_zip_importer``): each
  path part is split at ``_``; the first part whose second field is a participant of the
  assignment names the student, and the rest is the feedback file's name. So a student's page is
  ``<Full Name>_<participant id>_assignsubmission_file_/feedback.html``, the folder Moodle's own
  download names.
- Canvas, *Upload Submissions* (``Assignment#generate_comments_from_files``): the file's base
  name is split at ``_`` and its first two all-digit fields are the user id and the id of a file
  of that user's current submission; the file is attached to a comment on it. So a page is
  ``<name>[_LATE]_<user id>_<file id>_feedback.html``, as Canvas's download names the submission.
  Canvas names the attached file after the submitted one (``attention.ipynb``): docs/tas.md says so.
- Blackboard has no bulk upload of feedback files: its students are listed as left out.

Every field of a name comes from ``lms.json``, which only ``collect`` writes (from the part of a
download's names the LMS made), checked against the folder it lies in: the record must name the
student of that folder, and the ids must be plain ASCII digits. Nothing the student wrote (the
notebook, its file name, the results' texts) is part of a name, and the id in a name is always
the folder's own: no student's page can land in a classmate's slot.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnkit.constants import STUDENTS_FOLDER
from attnkit.files import write_zip
from attnkit.i18n import _
from attnkit.records import ResultsJson
from attnkit.intake.lms_record import lms_title, read_record
from attnkit.intake.lms_names import CANVAS, claim

UPLOADS = ("canvas", "moodle")  # the LMSs with a bulk upload of feedback files
FEEDBACK_FILE = "feedback.html"
_ASCII_ID = re.compile(r"[0-9]{1,18}")
_NAME_STANDIN = "student"  # where the LMS's name for a student cannot stand in a file name


@dataclass
class Packed:
    """What was written: the zips (path -> number of students) and who was left out, and why."""

    archives: dict[Path, int] = field(default_factory=dict)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (student/assignment, reason)
    by_hand: dict[str, list[str]] = field(default_factory=dict)  # an LMS without bulk upload -> its students


def _name_part(name: Any) -> str:
    """The LMS's name for the student as one field of a file name: no ``_`` or ``/`` (collect's
    patterns never let one through), nothing unprintable, never all digits (Canvas would read a
    digit field as an id); a stand-in otherwise."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        return _NAME_STANDIN
    if any(ch in "_/\\" or (unicodedata.category(ch)[0] in "CZ" and ch != " ") for ch in name):
        return _NAME_STANDIN
    if name.isdigit() or name.strip(".") == "":
        return _NAME_STANDIN
    return name


def canvas_file_id(record: dict[str, Any]) -> str:
    """Canvas's id of the submitted file: the record's own field, or (records of an older collect)
    read again from the LMS-made prefix of the download name in ``origin``."""
    found = record.get("lms_file_id")
    if isinstance(found, str) and found:
        return found
    origin = record.get("origin")
    origin = origin if isinstance(origin, str) else ""
    for candidate in (PurePosixPath(origin).name, origin.rsplit(":", 1)[-1]):
        claimed = claim(PurePosixPath(candidate), "canvas") if CANVAS.match(candidate) else None
        if claimed and claimed.student_id == record.get("student_id"):
            return claimed.file_id  # as written: "٥٠٠٥" stays non-ASCII and is refused
    return ""


def slot(record: dict[str, Any], student: str) -> tuple[str, str] | str:
    """(the LMS, the zip entry name of this student's page), or why there is none."""
    lms = record.get("lms")
    if lms not in UPLOADS:
        return _("{lms} 没有批量上传反馈文件的功能：请在它的评分页面为这名学生附上 feedback.html").format(lms=lms_title(str(lms or "?")))
    if not _ASCII_ID.fullmatch(student):
        return _("学号 {student} 不是 {lms} 的数字编号，无法命名它的反馈文件").format(student=student, lms=lms_title(lms))
    name = _name_part(record.get("name"))
    if lms == "moodle":
        return lms, f"{name}_{student}_assignsubmission_file_/{FEEDBACK_FILE}"
    file_id = canvas_file_id(record)
    if not _ASCII_ID.fullmatch(file_id):
        return _("lms.json 里没有 Canvas 的文件编号（请用新版 attnkit collect 重新收取），无法命名它的反馈文件")
    late = "_LATE" if record.get("late") is True else ""
    return lms, f"{name}{late}_{student}_{file_id}_{FEEDBACK_FILE}"


def archive_path(out: Path, lms: str, assignment: str) -> Path:
    return out / f"lms-feedback-{lms}-{assignment}.zip"


def write_lms_feedback(out: Path, submitted: Path, all_results: list[ResultsJson]) -> Packed:
    """One upload-ready zip per LMS and assignment of the submissions ``collect`` placed.

    Submissions without an ``lms.json`` (a class not collected from an LMS) are no one's business
    here; those with one that cannot go into a zip are listed with the reason."""
    packed = Packed()
    entries: dict[tuple[str, str], dict[str, bytes]] = {}
    for results in sorted(all_results, key=lambda r: (r["assignment"], r["student_id"])):
        student, assignment = results["student_id"], results["assignment"]
        record = read_record(submitted, student, assignment)
        if record is None:
            continue
        where = f"{student}/{assignment}"
        if isinstance(record, str):
            packed.left_out.append((where, record))
            continue
        if results.get("not_graded"):
            packed.left_out.append((where, _("未评分，没有反馈页面")))
            continue
        if record.get("lms") not in UPLOADS:
            packed.by_hand.setdefault(lms_title(str(record.get("lms") or "?")), []).append(where)
            continue
        found = slot(record, student)
        if isinstance(found, str):
            packed.left_out.append((where, found))
            continue
        lms, name = found
        page = out / STUDENTS_FOLDER / student / assignment / FEEDBACK_FILE
        try:
            data = page.read_bytes()
        except OSError:
            packed.left_out.append((where, _("找不到反馈页面 {path}").format(path=page)))
            continue
        # The id in the name is the folder's own (and the record's, checked): one slot per folder.
        entries.setdefault((lms, assignment), {})[name] = data
    for assignment in sorted({r["assignment"] for r in all_results}):
        for lms in UPLOADS:
            destination = archive_path(out, lms, assignment)
            files = entries.get((lms, assignment))
            if files:
                write_zip(destination, sorted(files.items()))
                packed.archives[destination] = len(files)
            else:
                destination.unlink(missing_ok=True)  # an earlier run's zip would hand out stale pages
    return packed
