"""A sandbox's request server: one submission's cells, calls and reads, answered as data.

:class:`Sandbox` runs in the sandbox process after ``attnkit.sandbox.lockdown.sequence``: requests come one at a
time (or as a batch, or as the plan held since the fork), whatever the student's code raises
becomes data (``attnkit.boundary.wire``), and calls that need the reference run in throwaway forks
holding stand-ins (swap sessions), so nothing the student's code keeps of them outlives the call.
"""

from __future__ import annotations

import gc
import hashlib
import os
import socket
import time
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.boundary.operations import BATCH, BATCHABLE, BYE, CALL, CALL_WITH, CELL, GET, OP, SWAP_BEGIN
from attnkit.sandbox.warm_shell import BoundedWriter
from attnkit.constants import CRASHED, MAX_MESSAGE
from attnkit.boundary.explain import student_frame
from attnkit.i18n import _
from attnkit.sandbox.lockdown.namespace_steps import die_with_parent
from attnkit.boundary.outcome import Outcome, builtin_exception, read_variable, run_in_namespace, unreadable

# The plan this zygote holds (``hold_plan``): its digest and its decoded requests. Requests only
# (the hidden tests' inputs), never an expected result; every sandbox forked afterwards has its
# own copy-on-write copy, so what one submission's code does to it no other sees. Per zygote
# process, replaced by the next ``hold_plan`` (its digest says which plan it is).
_plan: tuple[str, list] | None = None


def hold_plan(digest: str, descriptor: int) -> bool:
    """Read a plan's batch frame from ``descriptor`` (a memfd from the trusted grader), check it
    against ``digest``, decode it and keep it for the sandboxes forked from now on."""
    global _plan
    with os.fdopen(descriptor, "rb") as source:
        frame = source.read(wire.MAX_FRAME_BYTES + 1)
    if len(frame) > wire.MAX_FRAME_BYTES or hashlib.sha256(frame).hexdigest() != digest:
        return False
    try:
        batch = wire.decode(frame)
    except wire.ProtocolError:
        return False
    if not (isinstance(batch, dict) and isinstance(batch.get("requests"), list)):
        return False
    _plan = (digest, batch["requests"])
    gc.collect()
    gc.freeze()  # out of every sandbox's collections, like the rest of the zygote's heap
    return True


