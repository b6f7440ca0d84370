"""A grading worker: one zygote, and trusted pytest sessions over the chunks of submissions the
parent sends (usually two sessions for all of them: see ``worker_main``).

Runs in its own process, forked by the engine (``multiprocessing`` fork context) with torch
already imported. It never writes outputs: each finished
submission goes back to the parent as a plain dict, a ``records.SubmissionRecord``, over its
result pipe (between the messages of ``attnkit.engine.messages``), and the parent is the only
writer. Where a session's submissions come from (a sandbox each, the plan) is
``attnkit.grading.sandbox_provider``'s.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from attnkit.assignment.folder import Assignment, discover
from attnkit.constants import GraderError
from attnkit import cpu_account
from attnkit.i18n import _
from attnkit.submitted_files import display_name
from attnkit.engine import messages
from attnkit.grading.plugin import TestResult
from attnkit.boundary.policy import Limits
from attnkit.records import CellRecord, HiddenTestRecord, Job, SubmissionRecord
from attnkit.driver.submission import Submission
from attnkit.driver.replies import CellRun
from attnkit.driver.zygote_handle import Zygote
from attnkit.grading.sandbox_provider import PLANNING, Opened, SandboxProvider, evidence

# torch imports this module (and sympy with it: ~0.4 s of CPU) the first time one of its functions
# checks an argument with ``torch._check_with`` (``nn.MultiheadAttention`` with a
# ``key_padding_mask``, which the hidden tests call): imported here, in the parent before it forks
# the workers, it is paid once per run instead of once in each worker's first session.
import torch.fx.experimental.symbolic_shapes  # noqa: F401


def cell_record(run: CellRun, session: Submission) -> CellRecord:
    """A cell's run (every field of it), with the section it sits in (a student finds a cell by
    its heading, not by an index that counts markdown cells)."""
    record = CellRecord(
        index=run.index,
        grade_id=run.grade_id,
        ok=run.ok,
        error_type=run.error_type,
        message=run.message,
        output=run.output,
        seconds=run.seconds,
        line=run.line,
        text=run.text,
        section=next((cell.section for cell in session.cells if cell.index == run.index), ""),
    )
    if run.inner:
        record["inner"] = run.inner
    return record


def run_chunk(
    jobs: list[Job],
    suites: dict[str, Assignment],
    limits: Limits,
    zygote: Zygote,
    emit: Callable[[Mapping[str, Any]], None],
    more: Callable[[str], list[Job] | None] | None = None,
) -> None:
    """Grade ``jobs``, one pytest session per assignment among them, emitting each submission's
    record when it is done (and ``messages.started`` when one begins, so the parent knows
    whom a crash belongs to). ``more(assignment)``: the next jobs, all of that assignment, that the last
    session may go on with once these are done (None: it ends)."""
    names = list(dict.fromkeys(job.assignment for job in jobs))
    for name in names:
        _run_suite([job for job in jobs if job.assignment == name], suites[name], limits, zygote, emit, more if name == names[-1] else None)


class SubmissionRecords:
    """The records of one pytest session's submissions, each sent to the parent as it closes.

    ``results`` is the session's ``GradingPlugin.results`` (the plugin is given this very dict):
    a submission's test results are taken from it when its sandbox closes (``finished``)."""

    def __init__(self, assignment: Assignment, emit: Callable[[Mapping[str, Any]], None]) -> None:
        self.assignment = assignment
        self.emit = emit
        self.results: dict[str, list[TestResult]] = {}

    def started(self, job: Job) -> None:
        """Tells the parent which submission a dying worker was on."""
        self.emit(messages.started(job.id, job.key))

    def finished(self, opened: Opened) -> None:
        tests: list[HiddenTestRecord] = [result for result in self.results.pop(opened.job.key, [])]
        # Before the sandbox's description: the heatmaps' calls may still replace it.
        panels = evidence(self.assignment, opened.student, tests, opened.early_evidence) if opened.session else {}
        record: SubmissionRecord = {
            "student_id": opened.job.student_id,
            "assignment": opened.job.assignment,
            "fingerprint": opened.job.fingerprint,
            "tests": tests,
            "problems": opened.problems,
            "notes": opened.notes,
            # What the gradebook may copy to autograded/: these names with exactly these bytes.
            "notebooks": [
                {"name": display_name(Path(path).name), "sha256": digest, "stored_as": opened.job.graded_as or display_name(Path(path).name)}
                for path, digest in zip(opened.job.notebooks, opened.job.digests, strict=False)
            ],
            "cells": [cell_record(run, opened.session) for run in opened.session.runs] if opened.session else [],
            "sandbox": opened.session.describe() if opened.session else {},
            "evidence": panels,
            "seconds": time.perf_counter() - opened.started,
        }
        self.emit(messages.record(opened.job.id, record))


