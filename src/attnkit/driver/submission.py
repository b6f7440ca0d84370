"""The trusted driver of one submission's sandbox: run its cells, call its functions, recover.

A :class:`Submission` session owns one sandbox process at a time. Every request has a wall-clock
limit; when a cell or call hangs or kills its process, the session kills the sandbox, starts a new
one, re-runs the cells that worked (skipping the one that hung) and carries on, so one bad cell
costs only what depends on it. After a few restarts it gives up and every later call fails fast.
Its other parts live beside it: the handle on the zygote it asks for sandboxes
(``attnkit.driver.zygote_handle``), the swapped calls (``attnkit.driver.swapped_calls``), what the replies mean
(``attnkit.driver.replies``) and the sandbox's usage (``attnkit.driver.usage``).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from attnkit.constants import CRASHED, TIMEOUT
from attnkit.i18n import _
from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.notebook import CodeCell
from attnkit.boundary.policy import Limits
from attnkit.boundary.outcome import Outcome
from attnkit.driver.replies import CellRun, ReplyDecoding
from attnkit.driver.usage import open_schedstat, usage_of, wanted_seconds
from attnkit.driver.swapped_calls import SwappedCalls
from attnkit.driver.zygote_handle import Zygote


class SandboxDied(Exception):
    """The sandbox process is gone or not answering."""


class OutOfTime(Exception):
    """The submission's time budget ran out in the middle of a batch."""


class HostStalled(TimeoutError):
    """A request ran out of time while its sandbox spent at least half of the limit neither on
    a CPU nor waiting for one (stopped by the host, a paused machine): not the student's CPU.
    The sandbox is recovered and the request asked again, ``Limits.host_retries`` times at most
    per submission; after that a timeout is the student's, as before."""


@dataclass
class _Mark:
    """Where a request or a batch began: the clock, the sandbox's CPU time wanted so far
    (``usage.wanted_seconds``) and the submission's charged time."""

    at: float
    wanted: float | None
    used: float