class Sandbox:
    """One submission's process, once locked down (``attnkit.sandbox.lockdown.sequence``): serves requests until told to stop."""

    def __init__(self, channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell) -> None:
        self.channel = channel
        self.settings = settings
        self.shell = shell
        self.isolation: list[str] = []  # what its lock-down obtained
        self.output = BoundedWriter()
        # Swap sessions (``swap_begin``): forks of this sandbox holding stand-ins, each serving its
        # own channel until the grader closes it; and, in such a fork, whether a request is open
        # (its stand-ins answer only then).
        self.forks: list[int] = []
        self.live: list | None = None

    # -- serve ---------------------------------------------------------------------------------
    def serve(self) -> None:
        ready: dict[str, Any] = {"ready": True, "isolation": self.isolation, "pid": os.getpid()}
        if _plan is not None:
            ready[operations.PLAN] = _plan[0]
        wire.send(self.channel, ready)
        self._serve_requests()

    def _serve_requests(self) -> None:
        while True:
            try:
                request = wire.receive(self.channel)
            except wire.ProtocolError:
                return
            if not isinstance(request, dict) or request.get(OP) == BYE:
                return
            if request.get(OP) == BATCH and self.live is None:
                self.serve_batch(request)
                continue
            self.channel.sendall(self.answer(request))
            self._reap_forks()

    def answer(self, request: dict) -> bytes:
        """The reply frame to one request; whatever the student's code raises becomes data."""
        if self.live is not None:
            self.live.append(True)
        try:
            return self.handle(request)
        except BaseException as error:  # SystemExit, KeyboardInterrupt... from a student call
            return wire.encode({"error_type": type(error).__name__, "message": str(error)[:MAX_MESSAGE]})
        finally:
            if self.live is not None:
                self.live.clear()

    def serve_batch(self, request: dict) -> None:
        """``operations.batch`` (or ``operations.held_batch``: the requests of the plan held since
        the fork): cells, calls and reads
        answered in order, one reply frame each, sent as soon as it is ready (the grader holds
        each to its own time limit, as if asked one by one). Cells that would start after
        ``cell_budget`` seconds are not run (``{"skipped": true}``), as the grader would not ask
        for them. Swap sessions and nested batches are not batched."""
        started = time.monotonic()
        budget = request.get("cell_budget")
        items = request.get("requests")
        if operations.PLAN in request:  # the plan this sandbox was forked with (it said so when ready)
            if _plan is None or request[operations.PLAN] != _plan[0]:
                self.channel.sendall(wire.encode({"error_type": "__protocol__", "message": "no such plan"}))
                return
            items = _plan[1]
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get(OP) not in BATCHABLE:
                frame = wire.encode({"error_type": "__protocol__", "message": "not batchable"})
            elif item[OP] == CELL and isinstance(budget, (int, float)) and time.monotonic() - started > budget:
                frame = wire.encode({operations.SKIPPED: True})
            else:
                frame = self.answer(item)
            self.channel.sendall(frame)

    def handle(self, request: dict) -> bytes:
        """The reply frame to one request, encoded once."""
        op = request.get(OP)
        name = str(request.get("name", ""))
        namespace = self.shell.user_ns
        if op == CELL:
            return wire.encode(self.run_cell(str(request.get("source", ""))))
        if op == CALL_WITH:
            if self.live is not None:  # in a swap session: the stand-ins are already bound
                return self.handle(operations.plain_call(request))
            if request.get("in_place"):  # the grader replaces this sandbox before any other use
                return self._substituted_reply(request, [str(item) for item in request.get("substitutes", [])])
            return self.call_with_substitutes(request)
        if op == SWAP_BEGIN:
            if self.live is not None:  # no session within a session
                return wire.encode(operations.swap_reply(forked=False))
            return self.swap_begin(request)
        if op == CALL:
            outcome = run_in_namespace(namespace, name, tuple(request["args"]), dict(request["kwargs"]), plain=False)
        elif op == GET:
            outcome = read_variable(namespace, name, plain=False)
        else:
            outcome = Outcome(error_type="__protocol__", message=f"unknown op {op!r}")
        reply = {"value": outcome.value, "error_type": outcome.error_type, "message": outcome.message}
        if outcome.where:
            reply["where"] = outcome.where
        if outcome.warnings:
            reply["warnings"] = outcome.warnings
        if outcome.bases:
            reply["bases"] = outcome.bases
        output = self.output.take()
        if output:
            reply["output"] = output
        try:
            return wire.encode(reply)
        except wire.Unsupported as error:
            unread = unreadable(name, error)
            return wire.encode({"value": None, "error_type": unread.error_type, "message": unread.message, "output": output})

    def call_with_substitutes(self, request: dict) -> bytes:
        """A call with some names bound, for this call only, to stand-ins for the reference.

        Runs in a throwaway fork of this sandbox: whatever the student's code stores while the
        stand-ins are bound (the stand-in itself, results it obtained through it) dies with the
        fork, so no later call of the student's own functions can reuse the reference. A stand-in
        sends a ``callback`` frame (plain data) on the channel and waits for the trusted side's
        reply; it refuses once its call is over. The fork's reply comes back through a pipe and
        is sent from here. Where a fork is refused (process limit), the call runs in place and the
        original bindings are restored in ``finally``.
        """
        names = [str(item) for item in request.get("substitutes", [])]
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            return self._substituted_reply(request, names)
        if pid == 0:  # the throwaway fork
            try:
                os.close(read_end)
                die_with_parent()
                frame = self._substituted_reply(request, names)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(frame)
            finally:
                os._exit(0)
        os.close(write_end)
        chunks = []
        with os.fdopen(read_end, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        os.waitpid(pid, 0)
        frame = b"".join(chunks)
        if not frame:
            return wire.encode({"value": None, "error_type": CRASHED, "message": _("调用时进程意外退出")})
        return frame

    def swap_begin(self, request: dict) -> bytes:
        """A swap session: a throwaway fork of this sandbox with each name in ``substitutes``
        bound to a stand-in, serving the calls of swapped tests on a channel of its own (sent by
        the grader right after this request) until the grader closes that channel.

        As with a single swapped call, whatever the student's code keeps while the stand-ins are
        bound (the stand-in itself, the reference's results) lives only in the fork: this
        sandbox, which answers every call that is not swapped, never sees it. The stand-ins answer
        only while one of the fork's requests is open. Replies ``operations.swap_reply``: forked, or
        refused where no fork can be made (the grader then swaps call by call)."""
        names = [str(item) for item in request.get("substitutes", [])]
        try:
            _data, fds, _flags, _address = socket.recv_fds(self.channel, 1, 1)
        except OSError:
            fds = []
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return wire.encode(operations.swap_reply(forked=False))
        try:
            swap = socket.socket(fileno=fds[0])
        except OSError:
            os.close(fds[0])
            return wire.encode(operations.swap_reply(forked=False))
        try:
            pid = os.fork()
        except OSError:
            swap.close()
            return wire.encode(operations.swap_reply(forked=False))
        if pid == 0:  # the session's fork: serve the swap channel, then vanish
            try:
                die_with_parent()
                self.channel.close()
                self.channel = swap
                self.forks = []
                self.live = []
                namespace = self.shell.user_ns
                for key in names:
                    namespace[key] = self._stand_in(key, self.live)
                self._serve_requests()
            finally:
                os._exit(0)
        swap.close()
        self.forks.append(pid)
        return wire.encode(operations.swap_reply(forked=True))

    def _reap_forks(self) -> None:
        """Reap ended swap sessions (our own forks only: the student's children are theirs)."""
        for pid in list(self.forks):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.forks.remove(pid)

    def _substituted_reply(self, request: dict, names: list[str]) -> bytes:
        namespace = self.shell.user_ns
        live = [True]
        saved = {key: namespace[key] for key in names if key in namespace}
        for key in names:
            namespace[key] = self._stand_in(key, live)
        try:
            return self.handle(operations.plain_call(request))
        finally:
            live.clear()
            for key in names:
                if key in saved:
                    namespace[key] = saved[key]
                else:
                    namespace.pop(key, None)

    def _stand_in(self, name: str, live: list) -> Any:
        channel = self.channel

        def stand_in(*args: Any, **kwargs: Any) -> Any:
            if not live:
                raise RuntimeError(_("参考的 {name} 只在评分时的那一次调用中可用").format(name=name))
            try:
                frame = wire.encode(operations.callback(name, args, kwargs))
            except wire.Unsupported as error:
                raise TypeError(_("{name} 只接受张量、数字等数据作参数：{error}").format(name=name, error=error)) from None
            channel.sendall(frame)
            reply = wire.receive(channel)
            if not isinstance(reply, dict):
                raise RuntimeError(_("参考的 {name} 没有返回结果").format(name=name))
            if reply.get("error_type"):
                raise builtin_exception(str(reply["error_type"]), str(reply.get("message") or ""))
            return reply.get("value")

        stand_in.__name__ = stand_in.__qualname__ = name
        return stand_in

    def run_cell(self, source: str) -> dict:
        started = time.perf_counter()
        result = self.shell.run_cell(source, store_history=False, silent=False)
        error = result.error_before_exec or result.error_in_exec
        reply: dict[str, Any] = {"ok": error is None, "seconds": time.perf_counter() - started}
        if error is not None:
            reply["error_type"] = type(error).__name__
            reply["message"] = str(error)[:MAX_MESSAGE]
            # The student's own failing line in this cell: a syntax error knows it; otherwise the
            # innermost frame of their code in the cell that ran (a helper it defines included),
            # this cell's own line (issue 53: a line number on the page counts in the cell it names). When the error came from a function defined in
            # another cell, that function and its line (in its own cell) go too.
            if isinstance(error, SyntaxError) and error.lineno:
                reply["line"], reply["text"] = int(error.lineno), str(error.text or "").strip()[:300]
            elif (where := student_frame(error.__traceback__, same_cell=True)) is not None:
                reply["line"], reply["text"] = int(where["line"]), str(where["text"])[:300]
                inner = student_frame(error.__traceback__)
                if inner is not None and inner["cell_text"] != where["cell_text"]:
                    reply["inner"] = {key: inner[key] for key in ("function", "line", "text", "cell_text")}
        reply["output"] = self.output.take()
        return reply