def _run_suite(
    jobs: list[Job],
    assignment: Assignment,
    limits: Limits,
    zygote: Zygote,
    emit: Callable[[Mapping[str, Any]], None],
    more: Callable[[str], list[Job] | None] | None = None,
) -> None:
    import pytest

    from attnkit.grading import plugin as plugin_module
    from attnkit.grading.plugin import GradingPlugin

    records = SubmissionRecords(assignment, emit)
    provider = SandboxProvider(zygote, jobs, limits, assignment.functions, records.finished, started=records.started, assignment=assignment, more=more)
    plugin = GradingPlugin(provider, records.results)
    folder = str(assignment.folder)
    args = [
        folder,
        "--assert=plain",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "-p",
        "no:warnings",
        "-c",
        os.devnull,
        "--rootdir",
        folder,
        "-o",
        "addopts=",
        # Per-test costs we do not use: log capture on every logger, a gc.collect() per session.
        "-p",
        "no:logging",
        "-p",
        "no:unraisableexception",
        "-p",
        "no:threadexception",
    ]
    problems = SuiteProblems()
    try:
        code = pytest.main(args, plugins=[plugin_module, plugin, problems])
    except BaseException as error:
        # Whatever broke on the way out (pytest's own teardown, say), a reason to stop that the
        # session already found is the run's cause, not this.
        if provider.fatal or plugin.fatal:
            raise GraderError(provider.fatal or plugin.fatal) from error
        raise
    plugin.results.pop(PLANNING, None)
    if provider.fatal or plugin.fatal:
        raise GraderError(provider.fatal or plugin.fatal)
    problems.raise_for_grader(assignment, code, opened=bool(provider.opened_any))
    if code not in (0, 1):  # 0: all passed, 1: some failed; anything else: the session broke
        raise RuntimeError(_("隐藏测试的 pytest 会话异常结束（退出码 {code}）").format(code=int(code)))


class SuiteProblems:
    """A pytest plugin that notes what a session's own failures were: a hidden suite that does
    not collect (a syntax error, a failed import, an unreadable file) is the grader's fault, and
    stops the run with its cause instead of marking every student "not graded"."""

    def __init__(self) -> None:
        self.collection: list[str] = []

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
            self.collection.append(f"{report.nodeid or '.'}: {text.strip().splitlines()[-1] if text.strip() else ''}"[:500])

    def raise_for_grader(self, assignment: Assignment, code: int, opened: bool) -> None:
        """GraderError when the session failed for a reason of the suite's: it did not collect,
        or it ended abnormally before any submission was opened (student code cannot have
        caused it)."""
        if self.collection:
            raise GraderError(_("作业 {assignment} 的隐藏测试无法收集：{reason}").format(assignment=assignment.name, reason=_("；").join(self.collection[:3])))
        if code not in (0, 1) and not opened:
            raise GraderError(
                _("作业 {assignment} 的隐藏测试会话在评任何提交之前就异常结束（pytest 退出码 {code}）").format(assignment=assignment.name, code=int(code))
            )


def _expendable() -> None:
    # If the host runs out of memory, the kernel should kill a worker (one chunk is regraded)
    # rather than the parent that holds the class's results. Raising one's own score needs no
    # privilege; a failure only loses this preference.
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("500")
    except OSError:
        pass


