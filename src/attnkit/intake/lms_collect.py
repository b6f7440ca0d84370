"""``attnkit collect``: a Canvas, Moodle or Blackboard download into nbgrader's ``submitted/`` layout.

What the LMSs give a TA (a folder, or the zip they download as):

- Canvas "Download Submissions": one flat folder of renamed files; when a student submits
  again, the newer file has a higher submission (attachment) id.
- Moodle "Download all submissions": one folder per student.
- Blackboard "Download assignment": one flat folder, plus one ``.txt`` per attempt naming the student.

Whose each file is comes from the names the LMS made (``attnkit.intake.lms_names``); the download's
files are read by ``attnkit.intake.lms_download``. Here: a resubmission replaces an earlier one only by
the LMS's own order (Canvas's submission id, Blackboard's attempt time, then the file time); two
files that claim one student in a way that order cannot settle, or a file whose own name names
another student, are refused and reported.

Fidelity: times are UTC, a zip's local times (and Blackboard's attempt times) read in the LMS's
zone (``--timezone``, default UTC), never the TA machine's. Beside ``timestamp.txt`` goes
``lms.json`` (the format, the name, Canvas's late flag and file id, the original file name, notes); a
``roster.csv`` (LMS id -> name, formula-safe) goes next to ``submitted/``. The destination is built
from the parsed student id only.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import os
import zipfile
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnkit import i18n
from attnkit.i18n import _
from attnkit.intake.lms_record import RECORD
from attnkit.intake.lms_download import MAX_FILE_BYTES, Entry, download_entries
from attnkit.intake.lms_names import BLACKBOARD_NAME, Claim, claim, detect, notebook_of, other_ids

ROSTER = "roster.csv"


@dataclass
class Candidate:
    """One file of the download that names a student and one of the assignment's notebooks."""

    student_id: str
    notebook: str
    order: tuple  # the LMS's own order of this student's submissions: higher is newer
    mtime: float  # the submission time, seconds since the epoch (UTC)
    origin: str
    read: Callable[[], bytes] = field(repr=False)
    lms: str = ""
    name: str = ""
    late: bool | None = None  # Canvas's _LATE_ flag; None where the LMS says nothing
    original: str = ""
    notes: list[str] = field(default_factory=list)  # to the TA and the student (Chinese)
    file_id: str = ""  # Canvas's id of the submitted file: its bulk upload of feedback needs it


@dataclass
class Collected:
    placed: dict[str, Candidate] = field(default_factory=dict)  # "id/notebook" -> newest
    superseded: list[Candidate] = field(default_factory=list)
    unplaced: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    lms: str = ""
    roster: dict[str, str] = field(default_factory=dict)  # LMS id -> name


