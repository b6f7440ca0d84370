"""nbgrader's exchange as the service reads and writes it.

In: ``<exchange>/<course>/inbound/<student>+<assignment>+<timestamp>+<random>``, written by the
student's own ``nbgrader submit`` (nbgrader 0.9: the notebooks, then ``timestamp.txt`` and
``submission_secret.txt``, then the folder's mode set to 0777 last: that mode with a timestamp
is a finished folder). ``inbound/`` is writable by every student, so the name proves nothing:
the folder and every file in it must belong to the uid of the unix user the name gives
(``owner_problem``); anything else is refused, never graded as anyone.

Out: ``<exchange>/<course>/feedback/<hash>.html``, named and permitted as nbgrader's own
``release_feedback`` does (``nbgrader.utils.notebook_hash`` of the submission's secret and the
notebook's name; the folder 0711, so nobody can list it; the page 0644, written to
``<hash>-tmp.html`` and moved over): only the student, who keeps the secret in their nbgrader
cache, can compute the name, and ``nbgrader fetch_feedback`` / ``nbgrader list`` find it.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from attnkit.i18n import _
from attnkit.notebook import Unsafe, read_submitted

FINISHED_MODE = 0o777  # nbgrader submit's last step: chmod of the submission folder
FEEDBACK_FOLDER_MODE = 0o711  # release_feedback's ensure_directory (S_IRWXU | S_IXGRP | S_IXOTH)
FEEDBACK_MODE = 0o644
MAX_FILES = 100  # files of one submission copied (nbgrader submits the assignment folder)
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # all its files together (one notebook's cap is intake's)
MAX_DEPTH = 4


@dataclass(frozen=True)
class Inbound:
    """One folder in inbound/, as its name claims (nothing here is proved)."""

    name: str
    student: str
    assignment: str
    timestamp: str  # from the name; timestamp.txt is what counts once the folder is finished


def parse_name(name: str) -> Inbound | None:
    """``student+assignment+timestamp[+random]`` (nbgrader's ``assignment_filename``), else None."""
    parts = name.split("+")
    if len(parts) not in (3, 4) or not all(parts[:3]) or name.startswith("."):
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


def finished(folder: Path) -> str | None:
    """The folder's timestamp.txt if nbgrader submit has finished writing it (mode 0777 set last),
    else None (still being written, or not a folder)."""
    try:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) != FINISHED_MODE:
            return None
        text = read_submitted(folder, folder / "timestamp.txt", limit=1024).decode("utf-8", "replace").strip()
    except (OSError, Unsafe):
        return None
    return text or None


def student_uid(student: str) -> int | None:
    try:
        return pwd.getpwnam(student).pw_uid
    except KeyError:
        return None


def owner_problem(folder: Path, student: str, service_uid: int) -> str:
    """Why ``folder`` cannot be ``student``'s submission (empty: it is): the student must be a unix
    user with a uid of their own, and the folder and everything in it theirs. Students who all
    share one uid (or the service's) cannot be told apart by files: refused with that reason."""
    uid = student_uid(student)
    if uid is None:
        return _("没有名为 {student} 的系统用户：无法从文件的所有者确认提交者，未评分").format(student=student)
    if uid == service_uid or uid == 0:
        return _("{student} 与评分服务是同一个系统用户：无法从文件的所有者区分学生，未评分（请用 JupyterHub 认证的提交渠道）").format(student=student)
    try:
        top = os.lstat(folder)
    except OSError as error:
        return _("无法读取提交文件夹：{reason}").format(reason=error.strerror)
    if top.st_uid != uid:
        return _("提交文件夹属于另一个系统用户（uid {owner}），而不是 {student}（uid {uid}），未评分").format(owner=top.st_uid, student=student, uid=uid)
    for path, info in walk(folder):
        if info.st_uid != uid:
            return _("提交中的 {name} 属于另一个系统用户（uid {owner}），而不是 {student}，未评分").format(
                name=path.relative_to(folder), owner=info.st_uid, student=student
            )
    return ""


