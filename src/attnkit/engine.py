"""Grade a class: find submissions, skip what is unchanged, fan out to workers, write once.

The parent process is the only writer: workers send records back, and each record is written
atomically as soon as it arrives, so an interrupted run loses nothing already graded and a
re-run grades only what changed (the submission's bytes or the grader's own files).

Nothing in the submissions folder is trusted (see notebook.py): intake walks it without following
links and reads only regular files below the cap. A worker that dies or stalls costs only the
submission it was grading: its chunk's other submissions are graded again on a new worker.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import stat
import time
import unicodedata
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import attnkit
from attnkit.assignment import Assignment
from attnkit.constants import GraderError
from attnkit import i18n, worker_messages
from attnkit.i18n import _
from attnkit.notebook import Unsafe, digest_of, display_name, fingerprint, kind_of, read_submitted
from attnkit.seed import Seed
from attnkit.policy import Limits
from attnkit.worker import Job, worker_main

MAX_ID_LENGTH = 200




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


@functools.cache
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


def _entries(folder_fd: int) -> list[tuple[str, int]]:
    """(name, lstat mode) of a folder's entries, sorted; nothing is followed."""
    found = []
    with os.scandir(folder_fd) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.stat(follow_symlinks=False).st_mode))
            except OSError:
                continue
    return sorted(found)


def _open_folder(name: str, parent_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)


def find_jobs(submitted: Path, suites: dict[str, Assignment], only: str | None = None) -> Intake:
    """``submitted/<student_id>/<assignment>/<notebook>.ipynb``: a job per student and assignment
    graded in this run; everything else is listed in ``skipped`` with its reason.

    The run grades ``only`` when given, else every assignment with a hidden suite that at least
    one student has a folder for (a class of one assignment is not told about the others)."""
    if not submitted.is_dir():
        raise GraderError(_("找不到提交文件夹：{folder}").format(folder=submitted))
    if only is not None and only not in suites:
        raise GraderError(_("作业 {assignment} 没有隐藏测试（只有 {known}）").format(assignment=only, known=i18n.join(suites)))
    intake = Intake()
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
                seen.update(entry for entry, _ in _entries(folder_fd) if entry in suites)
            finally:
                os.close(folder_fd)
    return [suite for suite in suites.values() if suite.name in seen] or list(suites.values())


def _kind(mode: int) -> str:
    return _("普通文件") if stat.S_ISREG(mode) else kind_of(mode)


def _student(submitted: Path, root_fd: int, student_id: str, mode: int, chosen: list[Assignment],
             suites: dict[str, Assignment], intake: Intake) -> None:
    names = i18n.join(suite.name for suite in chosen)

    def job(assignment: Assignment, problems: list[str], notebooks: tuple[str, ...] = (), digests: tuple[str, ...] = (),
            notes: list[str] | None = None, graded_as: str = "") -> Job:
        salt = hashlib.sha256(grader_digest(assignment, i18n.language()).encode())
        for path, sha in zip(notebooks, digests, strict=True):
            salt.update(Path(path).name.encode("utf-8", "surrogateescape") + b"\0" + sha.encode())
        for problem in problems:
            salt.update(problem.encode() + b"\0")
        salt.update(graded_as.encode())
        return Job(student_id, assignment.name, list(notebooks), salt.hexdigest(), str(submitted), list(digests), list(problems),
                   list(notes or []), graded_as)

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
        entries = _entries(student_fd)
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
                intake.skipped.append(Skipped(f"{student_id}/{shown}", _("没有作业“{name}”的隐藏测试（本次只评 {assignment}），未评分，也未写入成绩册").format(
                    name=shown, assignment=names)))
        for assignment in chosen:
            _assignment(submitted, student_fd, student_id, assignment, modes.get(assignment.name), strays, len(chosen) == 1, job, intake)
    finally:
        os.close(student_fd)


def _assignment(submitted: Path, student_fd: int, student_id: str, assignment: Assignment, mode: int | None,
                strays: list[str], only_one: bool, job: Callable[..., Job], intake: Intake) -> None:
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
        candidates = [n for n, _ in _entries(assignment_fd) if n.endswith(".ipynb") and not n.startswith(".")]
    finally:
        os.close(assignment_fd)
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
        # Read (capped, links refused) to fingerprint the exact bytes; the worker reads them
        # again the same way and checks this digest before grading them.
        data = read_submitted(submitted, folder / notebook)
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


def shard_of(jobs: list[Job], shard: tuple[int, int] | None) -> list[Job]:
    """The deterministic slice ``i/n`` (1-based) of the sorted jobs: every n-th one."""
    if shard is None:
        return jobs
    index, count = shard
    return [job for position, job in enumerate(jobs) if position % count == index - 1]


MIN_CHUNK = 4  # below this, a chunk's round trip to this process costs more than the balance it buys


