"""``attnkit serve``: the loop of the on-submit service (docs/service.md).

One thread, one loop: it waits (``multiprocessing.connection.wait``) on the warm workers' pipes,
the inotify descriptor of the exchange's ``inbound/`` and the ``/metrics``/``/health`` socket at once; a
finished folder is checked (whose it is), copied and queued in the database before anything
grades it; idle workers get the next fair job; a record becomes the student's page in the
exchange at once, and its gradebook record is left to the recorder process. No thread: the
workers that replace a dead one are forked from this process, which must hold no other thread
at a fork (the engine's rule).

Its queue is the SQLite file in the course (one service), or a PostgreSQL table shared by
replicas (``--queue-url``, ``c.AttnkitServe.queue_url``: ``queue.postgres``), each renewing the
leases of what it grades from this loop (``heartbeat``).
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import math
import multiprocessing.connection
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from inotify_simple import flags

from attnkit.assignment.folder import Assignment, compile_suites, discover
from attnkit.boundary.policy import Limits
from attnkit.constants import GraderError
from attnkit.course.gradebook import course_config
from attnkit.driver.seed import Seed
from attnkit.i18n import _
from attnkit.intake.jobs import find_jobs
from attnkit.records import Job, ResultsJson, SubmissionRecord
from attnkit.report.cell_marks import marks_json
from attnkit.report.results_json import results_json
from attnkit.report.store import bounded_feedback
from attnkit.service import exchange as ex
from attnkit.service.policies import (
    DEFAULT,
    Policy,
    after_due_reason,
    ladder_levels,
    limit_reason,
    next_feedback_at,
    not_graded_page,
    policies_from,
    released_at_due,
    scores_page,
    show_times_in,
    withheld_page,
)
from attnkit.service.http_submit import SPOOL, take_spooled
from attnkit.service.metrics_endpoint import Endpoint
from attnkit.service.pool import WarmPool
from attnkit.service import hub_process as hub_side
from attnkit.service.queue import DELIVERED, GRADING, MAX_WAITING, QUEUED, Row, is_url, open_queue
from attnkit.service.queue.postgres import GRADEBOOK_ENGINES, gradebook_due_rows  # (a PostgreSQL gradebook's engines: forgotten by a fork)
from attnkit.service.recorder import PERSON_MUST_FIX, recorder_stopped_reason
from attnkit.service.settings import MIN_FREE_BYTES, PAUSED_FILE, STATE_FOLDER, free_bytes
from attnkit.service.unfinished import Unfinished

RESCAN_SECONDS = 2.0  # a full look at inbound/ besides inotify's events (a missed event, a restart)
KEEP_COPIES = 3  # copies of settled attempts kept per student and assignment (besides what counts)
PRUNE_SECONDS = 60.0  # how often the copies beyond KEEP_COPIES are removed
RECHECK_UNFINISHED_SECONDS = 30.0  # an unfinished folder no event names is looked at again this often
NAMES_PER_TURN = 256  # folder names looked at per turn of the loop (events and rescans together)
UNFINISHED_PER_OWNER = 50  # unfinished names held per uid owning them (beyond: ignored by rescans)
CAPPED_LOG_SECONDS = 60.0  # an owner's names ignored over the cap: one log line per this long
DUE_SECONDS = 5.0  # how often the due dates are read again from the gradebook (a small SQLite read)
PR_SET_PDEATHSIG = 1
PROBE_SECONDS = 1.0  # while paused: how often the disk's space and the database are looked at again
RECORDER_RESTARTS = 5  # a dead recorder is started again at most this often within RECORDER_RESTART_WINDOW
RECORDER_RESTART_WINDOW = 600.0
WARM_UP_STUDENT = "attnkit-warm-up-"  # the warm-up jobs' student ids (+ the worker's slot), never queued

def database_errors() -> tuple[type[BaseException], ...]:
    """The queue's databases' own errors: the service's failures, never a submission's."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    return (sqlite3.Error, SQLAlchemyError)


DATABASE_ERRORS = database_errors()


def is_transient(error: BaseException) -> bool:
    """A fault of the host that waiting cures, which pauses the service (``Service.pause``) rather
    than stopping it or failing a submission: a full disk (course, exchange, the service's own
    database: ``database or disk is full``), a database locked past its timeout, and a shared
    queue's PostgreSQL out of reach (its connection refused, reset or timed out)."""
    import errno
    import sqlite3

    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(error, (sqlite3.OperationalError, OperationalError)):
        text = str(error).lower()
        if any(word in text for word in ("locked", "busy", "disk is full", "disk i/o", "unable to open")):
            return True
    if isinstance(error, DBAPIError) and (error.connection_invalidated or isinstance(error, (OperationalError, InterfaceError))):
        return "psycopg" in type(error.orig).__module__  # PostgreSQL's connection, not a statement of ours
    return type(error).__module__.startswith("psycopg") and type(error).__name__ in ("OperationalError", "InterfaceError")


def is_the_services(error: BaseException) -> bool:
    """A failure of the service itself, which stops it (exit 2: the grader's ``GraderError``, the
    suite or the sandbox; or its database's), rather than of the one submission it was raised for."""
    return isinstance(error, (GraderError, *DATABASE_ERRORS))
BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)



def due_dates(gradebook: Path | str) -> dict[str, float]:
    """Each assignment's due date in the gradebook (epoch seconds), as nbgrader's late rule reads
    it; ``gradebook``: its SQLite file, or nbgrader's ``db_url`` (PostgreSQL)."""
    import datetime
    import sqlite3

    rows: list[Any]
    if isinstance(gradebook, str) and is_url(gradebook):
        rows = gradebook_due_rows(gradebook)  # (never waits on another session's lock: the rows read before)
    else:
        gradebook = Path(gradebook)
        if not gradebook.is_file():
            return {}
        with sqlite3.connect(f"file:{gradebook}?mode=ro", uri=True) as db:
            try:
                rows = db.execute("SELECT name, duedate FROM assignment").fetchall()
            except sqlite3.Error:
                return {}
    found: dict[str, float] = {}
    for name, due in rows:
        if due:
            found[name] = datetime.datetime.fromisoformat(str(due)).replace(tzinfo=datetime.UTC).timestamp()
    return found


