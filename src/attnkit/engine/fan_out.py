"""Grade a class's jobs: skip what is unchanged, fan out to workers, write once.

The jobs come from intake (``attnkit.intake.jobs``). The parent process is the only writer: workers
send records back, and each record is written atomically as soon as it arrives, so an
interrupted run loses nothing already graded and a re-run grades only what changed (the
submission's bytes or the grader's own files). A worker that dies or stalls costs only the
submission it was grading: its chunk's other submissions are graded again on a new worker
(``FanOut``).
"""

from __future__ import annotations

import ctypes
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from attnkit.constants import GraderError
from attnkit import i18n
from attnkit.engine import messages
from attnkit.i18n import _
from attnkit.driver.seed import Seed
from attnkit.boundary.policy import Limits
from attnkit.procfs import stat_fields
from attnkit.records import Job, SubmissionRecord
from attnkit.engine.worker import worker_main
from attnkit.report.shard_set import owned_jobs


def shard_of(jobs: list[Job], shard: tuple[int, int] | None) -> list[Job]:
    """The jobs shard ``i/n`` (1-based) owns: by a hash of the student id, never by position, so
    a student added late moves nobody else (``report.shard_set.owner``)."""
    return owned_jobs(jobs, shard)


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


def not_graded_record(job: Job, reason: str) -> SubmissionRecord:
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


def adopt_orphans(on: bool) -> None:
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
            found[int(entry)] = int(stat_fields(entry)[1])
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
class WorkerProcess:
    """One worker as the parent holds it: its process, the two ends of its pipes, and what it grades."""

    process: Any
    inbox: Any  # our end of its task pipe
    outbox: Any  # our end of its result pipe
    chunk: list[Job] | None = None
    current: int | None = None  # the id of the submission it is grading now
    since: float = 0.0  # when it started ``current`` (or its chunk)
    cpu: int | None = None  # the CPU it keeps to, with its zygote and sandboxes (``worker_cpus``)