def chunks(jobs: list[Job], workers: int) -> Iterator[list[Job]]:
    """Chunks of at most 50 jobs that shrink as the work runs out (each worker takes the next
    when it is done): a worker that gets the last big chunk would otherwise grade it alone while
    the others wait. A worker's pytest session usually goes on from one chunk to the next
    (``worker_main``); a chunk of another assignment, or the first one, costs a new session."""
    start = 0
    while start < len(jobs):
        size = max(MIN_CHUNK, min(50, math.ceil((len(jobs) - start) / (workers * 3))))
        yield jobs[start : start + size]
        start += size


def not_graded_record(job: Job, reason: str) -> dict[str, Any]:
    """The record of a submission whose grading killed or stalled its worker even on its own.
    An empty fingerprint: the next run tries it again."""
    return {
        "student_id": job.student_id,
        "assignment": job.assignment,
        "fingerprint": "",
        "tests": [],
        "problems": [_("未能评分：{reason}").format(reason=reason)],
        "notes": [],
        "not_graded": reason,
    }


def death_reason(exitcode: int | None) -> str:
    """Why a worker process ended, in the words shown to the student and the TA."""
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        if number == signal.SIGKILL:
            return _("评分进程被强制终止（{signal}，多半是内存耗尽）").format(signal=name)
        return _("评分进程因信号 {signal} 崩溃").format(signal=name)
    return _("评分进程意外退出（退出码 {code}）").format(code=exitcode)


PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans(on: bool) -> None:
    """While grading, processes a dead worker leaves behind (its zygote, a sandbox still running
    student code) become our children instead of init's, so they can be found and ended."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process we can see (/proc, no extra dependency)."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
            found[int(entry)] = int(data[data.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return found


def end_orphans(workers: set[int]) -> None:
    """End (SIGKILL, by pid) and reap every child of ours that is not a live worker, with its
    descendants: what a killed worker left behind. Nothing else of ours runs while grading."""
    if not os.path.isdir("/proc"):
        return
    parents = _parents()
    me = os.getpid()
    orphans = [pid for pid, parent in parents.items() if parent == me and pid not in workers]
    family = list(orphans)
    for pid in family:  # grows while iterated: breadth-first over descendants
        family += [child for child, parent in parents.items() if parent == pid and child not in family]
    for pid in reversed(family):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in orphans:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


@dataclass
class _Worker:
    process: Any
    inbox: Any  # our end of its task pipe
    outbox: Any  # our end of its result pipe
    chunk: list[Job] | None = None
    current: str | None = None  # the submission it is grading now
    since: float = 0.0  # when it started ``current`` (or its chunk)
    cpu: int | None = None  # the CPU it keeps to, with its zygote and sandboxes (``worker_cpus``)


def worker_cpus(workers: int) -> list[int]:
    """The CPUs that ``workers`` workers keep to, one worker's lane each (least used first), or
    none: then the scheduler places every process.

    A worker and its sandbox take turns (a request, its reply), and a sandbox is forked, runs and
    exits on the CPU of the worker it serves: where workers fill every CPU, each keeping to one,
    with its zygote and sandboxes, saves the kernel a wake-up across CPUs (an interrupt between
    processors, costly in a virtual machine) and a migration at every turn: 4-6 % of a class's
    time on a 2-core VM (README, Speed). With fewer workers than CPUs the spare ones are worth
    more: a sandbox forked ahead or a swapped re-run's fork runs on one of them."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []
    return allowed if len(allowed) > 1 and workers >= len(allowed) else []