def copies_to_remove(settled: list[Any], keep: int) -> list[tuple[str, str, str, float]]:
    """Of the settled attempts (``Queue.settled_copies``), those whose copy may go, as
    ``exchange.prune`` takes them: per student and assignment, all but the ``keep`` newest and each
    one that may still count (the latest and the best graded: the recorder copies it into
    submitted/). A copy still queued, grading or holding a page withheld until the due date is
    never settled, so never listed."""
    by_pair: dict[tuple[str, str], list[Any]] = {}
    for row in settled:
        by_pair.setdefault((row["student"], row["assignment"]), []).append(row)
    removable: list[tuple[str, str, str, float]] = []
    for rows in by_pair.values():
        graded = [row for row in rows if row["state"] == DELIVERED and row["score"] is not None]
        latest = max(graded, key=lambda row: (row["noticed"], row["id"]), default=None)
        best = max(graded, key=lambda row: (row["score"], row["noticed"]), default=None)
        counts = {row["id"] for row in (latest, best) if row is not None}
        newest = sorted(rows, key=lambda row: (row["noticed"], row["id"]), reverse=True)
        removable += [(row["inbound"], row["student"], row["assignment"], row["noticed"]) for row in newest[keep:] if row["id"] not in counts]
    return removable


def one_service(state: Path, replica: str) -> int:
    """The course's service lock (``serve.lock`` in its folder; ``serve-<replica>.lock`` for a
    replica of a shared queue), taken without waiting and held by the returned descriptor until
    this process ends (a ``kill -9`` included: the kernel releases it). Held by another process:
    GraderError naming its pid and how to stop it."""
    import fcntl

    path = state / (f"serve-{replica}.lock" if replica else "serve.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise GraderError(
            _(
                "这个课程已有一个 attnkit serve 在运行（pid {pid}）：一个课程只能有一个评分服务。"
                "先停止它（kill -TERM {pid}，或 systemctl stop attnkit-serve），或用 --status 查看它"
            ).format(pid=holder)
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a full disk: the pid is only what a second start names; the lock is held all the same
    return fd


@dataclass
class Metrics:
    """What /metrics serves (Prometheus' text format) and --status prints of this run."""

    graded: int = 0
    refused: int = 0
    failed: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0
    unfinished_ignored: int = 0

    def observe(self, seconds: float) -> None:
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.latency_counts[index] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def text(self, queued: int, in_flight: int, replica: str = "", mine: int = 0, ready: bool = True) -> str:
        """``queued``, ``in_flight``: the whole queue's (every replica's); ``mine``: this replica's."""
        name = replica.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines = [
            "# HELP attnkit_serve_replica_info This replica's name (the holder of its queue leases).",
            "# TYPE attnkit_serve_replica_info gauge",
            f'attnkit_serve_replica_info{{replica="{name}"}} 1',
            "# HELP attnkit_serve_ready 1 when this replica's warm workers are up (what /health says).",
            "# TYPE attnkit_serve_ready gauge",
            f'attnkit_serve_ready{{replica="{name}"}} {int(ready)}',
            "# HELP attnkit_serve_replica_in_flight Submissions this replica is grading.",
            "# TYPE attnkit_serve_replica_in_flight gauge",
            f'attnkit_serve_replica_in_flight{{replica="{name}"}} {mine}',
            "# HELP attnkit_serve_queue_length Submissions waiting to be graded.",
            "# TYPE attnkit_serve_queue_length gauge",
            f"attnkit_serve_queue_length {queued}",
            "# HELP attnkit_serve_in_flight Submissions being graded.",
            "# TYPE attnkit_serve_in_flight gauge",
            f"attnkit_serve_in_flight {in_flight}",
            "# TYPE attnkit_serve_graded_total counter",
            f"attnkit_serve_graded_total {self.graded}",
            "# TYPE attnkit_serve_refused_total counter",
            f"attnkit_serve_refused_total {self.refused}",
            "# TYPE attnkit_serve_failed_total counter",
            f"attnkit_serve_failed_total {self.failed}",
            "# HELP attnkit_serve_unfinished_ignored_total Unfinished names in inbound/ ignored over their owner's cap.",
            "# TYPE attnkit_serve_unfinished_ignored_total counter",
            f"attnkit_serve_unfinished_ignored_total {self.unfinished_ignored}",
            "# HELP attnkit_serve_latency_seconds From the folder noticed complete to the page fetchable.",
            "# TYPE attnkit_serve_latency_seconds histogram",
        ]
        lines += [f'attnkit_serve_latency_seconds_bucket{{le="{bound:g}"}} {count}' for bound, count in zip(BUCKETS, self.latency_counts, strict=True)]
        lines += [
            f'attnkit_serve_latency_seconds_bucket{{le="+Inf"}} {self.latency_count}',
            f"attnkit_serve_latency_seconds_sum {self.latency_sum:.6f}",
            f"attnkit_serve_latency_seconds_count {self.latency_count}",
        ]
        return "\n".join(lines) + "\n"


@dataclass
class InFlight:
    row: Row
    job: Job
    staged: Path  # the copy graded: attempts/<inbound>/<student>/<assignment>
    sent: float = field(default_factory=time.time)  # when a worker was given it


class Service:
    def __init__(
        self,
        course: ex.Course,
        autograder: Path,
        workers: int,
        limits: Limits,
        hide: list[str],
        gradebook: Path | str | None,
        metrics_port: int | None,
        seed: Seed | None,
        log: TextIO = sys.stderr,
        queue_url: str | None = None,
        replica: str = "",
        lease_seconds: float = 30.0,
        metrics_host: str = "127.0.0.1",
        hub: bool = False,
        hub_process: subprocess.Popen | None = None,
    ) -> None:
        """``gradebook``: nbgrader's SQLite file, or its ``db_url`` (a string: PostgreSQL);
        ``queue_url``: a PostgreSQL URL shared by replicas (None: ``.attnkit-serve/service.db``);
        ``replica``: this one's name among them (default: host and pid); ``hub_process``: the hub
        side, started by the command line before the engine's imports (``hub_process.start``), else
        started by ``run``."""
        self.course = course
        self.state = course.root / STATE_FOLDER
        self.state.mkdir(mode=0o700, exist_ok=True)
        self.state.chmod(0o700)  # the copies hold students' secrets
        self.attempts = self.state / "attempts"
        self.attempts.mkdir(exist_ok=True)
        self.replica = replica or f"{socket.gethostname()}-{os.getpid()}"
        # One service per course (per replica name with a shared queue): held until this process ends.
        self.lock = one_service(self.state, replica if queue_url else "")
        self.queue = open_queue(queue_url or self.state / "service.db", self.replica, lease_seconds)
        self.running = False  # the loop has started (its workers too): /health may say ready
        self.warming: dict[int, Job] = {}  # the warm-up jobs not yet graded (``warm_up``; ids below 0, never a row's): not ready until none
        self.warm_since = 0.0
        self.autograder = autograder
        compile_suites(autograder)  # a broken hidden file: exit 2 naming it, its line and the error (issue 50)
        self.suites: dict[str, Assignment] = discover(autograder)
        self.config = course_config(course.root)  # nbgrader's: the late rule (LateSubmissionPlugin) too
        self.late_plugin: Any = None  # the course's LateSubmissionPlugin, made at the first late submission
        self.policies_placed = True  # the public policies file (``place_policies``); False: placed again at the resume
        self.policies: dict[str, Policy] = policies_from(self.config)
        show_times_in(self.config)
        self.gradebook = gradebook
        self.log = log
        self.metrics = Metrics()
        self.digests: dict[tuple[Path, str], str] = {}
        self.in_flight: dict[int, InFlight] = {}  # by the submission's id in the queue
        self.known = self.queue.known()
        # Folders seen unfinished, with when: looked at again when an event names them, or by a
        # rescan once RECHECK_UNFINISHED_SECONDS have passed (never all of them on every event);
        # at most UNFINISHED_PER_OWNER per uid owning them (service.unfinished).
        self.pending = Unfinished(UNFINISHED_PER_OWNER, RECHECK_UNFINISHED_SECONDS)
        self.capped_logged: dict[int, float] = {}  # uid: when its unfinished-capped line was logged
        self.to_look: dict[str, None] = {}  # names waiting to be looked at, in order, each once
        self.scanning: Any = None  # the rescan under way (os.scandir's iterator), NAMES_PER_TURN at a time
        self.uid = os.geteuid()
        self.stopping = False
        self.dues: dict[str, float] = {}
        self.dues_read = 0.0
        self.pool = WarmPool(autograder, workers, limits, hide, self.on_record, seed, on_event=self.emit)
        self.recorder: subprocess.Popen | None = None
        self.recorder_restarts: list[float] = []  # when the recorder was started again (monotonic), for the bound
        self.recorder_due: float | None = None  # a dead recorder's restart, at this time (monotonic)
        # A transient fault of the host (``is_transient``): intake and claims paused until it passes.
        self.paused: str | None = None  # why, while paused
        self.paused_since = 0.0
        self.probed = 0.0
        self.held: list[tuple[InFlight, SubmissionRecord]] = []  # records graded while paused, delivered at the resume
        self.must_recover = False  # the start's recover() waits for the resume
        self.last_scan = self.last_prune = 0.0  # when inbound/ was last rescanned, the copies last pruned (monotonic)
        self.listener: socket.socket | None = None
        self.endpoint: Endpoint | None = None  # /metrics and /health, served by this loop without blocking it
        if metrics_port is not None:
            self.listener = socket.create_server((metrics_host, metrics_port))
            self.endpoint = Endpoint(self.listener, self.metrics_answer)
            os.register_at_fork(after_in_child=self.endpoint.close)  # a worker keeps no client's connection
        from inotify_simple import INotify

        self.inotify = INotify()
        self.inotify.add_watch(str(course.inbound), flags.CREATE | flags.ATTRIB | flags.MOVED_TO | flags.CLOSE_WRITE)
        # --hub: the HTTP side inside JupyterHub (service.hub, a process of its own) spools what
        # hub users post (service.http_submit); its notices wake this loop like inbound/'s folders.
        self.hub = hub
        self.hub_process = hub_process
        if hub_process is not None:
            self.pool.keep.add(hub_process.pid)
        self.spool_watch = -1
        if hub:
            (self.state / SPOOL).mkdir(mode=0o700, exist_ok=True)
            self.spool_watch = self.inotify.add_watch(str(self.state / SPOOL), flags.MOVED_TO)
        # A worker is forked from this process: it must not keep the /metrics port (a restart
        # after a kill -9 could not listen again while an orphan holds it) nor the inotify watch.
        os.register_at_fork(after_in_child=self.close_in_child)

    def close_in_child(self) -> None:
        # And it ends with the service: killed -9, the service leaves no worker behind (a forked
        # worker holds its own pipe's other end, so it would never see the service gone).
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        for handle in (self.listener, self.inotify):
            try:
                if handle is not None:
                    handle.close()
            except OSError:
                pass
        os.close(self.lock)  # the lock is the service's: a worker left behind must not hold it
        # Nor the service's database connections: forgotten here, never closed (closing one
        # would end the service's own session on the shared socket).
        engines = [getattr(self.queue, "engine", None), *GRADEBOOK_ENGINES.values()]
        for engine in engines:
            if engine is not None:
                engine.dispose(close=False)

    # -- intake ------------------------------------------------------------------------------
    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"time": round(time.time(), 3), "event": event, **fields}, ensure_ascii=False)
        # A name's undecodable bytes (surrogates) written escaped: a log line never raises.
        try:
            print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=self.log, flush=True)
        except OSError:
            pass  # the log's own disk full: the line is lost, never the service (the journal usually lives elsewhere)

    def look(self, names: list[str]) -> None:
        """Names in inbound/ to look at (an event's), after those already waiting."""
        for name in names:
            self.to_look[name] = None

    def rescan(self) -> None:
        """Start a full look at inbound/ (spread over the next turns: ``take_turn``), and take what
        the hub's side spooled."""
        if self.hub:
            self.take_spooled()
        if self.scanning is None:
            try:
                self.scanning = os.scandir(self.course.inbound)
            except OSError:
                self.scanning = None

    def take_turn(self) -> bool:
        """Look at up to NAMES_PER_TURN names: the events' first, then the rescan's. True when
        more are waiting (the loop then does not sleep). However many names a student makes, a
        turn of the loop costs a bounded amount: a classmate's page and /health never wait on them."""
        budget = NAMES_PER_TURN
        while budget and self.to_look:
            name = next(iter(self.to_look))
            del self.to_look[name]
            budget -= self.consider(name)
        now = time.monotonic()
        while budget and self.scanning is not None:
            entry = next(self.scanning, None)
            if entry is None:
                self.scanning.close()
                self.scanning = None
                self.pending.rescanned()
                break
            name = entry.name
            budget -= 1
            if name in self.known or self.pending.skip(name, now):
                continue
            budget -= self.consider(name)
            budget = max(budget, 0)
        return bool(self.to_look) or self.scanning is not None

    def take_spooled(self) -> None:
        try:
            for taken in take_spooled(self.state, self.notice_http):
                self.emit("queued", inbound=taken.name, student=taken.student, assignment=taken.assignment, channel="hub")
        except Exception as error:  # a spooled notice is the hub side's own (validated there): logged, never fatal
            if is_the_services(error):
                raise
            self.emit("spool-problem", error=f"{type(error).__name__}: {error}")

    def notice_http(self, name: str, student: str, assignment: str, timestamp: str, noticed: float) -> None:
        self.known.add(name)
        self.queue.notice(name, student, assignment, timestamp, noticed)

    def consider(self, name: str) -> int:
        """Look at folder ``name`` of inbound/ once; its cost in the turn's budget. Nothing a
        folder holds can stop the service: whatever is raised on its behalf makes it ``refused``
        with the cause (the database's own failures and the grader's are the service's: they stop it)."""
        if name in self.known:
            self.pending.pop(name, None)
            return 0
        try:
            return self.take_in(name)
        except Exception as error:
            if is_the_services(error) or is_transient(error):
                if is_transient(error):
                    shutil.rmtree(self.attempts / name, ignore_errors=True)  # a partial copy: taken again at the resume's rescan
                raise
            self.pending.pop(name, None)
            self.known.add(name)
            key = ex.inbound_key(name)
            claimed = ex.parse_name(key) if key == name else None
            cause = _("无法接收这个提交文件夹（{kind}：{message}），未评分").format(kind=type(error).__name__, message=str(error)[:200])
            if self.queue.refuse(key, claimed.student if claimed else "", claimed.assignment if claimed else "", "", cause) is not None:
                self.metrics.refused += 1
                self.emit("refused", inbound=key, cause=cause)
            return 1

    def take_in(self, name: str) -> int:
        key = ex.inbound_key(name)
        if key != name:  # bytes that are not a name a student's nbgrader makes: recorded (escaped) and refused
            self.known.add(name)
            cause = _("提交文件夹的名字含有无效的字节或控制字符，未评分")
            if self.queue.refuse(key, "", "", "", cause) is not None:
                self.metrics.refused += 1
                self.emit("refused", inbound=key, cause=cause)
            return 1
        claimed = ex.parse_name(name)
        if claimed is None:
            return 1
        # Finished, whose, and copied in one pass over one opening of the folder (ex.take). A row
        # in the queue always has its copy (made before the row is written).
        staged = self.attempts / name / claimed.student / claimed.assignment
        taken = ex.take(self.course.inbound, name, claimed.student, self.uid, staged, held=lambda: ex.held_by(self.attempts, claimed.student))
        if taken.pending:
            self.hold_unfinished(name, taken.owner)
            return 1
        self.pending.pop(name, None)
        self.known.add(name)
        # The service's clock: when it first saw the folder complete, or the kernel's record of
        # the last change of the folder and what was copied from it where that is earlier (the
        # service was down when it came). Never the student's timestamp.txt (kept for display).
        noticed = min(time.time(), taken.changed) if taken.ok else time.time()
        timestamp, problem = taken.timestamp or claimed.timestamp, taken.reason
        if taken.ok and self.queue.waiting(claimed.student) >= MAX_WAITING:
            shutil.rmtree(self.attempts / name, ignore_errors=True)
            problem = _("你已有 {count} 份提交在排队等待评分（上限）：这份未评分，请等反馈后再提交").format(count=MAX_WAITING)
        if problem:
            if self.queue.refuse(name, claimed.student, claimed.assignment, timestamp, problem, noticed) is None:
                return 2  # another replica refused it already
            self.metrics.refused += 1
            self.emit("refused", inbound=name, student=claimed.student, assignment=claimed.assignment, cause=problem)
            return 2
        if self.queue.notice(name, claimed.student, claimed.assignment, timestamp, noticed) is not None:
            self.emit("queued", inbound=name, student=claimed.student, assignment=claimed.assignment)
        return 4

    def hold_unfinished(self, name: str, owner: int | None) -> None:
        """An unfinished name, held to be looked at again, or over its owner's cap: ignored,
        counted, and logged once per owner per CAPPED_LOG_SECONDS (never a line per name)."""
        if self.pending.hold(name, owner, time.monotonic()) or owner is None:
            return
        self.metrics.unfinished_ignored += 1
        if time.monotonic() - self.capped_logged.get(owner, -math.inf) >= CAPPED_LOG_SECONDS:
            self.capped_logged[owner] = time.monotonic()
            self.emit("unfinished-capped", uid=owner, count=self.pending.ignored_by[owner], cap=UNFINISHED_PER_OWNER)

    # -- grading -----------------------------------------------------------------------------
    def dispatch(self) -> None:
        """Fair jobs to idle workers (``Queue.claim``); a row whose start raises is failed with the cause."""
        for row in self.queue.claim(self.pool.free()):
            with self.on_behalf_of(row):
                self.start(row)

    @contextmanager
    def on_behalf_of(self, row: Row) -> Iterator[None]:
        """The boundary around one submission's work: anything raised for it (its files, its
        secret, its record turned into a page) makes that row ``failed`` with the cause, on the
        student's page and in ``--status``, never the service's exit. The grader's own failures
        (``GraderError``: the suite, the sandbox) and the database's stop the service, as before."""
        try:
            yield
        except Exception as error:
            if is_the_services(error) or is_transient(error):
                raise
            self.in_flight.pop(row.id, None)
            cause = _("评分服务无法处理这份提交（{kind}：{message}）").format(kind=type(error).__name__, message=str(error)[:200])
            if self.queue.fail(row.id, cause):
                self.metrics.failed += 1
                self.emit("failed", id=row.id, student=row.student, assignment=row.assignment, cause=cause)

    def start(self, row: Row) -> None:
        """Row ``row`` (just claimed) to a worker, or failed with why it cannot be graded."""
        if row.assignment not in self.suites:
            self.queue.fail(row.id, _("作业 {assignment} 没有隐藏测试").format(assignment=row.assignment))
            self.metrics.failed += 1
            self.emit("failed", id=row.id, student=row.student, assignment=row.assignment, cause="no hidden suite")
            return
        root = self.attempts / row.inbound
        if not (root / row.student / row.assignment).is_dir():  # lost with a power cut: copied again, checked again
            held = ex.held_by(self.attempts, row.student)
            taken = ex.take(self.course.inbound, row.inbound, row.student, self.uid, root / row.student / row.assignment, held=held)
            if not taken.ok:
                self.queue.fail(row.id, _("提交文件夹已不在交换目录里") if taken.pending else taken.reason)
                self.metrics.failed += 1
                return
        intake = find_jobs(root, self.suites, row.assignment, self.digests)
        job = next((job for job in intake.jobs if job.student_id == row.student), None)
        if job is None:
            self.queue.fail(row.id, _("提交里没有可评分的内容"))
            self.metrics.failed += 1
            return
        job.id = row.id  # on every message about it between here, the pool and its worker
        self.in_flight[row.id] = InFlight(row, job, root / row.student / row.assignment)
        self.pool.submit(job)

    def on_record(self, job: Job, record: SubmissionRecord) -> None:
        """``record``, computed for ``job`` (the pool's word: the worker named its id): delivered
        to that row only. A result for a row no longer in flight here (failed meanwhile, or
        already delivered) is discarded and logged, never attached to another submission."""
        if self.warming.get(job.id) is job:
            self.on_warm_record(job, record)
            return
        flight = self.in_flight.get(job.id)
        if flight is None or flight.job is not job:
            self.emit("discarded", kind="record", job=job.id, about=job.key, why="not in flight")
            return
        if self.paused is not None:
            self.held.append((flight, record))  # delivered at the resume, in order
            return
        try:
            with self.on_behalf_of(flight.row):
                self.deliver(flight, record)
                self.in_flight.pop(flight.row.id, None)
        except Exception as error:
            if not is_transient(error):
                raise
            self.held.append((flight, record))
            self.pause(error)

    def deliver(self, flight: InFlight, record: SubmissionRecord) -> None:
        """The record as results, its page placed as the policy allows, the row delivered."""
        row = flight.row
        received = time.time()
        # The results and the page as `attnkit grade` writes them (report.store), kept in the
        # database and the exchange only: no graded/ folder, no fsync on the feedback's way.
        suite = self.suites[row.assignment]
        results = results_json(record, suite)
        if not flight.job.notebooks and not results.get("not_graded"):
            # No notebook was read (a link, none, several): not graded, never a 0 over the student's score.
            results["not_graded"] = "; ".join(results["problems"]) or _("提交里没有可评分的内容")
        late = self.lateness(row, results)
        if late is not None:
            results["late"] = late
        policy = self.policies.get(row.assignment, DEFAULT)
        if policy.hints == "ladder" and results["diagnoses"] and not results.get("not_graded"):
            # The next level of each diagnosis's hints, from what this student's earlier pages
            # showed (the queue's: it survives a restart; one in flight per student, so no other
            # page of theirs is being delivered meanwhile). The scores are untouched.
            results["hints"] = ladder_levels(results["diagnoses"], self.queue.hints_seen(row.student, row.assignment))
        full = bounded_feedback(results, suite).encode()
        now = time.time()
        shown, page = self.page_for(row, results, policy, full, now)
        if shown != "full":  # kept with the submission's copy: released in place after the due date
            (self.attempts / row.inbound / "feedback.html").write_bytes(full)
        names = [
            ex.feedback_name(flight.staged, self.course.course_id, row.student, row.assignment, Path(notebook).stem, row.timestamp)
            for notebook in sorted(p.name for p in flight.staged.glob("*.ipynb"))
        ] or [
            ex.feedback_name(flight.staged, self.course.course_id, row.student, row.assignment, Path(self.suites[row.assignment].notebook).stem, row.timestamp)
        ]
        for name in names:
            ex.place_feedback(self.course, name, page, row.student)
        graded = not results.get("not_graded")
        score = results["score"] if graded else None
        if not self.queue.deliver(row.id, dict(results), names[0], shown, score, results["max_score"], now, hints=results.get("hints")):
            return
        marks = json.dumps(marks_json(results, suite, shown, self.limit_of(row.student, row.assignment, now)), ensure_ascii=False).encode()
        for name in names:
            ex.place_marks(self.course, name, marks, row.student)
        latency = time.time() - row.noticed
        self.metrics.graded += 1
        self.metrics.observe(latency)
        self.emit(
            "delivered",
            id=row.id,
            student=row.student,
            assignment=row.assignment,
            attempt=self.queue.row(row.id).attempt,
            score=score,
            max_score=results["max_score"],
            shown=shown,
            hints=results.get("hints", {}),
            latency=round(latency, 4),
            # Where the time went: waiting for a worker, grading, the page written and delivered.
            waited=round(flight.sent - row.noticed, 4),
            grading=round(received - flight.sent, 4),
            delivering=round(time.time() - received, 4),
            layer=results.get("isolation", ""),
            not_graded=results.get("not_graded", ""),
        )

    def lateness(self, row: Row, results: ResultsJson) -> dict[str, Any] | None:
        """What ``nbgrader export`` will say of this submission's lateness once the recorder has
        saved it (``course.lateness``, the path ``attnkit grade`` takes too): its due date with the
        student's extension, the course's own ``LateSubmissionPlugin`` class, each notebook's
        penalty clamped. None when it is not late by the assignment's due date (an extension only
        moves it later) or there is no due date; the gradebook is asked only then.
        The submission's time is the service's (``row.noticed``: when it saw the folder complete,
        the recorder writes the same into ``submitted/``), never the student's own timestamp.txt."""
        import datetime

        from attnkit.course.lateness import GradebookLateness, course_late_plugin
        from attnkit.course.nbgrader_commands import kit_scores
        from attnkit.service.queue.postgres import engine_url

        due = self.due(row.assignment)
        if due is None or row.noticed <= due or self.gradebook is None:
            return None
        if self.late_plugin is None:
            self.late_plugin = course_late_plugin(self.course.root)
        key = (row.student, row.assignment)
        noticed = datetime.datetime.fromtimestamp(row.noticed, tz=datetime.UTC).replace(tzinfo=None)  # nbgrader's naive UTC
        gradebook = engine_url(str(self.gradebook)) if is_url(str(self.gradebook)) else Path(self.gradebook)
        lateness = GradebookLateness.read(gradebook, None, [key], self.course.root, timestamps={key: noticed}, plugin=self.late_plugin)
        facts = lateness.facts[key]
        if not facts.notebooks:
            # The assignment's notebooks are not in the gradebook yet (a due date set by `nbgrader db
            # assignment add`; the recorder registers them with this first record): one notebook
            # holding the suite's grade cells, as the recorder will register it.
            facts.notebooks = {Path(self.suites[row.assignment].notebook).stem: sorted(kit_scores(results))}
            facts.max_score = float(results["max_score"])
            if facts.duedate is None:
                facts.duedate = datetime.datetime.fromtimestamp(due, tz=datetime.UTC).replace(tzinfo=None)
        late = lateness.of(results)
        if late is None or late["seconds_late"] <= 0:
            return None
        return late

    def page_for(self, row: Row, results: ResultsJson, policy: Policy, full: bytes, now: float) -> tuple[str, bytes]:
        """What the student sees of this graded submission, as the assignment's policy says. One
        that could not be graded says so at once, whatever the policy: it shows no score, it is no
        attempt (``shown`` "not-graded" is not counted), and the gradebook keeps the earlier one."""
        if results.get("not_graded"):
            return "not-graded", not_graded_page(row.assignment, results["not_graded"]).encode()
        if policy.visibility == "after-due":
            due = self.due(row.assignment)
            if due is None or now < due:
                return "after-due", withheld_page(row.assignment, after_due_reason(due)).encode()
        if policy.attempts:
            next_at = next_feedback_at(policy, self.queue.shown_times(row.student, row.assignment, now - policy.window_seconds))
            if next_at is not None:
                return "withheld", withheld_page(row.assignment, limit_reason(policy, next_at)).encode()
        if policy.visibility == "scores":
            return "scores", scores_page(results, self.suites.get(row.assignment)).encode()
        return "full", full

    def limit_of(self, student: str, assignment: str, now: float) -> dict[str, Any]:
        """The attempts the assignment's window allows and when the student's counted ones were
        delivered (the lab extension says from these how many are left and when the next comes)."""
        policy = self.policies.get(assignment, DEFAULT)
        counted = self.queue.shown_times(student, assignment, now - policy.window_seconds) if policy.attempts else []
        return {"attempts": policy.attempts, "window_seconds": policy.window_seconds, "counted": counted}

    def place_policies(self) -> None:
        """The public policies file (``exchange.place_policies``): the attempts per window of each assignment."""
        policies = {name: self.policies.get(name, DEFAULT) for name in self.suites}
        public = {name: {"attempts": p.attempts, "window_seconds": p.window_seconds} for name, p in policies.items()}
        try:
            ex.place_policies(self.course, json.dumps({"format": 1, "assignments": public}).encode())
        except OSError as error:  # a full disk at the start: placed again when the service resumes (``probe``)
            self.policies_placed = False
            self.emit("policies-not-placed", reason=f"{type(error).__name__}: {error}")
            return
        self.policies_placed = True

    def due(self, assignment: str) -> float | None:
        if self.gradebook is not None and time.monotonic() - self.dues_read > DUE_SECONDS:
            self.dues, self.dues_read = due_dates(self.gradebook), time.monotonic()
        return self.dues.get(assignment)

    def release_after_due(self) -> None:
        """Pages withheld until the due date, once it has passed: each becomes the page ``full``
        visibility under the same attempt limit would have given it when it was delivered
        (``policies.released_at_due``: the limit holds under after-due, issue 48): its full page in
        place of its withheld one, or, past the limit in its window, the limit's page, saying why.
        Every submission has its own page: no other is touched."""
        for assignment, policy in self.policies.items():
            due = self.due(assignment) if policy.visibility == "after-due" else None
            if due is None or time.time() < due:
                continue
            pages = self.queue.withheld_after_due(assignment)
            for _student, group in itertools.groupby(pages, key=lambda page: page["student"]):
                mine = list(group)
                for row, next_at in zip(mine, released_at_due(policy, [(float(r["finished"]), r["shown"]) for r in mine]), strict=True):
                    if row["shown"] != "after-due":
                        continue
                    if next_at is None:
                        kept = self.attempts / row["inbound"] / "feedback.html"
                        if kept.is_file():
                            ex.place_feedback(self.course, row["feedback"], kept.read_bytes(), row["student"])
                        if self.queue.release_shown(row["id"], "released"):
                            self.emit("released", id=row["id"], assignment=assignment)
                    else:
                        ex.place_feedback(self.course, row["feedback"], withheld_page(assignment, limit_reason(policy, next_at)).encode(), row["student"])
                        if self.queue.release_shown(row["id"], "withheld"):
                            self.emit("withheld", id=row["id"], assignment=assignment, reason="attempts", next=round(next_at, 3))

    def prune_copies(self) -> list[str]:
        """The retention of the service's copies (``attempts/``, docs/service.md; ``copies_to_remove``).
        The names removed."""
        removed = ex.prune(self.attempts, copies_to_remove(self.queue.settled_copies(), KEEP_COPIES), keep=0)
        if removed:
            self.emit("pruned", count=len(removed))
        return removed

    # -- metrics and health ------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """Whether this replica can take work now, and why not: its loop running with every warm
        worker alive, its recorder alive, its database answering."""
        if not self.running:
            return False, "starting"
        if self.paused is not None:
            return False, f"paused: {self.paused}"  # the database is not asked: it may be what is gone
        if self.warming:
            return False, "warming"
        alive = sum(1 for worker in self.pool.pool.values() if worker.process.is_alive())
        if alive < self.pool.workers:
            return False, f"workers {alive}/{self.pool.workers}"
        if self.recorder is not None and self.recorder.poll() is not None:
            return False, "recorder stopped"
        try:
            self.queue.counts()
        except Exception as error:  # the database's own error, whatever its driver: not ready
            return False, f"database: {type(error).__name__}"
        return True, "ready"

    def answer_metrics(self, ready: list[Any]) -> None:
        """The ``/metrics`` and ``/health`` port's turn in the loop (``metrics_endpoint``): its
        connections are non-blocking and in the loop's wait set; what ``ready`` says can be read is
        read, a complete request line answered, a connection dropped after its deadline. Nothing
        here waits for a client (issue 48: idle connections held the loop for a second each)."""
        assert self.endpoint is not None
        self.endpoint.turn(ready)

    def metrics_answer(self, path: bytes) -> tuple[bytes, bytes, bytes]:
        """``GET /health``: 200 "ready" (or 503 and why not), for a readiness probe or a load
        balancer; any other path: ``/metrics`` (Prometheus' text format). (status, type, body)."""
        if path == b"/lti/jwks":  # the tool's public key set for the LMS (docs/lms.md); its private half never leaves the file
            return self.lti_jwks()
        ready, why = self.readiness()
        if path == b"/health":
            status = b"200 OK" if ready else b"503 Service Unavailable"
            body = json.dumps({"status": why, "replica": self.replica, "workers": self.pool.workers, "in_flight": len(self.in_flight)}).encode()
            return status, b"application/json", body
        try:
            counts = self.queue.counts()
        except Exception as error:
            if not is_transient(error):
                raise
            counts = {QUEUED: -1, GRADING: -1}  # unknown while the database is out of reach
        body = self.metrics.text(counts[QUEUED], counts[GRADING], self.replica, len(self.in_flight), ready).encode()
        return b"200 OK", b"text/plain; version=0.0.4", body

    def lti_jwks(self) -> tuple[bytes, bytes, bytes]:
        from attnkit.lms.keys import jwks
        from attnkit.lms.settings import registration_of

        registration = registration_of(self.course.root)
        if registration is None:
            return b"404 Not Found", b"text/plain", b"no LMS is connected to this course\n"
        return b"200 OK", b"application/json", json.dumps(jwks(registration.key_path)).encode()

    # -- transient faults ----------------------------------------------------------------------
    def pause(self, error: BaseException) -> None:
        """A transient fault (``is_transient``): no intake and no claims until ``probe`` finds it
        passed; what the workers have is graded and its record held (``held``). One log line
        (``paused``) per pause, and ``--status`` says it (``paused.txt`` in the service's folder)."""
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        if self.paused is None:
            self.paused, self.paused_since, self.probed = reason, time.monotonic(), time.monotonic()
            self.emit("paused", reason=reason, held=len(self.held))
            try:
                (self.state / PAUSED_FILE).write_text(f"{time.time():.0f} {reason}")
            except OSError:
                pass  # the disk that is full: --status then measures the space itself

    def disk_short(self) -> OSError | None:
        """The course's or the exchange's file system with less than MIN_FREE_BYTES free, as the
        error a copy there would meet (ENOSPC, with how much is left where), or None."""
        import errno

        for folder in (self.course.root, self.course.inbound):
            free = free_bytes(folder)
            if free is not None and free < MIN_FREE_BYTES:
                return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({free} bytes free on {folder}; intake resumes at {MIN_FREE_BYTES})")
        return None

    def probe(self) -> None:
        """While paused, every PROBE_SECONDS: enough free space on the course's and the exchange's
        file systems, the database answering; then the held records delivered, intake resumed
        (a full rescan of inbound/: what came meanwhile is taken in order), ``resumed`` logged."""
        if self.paused is None or time.monotonic() - self.probed < PROBE_SECONDS:
            return
        self.probed = time.monotonic()
        if self.disk_short() is not None:
            return
        try:
            self.queue.ping()
            if self.must_recover:
                self.emit("requeued", count=self.queue.recover())
                self.must_recover = False
            while self.held:
                flight, record = self.held[0]
                with self.on_behalf_of(flight.row):
                    self.deliver(flight, record)
                    self.in_flight.pop(flight.row.id, None)
                self.held.pop(0)
        except Exception as error:
            if not is_transient(error):
                raise
            return
        self.emit("resumed", reason=self.paused, seconds=round(time.monotonic() - self.paused_since, 3))
        if not self.policies_placed:
            self.place_policies()
        self.paused = None
        (self.state / PAUSED_FILE).unlink(missing_ok=True)
        self.pending.clear()
        self.rescan()

    def paused_turn(self, ready: list[Any]) -> None:
        """A turn of the loop while paused: the workers' records read (and held), inotify's events
        read and dropped (the resume rescans), /health answered (503, why), the recorder watched."""
        if self.inotify.fileno() in ready:
            self.inotify.read(timeout=0)
        if self.endpoint is not None:
            self.answer_metrics(ready)
        self.pool.pump([r for r in ready if r in self.pool.pool])
        self.watch_recorder()
        self.probe()

    # -- the loop ----------------------------------------------------------------------------
    def start_recorder(self) -> None:
        if self.gradebook is None:
            return
        policies = json.dumps({name: asdict(policy) for name, policy in self.policies.items()})
        self.recorder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnkit.service.recorder",
                str(self.course.root),
                self.queue.url,
                str(self.gradebook),
                policies,
                str(os.getpid()),
                f"{self.replica}-recorder",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        self.pool.keep.add(self.recorder.pid)

    def watch_recorder(self) -> None:
        """The recorder, started again if it died (killed, the OOM killer, a crash): what it had
        not recorded is in the queue (``unrecorded``) and the new one records it. At most
        RECORDER_RESTARTS restarts within RECORDER_RESTART_WINDOW seconds, each after a pause
        doubling from a second; beyond that, or when it stopped for a person to fix (exit 2:
        the course's configuration, the gradebook at odds with solutions/), the service stops
        (exit 2) saying why, the file and line of a broken configuration included."""
        if self.recorder is None or self.recorder.poll() is None:
            return
        code = self.recorder.returncode
        now = time.monotonic()
        if self.recorder_due is None:
            reason = recorder_stopped_reason(self.state)
            if code == PERSON_MUST_FIX and reason:
                raise GraderError(reason)
            course_config(self.course.root)  # a configuration broken meanwhile: named (GraderError), never a restart loop
            self.recorder_restarts = [at for at in self.recorder_restarts if now - at < RECORDER_RESTART_WINDOW]
            if len(self.recorder_restarts) >= RECORDER_RESTARTS:
                raise GraderError(
                    _("成绩册记录进程在 {minutes:.0f} 分钟内退出了 {count} 次（最后退出码 {code}），不再重启").format(
                        minutes=RECORDER_RESTART_WINDOW / 60, count=len(self.recorder_restarts) + 1, code=code
                    )
                )
            delay = min(2.0 ** len(self.recorder_restarts), 30.0)
            self.recorder_due = now + delay
            self.emit("recorder-died", code=code, restart_in=delay, unrecorded=self.queue.unrecorded())
            return
        if now >= self.recorder_due:
            self.recorder_due = None
            self.recorder_restarts.append(now)
            self.start_recorder()
            self.emit("recorder-restarted", pid=self.recorder.pid)

    def start_hub(self) -> None:
        """The HTTP side (``python -m attnkit.service.hub``), again if it died: it dies with us."""
        if not self.hub or (self.hub_process is not None and self.hub_process.poll() is None):
            return
        if self.hub_process is not None:
            if self.hub_process.returncode == 2:  # it cannot serve here (its log line says why): no restart loop
                raise GraderError(_("JupyterHub 服务的 HTTP 进程无法启动（见日志）"))
            self.emit("hub-restarted", code=self.hub_process.returncode)
        # the queue it reads: this loop's
        self.hub_process = hub_side.start(self.course.root, self.autograder, self.state, self.course.feedback, str(self.queue.url), self.log)
        self.pool.keep.add(self.hub_process.pid)

    def warm_up(self) -> None:
        """Each worker's first chunk: the source notebook of every assignment, graded and thrown away
        (issue 49). A worker's first grading opens its pytest session, plans the assignment on its
        source notebook, waits for its zygote and makes the zygote's first fork; the first student
        after a start paid that (grading 1.8 s against 0.1-0.3 s). Until these are graded the
        service is warming (``readiness``, the hub side's ``/health``); submissions are queued meanwhile
        and start as workers come free."""
        folder = self.state / "warm-up"
        shutil.rmtree(folder, ignore_errors=True)
        for slot in range(self.pool.workers):
            for name, suite in sorted(self.suites.items()):
                target = folder / f"{WARM_UP_STUDENT}{slot}" / name
                target.mkdir(parents=True)
                shutil.copyfile(suite.source, target / suite.notebook)
        self.warm_since = time.monotonic()
        for number, job in enumerate(find_jobs(folder, self.suites, None, self.digests).jobs, 1):
            job.id = -number
            self.warming[job.id] = job
            self.pool.submit(job)  # before the workers start: one chunk each as they start
        if not self.warming:
            self.warmed()

    def on_warm_record(self, job: Job, record: SubmissionRecord) -> None:
        """A warm-up job graded: its page made as a submission's would be (the parent's first page), then dropped."""
        self.warming.pop(job.id, None)
        try:
            bounded_feedback(results_json(record, self.suites[record["assignment"]]), self.suites[record["assignment"]])
        except Exception as error:  # a warm-up's page: never the service's failure (a student's would say)
            self.emit("warm-up-problem", error=f"{type(error).__name__}: {error}")
        if not self.warming:
            self.warmed()

    def warmed(self) -> None:
        self.emit("ready", warming=round(time.monotonic() - self.warm_since, 3), workers=self.pool.workers)
        if self.hub:
            hub_side.write_phase(self.state, hub_side.READY)

    def run(self) -> int:
        self.start_hub()  # (started by the command line: a hub side that could not serve stops us here)
        (self.state / PAUSED_FILE).unlink(missing_ok=True)
        recovered = 0
        try:
            recovered = self.queue.recover()
        except Exception as error:  # a full disk, the database out of reach: started paused, recovered at the resume
            if not is_transient(error):
                raise
            self.must_recover = True
            self.pause(error)
        short = self.disk_short()
        if short is not None:  # started on a full disk: paused from the first turn
            self.pause(short)
        self.place_policies()
        self.start_recorder()
        try:
            self.warm_up()
        except OSError as error:  # no room for the warm-up's copies: started cold rather than not at all
            if not is_transient(error):
                raise
            shutil.rmtree(self.state / "warm-up", ignore_errors=True)
            self.warming.clear()
            self.pause(error)
        self.pool.start()
        self.emit(
            "started", course=self.course.course_id, inbound=str(self.course.inbound), workers=self.pool.workers, requeued=recovered, replica=self.replica
        )
        self.running = True
        if self.hub and self.warming:
            hub_side.write_phase(self.state, hub_side.WARMING)
        gc.collect()
        gc.freeze()
        more = False  # names still waiting to be looked at: no sleep in the next wait
        try:
            while not self.stopping:
                waiting: list[Any] = [*self.pool.connections(), self.inotify.fileno()]
                if self.endpoint is not None:
                    waiting += self.endpoint.waitables()  # the listener and its open connections
                ready = multiprocessing.connection.wait(waiting, timeout=0 if more else 0.25)
                if self.paused is not None:
                    more = False
                    self.paused_turn(ready)
                    continue
                try:
                    more = self.turn(ready)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    self.pause(error)
        except GraderError as error:
            self.emit("stopped", reason=str(error))
            return 2
        finally:
            self.shut_down()
        self.emit("stopped", reason="signal")
        return 0

    def turn(self, ready: list[Any]) -> bool:
        """One turn of the loop (not paused): what ``ready`` says, the rescan, the recorder,
        intake, the leases, the claims. True when names are still waiting to be looked at."""
        if self.inotify.fileno() in ready:
            events = self.inotify.read(timeout=0)
            self.look([event.name for event in events if event.name and event.wd != self.spool_watch])
            if any(event.wd == self.spool_watch for event in events):
                self.take_spooled()
            if any(event.mask & flags.Q_OVERFLOW for event in events):  # events lost: look at everything
                self.pending.clear()
                self.rescan()
        if self.endpoint is not None:
            self.answer_metrics(ready)  # every turn: connections past their deadline are dropped
        self.pool.pump([r for r in ready if r in self.pool.pool])
        if time.monotonic() - self.last_scan > RESCAN_SECONDS:
            short = self.disk_short()
            if short is not None:  # before a copy fails for want of room
                self.pause(short)
                return False
            self.rescan()
            self.release_after_due()
            if time.monotonic() - self.last_prune > PRUNE_SECONDS:
                self.prune_copies()
                self.last_prune = time.monotonic()
            self.start_hub()
            self.last_scan = time.monotonic()
        self.watch_recorder()
        more = self.take_turn()
        self.queue.heartbeat()  # the leases of what this replica grades (shared queue)
        self.dispatch()
        return more

    def shut_down(self) -> None:
        self.running = False
        if self.recorder is not None and self.recorder.poll() is None:
            self.recorder.terminate()
            try:
                self.recorder.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.recorder.kill()
        if self.hub_process is not None and self.hub_process.poll() is None:
            self.hub_process.terminate()
            self.hub_process.wait(timeout=30)
        self.pool.stop()
        try:
            requeued = self.queue.recover()  # what was in flight waits for the next start
        except Exception as error:  # the database out of reach at the stop: the next start recovers it (a shared queue: the leases)
            if not is_transient(error):
                raise
            requeued = 0
        if requeued:
            self.emit("requeued", count=requeued)
        self.queue.close()
        self.inotify.close()
        if self.listener is not None:
            self.listener.close()


def serve(service: Service) -> int:
    """Run until SIGTERM or Ctrl-C (a clean stop), or a grader-side failure (exit 2)."""

    def stop(_signal: int, _frame: object) -> None:
        service.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return service.run()
