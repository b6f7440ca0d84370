"""The trusted side of the sandbox: start the zygote, run a submission's cells, call its functions.

A :class:`Submission` session owns one sandbox process at a time. Every request has a wall-clock
limit; when a cell or call hangs or kills its process, the session kills the sandbox, starts a new
one, re-runs the cells that worked (skipping the one that hung) and carries on, so one bad cell
costs only what depends on it. After a few restarts it gives up and every later call fails fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from attnkit.constants import CRASHED, MISSING, TIMEOUT
from attnkit.explain import explain
from attnkit import confinement, i18n
from attnkit.i18n import _
from attnkit import operations, protocol
from attnkit.notebook import CodeCell, defines, place_of
from attnkit.policy import Limits
from attnkit.proxy import Outcome
from attnkit.seed import start_zygote_process, wait_for_exit


@dataclass
class CellRun:
    index: int
    grade_id: str
    ok: bool
    error_type: str = ""
    message: str = ""
    output: str = ""
    seconds: float = 0.0
    line: int = 0  # the student's failing line (within its cell) and its text, when it failed
    text: str = ""


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
        seed: socket.socket | None = None,
        later: bool = False,
    ) -> None:
        """``seed``: ask it for the zygote (``attnkit.seed``), else start one of our own. ``later``:
        return once it is asked for, and wait for it to be ready only when it is first needed
        (``wait_ready``), so that the caller's own start runs meanwhile."""
        self.hide = [str(Path(p).resolve()) for p in (hide or [])]
        # Cells are public (the release notebook's): the zygote compiles them ahead for sandboxes.
        self._config = {
            "hide": self.hide,
            "warm_up": warm_up,
            "lang": i18n.language(),
            "cells": cells or [],
            # The CPUs we keep to (engine.worker_cpus): a zygote of our own inherits them, the seed's is told.
            "cpus": sorted(os.sched_getaffinity(0)),
        }
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
        self.process = start_zygote_process(theirs.fileno(), str(theirs.fileno()), json.dumps(self._config))
        theirs.close()
        self.control = ours
        self.pid = self.process.pid

    def _ask_seed(self, seed: socket.socket) -> bool:
        """Ask the seed for a zygote with our configuration; whether the request went out."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(seed, [operations.ZYGOTE], [theirs.fileno()])
            protocol.send(ours, self._config)
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
            # what works there: see attnkit.confinement.
            exposed = listed if isinstance(listed := isolation.get("exposed"), list) else []
            self._failure = IsolationUnavailable(confinement.exposure_refusal(exposed) if exposed else confinement.refusal(str(isolation.get("why") or "")))
            raise self._failure

    def _ready_message(self) -> dict | None:
        """The zygote's first message if it says ready (else None; what came is kept for the error)."""
        try:
            ready = protocol.receive(self.control)
        except (OSError, protocol.ProtocolError) as error:
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
        reply = protocol.receive(self.control)
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
        except (RuntimeError, ProcessLookupError, OSError, protocol.ProtocolError):
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


class SandboxDied(Exception):
    """The sandbox process is gone or not answering."""


class OutOfTime(Exception):
    """The submission's time budget ran out in the middle of a batch."""


