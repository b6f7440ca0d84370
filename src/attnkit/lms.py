"""``attnkit collect``: a Canvas, Moodle or Blackboard download into nbgrader's ``submitted/`` layout.

What the LMSs give a TA (a folder, or the zip they download as):

- Canvas "Download Submissions": one flat folder of renamed files,
  ``lastnamefirstname[_LATE]_<user_id>_<submission_id>_<original name>``; when a student submits
  again, the newer file has a higher submission (attachment) id.
- Moodle "Download all submissions": one folder per student,
  ``Full Name_<participant_id>_assignsubmission_file_/attention.ipynb`` (older Moodle versions
  flatten this to ``Full Name_<id>_assignsubmission_file_attention.ipynb``).
- Blackboard "Download assignment": one flat folder,
  ``<Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original name>`` plus one
  ``<Assignment>_<username>_attempt_<time>.txt`` per attempt naming the student.

Identity: the student id comes only from the part of a name the LMS made (Canvas's and
Blackboard's prefix, Moodle's OUTERMOST folder); the rest (the student's own file name, folders
inside a Moodle submission, zip entries) is data and never names anyone. The format is the TA's
``--lms``, or one detected for the whole download from entries only one format explains (an entry
a student crafted to look like another format explains two and proves nothing); never file by
file. A resubmission replaces an earlier one only by the LMS's own order (Canvas's submission id,
Blackboard's attempt time, then the file time); two files that claim one student in a way that
order cannot settle, or a file whose own name names another student, are refused and reported.

Fidelity: times are UTC, a zip's local times (and Blackboard's attempt times) read in the LMS's
zone (``--timezone``, default UTC), never the TA machine's. Beside ``timestamp.txt`` goes
``lms.json`` (the format, the name, Canvas's late flag and file id, the original file name, notes); a
``roster.csv`` (LMS id -> name, formula-safe) goes next to ``submitted/``.

Safety: symbolic links are never followed (in a folder or a zip), a zip's entries are never
extracted by their own path (the destination is built from the parsed student id only, so no
``../`` can escape), and sizes are capped per file, in total and in number of entries.
"""

from __future__ import annotations

import csv
import datetime
import functools
import io
import json
import os
import re
import stat
import struct
import zipfile
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from attnkit import i18n
from attnkit.i18n import _

MAX_FILE_BYTES = 50 * 1024 * 1024  # a notebook with embedded figures is a few MB; 50 MB is plenty
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
MAX_ENTRIES = 100_000
FORMATS = ("canvas", "moodle", "blackboard")
RECORD = "lms.json"
ROSTER = "roster.csv"

# The FIRST fields are Canvas's: a name without "_" (lastnamefirstname), the late flag, the user id
# and the submission id. Whatever follows is the student's file name, whatever it looks like.
CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?P<late>_late)?_(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$", re.IGNORECASE)
MOODLE_FOLDER = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_?$", re.IGNORECASE)
MOODLE_FLAT = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.+)$", re.IGNORECASE)
# The assignment's title may hold "_"; the first "_<username>_attempt_<time>" is Blackboard's.
BLACKBOARD = re.compile(r"^(?P<assignment>.+?)_(?P<id>[^_/]+)_attempt_(?P<when>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})(?:_(?P<file>.+)|\.txt)$")
BLACKBOARD_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<id>[^()]+)\)\s*$", re.MULTILINE)
# Canvas renames a resubmission "attention-1.ipynb"; browsers save a second copy "attention (1).ipynb".
RENAMED = re.compile(r"^(?P<base>.+?)(?:-\d+| \(\d+\))$")


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


@dataclass
class Entry:
    """A regular file of the download, by its path inside the download."""

    path: PurePosixPath
    size: int
    mtime: float
    read: Callable[[], bytes]


@dataclass
class Claim:
    """What the LMS-made part of an entry's path says: whose it is and what the student called it."""

    student_id: str
    name: str
    original: str  # the student's own file name (data)
    order: tuple = ()
    late: bool | None = None
    when: str = ""  # Blackboard's attempt time, in the LMS's zone
    nested: tuple[str, ...] = ()  # folders the student made inside a Moodle submission
    info: bool = False  # Blackboard's attempt .txt, not a submitted file
    file_id: str = ""  # Canvas's id of the file (its "submission" field)


