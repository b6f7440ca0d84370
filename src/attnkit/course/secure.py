"""The course keeps its secrets (issue 49): ``attnkit course secure`` and the start check.

A course folder is usually a git clone (folders 0755, files 0644): on a shared host every user can
read the model answers, the hidden suites, the gradebook and the classmates' submissions. This
module names what is hidden (``hidden_parts``), makes it readable by the owner only, or the owner
and the course's TA group (``secure``: group ownership and ``g+rX``, every ``o`` bit removed),
and tells ``attnkit serve`` and ``attnkit grade --gradebook`` what another user could still read
(``exposed``), so that they refuse to start (``refuse_if_exposed``).

Group ownership rather than POSIX ACLs: it needs no ``acl`` package or file-system option, survives
copies and backups that drop extended attributes, and is what ``ls -l`` shows; the TA group is one
group, which is all a course needs.

What stays as it was: ``assignments/`` (nbgrader's release folder), the exchange, the kit's code and
its virtualenv (the sandbox's user must keep reading the venv: that is why the course root itself
is not closed but each hidden part is). Nothing is followed: each entry is opened with
``O_PATH | O_NOFOLLOW`` relative to its folder's descriptor (``os.fwalk``), a link is left as it is
(its target is named, for the instructor to secure), and modes and groups are changed through that
opening.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.constants import GraderError
from attnkit.i18n import _
from attnkit.course.settings import KitSettings, course_config

# Under the course root, what no student may read (when present). ``nbgrader_config.py`` is among
# them: a student's nbgrader reads its own configuration (their home's, /etc/jupyter's), never the
# course's, and the course's may hold a database URL with its password and the service's policies.
# ``.git`` holds every model answer's history; ``tests`` and ``dist`` hold copies of the answers
# and of the hidden suite (the Gradescope bundle); ``graded``/``checked`` are the kit's OUT folders.
HIDDEN_NAMES = (
    "autograder",
    "solutions",
    "source",
    "submitted",
    "autograded",
    "feedback",
    "graded",
    "checked",
    "dist",
    "tests",
    ".git",
    ".attnkit-serve",
    "nbgrader_config.py",
)
GRADEBOOK_SUFFIXES = ("", "-wal", "-shm", "-journal")  # not its empty .attnkit.lock: it holds nothing, and a TA must open it
# The folders the kit and nbgrader write into later: made private when missing, so that what is
# written there later (with the writer's umask) is never reachable by another user.
MADE_PRIVATE = ("submitted", "autograded", "feedback", ".attnkit-serve")
INSECURE_FLAG = "--insecure-course"
FEEDBACK_MODE = 0o600  # a page owned by its student (give_to)
SHARED_FEEDBACK_MODE = 0o644  # nbgrader's, where a page cannot be given to its student alone


@dataclass(frozen=True)
class Settings:
    """``c.AttnkitCourse`` in the course's nbgrader_config.py."""

    ta_group: str | None = None
    single_user: bool = False


def course_settings(root: Path) -> Settings:
    """``c.AttnkitCourse`` as ``course.settings`` declares and reads it (the course's file, the environment)."""
    found = KitSettings.load(root).course
    return Settings(found.ta_group or None, found.single_user)


def is_course(folder: Path) -> bool:
    """A folder that is an nbgrader course the kit grades (its config and a source folder)."""
    return (folder / "nbgrader_config.py").is_file() and ((folder / "solutions").is_dir() or (folder / "source").is_dir())


def hidden_parts(root: Path) -> list[Path]:
    """Every hidden part of the course at ``root`` (present or not): the names above, nbgrader's
    own folder settings, and the SQLite gradebook with its companions; never the exchange."""
    config: Any = course_config(root)
    directories: Any = config.get("CourseDirectory", {})
    names = list(HIDDEN_NAMES)
    for key in ("source_directory", "submitted_directory", "autograded_directory", "feedback_directory"):
        value = directories.get(key) if hasattr(directories, "get") else None
        if isinstance(value, str) and value and "/" not in value and value not in names:
            names.append(value)
    parts = [root / name for name in names]
    url = directories.get("db_url", "") if hasattr(directories, "get") else ""
    database = Path(url[len("sqlite:///") :]) if isinstance(url, str) and url.startswith("sqlite:///") else root / "gradebook.db"
    if not database.is_absolute():
        database = root / database
    parts += [database.with_name(database.name + suffix) for suffix in GRADEBOOK_SUFFIXES]
    exchange_root: Any = config.get("Exchange", {})
    exchange = exchange_root.get("root") if hasattr(exchange_root, "get") else None
    if isinstance(exchange, str) and exchange:
        parts = [p for p in parts if not _inside(Path(exchange), p)]
    release = directories.get("release_directory") if hasattr(directories, "get") else None
    return [p for p in dict.fromkeys(parts) if not (release and p == root / str(release))]


def _inside(folder: Path, path: Path) -> bool:
    try:
        Path(os.path.realpath(folder)).relative_to(os.path.realpath(path))
    except ValueError:
        return False
    return True


# -- the change ---------------------------------------------------------------------------------


