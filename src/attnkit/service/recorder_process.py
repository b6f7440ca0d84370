"""The recorder's process (``python -m attnkit.service.recorder``) as the service's loop holds it:
started with the loop, started again if it dies (bounded), stopped with the loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from attnkit.constants import GraderError
from attnkit.course.gradebook import course_config
from attnkit.i18n import _
from attnkit.service.policies import Policy
from attnkit.service.recorder import PERSON_MUST_FIX, recorder_stopped_reason

RECORDER_RESTARTS = 5  # a dead recorder is started again at most this often within RECORDER_RESTART_WINDOW
RECORDER_RESTART_WINDOW = 600.0


class RecorderProcess:
    """The service's recorder: ``start``, ``watch`` every turn, ``stop`` at the end. Without a
    gradebook there is none (``start`` does nothing)."""

    def __init__(
        self,
        course_root: Path,
        state: Path,
        queue_url: str,
        gradebook: Path | str | None,
        policies: dict[str, Policy],
        replica: str,
        log: TextIO,
        emit: Callable[..., None],
        spare: Callable[[int], None],
        unrecorded: Callable[[], int],
    ) -> None:
        """``spare(pid)``: the process is no worker's leftover (the pool's ``spare``); ``unrecorded``:
        how many delivered submissions wait for the gradebook (for the log line of a death)."""
        self.course_root = course_root
        self.state = state
        self.queue_url = queue_url
        self.gradebook = gradebook
        self.policies = policies
        self.replica = replica
        self.log = log
        self.emit = emit
        self.spare = spare
        self.unrecorded = unrecorded
        self.process: subprocess.Popen | None = None
        self.restarts: list[float] = []  # when it was started again (monotonic), for the bound
        self.due: float | None = None  # a dead recorder's restart, at this time (monotonic)

    @property
    def stopped(self) -> bool:
        """There is a recorder and it is not running."""
        return self.process is not None and self.process.poll() is not None

    def start(self) -> None:
        if self.gradebook is None:
            return
        policies = json.dumps({name: asdict(policy) for name, policy in self.policies.items()})
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnkit.service.recorder",
                str(self.course_root),
                self.queue_url,
                str(self.gradebook),
                policies,
                str(os.getpid()),
                f"{self.replica}-recorder",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        self.spare(self.process.pid)

    def watch(self) -> None:
        """The recorder, started again if it died (killed, the OOM killer, a crash): what it had
        not recorded is in the queue (``unrecorded``) and the new one records it. At most
        RECORDER_RESTARTS restarts within RECORDER_RESTART_WINDOW seconds, each after a pause
        doubling from a second; beyond that, or when it stopped for a person to fix (exit 2:
        the course's configuration, the gradebook at odds with solutions/), the service stops
        (exit 2) saying why, the file and line of a broken configuration included."""
        if self.process is None or self.process.poll() is None:
            return
        code = self.process.returncode
        now = time.monotonic()
        if self.due is None:
            reason = recorder_stopped_reason(self.state)
            if code == PERSON_MUST_FIX and reason:
                raise GraderError(reason)
            course_config(self.course_root)  # a configuration broken meanwhile: named (GraderError), never a restart loop
            self.restarts = [at for at in self.restarts if now - at < RECORDER_RESTART_WINDOW]
            if len(self.restarts) >= RECORDER_RESTARTS:
                raise GraderError(
                    _("成绩册记录进程在 {minutes:.0f} 分钟内退出了 {count} 次（最后退出码 {code}），不再重启").format(
                        minutes=RECORDER_RESTART_WINDOW / 60, count=len(self.restarts) + 1, code=code
                    )
                )
            delay = min(2.0 ** len(self.restarts), 30.0)
            self.due = now + delay
            self.emit("recorder-died", code=code, restart_in=delay, unrecorded=self.unrecorded())
            return
        if now >= self.due:
            self.due = None
            self.restarts.append(now)
            self.start()
            self.emit("recorder-restarted", pid=self.process.pid)

    def stop(self) -> None:
        """Asked to stop (it finishes its batch), killed after two minutes."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
