"""Intake: what in the submissions folder is a submission to grade, and why the rest is not.

Nothing in the submissions folder is trusted (see notebook.py): intake walks it without following
links, reads only regular files below the cap, and fingerprints each notebook's exact bytes with
the grader's own files (``grader_digest``), so that a re-run grades only what changed. A folder
that cannot be graded is a ``Skipped`` (for the summary and report) or a job whose ``problems``
say why (the student then gets a 0 that says so). The fan-out is engine.py's.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import attnkit
from attnkit import i18n
from attnkit.assignment.folder import Assignment
from attnkit.constants import GraderError
from attnkit.i18n import _
from attnkit.submitted_files import Unsafe, digest_of, display_name, fingerprint, kind_of, read_opened
from attnkit.intake.lms_record import lms_lateness, lms_record
from attnkit.records import Job

MAX_ID_LENGTH = 200
# Entries listed in one student's folder or assignment folder (a submissions folder of a whole class
# is the TA's, listed whole): a folder of 100,000 is not listed on, its student gets a 0 that says why.
MAX_LISTED = 10_000


class _TooMany(Exception):
    """A student's folder lists more than MAX_LISTED entries (internal)."""


@dataclass
class Skipped:
    """Something in the submissions folder that was not graded, and why (for the summary and report)."""

    where: str  # the path below the submissions folder, printable
    reason: str  # in the run's language

    def to_dict(self) -> dict[str, str]:
        return {"where": self.where, "reason": self.reason}


@dataclass
class Intake:
    jobs: list[Job] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # (suite folder, language) -> grader_digest, for this intake only: every student's job needs
    # it, and a suite edited between two intakes in one process (a TA's second run from a
    # notebook, a test) must change the jobs' fingerprints, so it is never kept across intakes.
    digests: dict[tuple[Path, str], str] = field(default_factory=dict)

    def digest_of(self, assignment: Assignment) -> str:
        key = (assignment.folder, i18n.language())
        if key not in self.digests:
            self.digests[key] = grader_digest(assignment, key[1])
        return self.digests[key]


def grader_digest(assignment: Assignment, language: str = i18n.DEFAULT_LANGUAGE) -> str:
    """What every result of an assignment depends on besides the submission: its hidden suite,
    its source notebook (the points) and the engine, with their message catalogues, and the
    language the messages are written in (a class graded in Chinese and then in English is
    regraded: its stored messages are in the other language)."""
    engine = [p for p in Path(attnkit.__file__).parent.rglob("*") if p.is_file() and p.suffix in (".py", ".j2", ".po") and "__pycache__" not in p.parts]
    salt = attnkit.__version__ if language == i18n.DEFAULT_LANGUAGE else f"{attnkit.__version__}/{language}"
    return fingerprint(assignment.digest_files() + sorted(engine), salt=salt)


def id_problem(name: str) -> str:
    """Why a folder name cannot be a student id (empty: it can). Ids are written into CSV cells,
    JSON, HTML and the gradebook, which all need text: bytes that are not UTF-8 and control
    characters are refused; everything else (markup, `=`, `javascript:`) is data, escaped where shown."""
    if display_name(name) != name:
        return _("文件夹名不是有效的 UTF-8 文本，无法作为学号，未评分")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        return _("文件夹名含有控制字符，无法作为学号，未评分")
    if len(name) > MAX_ID_LENGTH:
        return _("文件夹名过长（超过 {limit} 个字符），无法作为学号，未评分").format(limit=MAX_ID_LENGTH)
    return ""


def _entries(folder_fd: int, cap: int | None = None) -> list[tuple[str, int]]:
    """(name, lstat mode) of a folder's entries, sorted; nothing is followed. ``cap``: at most
    that many listed, else :class:`_TooMany` (the rest never listed)."""
    found: list[tuple[str, int]] = []
    with os.scandir(folder_fd) as entries:
        for entry in entries:
            if cap is not None and len(found) >= cap:
                raise _TooMany
            try:
                found.append((entry.name, entry.stat(follow_symlinks=False).st_mode))
            except OSError:
                continue
    return sorted(found)