def private_mode(mode: int, directory: bool, group: bool) -> int:
    """``mode`` with no bit for others; with a TA group also ``g+rX`` (its ``w`` as it was),
    without one no bit for the group either."""
    perm = stat.S_IMODE(mode) & ~0o007
    if not group:
        return perm & ~0o070
    return perm | 0o040 | (0o010 if directory or perm & 0o100 else 0)


@dataclass
class Change:
    path: Path
    before: str
    after: str

    def line(self) -> str:
        return f"{self.path}: {self.before} → {self.after}"


def _describe(info: os.stat_result, with_group: bool) -> str:
    text = f"{stat.S_IMODE(info.st_mode):04o}"
    if with_group:
        try:
            text += " " + grp.getgrgid(info.st_gid).gr_name
        except KeyError:
            text += f" {info.st_gid}"
    return text


def _apply(fd: int, where: Path, gid: int | None, changes: list[Change], links: list[Path] | None) -> None:
    """One opened entry (``O_PATH | O_NOFOLLOW``): a link left alone (named when it is a hidden
    part itself: inside a private folder nobody else reaches it), anything else made private."""
    info = os.fstat(fd)
    if stat.S_ISLNK(info.st_mode):
        if links is not None:
            links.append(where)
        return
    handle = f"/proc/self/fd/{fd}"  # the opened inode itself, never a path looked up again
    directory = stat.S_ISDIR(info.st_mode)
    try:
        if gid is not None and info.st_gid != gid:
            os.chown(handle, -1, gid)
        mode = private_mode(info.st_mode, directory, gid is not None)
        if mode != stat.S_IMODE(info.st_mode):
            os.chmod(handle, mode)
    except OSError as error:  # not the runner's file (and not root): said, the rest goes on
        changes.append(Change(where, _describe(info, gid is not None), _("未能改动：{reason}").format(reason=error.strerror)))
        return
    after = os.fstat(fd)
    if (after.st_mode, after.st_gid) != (info.st_mode, info.st_gid):
        changes.append(Change(where, _describe(info, gid is not None), _describe(after, gid is not None)))


_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _secure_tree(top: Path, gid: int | None, changes: list[Change], links: list[Path]) -> None:
    try:
        fd = os.open(top.name, _PATH_FLAGS, dir_fd=_parent_fd(top))
    except FileNotFoundError:
        return
    try:
        _apply(fd, top, gid, changes, links)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return
    finally:
        os.close(fd)
    for folder, folders, files, folder_fd in os.fwalk(top, follow_symlinks=False):
        for name in sorted(folders + files):
            try:
                entry = os.open(name, _PATH_FLAGS, dir_fd=folder_fd)
            except FileNotFoundError:
                continue
            try:
                _apply(entry, Path(folder) / name, gid, changes, None)
            finally:
                os.close(entry)


_PARENTS: dict[Path, int] = {}


def _parent_fd(path: Path) -> int:
    parent = path.parent
    if parent not in _PARENTS:
        _PARENTS[parent] = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return _PARENTS[parent]


def ta_gid(root: Path, ta_group: str | None) -> int | None:
    name = ta_group or course_settings(root).ta_group
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise GraderError(_("找不到助教组 {group}（c.AttnkitCourse.ta_group 或 --ta-group）").format(group=name)) from None


def secure(root: Path, ta_group: str | None = None) -> tuple[list[Change], list[Path]]:
    """Make every hidden part of the course private (owner, and the TA group if any); the folders
    the kit writes into later are made when missing. What changed, and the links left alone."""
    root = root.absolute()
    gid = ta_gid(root, ta_group)
    changes: list[Change] = []
    links: list[Path] = []
    parts = hidden_parts(root)
    try:
        for name in MADE_PRIVATE:
            folder = root / name
            if not os.path.lexists(folder) and folder in parts:
                folder.mkdir(mode=0o700)
                if gid is not None:
                    os.chown(folder, -1, gid, follow_symlinks=False)
                    os.chmod(folder, 0o750)
                changes.append(Change(folder, _("（不存在）"), _describe(os.lstat(folder), gid is not None)))
        for part in parts:
            _secure_tree(part, gid, changes, links)
    finally:
        for fd in _PARENTS.values():
            os.close(fd)
        _PARENTS.clear()
    return changes, links


def keep_private(root: Path, paths: list[Path]) -> None:
    """Files the kit has just made under a secured course (a new gradebook, an OUT folder): made
    private the way ``secure`` makes them."""
    gid = ta_gid(root, None)
    try:
        for path in paths:
            if os.path.lexists(path):
                _secure_tree(path, gid, [], [])
    finally:
        for fd in _PARENTS.values():
            os.close(fd)
        _PARENTS.clear()


# -- the check ----------------------------------------------------------------------------------


