"""The worker's handle on its zygote: the pre-forking process that has imported torch and IPython once.

:class:`Zygote` asks the seed for one (``attnkit.driver.seed``) or starts one of its own, waits until it
says ready with the isolation the class needs (else :class:`IsolationUnavailable` says why), asks
it for sandboxes (the next one always requested ahead) and hands it plans to hold decoded
(``hold_plan``; ``frame_digest`` names them, ``held_batch_frame`` asks a sandbox for one).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from attnkit import i18n
from attnkit.driver import refusal
from attnkit.i18n import _
from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.boundary.policy import Limits
from attnkit.driver.seed import start_zygote_process, wait_for_exit


class IsolationUnavailable(RuntimeError):
    """The OS gives this grader no isolated sandbox, and the notebooks were not declared trusted."""


class Zygote:
    """A pre-forking process that has imported torch and IPython once.

    ``trusted=False`` (grading a class): the zygote must be able to build isolated sandboxes,
    else :class:`IsolationUnavailable` says why and how to fix it, before any cell runs.
    """

    def __init__(
        self,
        hide: list[str] | None = None,
        trusted: bool = False,
        warm_up: str = "",
        cells: list[str] | None = None,
        warm_up_cells: list[str] | None = None,
        seed: socket.socket | None = None,
        later: bool = False,
        collapse_idle_seconds: float | None = None,
    ) -> None:
        """``seed``: ask it for the zygote (``attnkit.driver.seed``), else start one of our own. ``later``:
        return once it is asked for, and wait for it to be ready only when it is first needed
        (``wait_ready``), so that the caller's own start runs meanwhile. ``collapse_idle_seconds``:
        how long the seed's zygote waits without a request before it collapses its heap into huge
        pages (``fork_server.COLLAPSE_IDLE_SECONDS`` when None)."""
        self.hide = [str(Path(p).resolve()) for p in (hide or [])]
        # Cells are public (the release notebook's): the zygote compiles them ahead for sandboxes.
        self._config: dict[str, Any] = {
            "hide": self.hide,
            "warm_up": warm_up,
            "warm_up_cells": warm_up_cells or [],
            "lang": i18n.language(),
            "cells": cells or [],
            # The CPUs we keep to (engine.worker_cpus): a zygote of our own inherits them, the seed's is told.
            "cpus": sorted(os.sched_getaffinity(0)),
        }
        if collapse_idle_seconds is not None:
            self._config["collapse_idle_seconds"] = collapse_idle_seconds
        self._trusted = trusted
        self.process: subprocess.Popen | None = None
        self.pid = 0
        self._pidfd: int | None = None
        self._ahead: tuple[socket.socket, Limits] | None = None
        self.plans: set[str] = set()  # digests of the plans handed to the zygote (hold_plan)
        self.isolated = False
        self.isolation: dict[str, Any] = {}
        self._ready = False
        self._last_reply = ""
        self._failure: Exception | None = None
        if seed is None or not self._ask_seed(seed):
            self._start_own()
        if not later:
            self.wait_ready()

    def _start_own(self) -> None:
        """A zygote process of our own, which imports everything itself."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The configuration (the hidden folders among it) goes over the socket, as to the seed's
        # zygotes: never on the command line, which every sandbox would inherit in its memory
        # (sys.argv, and the kernel's copy that /proc/self/cmdline shows).
        self.process = start_zygote_process(theirs.fileno(), str(theirs.fileno()))
        theirs.close()
        self.control = ours
        self.pid = self.process.pid
        wire.send(ours, self._config)

    def _ask_seed(self, seed: socket.socket) -> bool:
        """Ask the seed for a zygote with our configuration; whether the request went out."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(seed, [operations.ZYGOTE], [theirs.fileno()])
            wire.send(ours, self._config)
        except OSError:
            ours.close()
            return False
        finally:
            theirs.close()
        self.control = ours
        return True

    def wait_ready(self) -> None:
        """Until the zygote says it is ready (a seed's that never does is replaced by one of our
        own); raises RuntimeError if it cannot start, IsolationUnavailable as the class says."""
        if self._failure is not None:  # every later use fails as the first did (a retry must not hide why)
            raise self._failure
        if self._ready:
            return
        ready = self._ready_message()
        if ready is None and self.process is None:  # the seed's child never came: our own instead
            self.control.close()
            self._start_own()
            ready = self._ready_message()
        if ready is None:
            self._failure = RuntimeError(_("沙箱的 zygote 进程未能启动：{reply}").format(reply=self._last_reply))
            raise self._failure
        if self.process is None:
            try:
                self._pidfd = os.pidfd_open(ready["pid"])
            except OSError:
                self._pidfd = None
            self.pid = ready["pid"]
        self._ready = True
        isolation = found if isinstance(found := ready.get("isolation"), dict) else {}
        self.isolated = isolation.get("kind") in ("root", "userns", "landlock", "pool")
        self.isolation = isolation
        if not self.isolated and not self._trusted:
            self.close()
            # The cause in our words (a container's seccomp profile, an AppArmor restriction) and
            # what works there: see attnkit.driver.refusal.
            exposed = listed if isinstance(listed := isolation.get("exposed"), list) else []
            self._failure = IsolationUnavailable(refusal.exposure_refusal(exposed) if exposed else refusal.refusal(str(isolation.get("why") or "")))
            raise self._failure

    def _ready_message(self) -> dict | None:
        """The zygote's first message if it says ready (else None; what came is kept for the error)."""
        try:
            ready = wire.receive(self.control)
        except (OSError, wire.ProtocolError) as error:
            self._last_reply = f"{type(error).__name__}: {error}"
            return None
        if isinstance(ready, dict) and ready.get("zygote") == "ready" and isinstance(ready.get("pid"), int):
            return ready
        self._last_reply = repr(ready)
        return None

    def spawn(self, limits: Limits) -> tuple[socket.socket, int]:
        """A new sandbox: our end of its channel, and its pid.

        The next sandbox is always requested ahead, so the zygote forks it and it locks itself
        down while the current submission is being tested: a submission's sandbox is usually
        ready the moment it is asked for.
        """
        self.wait_ready()
        if self._ahead is not None and self._ahead[1] == limits:
            channel = self._ahead[0]
            self._ahead = None
            pid = self._pid_reply(channel)
        else:
            self._cancel_ahead()
            channel = self._ask_for_sandbox(limits)
            pid = self._pid_reply(channel)
        self._ahead = (self._ask_for_sandbox(limits), limits)
        return channel, pid

    def hold_plan(self, frame: bytes, digest: str = "") -> str:
        """Hand the zygote a plan's batch frame (``batch_frame(plan requests)``) to decode once and
        keep: sandboxes forked from now on hold it and say so when ready (``Submission.plan``).
        Returns its digest ("" if it could not be handed over); ``digest``: the frame's, if known.
        A plan already handed over is not sent again. Nothing is answered: a zygote that cannot
        keep it forks sandboxes that simply do not claim it."""
        digest = digest or frame_digest(frame)
        if digest in self.plans:
            return digest
        self.wait_ready()
        try:
            descriptor = os.memfd_create("attnkit-plan", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # no memfd here: every sandbox gets the whole batch
            return ""
        try:
            _write_all(descriptor, frame)
            os.lseek(descriptor, 0, os.SEEK_SET)
            socket.send_fds(self.control, [json.dumps(operations.hold_plan(digest)).encode()], [descriptor])
        except OSError:  # a zygote gone away: its next sandbox is refused, and says why
            return ""
        finally:
            os.close(descriptor)
        self.plans.add(digest)
        return digest

    def _ask_for_sandbox(self, limits: Limits) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = operations.spawn(limits.memory_mb, limits.cpu_seconds)
        socket.send_fds(self.control, [json.dumps(settings).encode()], [theirs.fileno()])
        theirs.close()
        return ours

    def _pid_reply(self, channel: socket.socket) -> int:
        reply = wire.receive(self.control)
        pid = reply.get("pid") if isinstance(reply, dict) else None
        if not isinstance(pid, int):
            channel.close()
            raise RuntimeError(str(reply.get("error") if isinstance(reply, dict) else "") or _("zygote 进程无法启动沙箱"))
        return pid

    def _cancel_ahead(self) -> None:
        if self._ahead is None:
            return
        channel = self._ahead[0]
        self._ahead = None
        try:
            os.kill(self._pid_reply(channel), signal.SIGKILL)
        except (RuntimeError, ProcessLookupError, OSError, wire.ProtocolError):
            pass
        channel.close()

    def close(self) -> None:
        self._cancel_ahead()
        self.control.close()
        if self.process is None:  # the seed's child: it ends its sandboxes and exits on our close
            wait_for_exit(self._pidfd)
            self._pidfd = None
            return
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def frame_digest(frame: bytes) -> str:
    """A plan's name between the grader and the zygote that holds it: its batch frame's sha256."""
    return hashlib.sha256(frame).hexdigest()


def held_batch_frame(digest: str) -> bytes:
    """The frame asking a sandbox for the requests of the plan it holds (``Zygote.hold_plan``)."""
    return wire.encode(operations.held_batch(digest))