def grade_jobs(
    jobs: list[Job],
    autograder: Path,
    workers: int,
    limits: Limits,
    hide: list[str],
    on_record: Callable[[dict], None],
    seed: Seed | None = None,
) -> list[str]:
    """Run ``jobs`` on ``workers`` processes; call ``on_record`` (in this process) for each result,
    including a "not graded" record for a submission that kills or stalls a worker on its own.
    Returns the keys of those not graded. ``seed``: where workers get their zygotes
    (``attnkit.seed``); it is closed here."""
    if not jobs:
        if seed is not None:
            seed.close()
        return []
    workers = max(1, min(workers, len(jobs)))
    # fork: workers start with torch already imported. Safe because this process has run no torch
    # op (so no OpenMP thread pool exists to deadlock a child) and runs no other threads.
    context = multiprocessing.get_context("fork")
    work: deque[list[Job]] = deque(chunks(jobs, workers))
    remaining = {job.key: job for job in jobs}
    not_graded: list[str] = []
    # A submission is bounded by the sandbox's own limits; this is the last resort for a worker
    # stuck on the trusted side, far above anything an honest notebook needs.
    stall_seconds = (limits.notebook_seconds + limits.submission_seconds) * (limits.restarts + 1) + 120
    pool: dict[Any, _Worker] = {}  # by the connection its results arrive on
    lanes = worker_cpus(workers)

    def start_worker() -> _Worker:
        # One pipe pair per worker, no shared queue: a worker killed mid-write (OOM) would leave a
        # shared queue's lock held and every other worker blocked forever.
        task_reader, task_writer = context.Pipe(duplex=False)
        result_reader, result_writer = context.Pipe(duplex=False)
        taken = Counter(other.cpu for other in pool.values())
        cpu = min(lanes, key=lambda lane: taken[lane]) if lanes else None
        process = context.Process(target=worker_main, args=(task_reader, result_writer, str(autograder), limits, hide, cpu,
                                                                   seed.requests if seed else None), daemon=True)
        process.start()
        task_reader.close()
        result_writer.close()
        worker = _Worker(process, task_writer, result_reader, cpu=cpu)
        pool[result_reader] = worker
        return worker

    def feed(worker: _Worker) -> None:
        while work and not any(job.key in remaining for job in work[0]):
            work.popleft()
        worker.current, worker.since = None, time.monotonic()
        worker.chunk = [job for job in work.popleft() if job.key in remaining] if work else None
        try:
            worker.inbox.send(worker.chunk)
        except OSError:
            pass  # it died: noticed below, and the chunk goes back

    def chunk_failed(worker: _Worker, reason: str) -> None:
        """Its ungraded submissions go back: the one it was on alone (the likely culprit), the
        rest together; a submission that fails alone is recorded as not graded."""
        left = [job for job in worker.chunk or [] if job.key in remaining]
        worker.chunk = None
        if len(left) == 1:
            job = left[0]
            del remaining[job.key]
            not_graded.append(job.key)
            on_record(not_graded_record(job, reason))
            return
        culprit = [job for job in left if job.key == worker.current]
        rest = [job for job in left if job.key != worker.current]
        if not culprit:  # died between submissions: find it one by one
            work.extendleft([job] for job in reversed(rest))
        else:
            if rest:
                work.appendleft(rest)
            work.appendleft(culprit)

    def bury(worker: _Worker, reason: str) -> None:
        del pool[worker.outbox]
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=5)
        reason = reason or death_reason(worker.process.exitcode)
        for end in (worker.inbox, worker.outbox):
            end.close()
        # The seed and the zygotes of live workers (its children) go on; the dead worker's zygote
        # ends by itself when the worker's end of it closes.
        end_orphans({w.process.pid for w in pool.values()} | ({seed.pid} if seed else set()))
        if worker.chunk is not None:
            chunk_failed(worker, reason)
        if remaining and work and len(pool) < workers:
            feed(start_worker())

    _adopt_orphans(True)
    for _worker in range(workers):
        feed(start_worker())
    try:
        while remaining and pool:
            for ready in multiprocessing.connection.wait(list(pool), timeout=0.5):
                worker = pool[ready]
                try:
                    message = worker.outbox.recv()  # the same connection, typed as what worker_main sends
                except (EOFError, OSError):
                    bury(worker, "")
                    continue
                kind = worker_messages.kind_of(message)
                if kind == worker_messages.FATAL:
                    raise GraderError(message[worker_messages.FATAL])
                if kind == worker_messages.STARTED:
                    worker.current, worker.since = message[worker_messages.STARTED], time.monotonic()
                elif kind == worker_messages.CHUNK_DONE:
                    if any(job.key in remaining for job in worker.chunk or []):
                        # A session that ended without a record for someone: find whom, alone.
                        chunk_failed(worker, _("评分会话结束时没有得到这份提交的结果"))
                    feed(worker)
                elif kind == worker_messages.CHUNK_FAILED:
                    chunk_failed(worker, _("评分过程出错（{error}）").format(error=message[worker_messages.CHUNK_FAILED][:300]))
                    feed(worker)
                else:
                    key = f"{message['student_id']}/{message['assignment']}"
                    if key in remaining:
                        del remaining[key]
                        on_record(message)
            for worker in list(pool.values()):
                if worker.chunk is not None and time.monotonic() - worker.since > stall_seconds:
                    bury(worker, _("评分超时（超过 {seconds} 秒没有完成）").format(seconds=f"{stall_seconds:.0f}"))
                elif not worker.process.is_alive() and not worker.outbox.poll():
                    bury(worker, "")
    finally:
        for worker in pool.values():
            try:
                worker.inbox.send(None)
            except OSError:
                pass
        for worker in pool.values():
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
        if seed is not None:
            seed.close()
        end_orphans(set())
        _adopt_orphans(False)
    if remaining:
        raise GraderError(i18n.ngettext("{count} 份提交未能评分：没有一个评分进程能够运行", "{count} 份提交未能评分：没有一个评分进程能够运行",
                                         len(remaining)).format(count=len(remaining)))
    return not_graded