@dataclass
class Submission:
    """One submission's code, run in a sandbox; implements the proxy's Backend protocol."""

    zygote: Zygote
    cells: list[CodeCell]
    limits: Limits = field(default_factory=Limits)
    runs: list[CellRun] = field(default_factory=list)
    isolation: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    restarts: int = 0
    replaced_after_swaps: int = 0  # sandboxes replaced before a request after another's swapped calls
    _missing_because: dict[str, str] = field(default_factory=dict)  # name -> ``_why_missing``
    seconds_used: float = 0.0  # wall-clock spent in the sandbox, cells and calls together
    _channel: socket.socket | None = None
    _pid: int | None = None
    _given_up: bool = False
    # Swap sessions: substituted names -> the channel of the sandbox's fork that holds them bound
    # (see ``call_with``); ``_swap_refused`` once the sandbox could not fork one.
    _swaps: dict[frozenset, socket.socket] = field(default_factory=dict)
    _swap_refused: bool = False
    # Swapped calls run in the sandbox itself (the stand-ins bound for the call only) until one
    # of them kills it; then in swap sessions. See ``call_with``.
    _swap_in_place: bool = True
    # The substituted names whose calls this sandbox (or a fork of it) has run, if any: until it
    # is replaced it answers nothing else (``_forget_swaps``).
    _swapped_by: frozenset | None = None
    # The digest of the plan the sandbox was forked holding (``Zygote.hold_plan``), or "".
    plan: str = ""
    # The sandbox's CPU time and peak memory just before its first swapped call (``describe``).
    _usage_before_swaps: dict[str, Any] = field(default_factory=dict)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start a sandbox and run every code cell in order (visible check cells excepted).

        The cells go in one batch and their replies stream back, each held to the cell limit as
        if sent alone; after a cell that hangs or kills the sandbox, the rest run one by one on
        a recovered sandbox."""
        self._boot()
        runnable = [cell for cell in self.cells if not (cell.is_check or cell.skip or not cell.source.strip())]
        deadline = time.monotonic() + self.limits.notebook_seconds
        replies, failure = self._batch(
            [operations.cell(cell.source) for cell in runnable],
            self.limits.cell_seconds,
            until=deadline + self.limits.cell_seconds,
            cell_budget=self.limits.notebook_seconds,
        )
        for cell, reply in zip(runnable, replies, strict=False):
            self.runs.append(self._not_run(cell) if reply.get(operations.SKIPPED) else self._cell_run(cell, reply))
        rest = runnable[len(replies) :]
        if failure is not None and rest:
            self.runs.append(self._cell_failed(rest.pop(0), hung=failure is TimeoutError))
        for cell in rest:
            self.runs.append(self._not_run(cell) if time.monotonic() > deadline else self._run_cell(cell))

    @staticmethod
    def _not_run(cell: CodeCell) -> CellRun:
        return CellRun(cell.index, cell.grade_id, False, TIMEOUT, _("整本笔记本的运行时间超过上限，此单元格未运行"))

    def _batch(
        self, requests: list[Any], seconds: float, until: float, cell_budget: float | None = None, frame: bytes | None = None, budget: float | None = None
    ) -> tuple[list[dict], type | None]:
        """Send ``requests`` as one batch; their replies in order, each within ``seconds`` of the
        one before (and all by ``until``), and what cut the stream short: ``TimeoutError``,
        ``SandboxDied``, or ``OutOfTime`` (``budget`` seconds had passed when the next request
        would start, so it would not have been asked); else None. When cut short the sandbox is
        closed: a reply still in flight must never be read as the answer to a later request."""
        replies: list[dict] = []
        if not requests:
            return replies, None
        channel = self._channel
        if channel is None:
            return replies, SandboxDied
        started = time.monotonic()
        try:
            channel.settimeout(seconds)
            channel.sendall(frame or batch_frame(requests, cell_budget))
            for index in range(len(requests)):
                if budget is not None and index and time.monotonic() - started > budget:
                    self.close()
                    return replies, OutOfTime
                reply = protocol.receive(channel, min(time.monotonic() + seconds, until))
                if not isinstance(reply, dict) or operations.CALLBACK in reply:
                    raise protocol.ProtocolError("unrecognised reply")
                replies.append(reply)
        except TimeoutError:
            self.close()
            return replies, TimeoutError
        except (OSError, protocol.ProtocolError):
            self.close()
            return replies, SandboxDied
        finally:
            self.seconds_used += time.monotonic() - started
        return replies, None

    def close(self) -> None:
        self._end_swaps()
        if self._channel is not None:
            try:
                self._channel.settimeout(0.5)
                protocol.send(self._channel, operations.bye())
            except (OSError, protocol.ProtocolError):
                pass
            self._channel.close()
            self._channel = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._pid = None

    def _boot(self) -> None:
        self.close()
        self._channel, self._pid = self.zygote.spawn(self.limits)
        try:
            ready = protocol.receive(self._channel, time.monotonic() + 30)
        except (OSError, protocol.ProtocolError) as error:
            self.close()
            raise SandboxDied(_("沙箱未能启动：{error}").format(error=error)) from None
        if not (isinstance(ready, dict) and ready.get("ready")):
            raise SandboxDied(_("沙箱未能启动：{error}").format(error=ready.get("error") if isinstance(ready, dict) else ready))
        self.isolation = [str(item) for item in ready.get("isolation", [])]
        self.plan = str(ready.get(operations.PLAN) or "")

    def _request(
        self, message: Mapping[str, Any], seconds: float, substitutes: dict[str, Any] | None = None, swap: frozenset | None = None, fds: list[int] | None = None
    ) -> dict:
        """One request and its reply, all within ``seconds`` of wall-clock time. With
        ``substitutes`` (a swapped call), the sandbox's ``callback`` frames for those names are
        answered here with the trusted functions' results until the real reply comes; without,
        a callback is just an unrecognised reply. ``swap``: sent to that swap session's fork
        instead (a fork that went away answers as a crashed call). ``fds``: descriptors sent
        right after the request (one byte of ancillary data)."""
        channel = self._channel if swap is None else self._swaps.get(swap)
        if channel is None:
            raise SandboxDied(_("沙箱未运行"))
        started = time.monotonic()
        deadline = started + seconds
        answered = 0
        try:
            channel.settimeout(seconds)
            protocol.send(channel, message)
            if fds:
                socket.send_fds(channel, [b"\0"], fds)
            reply = protocol.receive(channel, deadline)
            while substitutes is not None and isinstance(reply, dict) and operations.CALLBACK in reply:
                answered += 1
                channel.settimeout(max(0.001, deadline - time.monotonic()))
                protocol.send(channel, self._answer_callback(reply, substitutes, answered))
                reply = protocol.receive(channel, deadline)
        except TimeoutError:
            self.close()
            raise TimeoutError from None
        except (protocol.PeerClosed, BrokenPipeError, ConnectionResetError) as error:
            if swap is None:
                self.close()
                raise SandboxDied(str(error)) from None
            # The session's fork died in the call (the student's exit, a crash): the sandbox
            # itself goes on, as after a single swapped call's fork died.
            self._end_swaps(swap)
            reply = {"value": None, "error_type": CRASHED, "message": _("调用时进程意外退出")}
        except (OSError, protocol.ProtocolError) as error:
            self.close()
            raise SandboxDied(str(error)) from None
        finally:
            self.seconds_used += time.monotonic() - started
        if not isinstance(reply, dict) or operations.CALLBACK in reply:
            self.close()
            raise SandboxDied(_("沙箱返回了无法识别的数据"))
        return reply

    def _run_cell(self, cell: CodeCell) -> CellRun:
        try:
            reply = self._request(operations.cell(cell.source), self.limits.cell_seconds)
        except (TimeoutError, SandboxDied) as error:
            return self._cell_failed(cell, hung=isinstance(error, TimeoutError))
        return self._cell_run(cell, reply)

    def _cell_failed(self, cell: CodeCell, hung: bool) -> CellRun:
        """The cell hung or killed the sandbox: recover, and say which."""
        message = (
            _("单元格运行超过 {seconds} 秒，已被终止").format(seconds=f"{self.limits.cell_seconds:g}")
            if hung
            else _("单元格运行时进程意外退出（例如调用了 os._exit 或内存耗尽）")
        )
        self._recover()
        return CellRun(cell.index, cell.grade_id, False, TIMEOUT if hung else CRASHED, message)

    @staticmethod
    def _cell_run(cell: CodeCell, reply: dict) -> CellRun:
        line = reply.get("line")
        return CellRun(
            cell.index,
            cell.grade_id,
            bool(reply.get("ok")),
            str(reply.get("error_type") or ""),
            str(reply.get("message") or ""),
            str(reply.get("output") or ""),
            float(reply.get("seconds") or 0.0),
            line if isinstance(line, int) and 0 < line < 100_000 else 0,
            str(reply.get("text") or "")[:300],
        )

    def _recover(self) -> None:
        """A fresh sandbox with every cell that worked before re-run, or give up."""
        self.close()
        if self.restarts >= self.limits.restarts:
            self._given_up = True
            return
        self.restarts += 1
        self._reboot()

    def _reboot(self) -> None:
        """A fresh sandbox with every cell that worked before re-run (or give up)."""
        self._swapped_by = None
        try:
            self._boot()
            survived = {run.index for run in self.runs if run.error_type not in (TIMEOUT, CRASHED)}
            for cell in self.cells:
                if cell.index in survived:
                    self._request(operations.cell(cell.source), self.limits.cell_seconds)
        except (TimeoutError, SandboxDied):
            self._given_up = True
            self.close()

    def _forget_swaps(self, swap: frozenset | None) -> None:
        """Before a request for ``swap`` (None: a plain call or read), replace a sandbox that has
        run other swapped calls. A swap fork shares its sandbox's scratch folders, descriptors,
        shared memory and namespaces, and its code held the reference's answers: whatever it left
        there must reach neither the sandbox's own answers (a heatmap, a later test) nor a fork
        for other names. A sandbox freshly forked from the zygote, with the same cells re-run, has
        none of it (its own tmpfs, mount and IPC namespaces; unisolated, its own workdir). The
        cells' second run is the grader's cost, not the submission's time budget."""
        if self._swapped_by is None or self._swapped_by == swap:
            return
        used = self.seconds_used
        self.replaced_after_swaps += 1
        self.close()
        self._reboot()
        self.seconds_used = used

    # -- Backend -------------------------------------------------------------------------------
    def call(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        return self._ask(operations.call(name, args, kwargs), name)

    def variable(self, name: str) -> Outcome:
        return self._ask(operations.get(name), name)

    # The most reference calls one substituted call may ask for, and their largest tensor: a
    # multi-head call needs one; the bound keeps a hostile stand-in from making us compute much.
    MAX_CALLBACKS = 64
    MAX_CALLBACK_ELEMENTS = 1_000_000

    # Swap sessions kept open at once (one per set of substituted names).
    MAX_SWAPS = 4

    def call_with(self, name: str, args: tuple, kwargs: dict, substitutes: dict[str, Any]) -> Outcome:
        """``call`` with each name in ``substitutes`` standing, inside the sandbox, for the
        trusted function given here: the stand-ins send ``callback`` frames, answered here with
        the trusted function's result (callbacks are honoured only while a request is open).

        The call runs in the sandbox itself, the names bound for that call only and restored
        after: a swapped call needs the student's own state. What the student's code keeps of the
        reference there (the stand-in, its results) never reaches an unswapped answer, because a
        sandbox that has run swapped calls answers nothing else: before a plain call, a read or
        a call swapping other names it is replaced by a fresh one (``_forget_swaps``). The
        plugin defers swapped re-runs until a submission's plain tests are done, so that is rare.
        Once a swapped call has ended the sandbox (the student's exit, a crash), later ones run in
        a *swap session* instead, a fork of the sandbox serving every call with these names on a
        channel of its own, so that dying costs a fork, not a new sandbox; where it cannot fork,
        each call runs in a throwaway fork of its own (``call_with_substitutes``)."""
        return self._ask(operations.call_with(name, args, kwargs, substitutes), name, substitutes, swap=frozenset(substitutes))

    def _open_swap(self, names: frozenset) -> bool:
        """A swap session for ``names`` (already open, or forked now); False where the sandbox
        cannot fork one. Raises what ``_request`` raises."""
        if names in self._swaps:
            waiting = select.poll()
            waiting.register(self._swaps[names], select.POLLIN | select.POLLHUP | select.POLLERR)
            if not waiting.poll(0):
                return True
            # Between two calls its channel has something to read: the fork went away (or its
            # code wrote out of turn). A fresh one, as each swapped call had before.
            self._end_swaps(names)
        if self._swap_refused:
            return False
        while len(self._swaps) >= self.MAX_SWAPS:
            self._end_swaps(next(iter(self._swaps)))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            reply = self._request(operations.swap_begin(names), self.limits.call_seconds, fds=[theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if reply.get(operations.SWAP) != operations.SWAP_FORKED:
            ours.close()
            self._swap_refused = True
            return False
        self._swaps[names] = ours
        return True

    def _end_swaps(self, names: frozenset | None = None) -> None:
        """Close one swap session's channel (all of them by default): its fork sees the end of its
        channel and exits."""
        for key in [names] if names is not None else list(self._swaps):
            channel = self._swaps.pop(key, None)
            if channel is not None:
                channel.close()

    def _answer_callback(self, reply: dict, substitutes: dict[str, Any], answered: int) -> dict:
        """The trusted function's result for one stand-in call, or a refusal (a name not
        swapped, past the call budget, or arguments too large)."""
        from attnkit.proxy import run_in_namespace

        callee = reply.get(operations.CALLBACK)
        if callee not in substitutes or answered > self.MAX_CALLBACKS or not _small(reply.get("args"), reply.get("kwargs"), limit=self.MAX_CALLBACK_ELEMENTS):
            return {"error_type": "RuntimeError", "message": _("参考的 {name} 无法用于这次调用").format(name=callee)}
        args, kwargs = reply.get("args"), reply.get("kwargs")
        outcome = run_in_namespace(substitutes, str(callee), tuple(args) if isinstance(args, list) else (), kwargs if isinstance(kwargs, dict) else {})
        return {"value": outcome.value, "error_type": outcome.error_type, "message": outcome.message}

    def _ask(self, message: Mapping[str, Any], name: str, substitutes: dict[str, Any] | None = None, swap: frozenset | None = None) -> Outcome:
        refused = self._refusal()
        if refused is not None:
            return refused
        in_place = False
        try:
            self._forget_swaps(swap)
            refused = self._refusal()
            if refused is not None:
                return refused
            in_place = swap is not None and self._swap_in_place
            if swap is not None and self._swapped_by is None and self._pid is not None:
                # From here its code may hold the reference's answers, and could spell them in
                # how much memory or CPU it uses: results.json shows the usage read now.
                self._usage_before_swaps = usage_of(self._pid, self.zygote.pid)
            if swap is not None:
                self._swapped_by = swap  # from the first swapped call (in place or in a fork)
            if in_place:
                message = operations.in_place(message)
                swap = None
            elif swap is not None and self._open_swap(swap):
                message = operations.plain_call(message)
            else:
                swap = None
            reply = self._request(message, self.limits.call_seconds, substitutes, swap)
        except SandboxDied:
            if in_place:
                return self._swapped_call_died()
            return self._call_failed(name, hung=False)
        except TimeoutError:
            return self._call_failed(name, hung=True)
        return self._outcome(reply, name)

    def _swapped_call_died(self) -> Outcome:
        """A swapped call run in place ended the sandbox (the student's exit, a crash): as when
        a swap session's fork dies, the call crashed and nothing is charged as a restart. The
        sandbox is replaced, as after any swapped call, and this submission's later swapped calls
        run in swap sessions, so a notebook that exits in each costs a fork, not a new sandbox."""
        used = self.seconds_used
        self._swap_in_place = False
        self.close()
        self._reboot()
        self.seconds_used = used
        return Outcome(value=None, error_type=CRASHED, message=_("调用时进程意外退出"))

    def _refusal(self) -> Outcome | None:
        """Why no more calls run, if none will: given up, or over the submission's time budget
        (the sandbox may be closed then), or no sandbox."""
        crashed = Outcome(error_type=CRASHED, message=_("你的代码使运行环境多次崩溃或超时，后面的检查无法进行"))
        if self._given_up:
            return crashed
        if self.seconds_used > self.limits.submission_seconds:
            message = _("这份提交的总运行时间超过了 {seconds} 秒，后面的检查没有运行").format(seconds=f"{self.limits.submission_seconds:g}")
            return Outcome(error_type=TIMEOUT, message=message)
        return crashed if self._channel is None else None

    def _call_failed(self, name: str, hung: bool) -> Outcome:
        """The call hung or killed the sandbox: recover, and say which."""
        self._recover()
        if hung:
            return Outcome(error_type=TIMEOUT, message=_("{name} 超过 {seconds} 秒没有返回").format(name=name, seconds=f"{self.limits.call_seconds:g}"))
        return Outcome(error_type=CRASHED, message=_("调用 {name} 时进程意外退出").format(name=name))

    def _outcome(self, reply: dict, name: str = "") -> Outcome:
        error_type = reply.get("error_type")
        message = str(reply.get("message") or "")
        if error_type == MISSING and name:
            # Asked once per name: every planned call of a missing function comes back MISSING.
            if name not in self._missing_because:
                self._missing_because[name] = self._why_missing(name)
            message += self._missing_because[name]
        return Outcome(
            value=reply.get("value"),
            error_type=str(error_type) if error_type is not None else None,
            message=message,
            where=self._locate(reply.get("where")),
            warnings=[str(item)[:600] for item in reply.get("warnings", [])][:5] if isinstance(reply.get("warnings"), list) else [],
        )

    def _why_missing(self, name: str) -> str:
        """Where the student meant to define ``name``, if grading did not run it there: the cell
        that defines it failed (a syntax error, an exception before the ``def``), did not run, or
        is a skip-grading demo. Empty when no cell defines it (a misspelt name)."""
        runs = {run.index: run for run in self.runs}
        for cell in reversed(self.cells):  # the last definition is the one that would count
            if cell.is_check or not defines(cell.source, name):
                continue
            place = place_of(cell)
            if cell.skip:
                return _("：定义它的单元格（{place}）带有 skip-grading 标签，评分时不运行这种演示单元格，请把定义移到你的答案单元格里").format(place=place)
            run = runs.get(cell.index)
            if run is not None and not run.ok:
                failed = _("：定义它的单元格（{place}）运行出错（{error}），所以它没有被定义，先修正那个单元格").format(
                    place=place, error=f"{run.error_type}：{run.message}"[:300] if run.message else run.error_type
                )
                # What that error means, where the kit knows: a failed import names what grading has.
                meaning = explain(run.error_type, run.message, run.text)
                return i18n.sentences([failed + _("。"), meaning]) if meaning else failed
            if run is None:
                return _("：定义它的单元格（{place}）没有运行（前面的单元格用完了时间，或运行环境崩溃）").format(place=place)
        return ""

    def prefetch(self, requests: list[Any], frame: bytes | None = None) -> list[Outcome]:
        """Outcomes of ``requests`` (the ``call`` and ``get`` messages that :meth:`call` and
        :meth:`variable` send), asked in one batch, in order, as far as the batch got: each call
        still has the call limit and the submission's time budget still holds. A call that hangs
        or kills the sandbox gets the outcome it would have had alone and the sandbox recovers;
        the requests after it are not answered (the caller asks them one by one). ``frame``:
        ``batch_frame(requests)``, when the caller keeps it for many submissions."""
        if not requests or self._refusal() is not None:
            return []
        self._forget_swaps(None)  # asked at open, before any swap; but never of a swapped sandbox
        if self._refusal() is not None:
            return []
        left = self.limits.submission_seconds - self.seconds_used
        replies, failure = self._batch(requests, self.limits.call_seconds, time.monotonic() + left + self.limits.call_seconds, frame=frame, budget=left)
        outcomes = [self._outcome(reply, str(request.get("name", ""))) for reply, request in zip(replies, requests, strict=False)]
        if failure in (TimeoutError, SandboxDied) and len(outcomes) < len(requests):
            name = str(requests[len(outcomes)].get("name", ""))
            outcomes.append(self._call_failed(name, hung=failure is TimeoutError))
        return outcomes

    def _locate(self, where: Any) -> dict | None:
        """The failing line's cell, found among this submission's cells by its text (the sandbox
        knows IPython's name for it, not the notebook's): its index and section title."""
        if not isinstance(where, dict):
            return None
        text = str(where.get("cell_text") or "")
        located = {key: where.get(key) for key in ("function", "line", "text") if isinstance(where.get(key), (str, int))}
        for cell in reversed(self.cells):  # a later definition wins, as in the notebook
            if text and cell.source.strip() == text.strip():
                located.update(cell=cell.index, section=getattr(cell, "section", ""))
                break
        return located

    def describe(self) -> dict[str, Any]:
        """How the submission ran: isolation, restarts, and the sandbox's own CPU time and peak memory."""
        description: dict[str, Any] = {"isolation": self.isolation, "restarts": self.restarts, "replaced_after_swaps": self.replaced_after_swaps}
        if self._swapped_by is not None:  # what it used after that could carry the reference's answers
            description.update(self._usage_before_swaps)
        elif self._channel is not None and self._pid is not None and not self._given_up:  # set together by _boot
            description.update(usage_of(self._pid, self.zygote.pid))
        return description


def usage_of(pid: int, zygote: int) -> dict[str, Any]:
    """A sandbox's CPU time and peak memory as the kernel counts them, read here from /proc: asking
    the sandbox would cost a round trip, and its answer would be whatever its code made of
    ``resource.getrusage``. Nothing if ``pid`` is not the zygote's child any more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        status = Path(f"/proc/{pid}/status").read_bytes()
    except OSError:
        return {}
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (name) ": state, ppid, ...
    if len(fields) < 13 or fields[1] != str(zygote).encode():
        return {}
    try:  # nanoseconds on the CPU, where the kernel keeps them; else its ticks (10 ms)
        cpu_seconds = int(Path(f"/proc/{pid}/schedstat").read_bytes().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        cpu_seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next((line.split()[1] for line in status.splitlines() if line.startswith(b"VmHWM:")), b"0")
    return {"cpu_seconds": round(cpu_seconds, 4), "max_rss_kb": int(peak)}


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def frame_digest(frame: bytes) -> str:
    """A plan's name between the grader and the zygote that holds it: its batch frame's sha256."""
    return hashlib.sha256(frame).hexdigest()


def held_batch_frame(digest: str) -> bytes:
    """The frame asking a sandbox for the requests of the plan it holds (``Zygote.hold_plan``)."""
    return protocol.encode(operations.held_batch(digest))


def batch_frame(requests: list[Any], cell_budget: float | None = None) -> bytes:
    """The frame asking a sandbox for ``requests`` in one batch (``Sandbox.serve_batch``)."""
    return protocol.encode(operations.batch(requests, cell_budget))


def _small(*values: Any, limit: int) -> bool:
    """Every tensor in ``values`` has at most ``limit`` elements (nested lists/dicts searched)."""
    import torch

    stack = list(values)
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.numel() > limit:
                return False
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return True