def reachable(folder: Path) -> bool:
    """Whether a user who is neither the owner nor in the group can pass every folder from ``/``
    down to ``folder`` (its real path), and so reach what it holds by name."""
    real = Path(os.path.realpath(folder))
    for step in (real, *real.parents):
        try:
            if not os.stat(step).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def exposed(root: Path) -> list[tuple[Path, str]]:
    """Each hidden part of the course another user can reach and read or enter, with its mode.
    A part under a folder others cannot pass is fine; a link is judged by its target."""
    found = []
    for part in hidden_parts(root.absolute()):
        try:
            info = os.stat(part)
        except OSError:
            continue
        if not reachable(Path(os.path.realpath(part)).parent):
            continue
        bits = 0o005 if stat.S_ISDIR(info.st_mode) else 0o004
        if info.st_mode & bits:
            found.append((part, f"{stat.S_IMODE(info.st_mode):04o}"))
    return found


def refuse_if_exposed(root: Path, command: str, insecure: bool) -> None:
    """Before ``attnkit serve`` or ``attnkit grade --gradebook`` starts in the course at ``root``:
    a GraderError naming each hidden part another user can read, and the command that fixes it;
    with the opt-out (``--insecure-course``, ``c.AttnkitCourse.single_user = True``) it says why
    nothing was checked."""
    settings = course_settings(root)
    if insecure or settings.single_user:
        reason = INSECURE_FLAG if insecure else "c.AttnkitCourse.single_user = True"
        print(
            _("注意：未检查课程 {root} 的隐藏部分能否被其他用户读取（{reason}：只用于只有你一个用户的机器）").format(root=root, reason=reason),
            file=sys.stderr,
        )
        return
    found = exposed(root)
    if not found:
        return
    owner = pwd.getpwuid(os.stat(root).st_uid).pw_name if _has_owner(root) else "?"
    lines = "\n".join(f"  {path} ({mode})" for path, mode in found)
    raise GraderError(
        _(
            "{command} 拒绝启动：课程 {root}（属于 {owner}）的这些隐藏部分，本机任何用户都能读取或进入：\n{lines}\n"
            "修复：attnkit course secure --course {root}\n"
            "（只有你一个用户的机器：加 {flag}，或在 nbgrader_config.py 里设 c.AttnkitCourse.single_user = True）"
        ).format(command=command, root=root, owner=owner, lines=lines, flag=INSECURE_FLAG)
    )


def _has_owner(root: Path) -> bool:
    try:
        pwd.getpwuid(os.stat(root).st_uid)
    except (KeyError, OSError):
        return False
    return True


def command_secure(root: Path, ta_group: str | None) -> int:
    """``attnkit course secure``: print each change (before → after), then what is still exposed."""
    if not is_course(root):
        raise GraderError(_("{root} 不是 nbgrader 课程（没有 nbgrader_config.py 与 solutions/ 或 source/）").format(root=root))
    changes, links = secure(root, ta_group)
    for change in changes:
        print(change.line())
    for link in links:
        print(_("{path}：是链接，未跟随、未改动（请保护它指向的 {target}）").format(path=link, target=os.path.realpath(link)))
    if not changes:
        print(_("没有需要改动的：课程 {root} 的隐藏部分已只有评分者可读").format(root=root))
    left = exposed(root)
    for path, mode in left:
        print(_("仍可被其他用户读取：{path}（{mode}）").format(path=path, mode=mode), file=sys.stderr)
    return 2 if left else 0


# -- a page only its student can open -----------------------------------------------------------


def write_page(path: Path, page: bytes, student: str | None) -> None:
    """``page`` into a new ``path`` (any old one removed first: never written through), given to ``student``."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as handle:
        handle.write(page)
        handle.flush()
        give_to(handle.fileno(), path, student)


_WARNED: list[str] = []


def give_to(fd: int, path: Path, student: str | None) -> str:
    """The page open at ``fd`` (at ``path``) made readable by the unix user ``student`` alone:
    as root, owned by them, 0600; otherwise an ACL for their uid only (``setfacl -m
    u:UID:r,m::r``, the page's group entry empty, no bit for others); where neither works, 0644
    (nbgrader's mode: anyone who computes the name reads it) and a warning, once per process.
    Returns how: "owner", "acl" or "shared"."""
    import subprocess

    try:
        user = pwd.getpwnam(student) if student else None
    except KeyError:
        user = None
    if user is not None and os.geteuid() == 0:
        os.fchown(fd, user.pw_uid, user.pw_gid)
        os.fchmod(fd, FEEDBACK_MODE)
        return "owner"
    setfacl = shutil.which("setfacl")
    if user is not None and setfacl is not None:
        os.fchmod(fd, FEEDBACK_MODE)
        done = subprocess.run([setfacl, "-m", f"u:{user.pw_uid}:r,m::r", str(path)], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            return "acl"
        key, why = "setfacl", done.stderr.strip()
    elif user is None:
        key, why = "user", _("{student} 不是本机的用户").format(student=student)
    else:
        key, why = "root", _("不是 root，且没有 setfacl（apt install acl）")
    os.fchmod(fd, SHARED_FEEDBACK_MODE)
    if key not in _WARNED:  # once per cause: a class of pages would otherwise repeat it
        _WARNED.append(key)
        print(
            _("注意：反馈页面以 0644 放入交换目录（知道文件名的人都能读）：无法只让该学生读取：{why}").format(why=why),
            file=sys.stderr,
            flush=True,
        )
    return "shared"
