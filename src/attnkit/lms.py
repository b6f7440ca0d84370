"""``attnkit collect``: a Canvas or Moodle download into nbgrader's ``submitted/`` layout.

What the LMSs give a TA (a folder, or the zip they download as):

- Canvas "Download Submissions": one flat folder of renamed files,
  ``lastnamefirstname[_LATE]_<user_id>_<submission_id>_<original name>``; when a student submits
  again, Canvas renames the file ``softmax-1.ipynb``, ``softmax-2.ipynb``, ...
- Moodle "Download all submissions": one folder per student,
  ``Full Name_<participant_id>_assignsubmission_file_/softmax.ipynb`` (older Moodle versions
  flatten this to ``Full Name_<id>_assignsubmission_file_softmax.ipynb``).

Each notebook goes to ``submitted/<id>/<assignment>/<notebook>.ipynb`` with nbgrader's
``timestamp.txt`` (the file's time), keeping the newest resubmission. Every file that cannot be
placed is reported with the reason, and the command exits non-zero if there is any.

Safety: symbolic links are never followed (in a folder or a zip), a zip's entries are never
extracted by their own path (the destination is built from the parsed student id only, so no
``../`` can escape), and sizes are capped per file, in total and in number of entries.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from collections.abc import Callable, Iterator

from attnkit import i18n
from attnkit.i18n import _

MAX_FILE_BYTES = 50 * 1024 * 1024  # a notebook with embedded figures is a few MB; 50 MB is plenty
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
MAX_ENTRIES = 100_000

CANVAS = re.compile(r"^(?P<name>.+?)(?:_late)?_(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$", re.IGNORECASE)
MOODLE_FOLDER = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_?$", re.IGNORECASE)
MOODLE_FLAT = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.+)$", re.IGNORECASE)
# "softmax-1.ipynb" (Canvas) or "softmax (1).ipynb" (a browser's copy): resubmission number 1.
RESUBMISSION = re.compile(r"^(?P<base>.+?)(?:-(?P<dash>\d+)| \((?P<paren>\d+)\))?$")


@dataclass
class Candidate:
    """One file of the download that names a student and one of the assignment's notebooks."""

    student_id: str
    notebook: str
    number: int  # resubmission number: 0 for the first, higher is newer
    mtime: float
    origin: str
    read: Callable[[], bytes] = field(repr=False)


@dataclass
class Collected:
    placed: dict[str, Candidate] = field(default_factory=dict)  # "id/notebook" -> newest
    superseded: list[Candidate] = field(default_factory=list)
    unplaced: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)


@dataclass
class Entry:
    """A regular file of the download, by its path inside the download."""

    path: PurePosixPath
    size: int
    mtime: float
    read: Callable[[], bytes]


def parse(path: PurePosixPath, notebooks: dict[str, str]) -> tuple[str, str, int] | str:
    """(student id, notebook name, resubmission number), or the reason it cannot be placed."""
    parents = [part for part in path.parts[:-1]]
    student_id = original = None
    for part in reversed(parents):
        folder = MOODLE_FOLDER.match(part)
        if folder:
            student_id, original = folder["id"], path.name
            break
    if student_id is None:
        flat = MOODLE_FLAT.match(path.name) or CANVAS.match(path.name)
        if not flat:
            return _("文件名既不是 Canvas 格式（姓名_用户号_提交号_文件名）也不是 Moodle 格式（姓名_编号_assignsubmission_file_）")
        student_id, original = flat["id"], flat["file"]
    stem, suffix = os.path.splitext(original)
    if suffix.lower() != ".ipynb":
        return _("不是笔记本（{suffix}）").format(suffix=suffix) if suffix else _("不是笔记本（无扩展名）")
    parts = RESUBMISSION.match(stem)
    base, number = parts["base"], int(parts["dash"] or parts["paren"] or 0)
    name = notebooks.get(base.lower()) or notebooks.get(stem.lower())
    if name is None:
        return _("笔记本名 {name} 不是本作业的（应为 {expected}）").format(name=original, expected=i18n.join(sorted(v + ".ipynb" for v in notebooks.values())))
    if name.lower() == stem.lower():
        number = 0  # the name itself ends in "-<digits>": not a resubmission
    return student_id, name, number


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
            yield Entry(PurePosixPath(path.relative_to(root).as_posix()), info.st_size, info.st_mtime,
                        lambda path=path: _read_capped(path))


def _read_capped(path: Path) -> bytes:
    # O_NOFOLLOW: a file swapped for a link after the walk is still not followed.
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(_("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20))
    return data


def zip_entries(archive: Path, unplaced: list[tuple[str, str]]) -> Iterator[Entry]:
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
        mtime = datetime.datetime(*info.date_time).timestamp()

        def read(info: zipfile.ZipInfo = info) -> bytes:
            # The header's size may lie (a zip bomb): never read more than the cap.
            with opened.open(info) as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise ValueError(_("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20))
            return data

        yield Entry(name, info.file_size, mtime, read)


def gather(sources: list[Path], notebooks: dict[str, str]) -> Collected:
    """Every candidate of every source, the newest per student and notebook kept."""
    found = Collected()
    for source in sources:
        if source.is_symlink() and source.is_dir():
            found.unplaced.append((str(source), _("符号链接，未跟随")))
            continue
        if source.is_dir():
            entries = folder_entries(source, found.unplaced)
        elif source.is_file() and zipfile.is_zipfile(source):
            entries = zip_entries(source, found.unplaced)
        else:
            found.unplaced.append((str(source), _("不存在，或既不是文件夹也不是 zip")))
            continue
        for entry in entries:
            label = f"{source.name}:{entry.path}" if source.is_file() else str(source / entry.path)
            if any(part in ("__MACOSX", ".DS_Store") for part in entry.path.parts):
                found.unplaced.append((label, _("操作系统生成的附带文件")))
                continue
            if entry.size > MAX_FILE_BYTES:
                found.unplaced.append((label, _("超过 {limit} MB").format(limit=MAX_FILE_BYTES // 2**20)))
                continue
            parsed = parse(entry.path, notebooks)
            if isinstance(parsed, str):
                found.unplaced.append((label, parsed))
                continue
            student_id, notebook, number = parsed
            candidate = Candidate(student_id, notebook, number, entry.mtime, label, entry.read)
            key = f"{student_id}/{notebook}"
            current = found.placed.get(key)
            if current is None:
                found.placed[key] = candidate
            elif (number, entry.mtime) > (current.number, current.mtime):
                found.superseded.append(current)
                found.placed[key] = candidate
            else:
                found.superseded.append(candidate)
    return found


def nbgrader_timestamp(mtime: float) -> str:
    """The format nbgrader writes in timestamp.txt (and parses back with parse_utc)."""
    return datetime.datetime.fromtimestamp(mtime, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def collect(sources: list[Path], submitted: Path, assignment: str, notebooks: list[str]) -> Collected:
    """Place every notebook of ``sources`` in ``submitted/<id>/<assignment>/``; return what happened."""
    from attnkit.files import atomic_write

    found = gather(sources, {name.lower(): name for name in notebooks})
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
    return found