def worker_cpus(workers: int) -> list[int]:
    """The CPUs that ``workers`` workers keep to, one worker's lane each (least used first), or
    none: then the scheduler places every process.

    A worker and its sandbox take turns (a request, its reply), and a sandbox is forked, runs and
    exits on the CPU of the worker it serves: where workers fill every CPU, each keeping to one,
    with its zygote and sandboxes, saves the kernel a wake-up across CPUs (an interrupt between
    processors, costly in a virtual machine) and a migration at every turn: 4-6 % of a class's
    time on a 2-core VM (docs/speed.md). With fewer workers than CPUs the spare ones are worth
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
    on_record: Callable[[SubmissionRecord], None],
    seed: Seed | None = None,
    every_turn: Callable[[], None] | None = None,
) -> list[str]:
    """Run ``jobs`` on ``workers`` processes; call ``on_record`` (in this process) for each result,
    including a "not graded" record for a submission that kills or stalls a worker on its own.
    Returns the keys of those not graded. ``seed``: where workers get their zygotes
    (``attnkit.driver.seed``); it is closed here. ``every_turn``: called after each turn of the
    loop that waits for the workers, at least twice a second (the caller's periodic work, such as
    committing the records written so far)."""
    if not jobs:
        if seed is not None:
            seed.close()
        return []
    return FanOut(jobs, autograder, max(1, min(workers, len(jobs))), limits, hide, on_record, seed, every_turn).run()


class FanOut:
    """One run of ``grade_jobs``: the pool of workers, the chunks still to hand out, and the jobs
    still without a record. Every method runs in the parent, between ``wait``s on the pool."""

    def __init__(
        self,
        jobs: list[Job],
        autograder: Path,
        workers: int,
        limits: Limits,
        hide: list[str],
        on_record: Callable[[SubmissionRecord], None],
        seed: Seed | None,
        every_turn: Callable[[], None] | None = None,
        on_event: Callable[..., None] | None = None,
    ) -> None:
        """``on_event(event, **fields)``: where the pool's own news goes (a worker replaced, a
        submission graded again, a message discarded); without it, the rare ones go to stderr."""
        self.autograder = autograder
        self.workers = workers
        self.limits = limits
        self.hide = hide
        self.on_record = on_record
        self.seed = seed
        # fork: workers start with torch already imported. Safe because this process has run no torch
        # op (so no OpenMP thread pool exists to deadlock a child) and runs no other threads.
        self.context = multiprocessing.get_context("fork")
        for number, job in enumerate(jobs, 1):  # a grade run's jobs: their place is their id
            job.id = number
        self.work: deque[list[Job]] = deque(chunks(jobs, workers))
        self.remaining = {job.id: job for job in jobs}  # by id: the jobs still without a record
        self.not_graded: list[str] = []
        # Times each job was cut short by the host (its worker killed by a signal, the OOM killer's
        # included): graded again up to ``limits.host_retries`` times before it is "not graded".
        self.host_faults: Counter[int] = Counter()
        self.on_event = on_event
        # A submission is bounded by the sandbox's own limits; this is the last resort for a worker
        # stuck on the trusted side, far above anything an honest notebook needs.
        self.stall_seconds = (limits.notebook_seconds + limits.submission_seconds) * (limits.restarts + limits.host_retries + 1) + 120
        self.pool: dict[Any, WorkerProcess] = {}  # by the connection its results arrive on
        self.lanes = worker_cpus(workers)
        self.keep: set[int] = set()  # other children of ours that end_orphans must spare (attnkit serve's recorder)
        self.every_turn = every_turn  # see grade_jobs

    def run(self) -> list[str]:
        """Grade every job; the keys of those not graded. GraderError when grading cannot run."""
        adopt_orphans(True)
        for _worker in range(self.workers):
            self.feed(self.start_worker())
        try:
            while self.remaining and self.pool:
                for ready in multiprocessing.connection.wait(list(self.pool), timeout=0.5):
                    self.receive(self.pool[ready])
                self.check_health()
                if self.every_turn is not None:
                    self.every_turn()
        finally:
            self.shut_down()
        if self.remaining:
            raise GraderError(
                i18n.ngettext(
                    "{count} 份提交未能评分：没有一个评分进程能够运行", "{count} 份提交未能评分：没有一个评分进程能够运行", len(self.remaining)
                ).format(count=len(self.remaining))
            )
        return self.not_graded

    def start_worker(self) -> WorkerProcess:
        # One pipe pair per worker, no shared queue: a worker killed mid-write (OOM) would leave a
        # shared queue's lock held and every other worker blocked forever.
        task_reader, task_writer = self.context.Pipe(duplex=False)
        result_reader, result_writer = self.context.Pipe(duplex=False)
        taken = Counter(other.cpu for other in self.pool.values())
        cpu = min(self.lanes, key=lambda lane: taken[lane]) if self.lanes else None
        process = self.context.Process(
            target=worker_main,
            args=(task_reader, result_writer, str(self.autograder), self.limits, self.hide, cpu, self.seed.requests if self.seed else None),
            daemon=True,
        )
        process.start()
        task_reader.close()
        result_writer.close()
        worker = WorkerProcess(process, task_writer, result_reader, cpu=cpu)
        self.pool[result_reader] = worker
        self.event("worker-started", pid=process.pid)
        return worker

    def waiting(self, job: Job) -> bool:
        """``job`` itself is still to be recorded: not only another job of the same student and
        assignment (the service's next submission of a student has the same key, and may be
        given to another worker while the last one's messages are still on the way)."""
        return self.remaining.get(job.id) is job

    def event(self, event: str, **fields: Any) -> None:
        """The pool's news: to ``on_event``; without one, a line on stderr for what a TA should
        know of (a discarded message, a submission graded again), nothing for the rest."""
        if self.on_event is not None:
            self.on_event(event, **fields)
        elif event in ("discarded", "regrading"):
            print(f"attnkit: {json.dumps({'event': event, **fields}, ensure_ascii=False)}", file=sys.stderr, flush=True)

    def take(self, job: Job, record: SubmissionRecord) -> None:
        """``record``, computed for ``job`` (still waiting), is its result."""
        del self.remaining[job.id]
        self.on_record(record)

    def feed(self, worker: WorkerProcess) -> None:
        """Send ``worker`` the next chunk with a job still to grade (None when there is none)."""
        work = self.work
        while work and not any(self.waiting(job) for job in work[0]):
            work.popleft()
        worker.current, worker.since = None, time.monotonic()
        worker.chunk = [job for job in work.popleft() if self.waiting(job)] if work else None
        try:
            worker.inbox.send(worker.chunk)
        except OSError:
            pass  # it died: noticed below, and the chunk goes back

    def receive(self, worker: WorkerProcess) -> None:
        """One message from ``worker`` (``engine.messages``): a record, or news of its chunk. Each
        names the submission it is about by id; one about a job this worker does not hold, or no
        longer waiting, is discarded and logged, never taken for another (issue 50)."""
        try:
            message = worker.outbox.recv()  # the same connection, typed as what worker_main sends
        except (EOFError, OSError):
            self.bury(worker, "")
            return
        kind = messages.kind_of(message)
        if kind == messages.FATAL:
            raise GraderError(message[messages.FATAL])
        chunk = {job.id: job for job in worker.chunk or []}
        if kind == messages.STARTED:
            if message[messages.STARTED] in chunk:
                worker.current, worker.since = message[messages.STARTED], time.monotonic()
            else:
                self.discard(worker, message, "not a submission this worker holds")
        elif kind in (messages.CHUNK_DONE, messages.CHUNK_FAILED):
            if message.get(messages.JOBS) != list(chunk):
                self.discard(worker, message, "not the chunk this worker holds")
            elif kind == messages.CHUNK_DONE:
                if any(self.waiting(job) for job in chunk.values()):
                    # A session that ended without a record for someone: find whom, alone.
                    self.chunk_failed(worker, _("评分会话结束时没有得到这份提交的结果"))
                self.feed(worker)
            else:
                self.chunk_failed(worker, _("评分过程出错（{error}）").format(error=str(message[messages.CHUNK_FAILED])[:300]))
                self.feed(worker)
        elif kind == messages.RECORD:
            job = chunk.get(message["job"])
            record = message[messages.RECORD]
            # The record is the job this worker was given and still waiting, never a later one of the same student.
            if job is None or not self.waiting(job) or (record.get("student_id"), record.get("assignment")) != (job.student_id, job.assignment):
                self.discard(worker, message, "its submission is no longer being graded here")
            else:
                self.take(job, record)
        else:
            self.discard(worker, message, "not a message a worker sends")

    def discard(self, worker: WorkerProcess, message: Mapping[str, Any], why: str) -> None:
        """A worker's message that is about no job it holds and still waits for: dropped, and said
        (``why``: for the operator's log, in English as the log's other fields)."""
        record = message.get(messages.RECORD)
        about = f"{record.get('student_id')}/{record.get('assignment')}" if isinstance(record, Mapping) else message.get("key", "")
        self.event(
            "discarded",
            kind=messages.kind_of(message) or "unknown",
            job=message.get("job", message.get(messages.STARTED, message.get(messages.JOBS))),
            about=str(about)[:200],
            pid=worker.process.pid if worker.process is not None else None,
            holding=[job.id for job in worker.chunk or []],
            why=why,
        )

    def check_health(self) -> None:
        """Bury the workers that stalled on a chunk or died with nothing left to read."""
        for worker in list(self.pool.values()):
            if worker.chunk is not None and time.monotonic() - worker.since > self.stall_seconds:
                self.bury(worker, _("评分超时（超过 {seconds} 秒没有完成）").format(seconds=f"{self.stall_seconds:.0f}"))
            elif not worker.process.is_alive() and not worker.outbox.poll():
                self.bury(worker, "")

    def chunk_failed(self, worker: WorkerProcess, reason: str, by_host: bool = False) -> None:
        """Its ungraded submissions go back: the one it was on alone (the likely culprit), the
        rest together; a submission that fails alone is recorded as not graded. ``by_host``: the
        worker was killed by a signal (the OOM killer, an operator, the host), which is no
        verdict on the submission: it is graded again, ``limits.host_retries`` times at most,
        before anything is charged to it."""
        left = [job for job in worker.chunk or [] if self.waiting(job)]
        worker.chunk = None
        culprit = [job for job in left if job.id == worker.current] or (left if len(left) == 1 else [])
        rest = [job for job in left if job not in culprit]
        if by_host and culprit:
            job = culprit[0]
            self.host_faults[job.id] += 1
            if self.host_faults[job.id] <= self.limits.host_retries:
                self.event("regrading", id=job.id, student=job.student_id, assignment=job.assignment, reason=reason, retry=self.host_faults[job.id])
                if rest:
                    self.work.appendleft(rest)
                self.work.appendleft(culprit)
                return
        if len(left) == 1:
            job = left[0]
            self.not_graded.append(job.key)
            self.take(job, not_graded_record(job, reason))
            return
        if not culprit:  # died between submissions: find it one by one
            self.work.extendleft([job] for job in reversed(rest))
        else:
            if rest:
                self.work.appendleft(rest)
            self.work.appendleft(culprit)

    def bury(self, worker: WorkerProcess, reason: str) -> None:
        """A dead or stalled worker: ended, its leftovers too, its chunk back, a new one in its place."""
        del self.pool[worker.outbox]
        if not reason:  # its pipe's end can be seen a moment before its exit can be reaped
            worker.process.join(timeout=2)
        died = not reason and not worker.process.is_alive()  # on its own: not stalled, not ended by us
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=5)
        by_host = died and worker.process.exitcode is not None and worker.process.exitcode < 0  # a signal: the OOM killer's, the host's
        reason = reason or death_reason(worker.process.exitcode)
        self.event("worker-ended", pid=worker.process.pid, reason=reason, on=worker.current if worker.chunk else None)
        for end in (worker.inbox, worker.outbox):
            end.close()
        # The seed and the zygotes of live workers (its children) go on; the dead worker's zygote
        # ends by itself when the worker's end of it closes.
        end_orphans({w.process.pid for w in self.pool.values()} | ({self.seed.pid} if self.seed else set()) | self.keep)
        if worker.chunk is not None:
            self.chunk_failed(worker, reason, by_host)
        if self.remaining and self.work and len(self.pool) < self.workers:
            self.feed(self.start_worker())

    def spare(self, pid: int) -> None:
        """``pid``, another child of this process (the service's recorder, its hub side), is not a
        worker's leftover: ``end_orphans`` leaves it alone."""
        self.keep.add(pid)

    def alive(self) -> int:
        """How many of the workers are running now."""
        return sum(1 for worker in self.pool.values() if worker.process.is_alive())

    def shut_down(self) -> None:
        """Every worker told to stop (killed if it will not), the seed closed, the leftovers ended."""
        for worker in self.pool.values():
            try:
                worker.inbox.send(None)
            except OSError:
                pass
        for worker in self.pool.values():
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=5)
        if self.seed is not None:
            self.seed.close()
        end_orphans(set(self.keep))
        adopt_orphans(False)
