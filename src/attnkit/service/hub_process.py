"""The hub side's process (``python -m attnkit.service.hub``, docs/hub.md) and the loop's phase it reads.

``attnkit serve --hub`` starts it first, before torch and the course's suites are loaded (issue 49:
JupyterHub serves nothing, its login page included, until a managed service answers on its port),
so this module stays light (no torch, no jupyterhub). The loop hands it on to ``Service``, which
restarts it if it dies. The hub side says ``/health`` "warming" (200: the hub and its users may
come in; a submission is queued) until the loop has written ``ready`` here, its workers warm.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO
from urllib.parse import urlparse

from attnkit.constants import GraderError
from attnkit.i18n import _
from attnkit.service.queue import QUEUE_AT_VARIABLE

PHASE_FILE = "phase"  # in the service's folder: "<pid of the loop> <phase>"
STARTING, WARMING, READY = "starting", "warming", "ready"


def listen() -> socket.socket | None:
    """A socket listening where JupyterHub expects the service (``JUPYTERHUB_SERVICE_URL``), bound
    first thing: the hub's probes of the port wait in its backlog for the hub side's answer, instead
    of being refused and backing off (0.2, 0.4, ... 5 s between probes: seconds of a hub serving
    nothing). None without the URL (the hub side says why) or when the port cannot be bound (it tries itself)."""
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
    if url.port is None:
        return None
    try:
        return socket.create_server((url.hostname or "127.0.0.1", url.port), backlog=128)
    except OSError:
        return None


def start(
    course_root: Path, autograder: Path, state: Path, feedback: Path | str, queue: str, log: TextIO, listening: socket.socket | None = None
) -> subprocess.Popen:
    """The hub side, a child of this process (it ends with us: PR_SET_PDEATHSIG in ``hub.main``);
    ``queue``: the queue's location, in its environment (never on a command line, where a password
    would show); ``feedback`` and ``queue`` empty: the hub side reads them from the course as the
    loop does (``settings``); ``listening``: its socket (``listen``), handed over and closed here."""
    extra = [str(listening.fileno())] if listening is not None else []
    env = {key: value for key, value in os.environ.items() if key != QUEUE_AT_VARIABLE}
    if queue:
        env[QUEUE_AT_VARIABLE] = queue
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "attnkit.service.hub", *map(str, (course_root, autograder, state, feedback, os.getpid())), *extra],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            pass_fds=[listening.fileno()] if listening is not None else [],
        )
    finally:
        if listening is not None:
            listening.close()  # the hub side's alone: no worker forked from us holds the port


def started_at(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, /proc): a pid and this name one process,
    so a phase left by an earlier run under the same pid (a container's pid 1) is never taken for ours."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "?"


def write_phase(state: Path, phase: str) -> None:
    """The loop's phase (``WARMING``, ``READY``), for the hub side's ``/health``."""
    temporary = state / f".{PHASE_FILE}.tmp"
    temporary.write_text(f"{os.getpid()} {started_at(os.getpid())} {phase}\n")
    os.replace(temporary, state / PHASE_FILE)


def read_phase(state: Path, parent: int) -> str:
    """The phase the loop ``parent`` wrote; ``STARTING`` until it wrote one (a file left by an earlier run names another process)."""
    try:
        pid, started, phase = (state / PHASE_FILE).read_text().split()
    except (OSError, ValueError):
        return STARTING
    return phase if pid == str(parent) and started == started_at(parent) and phase in (WARMING, READY) else STARTING


class HubSide:
    """``--hub``'s HTTP process as the loop holds it: started (again, if it died) by ``keep_up``,
    its phase written, stopped with the loop. ``process``: the one the command line started before
    the engine's imports (``start``), if any."""

    def __init__(
        self,
        course_root: Path,
        autograder: Path,
        state: Path,
        feedback: Path | str,
        queue_url: str,
        log: TextIO,
        emit: Callable[..., None],
        spare: Callable[[int], None],
        process: subprocess.Popen | None = None,
    ) -> None:
        self.course_root, self.autograder, self.state, self.feedback = course_root, autograder, state, feedback
        self.queue_url = queue_url
        self.log = log
        self.emit = emit
        self.spare = spare
        self.process = process
        if process is not None:
            spare(process.pid)

    def keep_up(self) -> None:
        """The HTTP side (``python -m attnkit.service.hub``), again if it died: it dies with us."""
        if self.process is not None and self.process.poll() is None:
            return
        if self.process is not None:
            if self.process.returncode == 2:  # it cannot serve here (its log line says why): no restart loop
                raise GraderError(_("JupyterHub 服务的 HTTP 进程无法启动（见日志）"))
            self.emit("hub-restarted", code=self.process.returncode)
        # the queue it reads: this loop's
        self.process = start(self.course_root, self.autograder, self.state, self.feedback, self.queue_url, self.log)
        self.spare(self.process.pid)

    def phase(self, phase: str) -> None:
        write_phase(self.state, phase)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
