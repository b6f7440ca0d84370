"""The files of an LMS's download, from a folder or the zip it downloads as, read safely.

Symbolic links are never followed (in a folder or a zip), a zip's entries are never extracted by
their own path (they are read by name; where one goes is decided from the parsed student id only,
so no ``../`` can escape), and sizes are capped per file, in total and in number of entries. A
zip's local times are read in the LMS's zone (``--timezone``), never the TA machine's.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
import stat
import struct
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from attnkit.i18n import _


MAX_FILE_BYTES = 50 * 1024 * 1024  # a notebook with embedded figures is a few MB; 50 MB is plenty
MAX_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
MAX_ENTRIES = 100_000


@dataclass
class Entry:
    """A regular file of the download, by its path inside the download."""

    path: PurePosixPath
    size: int
    mtime: float
    read: Callable[[], bytes]


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


def download_entries(sources: list[Path], unplaced: list[tuple[str, str]], zone: datetime.tzinfo) -> list[tuple[str, Entry]]:
    """(label, entry) of every regular file of every source; what is not one is reported in
    ``unplaced`` as (file, reason)."""
    listed = []
    for source in sources:
        if source.is_symlink() and source.is_dir():
            unplaced.append((str(source), _("符号链接，未跟随")))
            continue
        if source.is_dir():
            entries = folder_entries(source, unplaced)
        elif source.is_file() and zipfile.is_zipfile(source):
            entries = zip_entries(source, unplaced, zone)
        else:
            unplaced.append((str(source), _("不存在，或既不是文件夹也不是 zip")))
            continue
        for entry in entries:
            label = f"{source.name}:{entry.path}" if source.is_file() else str(source / entry.path)
            if any(part in ("__MACOSX", ".DS_Store") for part in entry.path.parts):
                unplaced.append((label, _("操作系统生成的附带文件")))
                continue
            listed.append((label, entry))
    return listed
