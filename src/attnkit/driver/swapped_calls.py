"""Swapped calls, the trusted side: a student's function called with the reference standing in
for some of the names it calls (``call_with``), the stand-ins' callbacks answered here.

:class:`SwappedCalls` is that part of ``sandbox.Submission``: the calls run in the sandbox itself
until one ends it, then in swap sessions (forks of the sandbox, ``_open_swap``); a sandbox that
has run swapped calls is replaced before it answers anything else (``_forget_swaps``).
"""

from __future__ import annotations

import select
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attnkit.constants import CRASHED
from attnkit.i18n import _
from attnkit.boundary import operations
from attnkit.boundary.outcome import Outcome

if TYPE_CHECKING:
    from attnkit.boundary.policy import Limits


class SwappedCalls:
    """The swapped calls of a ``sandbox.Submission`` (a mixin: its state is the submission's fields)."""

    if TYPE_CHECKING:  # what this part uses of the rest of sandbox.Submission
        limits: Limits
        seconds_used: float
        replaced_after_swaps: int
        _swaps: dict[frozenset, socket.socket]
        _swap_refused: bool
        _swap_in_place: bool
        _swapped_by: frozenset | None

        def close(self) -> None: ...

        def _reboot(self) -> None: ...

        def _ask(self, message: Mapping[str, Any], name: str, substitutes: dict[str, Any] | None = None, swap: frozenset | None = None) -> Outcome: ...

        def _request(
            self,
            message: Mapping[str, Any],
            seconds: float,
            substitutes: dict[str, Any] | None = None,
            swap: frozenset | None = None,
            fds: list[int] | None = None,
        ) -> dict: ...

    # The most reference calls one substituted call may ask for, and their largest tensor: a
    # multi-head call needs one; the bound keeps a hostile stand-in from making us compute much.
    MAX_CALLBACKS = 64
    MAX_CALLBACK_ELEMENTS = 1_000_000

    # Swap sessions kept open at once (one per set of substituted names).
    MAX_SWAPS = 4

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
        from attnkit.boundary.outcome import run_in_namespace

        callee = reply.get(operations.CALLBACK)
        if callee not in substitutes or answered > self.MAX_CALLBACKS or not _small(reply.get("args"), reply.get("kwargs"), limit=self.MAX_CALLBACK_ELEMENTS):
            return {"error_type": "RuntimeError", "message": _("参考的 {name} 无法用于这次调用").format(name=callee)}
        args, kwargs = reply.get("args"), reply.get("kwargs")
        outcome = run_in_namespace(substitutes, str(callee), tuple(args) if isinstance(args, list) else (), kwargs if isinstance(kwargs, dict) else {})
        return {"value": outcome.value, "error_type": outcome.error_type, "message": outcome.message}

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