def gather(sources: list[Path], notebooks: dict[str, str], lms: str | None = None, zone: datetime.tzinfo = datetime.UTC) -> Collected:
    """Every candidate of every source, by the LMS's own order; conflicts refused, not guessed."""
    found = Collected()
    listed = download_entries(sources, found.unplaced, zone)
    if lms is None:
        try:
            lms = detect([entry.path for _label, entry in listed])
        except ValueError as error:
            found.unplaced.extend((label, str(error)) for label, _entry in listed)
            return found
    found.lms = lms
    claims: dict[str, list[Candidate]] = {}
    for label, entry in listed:
        claimed = claim(entry.path, lms)
        if claimed is None:
            found.unplaced.append((label, _("不是 {lms} 生成的文件名或文件夹，无法确定是谁的提交").format(lms=lms)))
            continue
        if claimed.name:
            found.roster.setdefault(claimed.student_id, claimed.name)
        if claimed.info:
            _blackboard_name(entry, claimed, found)
            continue
        foreign = other_ids(claimed)
        if foreign:
            found.unplaced.append(
                (
                    label,
                    _("文件名或文件夹名冒充了其他学生（编号 {ids}），已拒绝；它属于 {owner} 的提交").format(ids=i18n.join(foreign), owner=claimed.student_id),
                )
            )
            continue
        if claimed.nested:
            found.unplaced.append((label, _("在提交里学生自建的文件夹中，未采用（笔记本应直接放在提交中）")))
            continue
        if entry.size > MAX_FILE_BYTES:
            found.unplaced.append((label, _("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20)))
            continue
        named = notebook_of(claimed.original, notebooks)
        if isinstance(named, str):
            found.unplaced.append((label, named))
            continue
        notebook, notes = named
        mtime = entry.mtime
        if claimed.when:
            mtime = datetime.datetime.strptime(claimed.when, "%Y-%m-%d-%H-%M-%S").replace(tzinfo=zone).timestamp()
        candidate = Candidate(
            claimed.student_id,
            notebook,
            (*claimed.order, mtime),
            mtime,
            label,
            entry.read,
            lms,
            claimed.name,
            claimed.late,
            claimed.original,
            notes,
            claimed.file_id,
        )
        claims.setdefault(f"{claimed.student_id}/{notebook}", []).append(candidate)
    for key, candidates in claims.items():
        _choose(key, candidates, lms, found)
    return found


def _choose(key: str, candidates: list[Candidate], lms: str, found: Collected) -> None:
    """The newest by the LMS's order; refused when that order cannot tell (or Moodle holds two)."""
    candidates.sort(key=lambda c: c.order)
    newest = candidates[-1]
    tied = [c for c in candidates if c.order == newest.order]
    if len(candidates) > 1 and (len(tied) > 1 or lms == "moodle"):
        # Moodle's download holds a student's current files only: two notebooks are the student's
        # two uploads ("attention.ipynb", "attention (1).ipynb"), and nothing says which is meant.
        others = i18n.join(c.origin for c in candidates)
        for candidate in candidates:
            reason = _("与同一学生（{student}）的其他文件冲突，无法确定采用哪一份：{others}；未放入任何一份，请与学生确认")
            found.unplaced.append((candidate.origin, reason.format(student=key.split("/")[0], others=others)))
        return
    found.superseded.extend(candidates[:-1])
    found.placed[key] = newest


def _blackboard_name(entry: Entry, claimed: Claim, found: Collected) -> None:
    """The name in Blackboard's attempt .txt ("Name: First Last (username)"), for the roster."""
    try:
        text = entry.read()[:65536].decode("utf-8", "replace")
    except (OSError, ValueError, zipfile.BadZipFile):
        return
    match = BLACKBOARD_NAME.search(text)
    if match and match["id"] == claimed.student_id:
        found.roster[claimed.student_id] = match["name"]


def nbgrader_timestamp(mtime: float) -> str:
    """The format nbgrader writes in timestamp.txt (and parses back with parse_utc)."""
    return datetime.datetime.fromtimestamp(mtime, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def timezone(name: str | None) -> datetime.tzinfo:
    """The LMS's zone by its IANA name (``Asia/Shanghai``); UTC when not given."""
    if not name:
        return datetime.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(_("未知的时区：{zone}（应为 IANA 名称，如 Asia/Shanghai）").format(zone=name)) from None


def record(candidate: Candidate) -> dict:
    """lms.json: what the LMS said about this submission, beside nbgrader's timestamp.txt."""
    return {
        "lms": candidate.lms,
        "student_id": candidate.student_id,
        "name": candidate.name,
        "late": candidate.late,
        "submitted_utc": nbgrader_timestamp(candidate.mtime),
        "original_name": candidate.original,
        "stored_as": f"{candidate.notebook}.ipynb",
        "origin": candidate.origin,
        "notes": candidate.notes,
        "lms_file_id": candidate.file_id or None,
    }


def write_roster(path: Path, roster: dict[str, str], lms: str) -> None:
    """roster.csv (student_id, name, lms); rows of an earlier collect are kept, this one's win."""
    from attnkit.files import atomic_write, csv_text

    rows: dict[str, tuple[str, str]] = {}
    if path.is_file():
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                rows[row.get("student_id", "")] = (row.get("name", ""), row.get("lms", ""))
    rows.update({sid: (name, lms) for sid, name in roster.items()})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["student_id", "name", "lms"])
    for sid, (name, source) in sorted(rows.items()):
        writer.writerow([csv_text(sid), csv_text(name), csv_text(source)])
    atomic_write(path, out.getvalue())


def collect(
    sources: list[Path], submitted: Path, assignment: str, notebooks: list[str], lms: str | None = None, zone: datetime.tzinfo = datetime.UTC
) -> Collected:
    """Place every notebook of ``sources`` in ``submitted/<id>/<assignment>/``; return what happened."""
    from attnkit.files import atomic_write

    found = gather(sources, {name.lower(): name for name in notebooks}, lms, zone)
    for key, candidate in sorted(found.placed.items()):
        try:
            data = candidate.read()
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            found.unplaced.append((candidate.origin, _("无法读取：{error}").format(error=error)))
            del found.placed[key]
            continue
        folder = submitted / candidate.student_id / assignment
        target = folder / f"{candidate.notebook}.ipynb"
        folder.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)
        os.utime(target, (candidate.mtime, candidate.mtime))
        atomic_write(folder / "timestamp.txt", nbgrader_timestamp(candidate.mtime) + "\n")
        atomic_write(folder / RECORD, json.dumps(record(candidate), ensure_ascii=False, indent=1) + "\n")
    if found.roster:
        submitted.mkdir(parents=True, exist_ok=True)
        write_roster(submitted.resolve().parent / ROSTER, found.roster, found.lms)
    return found
