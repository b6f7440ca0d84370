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
    assignment: str = ""  # the assignment whose notebook this is (by its name, or the TA's --assignment)


@dataclass
class Collected:
    placed: dict[str, Candidate] = field(default_factory=dict)  # "id/assignment/notebook" -> newest
    superseded: list[Candidate] = field(default_factory=list)
    replaced: list[tuple[Candidate, str]] = field(default_factory=list)  # (placed now, the time of the notebook it replaced)
    unplaced: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)
    lms: str = ""
    roster: dict[str, str] = field(default_factory=dict)  # LMS id -> name


def gather(
    sources: list[Path], notebooks: dict[str, str], lms: str | None = None, zone: datetime.tzinfo = datetime.UTC, owners: dict[str, list[str]] | None = None
) -> Collected:
    """Every candidate of every source, by the LMS's own order; conflicts refused, not guessed.
    ``notebooks``: lower-case stem -> the notebook's stem; ``owners``: stem -> the assignments
    whose notebook has that name (one: the file is that assignment's; several: the TA must say)."""
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
        if entry.size > MAX_FILE_BYTES:
            found.unplaced.append((label, _("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20)))
            continue
        named = notebook_of(claimed.original, notebooks)
        if isinstance(named, str):
            found.unplaced.append((label, named))
            continue
        notebook, notes = named
        assignments = (owners or {}).get(notebook, [""])
        if len(assignments) > 1:
            reason = _("无法从文件名判断 {file} 属于哪项作业（{known} 的笔记本都叫 {notebook}.ipynb）：请用 attnkit collect --assignment 指定作业后再收取")
            found.unplaced.append((label, reason.format(file=claimed.original, known=i18n.join(assignments), notebook=notebook)))
            continue
        if claimed.nested:
            # A folder the student made inside her own LMS-made submission (``homework/``): the
            # LMS's folder says whose it is; the folder's name is data (one that spells another
            # student's id was refused above).
            notes.append(_("笔记本在学生自建的文件夹 {folder} 中，已放入提交并评分").format(folder="/".join(claimed.nested)))
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
            assignments[0],
        )
        claims.setdefault(f"{claimed.student_id}/{assignments[0]}/{notebook}", []).append(candidate)
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


def write_roster(path: Path, roster: dict[str, str], lms: str, submitted: str = "") -> None:
    """roster.csv (student_id, name, lms, submitted); rows of an earlier collect are kept, this
    one's win. Each row belongs to one ``submitted/`` folder (its name, in ``submitted``): two
    classes collected into folders that share a parent share the file, never their rows."""
    from attnkit.files import atomic_write, csv_text

    rows: dict[tuple[str, str], tuple[str, str]] = {}
    if path.is_file():
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                # A roster written before the column: its rows were this folder's (the only one then).
                rows[(row.get("submitted") or submitted, row.get("student_id", ""))] = (row.get("name", ""), row.get("lms", ""))
    rows.update({(submitted, sid): (name, lms) for sid, name in roster.items()})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["student_id", "name", "lms", "submitted"])
    for (folder, sid), (name, source) in sorted(rows.items()):
        writer.writerow([csv_text(sid), csv_text(name), csv_text(source), csv_text(folder)])
    atomic_write(path, out.getvalue())


def read_roster(submitted: Path) -> dict[str, str]:
    """Student id -> name, from the roster.csv beside ``submitted`` (its rows for this folder only;
    empty where there is none: a class not collected from an LMS)."""
    path = submitted.resolve().parent / ROSTER
    names: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("submitted", submitted.resolve().name) in ("", submitted.resolve().name):
                    names[row.get("student_id", "")] = row.get("name", "")
    except (OSError, csv.Error, UnicodeDecodeError):
        return {}
    return names


def collect(sources: list[Path], submitted: Path, notebooks: dict[str, list[str]], lms: str | None = None, zone: datetime.tzinfo = datetime.UTC) -> Collected:
    """Place every notebook of ``sources`` in ``submitted/<id>/<assignment>/``; return what
    happened. ``notebooks``: assignment -> its notebooks' stems; a file is the assignment's whose
    notebook it is named after (a name two assignments share is refused, naming the file)."""
    from attnkit.files import atomic_write

    owners: dict[str, list[str]] = {}
    for assignment, stems in notebooks.items():
        for stem in stems:
            owners.setdefault(stem, []).append(assignment)
    found = gather(sources, {stem.lower(): stem for stem in owners}, lms, zone, owners)
    for key, candidate in sorted(found.placed.items()):
        try:
            data = candidate.read()
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            found.unplaced.append((candidate.origin, _("无法读取：{error}").format(error=error)))
            del found.placed[key]
            continue
        folder = submitted / candidate.student_id / candidate.assignment
        target = folder / f"{candidate.notebook}.ipynb"
        folder.mkdir(parents=True, exist_ok=True)
        if target.is_file() and target.read_bytes() != data:
            # A resubmission since the last collect (or another download): the TA is told which.
            previous = (folder / "timestamp.txt").read_text(encoding="utf-8").strip() if (folder / "timestamp.txt").is_file() else ""
            found.replaced.append((candidate, previous))
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)
        os.utime(target, (candidate.mtime, candidate.mtime))
        atomic_write(folder / "timestamp.txt", nbgrader_timestamp(candidate.mtime) + "\n")
        atomic_write(folder / RECORD, json.dumps(record(candidate), ensure_ascii=False, indent=1) + "\n")
    if found.roster:
        submitted.mkdir(parents=True, exist_ok=True)
        write_roster(submitted.resolve().parent / ROSTER, found.roster, found.lms, submitted.resolve().name)
    return found