def _open_folder(name: str, parent_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)


def find_jobs(submitted: Path, suites: dict[str, Assignment], only: str | None = None, digests: dict[tuple[Path, str], str] | None = None) -> Intake:
    """``submitted/<student_id>/<assignment>/<notebook>.ipynb``: a job per student and assignment
    graded in this run; everything else is listed in ``skipped`` with its reason.

    The run grades ``only`` when given, else every assignment with a hidden suite that at least
    one student has a folder for (a class of one assignment is not told about the others).
    ``digests``: the grader digests to use and fill (``Intake.digests``), for a caller that keeps
    them across intakes knowingly (``attnkit serve``, whose suites do not change while it runs)."""
    if not submitted.is_dir():
        raise GraderError(_("找不到提交文件夹：{folder}").format(folder=submitted))
    if only is not None and only not in suites:
        raise GraderError(_("作业 {assignment} 没有隐藏测试（只有 {known}）").format(assignment=only, known=i18n.join(suites)))
    intake = Intake() if digests is None else Intake(digests=digests)
    root_fd = os.open(submitted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the TA's folder
    try:
        students: list[tuple[str, int]] = []
        for name, mode in _entries(root_fd):
            if name.startswith("."):
                continue
            shown = display_name(name)
            if stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
                problem = id_problem(name)
                if problem:
                    # Shown as its bytes (\xe9…): what the TA needs to find the folder.
                    intake.skipped.append(Skipped(repr(name.encode("utf-8", "surrogateescape"))[2:-1], problem))
                    continue
                students.append((name, mode))
            elif name.endswith(".ipynb"):
                intake.skipped.append(Skipped(shown, _("笔记本直接放在了提交文件夹下，而不在 <学号>/<作业>/ 文件夹中，未评分")))
            else:
                intake.skipped.append(Skipped(shown, _("不是学生文件夹（{kind}），未评分").format(kind=_kind(mode))))
        chosen = [suites[only]] if only is not None else _present(root_fd, students, suites)
        for name, mode in students:
            _student(submitted, root_fd, name, mode, chosen, suites, intake)
    finally:
        os.close(root_fd)
    return intake


def _present(root_fd: int, students: list[tuple[str, int]], suites: dict[str, Assignment]) -> list[Assignment]:
    """The assignments some student has a folder (of any kind) for; all of them if none has."""
    seen: set[str] = set()
    for name, mode in students:
        if stat.S_ISDIR(mode):
            try:
                folder_fd = _open_folder(name, root_fd)
            except OSError:
                continue
            try:
                seen.update(entry for entry, _ in _entries(folder_fd, MAX_LISTED) if entry in suites)
            except _TooMany:
                continue
            finally:
                os.close(folder_fd)
    return [suite for suite in suites.values() if suite.name in seen] or list(suites.values())


def _kind(mode: int) -> str:
    return _("普通文件") if stat.S_ISREG(mode) else kind_of(mode)


def _student(submitted: Path, root_fd: int, student_id: str, mode: int, chosen: list[Assignment], suites: dict[str, Assignment], intake: Intake) -> None:
    names = i18n.join(suite.name for suite in chosen)

    def job(
        assignment: Assignment,
        problems: list[str],
        notebooks: tuple[str, ...] = (),
        digests: tuple[str, ...] = (),
        notes: list[str] | None = None,
        graded_as: str = "",
    ) -> Job:
        salt = hashlib.sha256(intake.digest_of(assignment).encode())
        for path, sha in zip(notebooks, digests, strict=True):
            salt.update(Path(path).name.encode("utf-8", "surrogateescape") + b"\0" + sha.encode())
        for problem in problems:
            salt.update(problem.encode() + b"\0")
        salt.update(graded_as.encode())
        lms_late = lms_lateness(lms_record(submitted, student_id, assignment.name)) if not stat.S_ISLNK(mode) else None
        return Job(
            student_id,
            assignment.name,
            list(notebooks),
            salt.hexdigest(),
            str(submitted),
            list(digests),
            list(problems),
            list(notes or []),
            graded_as,
            lms_late,
        )

    if stat.S_ISLNK(mode):
        for assignment in chosen:
            intake.jobs.append(job(assignment, [_("学生文件夹是符号链接，只评分真实的文件夹，未读取其中任何文件")]))
        return
    try:
        student_fd = _open_folder(student_id, root_fd)
    except OSError as error:
        for assignment in chosen:
            intake.jobs.append(job(assignment, [_("无法打开学生文件夹：{reason}").format(reason=error.strerror)]))
        return
    try:
        try:
            entries = _entries(student_fd, MAX_LISTED)
        except _TooMany:
            for assignment in chosen:
                intake.jobs.append(job(assignment, [_too_many(student_id)]))
            return
        modes = dict(entries)
        strays = [n for n, m in entries if n.endswith(".ipynb") and not n.startswith(".")]
        for name, entry_mode in entries:
            shown = display_name(name)
            if name.startswith(".") or any(name == suite.name for suite in chosen):
                continue
            if name.endswith(".ipynb"):
                reason = _("笔记本直接放在了学生文件夹里，而不在 {assignment}/ 文件夹中，未评分").format(assignment=names)
                intake.skipped.append(Skipped(f"{student_id}/{shown}", reason))
            elif (stat.S_ISDIR(entry_mode) or stat.S_ISLNK(entry_mode)) and name not in suites:
                # (An assignment with a suite that --assignment left out is the TA's choice, not news.)
                intake.skipped.append(
                    Skipped(
                        f"{student_id}/{shown}",
                        _("没有作业“{name}”的隐藏测试（本次只评 {assignment}），未评分，也未写入成绩册").format(name=shown, assignment=names),
                    )
                )
        for assignment in chosen:
            _assignment(submitted, student_fd, student_id, assignment, modes.get(assignment.name), strays, len(chosen) == 1, job, intake)
    finally:
        os.close(student_fd)


def _assignment(
    submitted: Path,
    student_fd: int,
    student_id: str,
    assignment: Assignment,
    mode: int | None,
    strays: list[str],
    only_one: bool,
    job: Callable[..., Job],
    intake: Intake,
) -> None:
    """One student's folder of one assignment: a job, or the reason there is none."""
    name, expected = assignment.name, assignment.notebook
    if mode is None:
        # A notebook left beside the folders belongs here if it has this assignment's name (or
        # this is the only assignment graded): the student then gets a 0 that says why.
        mine = [n for n in strays if n == expected or only_one]
        if mine:
            listed = i18n.join(display_name(n) for n in mine)
            problem = _("笔记本 {names} 直接放在了学生文件夹里，而不在 {assignment}/ 文件夹中，未评分").format(names=listed, assignment=name)
            intake.jobs.append(job(assignment, [problem]))
        else:
            intake.skipped.append(Skipped(student_id, _("学生文件夹里没有 {assignment}/ 文件夹，未评分").format(assignment=name)))
        return
    if stat.S_ISLNK(mode):
        intake.jobs.append(job(assignment, [_("作业文件夹 {assignment} 是符号链接，只评分真实的文件夹，未读取其中任何文件").format(assignment=name)]))
        return
    if not stat.S_ISDIR(mode):
        intake.jobs.append(job(assignment, [_("{assignment} 不是文件夹（{kind}），没有找到任何 .ipynb 笔记本").format(assignment=name, kind=_kind(mode))]))
        return
    try:
        assignment_fd = _open_folder(name, student_fd)
    except OSError as error:
        intake.jobs.append(job(assignment, [_("无法打开作业文件夹：{reason}").format(reason=error.strerror)]))
        return
    try:
        _graded(submitted, assignment_fd, student_id, assignment, job, intake)
    finally:
        os.close(assignment_fd)


def _too_many(where: str) -> str:
    return _("文件夹 {name} 里的条目过多（超过 {limit} 个），未评分").format(name=display_name(where), limit=MAX_LISTED)


def _graded(submitted: Path, assignment_fd: int, student_id: str, assignment: Assignment, job: Callable[..., Job], intake: Intake) -> None:
    """The notebook graded in one student's assignment folder (open at ``assignment_fd``: listed
    and read through that one opening), or the reason there is none."""
    name, expected = assignment.name, assignment.notebook
    try:
        candidates = [n for n, _ in _entries(assignment_fd, MAX_LISTED) if n.endswith(".ipynb") and not n.startswith(".")]
    except _TooMany:
        intake.jobs.append(job(assignment, [_too_many(f"{student_id}/{name}")]))
        return
    folder = submitted / student_id / name
    notes: list[str] = []
    renamed = [n for n in candidates if is_renamed(n, expected)]
    graded_as = ""
    if expected not in candidates and len(renamed) == 1:
        # "attention (1).ipynb", "Attention.ipynb": the student's copy of this very notebook. It
        # is graded, and stored in autograded/, under the assignment's name; both are told.
        graded_as, expected = expected, renamed[0]
        notes.append(_("提交的文件名是 {original}，已按作业的笔记本名 {name} 评分和保存").format(original=display_name(expected), name=graded_as))
    if expected in candidates:
        chosen = [expected]
        for extra in candidates:
            if extra != expected:
                notes.append(_("文件夹里还有笔记本 {name}，只评分了 {graded}").format(name=display_name(extra), graded=expected))
                reason = _("同一作业文件夹里有 {graded}，这个多出来的笔记本未评分").format(graded=expected)
                intake.skipped.append(Skipped(f"{student_id}/{name}/{display_name(extra)}", reason))
    elif len(candidates) > 1:
        listed = i18n.join(display_name(n) for n in candidates)
        problem = _("作业文件夹里有多个笔记本（{names}）而没有 {expected}，无法确定评分哪一个，未评分；请只保留一个").format(names=listed, expected=expected)
        intake.jobs.append(job(assignment, [problem]))
        return
    else:
        chosen = candidates
    if not chosen:
        intake.jobs.append(job(assignment, [_("没有找到任何 .ipynb 笔记本")], notes=notes))
        return
    notebook = chosen[0]
    shown = display_name(notebook)
    if shown != notebook:
        intake.jobs.append(job(assignment, [_("{name}：文件名不是有效的 UTF-8 文本，未读取").format(name=shown)], notes=notes))
        return
    try:
        # Read (capped, links refused, through the folder's own opening: the descriptor it was
        # listed from) to fingerprint the exact bytes; the worker reads them again the same way
        # and checks this digest before grading them.
        data = read_opened(assignment_fd, notebook)
    except Unsafe as error:
        intake.jobs.append(job(assignment, [_("{name}：{problem}").format(name=notebook, problem=error)], notes=notes))
        return
    intake.jobs.append(job(assignment, [], (str(folder / notebook),), (digest_of(data),), notes, graded_as))


# A browser's second download ("attention (1)"), Canvas's resubmission ("attention-1"), any case.
_RENAMED = re.compile(r"^(?P<stem>.+?)(?:-\d+| ?\(\d+\))?\.ipynb$", re.IGNORECASE)


def is_renamed(name: str, expected: str) -> bool:
    """Whether ``name`` is the student's renamed copy of the notebook ``expected`` (not ``expected`` itself)."""
    match = _RENAMED.match(name)
    return name != expected and match is not None and match["stem"].lower() == Path(expected).stem.lower()
