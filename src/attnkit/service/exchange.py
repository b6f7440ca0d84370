"""nbgrader's exchange as the service reads and writes it.

In: ``<exchange>/<course>/inbound/<student>+<assignment>+<timestamp>+<random>``, written by the
student's own ``nbgrader submit`` (nbgrader 0.9: the notebooks, then ``timestamp.txt`` and
``submission_secret.txt``, then the folder's mode set to 0777 last: that mode with a timestamp
is a finished folder). ``inbound/`` is writable by every student, so the name proves nothing:
the folder and every file in it must belong to the uid of the unix user the name gives; anything
else is refused, never graded as anyone.

What is graded is what the student owns (``take``): the folder is opened ONCE, relative to a
descriptor of ``inbound/`` and without following a link, and every check and every read goes
through that opening's descriptors: its entries are listed from its descriptor, each file opened
relative to it (``O_NOFOLLOW | O_NONBLOCK``), and its owner, type and size checked with ``fstat``
on the very descriptor its bytes are then read from. The check and the copy are one pass (what is
checked is what was opened, what is copied is what was checked), so a folder renamed away, a
link or a hard link put in its place after any check changes nothing. A hard link is a name of a
file, not a file: a regular file with ``st_nlink > 1`` is the student's only if its owner (on the
opened descriptor) is the student, like any other; a link to the instructor's or a classmate's
file has their uid and refuses the submission.

Bounded: at most MAX_ENTRIES entries listed per folder and MAX_WALKED in all (a folder of 100,000
entries is refused after the first MAX_ENTRIES, without listing the rest), MAX_DEPTH folders deep,
MAX_FILES files and MAX_TOTAL_BYTES copied, no file over MAX_FILE_BYTES read (its size is known
from ``fstat`` first); copies keep holes (a sparse file stays sparse), and a student holds at most
STUDENT_QUOTA_BYTES of copies under the service's ``attempts/`` (``held_by``; ``prune`` removes
old ones). Everything a student wrote is data: names that are not UTF-8 text or hold control
characters are left out, ``timestamp.txt`` and ``submission_secret.txt`` are validated as bytes
(``valid_timestamp``, ``valid_secret``); the public functions return reasons (Chinese, like every
student-facing text), they never raise on what a student wrote.

Out: ``<exchange>/<course>/feedback/<hash>.html``, named and permitted as nbgrader's own
``release_feedback`` does (``nbgrader.utils.notebook_hash`` of the submission's secret and the
notebook's name; the folder 0711, so nobody can list it; the page written to ``<hash>-tmp.html``
and moved over): ``nbgrader fetch_feedback`` / ``nbgrader list`` find it. The name alone is not the
secret (a classmate who reads a student's ``submission_secret.txt``, 0644 in a default home, can
compute it), so the page is the student's alone (``course.secure.give_to``, issue 49): owned by the student's
uid, 0600 (0600, not 0400: ``fetch_feedback`` copies the mode, and its next fetch writes over
that copy); not root, an ACL for that uid only (``setfacl``); neither, 0644 and a warning, once.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import os
import pwd
import re
import shutil
import stat
import tempfile
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnkit.course.secure import write_page
from attnkit.i18n import _
from attnkit.submitted_files import Unsafe, MAX_SUBMITTED_BYTES, display_name, kind_of, read_submitted

FINISHED_MODE = 0o777  # nbgrader submit's last step: chmod of the submission folder
FEEDBACK_FOLDER_MODE = 0o711  # release_feedback's ensure_directory (S_IRWXU | S_IXGRP | S_IXOTH)
MAX_FILES = 100  # files of one submission copied (nbgrader submits the assignment folder)
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # all its files together (one notebook's cap is intake's)
MAX_DEPTH = 4
MAX_FILE_BYTES = MAX_SUBMITTED_BYTES  # one file: intake's cap on reading a notebook
MAX_ENTRIES = 1000  # entries listed in one folder of a submission; more: refused, the rest never listed
MAX_WALKED = 5000  # entries looked at in one submission, all its folders together
# The copies a student holds under the service's attempts/ (their sizes, st_size: a sparse file
# counts whole though its copy keeps the holes): two submissions at MAX_TOTAL_BYTES. A submission
# that would take a student past it is refused (``prune`` frees the copies of recorded attempts).
STUDENT_QUOTA_BYTES = 2 * MAX_TOTAL_BYTES
MAX_SECRET_BYTES = 512  # nbgrader 0.9 writes secrets.token_hex(64): 128 characters
MAX_TIMESTAMP_BYTES = 64
TIMESTAMP_YEARS = (2000, 2199)  # a timestamp.txt outside these years is not nbgrader's
SECRET_FILE = "submission_secret.txt"
TIMESTAMP_FILE = "timestamp.txt"

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class Inbound:
    """One folder in inbound/, as its name claims (nothing here is proved)."""

    name: str
    student: str
    assignment: str
    timestamp: str  # from the name; timestamp.txt is what counts once the folder is finished


def parse_name(name: str) -> Inbound | None:
    """``student+assignment+timestamp[+random]`` (nbgrader's ``assignment_filename``), else None
    (also a name that is not UTF-8 text or holds control characters: never a student's, and
    nothing the service's records could hold)."""
    parts = name.split("+")
    if len(parts) not in (3, 4) or not all(parts[:3]) or name.startswith(".") or name_problem(name):
        return None
    return Inbound(name, parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class Course:
    """Where the course's exchange is (nbgrader_config.py: ``Exchange.root``, ``CourseDirectory.course_id``)."""

    root: Path  # the course folder (nbgrader_config.py, source/solutions, gradebook.db)
    exchange: Path
    course_id: str

    @property
    def inbound(self) -> Path:
        return self.exchange / self.course_id / "inbound"

    @property
    def feedback(self) -> Path:
        return self.exchange / self.course_id / "feedback"


# -- what a student wrote, validated as bytes ---------------------------------------------------


def shown_name(name: str) -> str:
    """A name as a reason can show it: its bytes escaped (\\xe9) when it is not UTF-8 text."""
    if display_name(name) != name:
        return repr(name.encode("utf-8", "surrogateescape"))[2:-1]
    return "".join(ch if unicodedata.category(ch) not in ("Cc", "Cs") else repr(ch)[1:-1] for ch in name)


def name_problem(name: str) -> str:
    """Why an entry's name (as ``os.listdir`` gives it: surrogate-escaped bytes) is not copied
    (empty: it is): its bytes must be strict UTF-8 text with no control character, and one name."""
    try:
        name.encode("utf-8", "surrogateescape").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return _("文件名不是有效的 UTF-8 文本，未复制")
    if display_name(name) != name:
        return _("文件名不是有效的 UTF-8 文本，未复制")
    if name in ("", ".", "..") or "/" in name or "\\" in name or len(name.encode("utf-8", "surrogateescape")) > 255:
        return _("文件名不合法，未复制")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        return _("文件名含有控制字符，未复制")
    return ""


def valid_secret(data: bytes) -> tuple[str | None, str]:
    """``submission_secret.txt``'s bytes: (the secret, "") if they are nbgrader's kind (printable
    ASCII without spaces, at most MAX_SECRET_BYTES; kept exactly, as the student's nbgrader hashes
    it); (None, "") if empty (a submission made without one: nbgrader's legacy hash); else (None, why)."""
    if not data:
        return None, ""
    if len(data) > MAX_SECRET_BYTES:
        return None, _("submission_secret.txt 过长（超过 {limit} 字节），不是 nbgrader 写的，未评分").format(limit=MAX_SECRET_BYTES)
    if not all(0x21 <= byte <= 0x7E for byte in data):
        return None, _("submission_secret.txt 不是可打印的 ASCII 文本，不是 nbgrader 写的，未评分")
    return data.decode("ascii"), ""


_TIMESTAMP = re.compile(rb"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) ([A-Z]{1,5}|[+-]\d{4})")


def valid_timestamp(data: bytes) -> tuple[str | None, str]:
    """``timestamp.txt``'s bytes: (the timestamp, "") if they are nbgrader's format
    ``YYYY-MM-DD HH:MM:SS.ffffff ZONE`` (``Exchange.timestamp_format``'s default; the zone an
    abbreviation such as UTC or CET, or +HHMM), a real date in TIMESTAMP_YEARS (whitespace around
    it ignored, as nbgrader's reader does); else (None, why)."""
    text = data[: MAX_TIMESTAMP_BYTES + 1].strip(b" \t\r\n")
    match = _TIMESTAMP.fullmatch(text) if len(data) <= MAX_TIMESTAMP_BYTES else None
    if match is None:
        return None, _("timestamp.txt 不是 nbgrader 的时间格式（YYYY-MM-DD HH:MM:SS.ffffff 时区），未评分")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    try:
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None, _("timestamp.txt 不是真实的日期和时间，未评分")
    if not TIMESTAMP_YEARS[0] <= year <= TIMESTAMP_YEARS[1]:
        return None, _("timestamp.txt 的年份 {year} 不可能是提交的时间，未评分").format(year=year)
    return text.decode("ascii"), ""


# -- the submission, opened once ------------------------------------------------------------------


@dataclass
class Taken:
    """What ``take`` made of one folder in inbound/.

    ``ok``: it is the student's finished submission and its copy is in ``target`` (the service
    grades it); otherwise ``reason`` says why not (Chinese, for the log, ``--status`` and the
    student). ``pending``: not (yet) a finished folder (not 0777, not a folder, gone): nothing to
    record, look again later. ``timestamp``/``secret``: the validated contents of timestamp.txt and
    submission_secret.txt (None when absent or not ok). ``left_out``: ``"<path>: <why>"`` of each
    entry not copied (a link, a FIFO, a name that is not UTF-8, a file over the cap ...)."""

    ok: bool
    reason: str = ""
    pending: bool = False
    timestamp: str | None = None
    secret: str | None = None
    files_copied: int = 0
    bytes_copied: int = 0  # the files' sizes (st_size); holes are not written
    left_out: list[str] = field(default_factory=list)
    # The kernel's last change (ctime, epoch seconds) of the folder or anything copied from it:
    # no call a student can make sets it back, so the submission was complete no earlier.
    changed: float = 0.0
    # ``pending``: the uid owning what the name is now (``fstat`` of the opened folder, or ``lstat``
    # of a name that is no folder: a file, a link); None when it is gone. Unforgeable, unlike the
    # name: the service caps each owner's unfinished names by it (``serve``, issue 48).
    owner: int | None = None


class _Refused(Exception):
    """The whole submission is refused (internal: ``take`` returns it as a reason)."""


def _owner_reason(where: str, owner: int, student: str) -> str:
    return _("提交中的 {name} 属于另一个系统用户（uid {owner}），而不是 {student}，未评分").format(name=where, owner=owner, student=student)


def _top_owner_reason(owner: int, student: str, uid: int) -> str:
    return _("提交文件夹属于另一个系统用户（uid {owner}），而不是 {student}（uid {uid}），未评分").format(owner=owner, student=student, uid=uid)


class _Pass:
    """One walk over a submission's descriptors: each entry checked on what was opened, and copied
    (into ``out``, the service's own staging folder) from the descriptor it was checked on."""

    def __init__(self, uid: int | None, student: str, out: Path | None, held: int, quota: int, strict: bool = True) -> None:
        self.uid, self.student, self.out, self.held, self.quota = uid, student, out, held, quota
        self.strict = strict  # an entry of another uid that is left out anyway (a link) refuses too
        self.walked = 0
        self.files = 0
        self.total = 0
        self.left_out: list[str] = []
        self.top: dict[str, bytes] = {}  # timestamp.txt and submission_secret.txt, as read
        self.changed = 0.0  # the latest ctime of what was checked (Taken.changed)

    def leave(self, where: str, why: str) -> None:
        self.left_out.append(f"{where}: {why}")

    def owned(self, where: str, info: os.stat_result) -> None:
        self.changed = max(self.changed, info.st_ctime)
        if self.uid is not None and info.st_uid != self.uid:
            raise _Refused(_owner_reason(where, info.st_uid, self.student))

    def listed(self, fd: int, where: str) -> list[os.DirEntry[str]]:
        """The folder's entries, sorted; refused past MAX_ENTRIES (the rest never listed) or MAX_WALKED in all."""
        found: list[os.DirEntry[str]] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                self.walked += 1
                if len(found) >= MAX_ENTRIES or self.walked > MAX_WALKED:
                    raise _Refused(
                        _("提交中的文件夹 {name} 条目过多（一个文件夹最多 {limit} 个，全部最多 {total} 个），未评分").format(
                            name=where or ".", limit=MAX_ENTRIES, total=MAX_WALKED
                        )
                    )
                found.append(entry)
        return sorted(found, key=lambda entry: entry.name)

    def folder(self, fd: int, parts: tuple[str, ...], depth: int) -> None:
        entries = self.listed(fd, "/".join(parts))
        if not parts:  # nbgrader's two small files first: always within the caps, always copied
            entries.sort(key=lambda entry: (entry.name not in (TIMESTAMP_FILE, SECRET_FILE), entry.name))
        for entry in entries:
            name = entry.name
            where = "/".join((*parts, shown_name(name)))
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as error:
                self.leave(where, _("无法读取：{reason}").format(reason=error.strerror))
                continue
            if self.strict or stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                self.owned(where, info)  # whatever it is: a classmate's link or FIFO refuses too
            problem = name_problem(name)
            if problem:
                self.leave(where, problem)
            elif stat.S_ISDIR(info.st_mode):
                self.subfolder(fd, name, (*parts, name), depth, where)
            elif stat.S_ISREG(info.st_mode):
                self.file(fd, name, (*parts, name), where)
            else:
                self.leave(where, _("这是{kind}而不是普通文件，未复制").format(kind=kind_of(info.st_mode)))

    def subfolder(self, fd: int, name: str, parts: tuple[str, ...], depth: int, where: str) -> None:
        if depth >= MAX_DEPTH:
            self.leave(where, _("文件夹层次过深（超过 {limit} 层），未复制").format(limit=MAX_DEPTH))
            return
        if name.endswith(".ipynb"):
            self.leave(where, _("这是名为 .ipynb 的文件夹而不是笔记本，未复制"))
            return
        try:
            inner = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
        except OSError as error:
            self.leave(where, _("无法打开文件夹：{reason}").format(reason=error.strerror))
            return
        try:
            info = os.fstat(inner)
            self.owned(where, info)
            if not stat.S_ISDIR(info.st_mode):
                self.leave(where, _("这是{kind}而不是文件夹，未复制").format(kind=kind_of(info.st_mode)))
                return
            self.folder(inner, parts, depth + 1)
        finally:
            os.close(inner)

    def file(self, fd: int, name: str, parts: tuple[str, ...], where: str) -> None:
        try:
            handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
        except OSError as error:
            self.leave(where, _("无法读取文件：{reason}").format(reason=error.strerror))
            return
        try:
            info = os.fstat(handle)  # what was opened is what is checked, and what is read
            self.owned(where, info)
            if not stat.S_ISREG(info.st_mode):
                self.leave(where, _("这是{kind}而不是普通文件，未复制").format(kind=kind_of(info.st_mode)))
                return
            size = info.st_size
            if len(parts) == 1 and name in (TIMESTAMP_FILE, SECRET_FILE):
                limit = MAX_TIMESTAMP_BYTES if name == TIMESTAMP_FILE else MAX_SECRET_BYTES
                self.top[name] = os.pread(handle, limit + 1, 0)  # validated by the caller
            if size > MAX_FILE_BYTES:
                self.leave(where, _("文件过大（{size} MB，上限 {limit} MB），未读取").format(size=size // 1024 // 1024, limit=MAX_FILE_BYTES // 1024 // 1024))
                return
            if self.files >= MAX_FILES:
                self.leave(where, _("文件过多（上限 {limit} 个），未复制").format(limit=MAX_FILES))
                return
            if self.total + size > MAX_TOTAL_BYTES:
                self.leave(where, _("文件合计超过 {limit} MB，未复制").format(limit=MAX_TOTAL_BYTES // 1024 // 1024))
                return
            if self.held + self.total + size > self.quota:
                raise _Refused(
                    _("{student} 在评分服务中保存的提交副本将超过上限（{limit} MB），这次提交未评分；请删去不需要的大文件后再提交").format(
                        student=self.student, limit=self.quota // 1024 // 1024
                    )
                )
            if self.out is not None:
                destination = self.out.joinpath(*parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                copied = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                try:
                    size = _copy_sparse(handle, copied, size)
                finally:
                    os.close(copied)
            self.files += 1
            self.total += size
        finally:
            os.close(handle)


def _copy_sparse(source: int, target: int, size: int) -> int:
    """Copy at most ``size`` bytes of ``source`` into ``target`` keeping holes (found with
    SEEK_DATA/SEEK_HOLE, and all-zero chunks not written): a sparse file stays sparse. The bytes
    copied (fewer if the file shrank meanwhile; never more than ``size`` if it grew)."""
    position = 0
    while position < size:
        try:
            data = os.lseek(source, position, os.SEEK_DATA)
            hole = min(os.lseek(source, data, os.SEEK_HOLE), size)
        except OSError as error:
            if error.errno == errno.ENXIO:  # nothing but a hole from here to the end
                position = size
                break
            data, hole = position, size  # no SEEK_DATA here: every chunk is read
        if data >= size:
            position = size
            break
        position = data
        while position < hole:
            chunk = os.pread(source, min(1 << 20, hole - position), position)
            if not chunk:
                hole = size = position  # shrank: what is there is copied
                break
            if chunk.count(0) != len(chunk):
                os.pwrite(target, chunk, position)
            position += len(chunk)
    os.ftruncate(target, position)
    return position


def _staging_beside(target: Path) -> Path:
    """A new private folder on the target's file system (the nearest folder of it that exists),
    renamed to ``target`` once the copy is whole; nothing is left anywhere for a refusal."""
    existing = target.parent
    while not existing.is_dir():
        existing = existing.parent
    return Path(tempfile.mkdtemp(dir=existing, prefix=".attnkit-staging-"))


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a copy's write failed for want of room: raised, never a refusal


def _one_pass(fd: int, uid: int | None, student: str, target: Path | None, held: int, quota: int, finished: bool, strict: bool = True) -> Taken:
    """Check (and copy into ``target``) the submission open at ``fd``: one pass over its descriptors."""
    staging = _staging_beside(target) if target is not None else None
    walk = _Pass(uid, student, staging, held, quota, strict)
    walk.changed = os.fstat(fd).st_ctime
    timestamp: str | None = None
    secret: str | None = None
    try:
        try:
            walk.folder(fd, (), 0)
        except OSError as error:  # the listing of a folder, or the service's own disk
            if error.errno in DISK_FULL:
                raise  # the host's fault, not the submission's: the service pauses and takes it again
            raise _Refused(_("无法复制提交：{reason}").format(reason=error.strerror)) from None
        if TIMESTAMP_FILE in walk.top:
            timestamp, problem = valid_timestamp(walk.top[TIMESTAMP_FILE])
            if problem:
                raise _Refused(problem)
        elif finished:
            raise _Refused(_("已完成的提交文件夹里没有 timestamp.txt 普通文件，不是 nbgrader 的提交，未评分"))
        secret, problem = valid_secret(walk.top.get(SECRET_FILE, b""))
        if problem:
            raise _Refused(problem)
        if staging is not None and target is not None:
            staging.chmod(0o755)  # as the copy was before (the service's folder above it is 0700)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, target)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise _Refused(_("无法复制提交：{reason}").format(reason=error.strerror)) from None
                shutil.rmtree(staging, ignore_errors=True)  # another replica's copy of it is there
            staging = None
    except _Refused as refused:
        return Taken(False, str(refused), left_out=walk.left_out)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return Taken(True, "", False, timestamp, secret, walk.files, walk.total, walk.left_out, walk.changed)


def _identity_problem(student: str, service_uid: int) -> tuple[int | None, str]:
    uid = student_uid(student)
    if uid is None:
        return None, _("没有名为 {student} 的系统用户：无法从文件的所有者确认提交者，未评分").format(student=student)
    if uid == service_uid or uid == 0:
        return None, _("{student} 与评分服务是同一个系统用户：无法从文件的所有者区分学生，未评分（请用 JupyterHub 认证的提交渠道）").format(student=student)
    return uid, ""


def _open_below(inbound: Path | int, name: str) -> int:
    """``name`` in ``inbound`` (a descriptor, or the trusted path of the folder) opened as a
    folder without following a link; OSError when it is none (a link, a file, gone)."""
    if "/" in name or name in ("", ".", ".."):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    if isinstance(inbound, int):
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=inbound)
    parent = os.open(inbound, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the course's exchange: trusted
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)


def _owner_of(inbound: Path | int, name: str) -> int | None:
    """The uid owning ``name`` in ``inbound`` (``lstat``: a link's own owner), None when it is gone."""
    try:
        if isinstance(inbound, int):
            return os.lstat(name, dir_fd=inbound).st_uid
        return os.lstat(Path(inbound) / name).st_uid
    except (OSError, ValueError):
        return None


def take(
    inbound: Path | int,
    name: str,
    student: str,
    service_uid: int,
    target: Path | None,
    held: int | Callable[[], int] = 0,
    quota: int = STUDENT_QUOTA_BYTES,
    after_open: Callable[[], object] | None = None,
) -> Taken:
    """The finished-check, the ownership check and the copy of ``inbound/<name>`` as ``student``'s
    submission, in one pass over the descriptors of ONE opening of the folder (the module's
    docstring): pending unless it is a folder of mode 0777 (nbgrader's last step); refused unless
    ``student`` is a unix user of their own (not ``service_uid``, not root) who owns the folder
    (``fstat`` of the opened folder) and every entry in it (``fstat`` of each opened file), unless
    timestamp.txt and submission_secret.txt are valid (``valid_timestamp``, ``valid_secret``), or
    if the copy would take the student's copies past ``quota`` (``held``: ``held_by``, or a function
    giving it, called only for a finished folder of the student's: an unfinished one costs no walk). Entries
    that cannot be graded are left out, with why. ``target``: where the copy goes (None: check
    only); it appears whole (renamed into place) or not at all. ``after_open``: called once the
    folder is open and its owner checked (tests swap the folder there). Never raises on what a
    student wrote; raises OSError when the service's own disk is full (``DISK_FULL``)."""
    problem = name_problem(name)
    if problem:
        return Taken(False, problem)
    try:
        fd = _open_below(inbound, name)
    except OSError as error:
        return Taken(False, _("无法打开提交文件夹：{reason}").format(reason=error.strerror), pending=True, owner=_owner_of(inbound, name))
    try:
        top = os.fstat(fd)
        if stat.S_IMODE(top.st_mode) != FINISHED_MODE:
            return Taken(False, pending=True, owner=top.st_uid)
        uid, problem = _identity_problem(student, service_uid)
        if uid is None:
            return Taken(False, problem)
        if top.st_uid != uid:
            return Taken(False, _top_owner_reason(top.st_uid, student, uid))
        if after_open is not None:
            after_open()
        return _one_pass(fd, uid, student, target, held() if callable(held) else held, quota, finished=True)
    except OSError as error:
        if error.errno in DISK_FULL:
            raise  # the service's disk is full: never the student's refusal (the service pauses)
        return Taken(False, _("无法读取提交文件夹：{reason}").format(reason=error.strerror))
    finally:
        os.close(fd)


def held_by(attempts: Path, student: str) -> int:
    """The bytes (st_size) of ``student``'s copies under the service's ``attempts/`` (laid out
    ``attempts/<inbound>/<student>/<assignment>/...``), links not followed: what ``take``'s quota counts."""
    total = 0
    try:
        inbound_names = os.listdir(attempts)
    except OSError:
        return 0
    for inbound_name in inbound_names:
        own = attempts / inbound_name / student
        try:
            if not stat.S_ISDIR(os.lstat(own).st_mode):
                continue
        except OSError:
            continue
        for folder, _folders, files in os.walk(own):  # never follows links (followlinks=False)
            for file_name in files:
                try:
                    total += os.lstat(os.path.join(folder, file_name)).st_size
                except OSError:
                    continue
    return total


def prune(attempts: Path, recorded: Iterable[tuple[str, str, str, float]], keep: int = 3) -> list[str]:
    """Free the copies of old attempts: ``recorded`` lists the service's attempts whose copy is no
    longer needed, as ``(inbound name, student, assignment, noticed)`` (delivered, recorded in the
    gradebook, and no page held back in ``feedback.html`` for a later release: the caller's
    knowledge). Per student and assignment, the ``keep`` newest of them keep their copies; the
    others' ``attempts/<inbound name>`` folders are removed (``shutil.rmtree``, which never follows
    a link). The names removed, oldest first."""
    by_key: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for inbound_name, student, assignment, noticed in recorded:
        by_key.setdefault((student, assignment), []).append((noticed, inbound_name))
    removed: list[tuple[float, str]] = []
    for attempts_of in by_key.values():
        attempts_of.sort(reverse=True)
        for noticed, inbound_name in attempts_of[max(keep, 0) :]:
            if name_problem(inbound_name) or inbound_name.startswith("."):
                continue
            folder = attempts / inbound_name
            try:
                if not stat.S_ISDIR(os.lstat(folder).st_mode):
                    continue
            except OSError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append((noticed, inbound_name))
    return [inbound_name for _noticed, inbound_name in sorted(removed)]


# -- the old entry points, on the same descriptors ------------------------------------------------


def finished(folder: Path) -> str | None:
    """The folder's validated timestamp.txt if nbgrader submit has finished writing it (mode 0777
    set last), else None (still being written, not a folder, a link, no valid timestamp)."""
    try:
        fd = _open_below(folder.parent, folder.name)
    except OSError:
        return None
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FINISHED_MODE:
            return None
        handle = os.open(TIMESTAMP_FILE, _FILE_FLAGS, dir_fd=fd)
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):
                return None
            timestamp, _problem = valid_timestamp(os.pread(handle, MAX_TIMESTAMP_BYTES + 1, 0))
        finally:
            os.close(handle)
        return timestamp
    except OSError:
        return None
    finally:
        os.close(fd)


def student_uid(student: str) -> int | None:
    try:
        return pwd.getpwnam(student).pw_uid
    except (KeyError, ValueError, UnicodeEncodeError):
        return None


def owner_problem(folder: Path, student: str, service_uid: int) -> str:
    """Why ``folder`` cannot be ``student``'s submission (empty: it is), checked as ``take`` checks
    (one opening, no copy, finished or not): the student must be a unix user with a uid of their
    own, and the folder and everything in it theirs. Students who all share one uid (or the
    service's) cannot be told apart by files: refused with that reason."""
    uid, problem = _identity_problem(student, service_uid)
    if uid is None:
        return problem
    try:
        fd = _open_below(folder.parent, folder.name)
    except OSError as error:
        return _("无法读取提交文件夹：{reason}").format(reason=error.strerror)
    try:
        top = os.fstat(fd)
        if top.st_uid != uid:
            return _top_owner_reason(top.st_uid, student, uid)
        return _one_pass(fd, uid, student, None, 0, STUDENT_QUOTA_BYTES, finished=False).reason
    except OSError as error:
        return _("无法读取提交文件夹：{reason}").format(reason=error.strerror)
    finally:
        os.close(fd)


def stage(folder: Path, target: Path) -> list[str]:
    """Copy the submission's regular files into ``target`` (the service's own), through one
    opening of ``folder`` that follows no link: only files and folders owned by the folder's owner
    (another's refuses the copy; links, FIFOs ... are left out), capped; what was left out and
    why. The service uses ``take``."""
    try:
        fd = _open_below(folder.parent, folder.name)
    except OSError as error:
        return [f"{shown_name(folder.name)}: " + _("无法打开提交文件夹：{reason}").format(reason=error.strerror)]
    try:
        owner = os.fstat(fd).st_uid
        taken = _one_pass(fd, owner, str(owner), target, 0, STUDENT_QUOTA_BYTES, finished=False, strict=False)
    except OSError as error:
        return [f"{shown_name(folder.name)}: {error.strerror}"]
    finally:
        os.close(fd)
    return taken.left_out if taken.ok else [*taken.left_out, f"{shown_name(folder.name)}: {taken.reason}"]


def feedback_name(staged: Path, course_id: str, student: str, assignment: str, notebook_id: str, timestamp: str) -> str:
    """The file name under feedback/ where nbgrader looks for this submission's page of
    ``notebook_id``: nbgrader's own hash (``nbgrader.utils.notebook_hash``, 0.9) of the
    submission's secret, read as validated bytes from the copy; or, for a submission made without
    one, its legacy hash of the notebook's bytes and the unique key (no notebook there, or a
    folder of that name: the hash of the key alone). Never raises on what the student sent."""
    try:
        data = read_submitted(staged, staged / SECRET_FILE, limit=MAX_SECRET_BYTES)
    except Unsafe:
        data = b""
    secret, _problem = valid_secret(data)
    digest = hashlib.md5(usedforsecurity=False)
    if secret:
        digest.update(secret.encode("ascii") + notebook_id.encode("utf-8", "surrogateescape"))
        return f"{digest.hexdigest()}.html"
    key = "+".join([course_id, assignment, notebook_id, student, timestamp])  # nbgrader's make_unique_key
    try:
        notebook = read_submitted(staged, staged / f"{notebook_id}.ipynb")
    except Unsafe:
        notebook = b""
    digest.update(notebook + key.encode("utf-8", "surrogateescape"))
    return f"{digest.hexdigest()}.html"

def place_feedback(course: Course, name: str, page: bytes, student: str | None = None) -> Path:
    """Write the page as release_feedback does (the folder made 0711 if new, the page written to
    ``<hash>-tmp.html`` and moved over ``<hash>.html`` at once), readable by ``student`` alone
    (``give_to``)."""
    folder = course.feedback
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(FEEDBACK_FOLDER_MODE)
    final = folder / name
    temporary = folder / f"{final.stem}-tmp.html"
    write_page(temporary, page, student)
    os.replace(temporary, final)
    return final


def place_marks(course: Course, page_name: str, marks: bytes, student: str | None = None) -> Path:
    """The page's marks for the student's JupyterLab (``report.cell_marks``) beside it, as
    ``<hash>.json``, written and given to ``student`` alone as the page is."""
    final = course.feedback / f"{Path(page_name).stem}.json"
    temporary = course.feedback / f"{final.stem}-tmp.json"
    write_page(temporary, marks, student)
    os.replace(temporary, final)
    return final


POLICIES_FILE = "attnkit-policies.json"  # the course's policies, public: what a student may know before a first submit


def place_policies(course: Course, policies: bytes) -> Path:
    """The attempts each assignment allows per window, readable by every student (0644: nothing
    in it is anyone's), so the lab extension can say how many feedbacks are left before a first submit."""
    folder = course.feedback
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(FEEDBACK_FOLDER_MODE)
    temporary = folder / f".{POLICIES_FILE}-tmp"
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as handle:
        handle.write(policies)
    os.chmod(temporary, 0o644)
    os.replace(temporary, folder / POLICIES_FILE)
    return folder / POLICIES_FILE


def inbound_key(name: str) -> str:
    """``name`` as the queue keeps it: itself when it is a name an entry may have (``name_problem``:
    strict UTF-8, no control character, no slash or backslash), else ``#`` and its bytes in hex (a
    name read from the file system carries undecodable bytes as surrogates, which no database
    takes). Two different names never share a key: a name kept as itself never starts with ``#``."""
    if not name_problem(name) and not name.startswith("#"):
        return name
    return "#" + name.encode("utf-8", "surrogateescape").hex()