class ChunkFeed:
    """The worker's side of its pipes to the parent: the chunks it is sent, in order, and whether
    the chunk being graded has had its ``chunk_done`` (sent once per chunk, by ``more`` when a
    session goes on with the next chunk, else after the chunk's session)."""

    def __init__(self, inbox: Any, results: Any) -> None:
        self.inbox = inbox  # our end of the task pipe
        self.results = results  # our end of the result pipe
        self.pid = os.getpid()
        self.pending: list[list[Job] | None] = []  # received by ``more`` for after its session
        self.reported = False
        self.chunk: list[int] = []  # the ids of the chunk being graded: its chunk_done names them

    def emit(self, message: Mapping[str, Any]) -> None:
        self.results.send(messages.from_worker(message, self.pid))

    def next(self) -> list[Job] | None:
        """The next chunk to grade; None: the parent has no more."""
        chunk = self.pending.pop() if self.pending else self.inbox.recv()
        self.reported = False
        self.chunk = [job.id for job in chunk or []]
        return chunk

    def more(self, assignment: str) -> list[Job] | None:
        """The current chunk done, the next one if it is all of ``assignment`` (the session goes
        on with it); else None, and that chunk (or the end) waits for ``next``."""
        self.done()
        chunk = self.inbox.recv()
        if chunk and all(job.assignment == assignment for job in chunk):
            self.reported = False
            self.chunk = [job.id for job in chunk]
            return chunk
        self.pending.append(chunk)  # another assignment's, or the end: after this session
        return None

    def done(self) -> None:
        self.emit(messages.chunk_done(self.chunk))
        self.reported = True

    def failed(self, error: BaseException) -> None:
        """The chunk's session broke; unless it broke after its chunk was done and before the next began."""
        if not self.reported:
            self.emit(messages.chunk_failed(f"{type(error).__name__}: {str(error)[:500]}", self.chunk))


def worker_main(inbox: Any, results: Any, autograder: str, limits: Limits, hide: list[str], cpu: int | None = None, seed: socket.socket | None = None) -> None:
    """Process entry point: grade chunks received on the pipe ``inbox`` until ``None``; send
    messages on the pipe ``results``.

    Every message (``attnkit.engine.messages``) carries this worker's pid. After each chunk:
    ``chunk_done``, or ``chunk_failed`` with the reason when the chunk's pytest session broke (the
    parent retries its ungraded submissions one by one to find the culprit); ``fatal`` with the
    reason when grading cannot run at all (the zygote or a sandbox cannot start). ``cpu``: the one to keep to, before
    the zygote starts, so that it and every sandbox keep to it too (``engine.worker_cpus``). ``seed``:
    where to ask for the zygote (``attnkit.driver.seed``); without one, or if it cannot answer, the worker
    starts its own."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            pass  # a CPU taken away meanwhile: the scheduler places us, as without lanes
    _expendable()
    # Ctrl-C reaches the whole process group: the parent handles it (it stops us and tells the
    # TA how to resume); a worker printing its own KeyboardInterrupt traceback would only confuse.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    feed = ChunkFeed(inbox, results)
    emit = feed.emit

    try:
        suites = discover(Path(autograder))
        zygote = Zygote(
            hide=hide,
            trusted=limits.trusted,
            warm_up="\n".join(s.warm_up_source() for s in suites.values()),
            cells=[cell for suite in suites.values() for cell in suite.release_cells()],
            warm_up_cells=[cell for suite in suites.values() for cell in suite.warm_up_cells()],
            seed=seed,
            later=True,
        )
    except Exception as error:
        emit(messages.fatal(_("无法启动沙箱的 zygote 进程：{error}").format(error=error)))
        return
    finally:
        if seed is not None:
            seed.close()  # ours is the only zygote this worker asks for: the seed sees its end once all are done
    # torch, pytest and the suites are here for good: out of the collector's view, so that the
    # collections that grading's many small objects trigger do not walk them every time.
    gc.collect()
    gc.freeze()
    # A session whose suite is known to be plain goes on with the next chunk when that chunk is all
    # of its assignment (``more``): one pytest session (its configuration and collection, ~40 ms)
    # per worker instead of one per chunk. The parent sees the same messages: each chunk's records,
    # then its ``chunk_done`` (sent here, before the next chunk is asked for).
    try:
        while (chunk := feed.next()) is not None:
            try:
                run_chunk(chunk, suites, limits, zygote, emit, feed.more)
            except GraderError as error:
                emit(messages.fatal(str(error)))
                return
            except BaseException as error:  # RecursionError, MemoryError, pytest's own
                feed.failed(error)
            else:
                if not feed.reported:
                    feed.done()
    finally:
        zygote.close()
        cpu_account.own("worker")