def claim(path: PurePosixPath, lms: str) -> Claim | None:
    """The LMS-made claim of ``path`` under format ``lms``, or None if that LMS did not make it
    (or its id could not be a student's folder: ``submitted/<id>/`` must stay inside submitted/)."""
    claimed = _claim(path, lms)
    return claimed if claimed is not None and _folder_name(claimed.student_id) else None


def _folder_name(student_id: str) -> bool:
    """An id that is one folder name of its own: not "." or ".." (Blackboard's usernames are
    ``[^_/]+``), nothing unprintable (a NUL would stop the whole collect)."""
    return student_id not in (".", "..") and student_id.isprintable() and student_id.strip() == student_id != ""


def _claim(path: PurePosixPath, lms: str) -> Claim | None:
    if lms == "canvas":
        match = CANVAS.match(path.name) if len(path.parts) == 1 else None
        if match:
            return Claim(match["id"], match["name"], match["file"], (int(match["submission"]),), bool(match["late"]), file_id=match["submission"])
    elif lms == "moodle":
        for depth, part in enumerate(path.parts[:-1]):  # the OUTERMOST Moodle folder; above it, the TA's
            folder = MOODLE_FOLDER.match(part)
            if folder:
                return Claim(folder["id"], folder["name"], path.name, nested=tuple(path.parts[depth + 1 : -1]))
        flat = MOODLE_FLAT.match(path.name) if len(path.parts) == 1 else None
        if flat:
            return Claim(flat["id"], flat["name"], flat["file"])
    elif lms == "blackboard":
        match = BLACKBOARD.match(path.name) if len(path.parts) == 1 else None
        if match:
            return Claim(match["id"], "", match["file"] or "", (match["when"],), when=match["when"], info=match["file"] is None)
    return None


def detect(entries: list[PurePosixPath]) -> str:
    """The one format that made this download, or ValueError saying why there is none.

    Only an entry exactly one format explains is evidence: a student's file name crafted to look
    like another LMS's (Canvas keeps it after its own prefix) explains two formats and counts for none."""
    evidence: dict[str, PurePosixPath] = {}
    for path in entries:
        formats = [lms for lms in FORMATS if claim(path, lms)]
        if len(formats) == 1:
            evidence.setdefault(formats[0], path)
    if len(evidence) == 1:
        return next(iter(evidence))
    if not evidence:
        raise ValueError(_("无法判断下载来自哪个学习平台（没有文件符合 Canvas、Moodle 或 Blackboard 的命名）；请用 --lms 指明"))
    examples = i18n.join(f"{lms}（{path}）" for lms, path in sorted(evidence.items()))
    raise ValueError(_("下载中混有多个学习平台的命名：{examples}；请用 --lms 指明，一次只收一个平台的下载").format(examples=examples))


def other_ids(claimed: Claim) -> list[str]:
    """Student ids that the student-made parts (file name, nested folders) spell in any LMS's format."""
    found = []
    for text in (claimed.original, *claimed.nested):
        single = PurePosixPath(text or "_")
        for lms in FORMATS:
            inner = claim(single, lms) or (claim(single / "x", lms) if lms == "moodle" else None)
            if inner and inner.student_id != claimed.student_id:
                found.append(inner.student_id)
    return sorted(set(found))


def notebook_of(original: str, notebooks: dict[str, str]) -> tuple[str, list[str]] | str:
    """(the assignment's notebook, notes) the student's file is, or the reason it is none."""
    stem, suffix = os.path.splitext(original)
    if suffix.lower() != ".ipynb":
        return _("不是笔记本（{suffix}）").format(suffix=suffix) if suffix else _("不是笔记本（无扩展名）")
    renamed = RENAMED.match(stem)
    name = notebooks.get(stem.lower()) or (notebooks.get(renamed["base"].lower()) if renamed else None)
    if name is None:
        return _("笔记本名 {name} 不是本作业的（应为 {expected}）").format(name=original, expected=i18n.join(sorted(v + ".ipynb" for v in notebooks.values())))
    notes = []
    if original != name + ".ipynb" and not re.fullmatch(re.escape(name) + r"-\d+\.ipynb", original):
        notes.append(_("提交的文件名是 {original}，已按作业的笔记本名 {name}.ipynb 保存和评分").format(original=original, name=name))
    return name, notes


