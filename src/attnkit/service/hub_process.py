"""The hub side's process (``python -m attnkit.service.hub``, docs/hub.md) and the loop's phase it reads.

``attnkit serve --hub`` starts it first, before torch and the course's suites are loaded (issue 49:
JupyterHub serves nothing, its login page included, until a managed service answers on its port),
so this module stays light (no torch, no jupyterhub). The loop hands it on to ``Service``, which
restarts it if it dies. The hub side says ``/health`` "warming" (200: the hub and its users may
come in; a submission is queued) until the loop has written ``ready`` here, its workers warm.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from attnkit.service.queue import QUEUE_AT_VARIABLE

PHASE_FILE = "phase"  # in the service's folder: "<pid of the loop> <phase>"
STARTING, WARMING, READY = "starting", "warming", "ready"


def queue_at(state: Path, queue_url: str | None) -> str:
    """Where the hub side reads the queue: the shared queue's URL, else the course's SQLite file (``Queue.url``)."""
    return queue_url or str(state / "service.db")


def start(course_root: Path, autograder: Path, state: Path, feedback: Path, queue: str, log: TextIO) -> subprocess.Popen:
    """The hub side, a child of this process (it ends with us: PR_SET_PDEATHSIG in ``hub.main``);
    ``queue``: the queue's location, in its environment (never on a command line, where a password would show)."""
    return subprocess.Popen(
        [sys.executable, "-m", "attnkit.service.hub", *map(str, (course_root, autograder, state, feedback, os.getpid()))],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env={**os.environ, QUEUE_AT_VARIABLE: queue},
    )


def write_phase(state: Path, phase: str) -> None:
    """The loop's phase (``WARMING``, ``READY``), for the hub side's ``/health``."""
    temporary = state / f".{PHASE_FILE}.tmp"
    temporary.write_text(f"{os.getpid()} {phase}\n")
    os.replace(temporary, state / PHASE_FILE)


def read_phase(state: Path, parent: int) -> str:
    """The phase the loop ``parent`` wrote; ``STARTING`` until it wrote one (a file left by an earlier run names another pid)."""
    try:
        pid, phase = (state / PHASE_FILE).read_text().split()
    except (OSError, ValueError):
        return STARTING
    return phase if pid == str(parent) and phase in (WARMING, READY) else STARTING