def walk(folder: Path, depth: int = 0) -> list[tuple[Path, os.stat_result]]:
    """Every entry below ``folder`` with its lstat, links not followed, at most MAX_DEPTH deep."""
    found: list[tuple[Path, os.stat_result]] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return found
    for name in names:
        path = folder / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        found.append((path, info))
        if stat.S_ISDIR(info.st_mode) and depth < MAX_DEPTH:
            found += walk(path, depth + 1)
    return found


def stage(folder: Path, target: Path) -> list[str]:
    """Copy the submission's regular files into ``target`` (the service's own, 0700), read as
    intake reads (no link followed, capped); what was left out and why (for the log)."""
    left_out: list[str] = []
    target.mkdir(parents=True, exist_ok=True)
    total = 0
    copied = 0
    for path, info in walk(folder):
        relative = path.relative_to(folder)
        if stat.S_ISDIR(info.st_mode):
            continue
        if not stat.S_ISREG(info.st_mode) or copied >= MAX_FILES:
            left_out.append(f"{relative}: {'not a regular file' if not stat.S_ISREG(info.st_mode) else 'too many files'}")
            continue
        try:
            data = read_submitted(folder, path)
        except Unsafe as error:
            left_out.append(f"{relative}: {error}")
            continue
        total += len(data)
        if total > MAX_TOTAL_BYTES:
            left_out.append(f"{relative}: over {MAX_TOTAL_BYTES // 1024 // 1024} MB in all")
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        # No fsync: the copy outlives a crash or kill of the service (the page cache keeps it);
        # one lost with a power cut is taken again from inbound/ when its row is graded.
        (target / relative).write_bytes(data)
        copied += 1
    return left_out


def feedback_name(staged: Path, course_id: str, student: str, assignment: str, notebook_id: str, timestamp: str) -> str:
    """The file name under feedback/ where nbgrader looks for this submission's page of
    ``notebook_id``: nbgrader's own hash of the submission's secret (0.9), or, for a submission
    made without one, its legacy hash of the notebook's bytes and the unique key."""
    from nbgrader.utils import make_unique_key, notebook_hash

    secret_path = staged / "submission_secret.txt"
    if secret_path.is_file():
        secret = secret_path.read_text()
        if secret:
            return f"{notebook_hash(secret=secret, notebook_id=notebook_id)}.html"
    key = make_unique_key(course_id, assignment, notebook_id, student, timestamp)
    return f"{notebook_hash(str(staged / f'{notebook_id}.ipynb'), key)}.html"


def place_feedback(course: Course, name: str, page: bytes) -> Path:
    """Write the page as release_feedback does: the folder made 0711 if new, the page written to
    ``<hash>-tmp.html`` (0644) and moved over ``<hash>.html`` at once."""
    folder = course.feedback
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(FEEDBACK_FOLDER_MODE)
    final = folder / name
    temporary = folder / f"{final.stem}-tmp.html"
    with open(temporary, "wb") as handle:
        handle.write(page)
        os.fchmod(handle.fileno(), FEEDBACK_MODE)
    os.replace(temporary, final)
    return final


def inbound_key(name: str) -> str:
    """``name`` as the queue keeps it: itself when it is a name nbgrader's submit could make
    (UTF-8, no control character, no backslash), else ``#`` and its bytes in hex (a name read
    from the file system carries undecodable bytes as surrogates, which no database takes). Two
    different names never share a key: a name kept as itself never starts with ``#`` here."""
    raw = name.encode("utf-8", "surrogateescape")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and not text.startswith("#") and "\\" not in text and all(" " <= char != "\x7f" for char in text):
        return text
    return "#" + raw.hex()


def changed(folder: Path) -> float:
    """When the kernel last recorded a change of the folder itself (its ctime: set by the kernel at
    each entry made or removed, each mode change and each rename, and by no call a user can make
    to set it), as epoch seconds; now if it cannot be read."""
    import time

    try:
        return os.lstat(folder).st_ctime
    except OSError:
        return time.time()
