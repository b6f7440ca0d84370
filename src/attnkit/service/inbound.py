"""The service's way in: nbgrader's ``inbound/`` (inotify, and a rescan spread over the loop's
turns) and, with ``--hub``, the notices the HTTP side spools (``http_submit``). A finished folder
is checked (whose it is: ``exchange.take``), copied and queued in the database before anything
grades it; whatever is raised on behalf of a folder makes it ``refused``, never the service's exit.
However many names a student makes, a turn costs a bounded amount (NAMES_PER_TURN)."""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inotify_simple import INotify, flags

from attnkit.i18n import _
from attnkit.service import exchange
from attnkit.service.faults import is_the_services, is_transient
from attnkit.service.http_submit import SPOOL, take_spooled
from attnkit.service.metrics import Metrics
from attnkit.service.queue import MAX_WAITING, Queue
from attnkit.service.unfinished import Unfinished

NAMES_PER_TURN = 256  # folder names looked at per turn of the loop (events and rescans together)
UNFINISHED_PER_OWNER = 50  # unfinished names held per uid owning them (beyond: ignored by rescans)
RECHECK_UNFINISHED_SECONDS = 30.0  # an unfinished folder no event names is looked at again this often
CAPPED_LOG_SECONDS = 60.0  # an owner's names ignored over the cap: one log line per this long


class Inbound:
    """The names of ``inbound/`` (and the hub's spool) to look at, and looking at them."""

    def __init__(
        self, course: exchange.Course, state: Path, attempts: Path, queue: Queue, metrics: Metrics, emit: Callable[..., None], hub: bool
    ) -> None:
        """``state``: the service's folder (its spool with ``hub``); ``attempts``: where the copies go."""
        self.course = course
        self.state = state
        self.attempts = attempts
        self.queue = queue
        self.metrics = metrics
        self.emit = emit
        self.hub = hub
        self.uid = os.geteuid()
        self.known = queue.known()
        # Folders seen unfinished, with when: looked at again when an event names them, or by a
        # rescan once RECHECK_UNFINISHED_SECONDS have passed (never all of them on every event);
        # at most UNFINISHED_PER_OWNER per uid owning them (service.unfinished).
        self.pending = Unfinished(UNFINISHED_PER_OWNER, RECHECK_UNFINISHED_SECONDS)
        self.capped_logged: dict[int, float] = {}  # uid: when its unfinished-capped line was logged
        self.to_look: dict[str, None] = {}  # names waiting to be looked at, in order, each once
        self.scanning: Any = None  # the rescan under way (os.scandir's iterator), NAMES_PER_TURN at a time
        self.inotify = INotify()
        self.inotify.add_watch(str(course.inbound), flags.CREATE | flags.ATTRIB | flags.MOVED_TO | flags.CLOSE_WRITE)
        # --hub: the HTTP side inside JupyterHub (service.hub, a process of its own) spools what
        # hub users post (service.http_submit); its notices wake this loop like inbound/'s folders.
        self.spool_watch = -1
        if hub:
            (state / SPOOL).mkdir(mode=0o700, exist_ok=True)
            self.spool_watch = self.inotify.add_watch(str(state / SPOOL), flags.MOVED_TO)

    def fileno(self) -> int:
        """inotify's descriptor, for the loop's wait."""
        return self.inotify.fileno()

    def drop_events(self, ready: list[Any]) -> None:
        """While paused: inotify's events read and dropped (the resume rescans)."""
        if self.inotify.fileno() in ready:
            self.inotify.read(timeout=0)

    def read_events(self, ready: list[Any]) -> None:
        """inotify's events, when ``ready`` says it has some: the names they give to look at, the
        spool taken, and everything looked at again if events were lost."""
        if self.inotify.fileno() not in ready:
            return
        events = self.inotify.read(timeout=0)
        self.look([event.name for event in events if event.name and event.wd != self.spool_watch])
        if any(event.wd == self.spool_watch for event in events):
            self.take_spooled()
        if any(event.mask & flags.Q_OVERFLOW for event in events):  # events lost: look at everything
            self.pending.clear()
            self.rescan()

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
            key = exchange.inbound_key(name)
            claimed = exchange.parse_name(key) if key == name else None
            cause = _("无法接收这个提交文件夹（{kind}：{message}），未评分").format(kind=type(error).__name__, message=str(error)[:200])
            if self.queue.refuse(key, claimed.student if claimed else "", claimed.assignment if claimed else "", "", cause) is not None:
                self.metrics.refused += 1
                self.emit("refused", inbound=key, cause=cause)
            return 1

    def take_in(self, name: str) -> int:
        key = exchange.inbound_key(name)
        if key != name:  # bytes that are not a name a student's nbgrader makes: recorded (escaped) and refused
            self.known.add(name)
            cause = _("提交文件夹的名字含有无效的字节或控制字符，未评分")
            if self.queue.refuse(key, "", "", "", cause) is not None:
                self.metrics.refused += 1
                self.emit("refused", inbound=key, cause=cause)
            return 1
        claimed = exchange.parse_name(name)
        if claimed is None:
            return 1
        # Finished, whose, and copied in one pass over one opening of the folder (exchange.take). A
        # row in the queue always has its copy (made before the row is written).
        staged = self.attempts / name / claimed.student / claimed.assignment
        taken = exchange.take(
            self.course.inbound, name, claimed.student, self.uid, staged, held=lambda: exchange.held_by(self.attempts, claimed.student)
        )
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

    def resume(self) -> None:
        """After a pause: the unfinished names forgotten, everything looked at again in order."""
        self.pending.clear()
        self.rescan()

    def close(self) -> None:
        self.inotify.close()