@dataclass
class Submission(SwappedCalls, ReplyDecoding):
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
    _schedstat: int | None = None  # a descriptor on the sandbox's /proc/<pid>/schedstat (``_mark``)
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
    host_stalls: int = 0  # requests asked again because the host stalled the sandbox (``HostStalled``)
    excused_seconds: float = 0.0  # wall-clock of those stalls that the sandbox did not want the CPU: not charged

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start a sandbox and run every code cell in order (visible check cells excepted).

        The cells go in one batch and their replies stream back, each held to the cell limit as
        if sent alone; after a cell that hangs or kills the sandbox, the rest run one by one on
        a recovered sandbox."""
        self._boot()
        runnable = [cell for cell in self.cells if cell.runs_in_sandbox]
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
        if failure is HostStalled and rest:
            self._recover(by_host=True)  # the cell it was on runs again, alone
        elif failure is not None and rest:
            self.runs.append(self._cell_failed(rest.pop(0), hung=failure is TimeoutError))
        for cell in rest:
            self.runs.append(self._not_run(cell) if time.monotonic() - self.excused_seconds > deadline else self._run_cell(cell))

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
        mark = self._mark()
        started = mark.at
        stalled = False
        try:
            channel.settimeout(seconds)
            channel.sendall(frame or batch_frame(requests, cell_budget))
            for index in range(len(requests)):
                if budget is not None and index and time.monotonic() - started > budget:
                    self.close()
                    return replies, OutOfTime
                reply = wire.receive(channel, min(time.monotonic() + seconds, until))
                if not isinstance(reply, dict) or operations.CALLBACK in reply:
                    raise wire.ProtocolError("unrecognised reply")
                replies.append(reply)
        except TimeoutError:
            stalled = self._stalled(mark, seconds)
            self.close()
            return replies, HostStalled if stalled else TimeoutError
        except (OSError, wire.ProtocolError):
            self.close()
            return replies, SandboxDied
        finally:
            if not stalled:
                self.seconds_used += time.monotonic() - started
        return replies, None

    def _mark(self) -> _Mark:
        return _Mark(time.monotonic(), wanted_seconds(self._schedstat), self.seconds_used)

    def _stalled(self, mark: _Mark, seconds: float) -> bool:
        """At a timeout, before the sandbox is closed: did the host stall it? Since ``mark`` it
        spent at least half of the limit (``seconds``) neither on a CPU nor waiting for one, and
        this submission has stalls left to excuse. If so the stretch is charged only the CPU time
        the sandbox wanted (not its wall-clock), and the caller asks again."""
        now = wanted_seconds(self._schedstat)
        if now is None or mark.wanted is None or self.host_stalls >= self.limits.host_retries:
            return False
        wall, wanted = time.monotonic() - mark.at, max(0.0, now - mark.wanted)
        if wall - wanted < seconds / 2:
            return False  # it ran (or wanted to run) for most of the limit: the student's own timeout
        self.host_stalls += 1
        self.excused_seconds += wall - wanted
        self.seconds_used = mark.used + wanted
        return True

    def close(self) -> None:
        self._end_swaps()
        if self._channel is not None:
            try:
                self._channel.settimeout(0.5)
                wire.send(self._channel, operations.bye())
            except (OSError, wire.ProtocolError):
                pass
            self._channel.close()
            self._channel = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._pid = None
        if self._schedstat is not None:
            os.close(self._schedstat)
            self._schedstat = None

    def _boot(self) -> None:
        self.close()
        self._channel, self._pid = self.zygote.spawn(self.limits)
        self._schedstat = open_schedstat(self._pid)
        try:
            ready = wire.receive(self._channel, time.monotonic() + 30)
        except (OSError, wire.ProtocolError) as error:
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
        mark = self._mark() if swap is None else None  # a swap session's fork is another process: its timeouts are plain
        started = time.monotonic()
        deadline = started + seconds
        answered = 0
        stalled = False
        try:
            channel.settimeout(seconds)
            wire.send(channel, message)
            if fds:
                socket.send_fds(channel, [b"\0"], fds)
            reply = wire.receive(channel, deadline)
            while substitutes is not None and isinstance(reply, dict) and operations.CALLBACK in reply:
                answered += 1
                channel.settimeout(max(0.001, deadline - time.monotonic()))
                wire.send(channel, self._answer_callback(reply, substitutes, answered))
                reply = wire.receive(channel, deadline)
        except TimeoutError:
            stalled = mark is not None and self._stalled(mark, seconds)
            self.close()
            raise (HostStalled if stalled else TimeoutError) from None
        except (wire.PeerClosed, BrokenPipeError, ConnectionResetError) as error:
            if swap is None:
                self.close()
                raise SandboxDied(str(error)) from None
            # The session's fork died in the call (the student's exit, a crash): the sandbox
            # itself goes on, as after a single swapped call's fork died.
            self._end_swaps(swap)
            reply = {"value": None, "error_type": CRASHED, "message": _("调用时进程意外退出")}
        except (OSError, wire.ProtocolError) as error:
            self.close()
            raise SandboxDied(str(error)) from None
        finally:
            if not stalled:
                self.seconds_used += time.monotonic() - started
        if not isinstance(reply, dict) or operations.CALLBACK in reply:
            self.close()
            raise SandboxDied(_("沙箱返回了无法识别的数据"))
        return reply

    def _run_cell(self, cell: CodeCell) -> CellRun:
        try:
            reply = self._request(operations.cell(cell.source), self.limits.cell_seconds)
        except HostStalled:
            self._recover(by_host=True)
            return self._run_cell(cell)  # again, on a fresh sandbox (bounded: ``_stalled``)
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

    def _recover(self, by_host: bool = False) -> None:
        """A fresh sandbox with every cell that worked before re-run, or give up. ``by_host``:
        after a stall of the host's (``HostStalled``), which is not one of the student's restarts."""
        self.close()
        if not by_host:
            if self.restarts >= self.limits.restarts:
                self._given_up = True
                return
            self.restarts += 1
        self._reboot()

    def _reboot(self) -> None:
        """A fresh sandbox with every cell that worked before re-run (or give up); again if the
        host stalled it meanwhile (bounded: ``_stalled``)."""
        self._swapped_by = None
        while True:
            try:
                self._boot()
                survived = {run.index for run in self.runs if run.error_type not in (TIMEOUT, CRASHED)}
                for cell in self.cells:
                    if cell.index in survived:
                        self._request(operations.cell(cell.source), self.limits.cell_seconds)
                return
            except HostStalled:
                self.close()
            except (TimeoutError, SandboxDied):
                self._given_up = True
                self.close()
                return

    # -- Backend -------------------------------------------------------------------------------
    def call(self, name: str, args: tuple, kwargs: dict) -> Outcome:
        return self._ask(operations.call(name, args, kwargs), name)

    def variable(self, name: str) -> Outcome:
        return self._ask(operations.get(name), name)

    def _ask(self, message: Mapping[str, Any], name: str, substitutes: dict[str, Any] | None = None, swap: frozenset | None = None) -> Outcome:
        asked = message, swap
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
        except HostStalled:
            self._recover(by_host=True)
            return self._ask(asked[0], name, substitutes, asked[1])  # again, on a fresh sandbox (bounded: ``_stalled``)
        except TimeoutError:
            return self._call_failed(name, hung=True)
        return self._outcome(reply, name)

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
        if failure is HostStalled:
            self._recover(by_host=True)  # the rest, the stalled one first, are asked one by one
        elif failure in (TimeoutError, SandboxDied) and len(outcomes) < len(requests):
            name = str(requests[len(outcomes)].get("name", ""))
            outcomes.append(self._call_failed(name, hung=failure is TimeoutError))
        return outcomes

    def describe(self) -> dict[str, Any]:
        """How the submission ran: isolation, restarts, and the sandbox's own CPU time and peak memory."""
        description: dict[str, Any] = {"isolation": self.isolation, "restarts": self.restarts, "replaced_after_swaps": self.replaced_after_swaps}
        if self.host_stalls:  # asked again, not charged: the TA may want to know the host stalled
            description["host_stalls"] = self.host_stalls
        if self._swapped_by is not None:  # what it used after that could carry the reference's answers
            description.update(self._usage_before_swaps)
        elif self._channel is not None and self._pid is not None and not self._given_up:  # set together by _boot
            description.update(usage_of(self._pid, self.zygote.pid))
        return description


def batch_frame(requests: list[Any], cell_budget: float | None = None) -> bytes:
    """The frame asking a sandbox for ``requests`` in one batch (``Sandbox.serve_batch``)."""
    return wire.encode(operations.batch(requests, cell_budget))