def folder_entries(root: Path, unplaced: list[tuple[str, str]]) -> Iterator[Entry]:
    """Regular files under ``root``; symbolic links are reported, never followed."""
    count = 0
    for directory, subdirs, files in os.walk(root, followlinks=False):
        for name in sorted(subdirs):
            if (Path(directory) / name).is_symlink():
                unplaced.append((str(Path(directory) / name), _("符号链接，未跟随")))
        subdirs[:] = sorted(d for d in subdirs if not (Path(directory) / d).is_symlink())
        for name in sorted(files):
            path = Path(directory) / name
            info = path.lstat()
            count += 1
            if count > MAX_ENTRIES:
                unplaced.append((str(path), _("文件数超过上限 {limit}，其余未处理").format(limit=MAX_ENTRIES)))
                return
            if stat.S_ISLNK(info.st_mode):
                unplaced.append((str(path), _("符号链接，未跟随")))
                continue
            if not stat.S_ISREG(info.st_mode):
                unplaced.append((str(path), _("不是普通文件")))
                continue
            yield Entry(PurePosixPath(path.relative_to(root).as_posix()), info.st_size, info.st_mtime, functools.partial(_read_capped, path))


def _read_capped(path: Path) -> bytes:
    # O_NOFOLLOW: a file swapped for a link after the walk is still not followed.
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(_("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20))
    return data


def zip_time(info: zipfile.ZipInfo, zone: datetime.tzinfo) -> float:
    """An entry's time: the UTC time of its extended-timestamp field (0x5455) if it has one, else its
    DOS local time read in the LMS's zone (never the TA machine's)."""
    extra = info.extra
    while len(extra) >= 4:
        kind, size = struct.unpack("<HH", extra[:4])
        body = extra[4 : 4 + size]
        if kind == 0x5455 and size >= 5 and body[0] & 1:
            return float(struct.unpack("<i", body[1:5])[0])
        extra = extra[4 + size :]
    return datetime.datetime(*info.date_time, tzinfo=zone).timestamp()


def zip_entries(archive: Path, unplaced: list[tuple[str, str]], zone: datetime.tzinfo) -> Iterator[Entry]:
    """Regular files of a zip, by name only: never extracted by their own path."""
    opened = zipfile.ZipFile(archive)
    infos = opened.infolist()
    if len(infos) > MAX_ENTRIES:
        unplaced.append((str(archive), _("压缩包条目超过上限 {limit}").format(limit=MAX_ENTRIES)))
        return
    total = 0
    for info in infos:
        label = f"{archive.name}:{info.filename}"
        if info.is_dir():
            continue
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            unplaced.append((label, _("符号链接，未跟随")))
            continue
        name = PurePosixPath(info.filename.replace("\\", "/"))
        if name.is_absolute() or ".." in name.parts or re.match(r"^[A-Za-z]:", info.filename):
            unplaced.append((label, _("路径指向压缩包之外（zip-slip），已拒绝")))
            continue
        total += info.file_size
        if total > MAX_TOTAL_BYTES:
            unplaced.append((label, _("解压总量超过上限 {limit} GB，其余未处理").format(limit=MAX_TOTAL_BYTES // 2**30)))
            return

        def read(info: zipfile.ZipInfo = info) -> bytes:
            # The header's size may lie (a zip bomb): never read more than the cap.
            with opened.open(info) as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise ValueError(_("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20))
            return data

        yield Entry(name, info.file_size, zip_time(info, zone), read)


def download_entries(sources: list[Path], found: Collected, zone: datetime.tzinfo) -> list[tuple[str, Entry]]:
    """(label, entry) of every regular file of every source; what is not one is reported."""
    listed = []
    for source in sources:
        if source.is_symlink() and source.is_dir():
            found.unplaced.append((str(source), _("符号链接，未跟随")))
            continue
        if source.is_dir():
            entries = folder_entries(source, found.unplaced)
        elif source.is_file() and zipfile.is_zipfile(source):
            entries = zip_entries(source, found.unplaced, zone)
        else:
            found.unplaced.append((str(source), _("不存在，或既不是文件夹也不是 zip")))
            continue
        for entry in entries:
            label = f"{source.name}:{entry.path}" if source.is_file() else str(source / entry.path)
            if any(part in ("__MACOSX", ".DS_Store") for part in entry.path.parts):
                found.unplaced.append((label, _("操作系统生成的附带文件")))
                continue
            listed.append((label, entry))
    return listed


def gather(sources: list[Path], notebooks: dict[str, str], lms: str | None = None, zone: datetime.tzinfo = datetime.UTC) -> Collected:
    """Every candidate of every source, by the LMS's own order; conflicts refused, not guessed."""
    found = Collected()
    listed = download_entries(sources, found, zone)
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
