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

This module is the loop and what ties its parts together; each job is a module of its own:
``inbound`` (the way in), ``delivery`` (a record to its page), ``faults`` (what stops the service,
what pauses it, the pause), ``metrics`` (``/metrics``, ``/health``), ``warm_up``, ``retention``
(the copies kept), ``due_dates``, ``course_lock``, ``recorder_process`` and ``hub_process`` (the
two child processes), ``pool`` (the engine's warm workers).
"""

from __future__ import annotations

import ctypes
import gc
import json
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from attnkit.assignment.folder import Assignment, compile_suites, discover
from attnkit.boundary.policy import Limits
from attnkit.constants import GraderError
from attnkit.course.gradebook import course_config
from attnkit.driver.seed import Seed
from attnkit.i18n import _
from attnkit.intake.jobs import find_jobs
from attnkit.records import Job, SubmissionRecord
from attnkit.service import exchange
from attnkit.service import metrics
from attnkit.service.course_lock import one_service
from attnkit.service.delivery import Delivery, InFlight
from attnkit.service.queue.postgres import GRADEBOOK_ENGINES  # (a PostgreSQL gradebook's engines: forgotten by a forked worker)
from attnkit.service.faults import Pause, is_the_services, is_transient
from attnkit.service.hub_process import READY, WARMING, HubSide
from attnkit.service.inbound import Inbound
from attnkit.service.metrics import Metrics
from attnkit.service.metrics_endpoint import Endpoint
from attnkit.service.policies import Policy, policies_from, show_times_in
from attnkit.service.pool import WarmPool
from attnkit.service.queue import Row, open_queue
from attnkit.service.recorder_process import RecorderProcess
from attnkit.service.retention import PRUNE_SECONDS, prune
from attnkit.service.settings import STATE_FOLDER
from attnkit.service.warm_up import WarmUp

RESCAN_SECONDS = 2.0  # a full look at inbound/ besides inotify's events (a missed event, a restart)
PR_SET_PDEATHSIG = 1


class Service:
    def __init__(
        self,
        course: exchange.Course,
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
        self.autograder = autograder
        compile_suites(autograder)  # a broken hidden file: exit 2 naming it, its line and the error (issue 50)
        self.suites: dict[str, Assignment] = discover(autograder)
        self.config = course_config(course.root)  # nbgrader's: the late rule (LateSubmissionPlugin) too
        self.policies: dict[str, Policy] = policies_from(self.config)
        show_times_in(self.config)
        self.gradebook = gradebook
        self.log = log
        self.metrics = Metrics()
        self.digests: dict[tuple[Path, str], str] = {}
        self.in_flight: dict[int, InFlight] = {}  # by the submission's id in the queue
        self.stopping = False
        self.pool = WarmPool(autograder, workers, limits, hide, self.on_record, seed, on_event=self.emit)
        self.warming = WarmUp(self.state / "warm-up", self.suites, self.digests, self.emit)
        self.inbound = Inbound(course, self.state, self.attempts, self.queue, self.metrics, self.emit, hub)
        self.delivery = Delivery(course, self.attempts, self.suites, self.policies, self.queue, gradebook, self.metrics, self.emit)
        self.recorder = RecorderProcess(
            course.root, self.state, self.queue.url, gradebook, self.policies, self.replica, log, self.emit, self.pool.spare, self.queue.unrecorded
        )
        # A transient fault of the host (``faults.is_transient``): intake and claims paused until it passes.
        self.pause = Pause(self.state, (course.root, course.inbound), self.emit)
        self.last_scan = self.last_prune = 0.0  # when inbound/ was last rescanned, the copies last pruned (monotonic)
        self.listener: socket.socket | None = None
        self.endpoint: Endpoint | None = None  # /metrics and /health, served by this loop without blocking it
        if metrics_port is not None:
            self.listener = socket.create_server((metrics_host, metrics_port))
            self.endpoint = Endpoint(self.listener, self.metrics_answer)
            os.register_at_fork(after_in_child=self.endpoint.close)  # a worker keeps no client's connection
        # --hub: the HTTP side inside JupyterHub (service.hub, a process of its own).
        self.hub = hub
        self.hub_side = (
            HubSide(course.root, autograder, self.state, course.feedback, str(self.queue.url), log, self.emit, self.pool.spare, hub_process)
            if hub or hub_process is not None
            else None
        )
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
        for handle in (self.listener, self.inbound.inotify):
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

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"time": round(time.time(), 3), "event": event, **fields}, ensure_ascii=False)
        # A name's undecodable bytes (surrogates) written escaped: a log line never raises.
        try:
            print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=self.log, flush=True)
        except OSError:
            pass  # the log's own disk full: the line is lost, never the service (the journal usually lives elsewhere)

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
            held = exchange.held_by(self.attempts, row.student)
            taken = exchange.take(self.course.inbound, row.inbound, row.student, self.inbound.uid, root / row.student / row.assignment, held=held)
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
        if self.warming.owns(job):
            self.warming.on_record(job, record)
            return
        flight = self.in_flight.get(job.id)
        if flight is None or flight.job is not job:
            self.emit("discarded", kind="record", job=job.id, about=job.key, why="not in flight")
            return
        if self.pause.active:
            self.pause.held.append((flight, record))  # delivered at the resume, in order
            return
        try:
            self.deliver(flight, record)
        except Exception as error:
            if not is_transient(error):
                raise
            self.pause.held.append((flight, record))
            self.pause.begin(error)

    def deliver(self, flight: InFlight, record: SubmissionRecord) -> None:
        """``record`` to its page and its row delivered (``delivery``), on behalf of its row; no longer in flight."""
        with self.on_behalf_of(flight.row):
            self.delivery.deliver(flight, record)
            self.in_flight.pop(flight.row.id, None)


    # -- metrics and health ------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        """Whether this replica can take work now, and why not: its loop running with every warm
        worker alive, its recorder alive, its database answering."""
        if not self.running:
            return False, "starting"
        if self.pause.reason is not None:
            return False, f"paused: {self.pause.reason}"  # the database is not asked: it may be what is gone
        if self.warming:
            return False, "warming"
        alive = self.pool.alive()
        if alive < self.pool.workers:
            return False, f"workers {alive}/{self.pool.workers}"
        if self.recorder.stopped:
            return False, "recorder stopped"
        try:
            self.queue.counts()
        except Exception as error:  # the database's own error, whatever its driver: not ready
            return False, f"database: {type(error).__name__}"
        return True, "ready"

    def metrics_answer(self, path: bytes) -> tuple[bytes, bytes, bytes]:
        """What the ``/metrics`` port (``metrics_endpoint``, served in the loop without ever waiting
        on a client: issue 48) answers for ``path`` (``metrics.answer``)."""
        return metrics.answer(path, self.metrics, self.readiness, self.queue.counts, self.course.root, self.replica, self.pool.workers, len(self.in_flight))

    # -- transient faults ----------------------------------------------------------------------
    def probe(self) -> None:
        """While paused (``faults.Pause.probe``): once the fault has passed, the held records
        delivered, the policies placed if they could not be, intake resumed (a full rescan of
        inbound/: what came meanwhile is taken in order)."""
        if not self.pause.probe(self.queue.ping, self.queue.recover, self.deliver):
            return
        if not self.delivery.policies_placed:
            self.delivery.place_policies()
        self.pause.end()
        self.inbound.resume()

    def paused_turn(self, ready: list[Any]) -> None:
        """A turn of the loop while paused: the workers' records read (and held), inotify's events
        read and dropped (the resume rescans), /health answered (503, why), the recorder watched."""
        self.inbound.drop_events(ready)
        if self.endpoint is not None:
            self.endpoint.turn(ready)
        self.pool.pump(ready)
        self.recorder.watch()
        self.probe()

    # -- the loop ----------------------------------------------------------------------------
    def warmed(self) -> None:
        self.emit("ready", warming=self.warming.seconds(), workers=self.pool.workers)
        if self.hub and self.hub_side is not None:
            self.hub_side.phase(READY)

    def run(self) -> int:
        if self.hub and self.hub_side is not None:
            self.hub_side.keep_up()  # (started by the command line: a hub side that could not serve stops us here)
        self.pause.clear_file()
        recovered = 0
        try:
            recovered = self.queue.recover()
        except Exception as error:  # a full disk, the database out of reach: started paused, recovered at the resume
            if not is_transient(error):
                raise
            self.pause.must_recover = True
            self.pause.begin(error)
        short = self.pause.disk_short()
        if short is not None:  # started on a full disk: paused from the first turn
            self.pause.begin(short)
        self.delivery.place_policies()
        self.recorder.start()
        try:
            self.warming.start(self.pool, self.warmed)
        except OSError as error:  # no room for the warm-up's copies: started cold rather than not at all
            if not is_transient(error):
                raise
            self.warming.give_up()
            self.pause.begin(error)
        self.pool.start()
        self.emit(
            "started", course=self.course.course_id, inbound=str(self.course.inbound), workers=self.pool.workers, requeued=recovered, replica=self.replica
        )
        self.running = True
        if self.hub and self.hub_side is not None and self.warming:
            self.hub_side.phase(WARMING)
        gc.collect()
        gc.freeze()
        more = False  # names still waiting to be looked at: no sleep in the next wait
        try:
            while not self.stopping:
                waiting: list[Any] = [*self.pool.connections(), self.inbound.fileno()]
                if self.endpoint is not None:
                    waiting += self.endpoint.waitables()  # the listener and its open connections
                ready = multiprocessing.connection.wait(waiting, timeout=0 if more else 0.25)
                if self.pause.active:
                    more = False
                    self.paused_turn(ready)
                    continue
                try:
                    more = self.turn(ready)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    self.pause.begin(error)
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
        self.inbound.read_events(ready)
        if self.endpoint is not None:
            self.endpoint.turn(ready)  # every turn: connections past their deadline are dropped
        self.pool.pump(ready)
        if time.monotonic() - self.last_scan > RESCAN_SECONDS:
            short = self.pause.disk_short()
            if short is not None:  # before a copy fails for want of room
                self.pause.begin(short)
                return False
            self.inbound.rescan()
            self.delivery.release_after_due()
            if time.monotonic() - self.last_prune > PRUNE_SECONDS:
                self.prune_copies()
                self.last_prune = time.monotonic()
            if self.hub and self.hub_side is not None:
                self.hub_side.keep_up()
            self.last_scan = time.monotonic()
        self.recorder.watch()
        more = self.inbound.take_turn()
        self.queue.heartbeat()  # the leases of what this replica grades (shared queue)
        self.dispatch()
        return more

    def prune_copies(self) -> list[str]:
        """The retention of the service's copies (``attempts/``, docs/service.md; ``retention``). The names removed."""
        removed = prune(self.attempts, self.queue)
        if removed:
            self.emit("pruned", count=len(removed))
        return removed

    def shut_down(self) -> None:
        self.running = False
        self.recorder.stop()
        if self.hub_side is not None:
            self.hub_side.stop()
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
        self.inbound.close()
        if self.listener is not None:
            self.listener.close()


def serve(service: Service) -> int:
    """Run until SIGTERM or Ctrl-C (a clean stop), or a grader-side failure (exit 2)."""

    def stop(_signal: int, _frame: object) -> None:
        service.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return service.run()
