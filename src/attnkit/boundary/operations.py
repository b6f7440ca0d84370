"""Every operation a sandbox and its zygote serve, each with the one builder of its request.

The trusted side (``attnkit.driver.submission``, ``attnkit.proxy``, ``attnkit.engine.worker``) builds every request
through the functions here, and the untrusted side (``attnkit.sandbox.server``,
``attnkit.sandbox.fork_server``) dispatches on the names here: nowhere else spells an operation.

``attnkit.boundary.wire`` stays the byte format. A builder returns a plain dict (its TypedDict is for
the type checker only: nothing is validated or copied per call, as this is every call's path) with
its keys in the order the wire has always had, so the frames are the same bytes
(``tests/boundary/test_protocol.py`` and ``tests/boundary/test_operations.py`` pin them). A request is also the key
of a prefetched answer (``Student.prefetched``, compared as wire bytes): a builder that reordered
its keys would silently miss every prefetched answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

# -- a sandbox's channel (``protocol`` frames) ------------------------------------------------------

OP: Final = "op"  # the key naming a request's operation

CELL: Final = "cell"  # run one code cell
CALL: Final = "call"  # call one of the student's functions
GET: Final = "get"  # read one top-level variable
CALL_WITH: Final = "call_with"  # a call with some names bound to stand-ins for the reference
SWAP_BEGIN: Final = "swap_begin"  # fork a swap session holding stand-ins (its channel follows)
BATCH: Final = "batch"  # many cells, calls and reads, or the plan the sandbox holds
BYE: Final = "bye"  # the grader is done: the sandbox exits

OPERATIONS: Final = (CELL, CALL, GET, CALL_WITH, SWAP_BEGIN, BATCH, BYE)
# What a batch may hold: swap sessions and nested batches are asked one by one.
BATCHABLE: Final = (CELL, CALL, GET)

Operation = Literal["cell", "call", "get", "call_with", "swap_begin", "batch", "bye"]


class CellRequest(TypedDict):
    op: Literal["cell"]
    source: str


class CallRequest(TypedDict):
    op: Literal["call"]
    name: str
    args: list[Any]
    kwargs: dict[str, Any]


class GetRequest(TypedDict):
    op: Literal["get"]
    name: str


class CallWithRequest(TypedDict):
    op: Literal["call_with"]
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    substitutes: list[str]  # sorted
    in_place: NotRequired[bool]  # bind them in the sandbox itself, not in a throwaway fork


class SwapBeginRequest(TypedDict):
    op: Literal["swap_begin"]
    substitutes: list[str]  # sorted


class BatchRequest(TypedDict):
    op: Literal["batch"]
    requests: NotRequired[list[Any]]  # CellRequest | CallRequest | GetRequest
    cell_budget: NotRequired[float]  # cells that would start later than this are skipped
    plan: NotRequired[str]  # instead of requests: the digest of the plan the sandbox holds


class ByeRequest(TypedDict):
    op: Literal["bye"]


Request = CellRequest | CallRequest | GetRequest | CallWithRequest | SwapBeginRequest | BatchRequest | ByeRequest
# A request that the proxy sends for one test and a batch may carry ahead (``worker.Plan``).
Asked = CallRequest | GetRequest


def cell(source: str) -> CellRequest:
    """Run ``source`` as the next cell of the notebook."""
    return {"op": CELL, "source": source}


def call(name: str, args: tuple | list, kwargs: dict[str, Any]) -> CallRequest:
    """Call the student's ``name`` (also the key of a prefetched answer)."""
    return {"op": CALL, "name": name, "args": list(args), "kwargs": kwargs}


def get(name: str) -> GetRequest:
    """Read the student's top-level variable ``name``."""
    return {"op": GET, "name": name}


def call_with(name: str, args: tuple | list, kwargs: dict[str, Any], substitutes: Iterable[str]) -> CallWithRequest:
    """Call ``name`` with each of ``substitutes`` bound, for this call only, to a stand-in that asks
    the trusted side for the reference's result (:data:`CALLBACK` frames)."""
    return {"op": CALL_WITH, "name": name, "args": list(args), "kwargs": kwargs, "substitutes": sorted(substitutes)}


def in_place(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` (a :func:`call_with`'s) to run in the sandbox itself, the stand-ins bound for the
    call only and restored after: only for a sandbox the grader replaces before any other use
    (``Submission._forget_swaps``)."""
    return {**request, "in_place": True}


def plain_call(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` (a :func:`call_with`'s) as the plain call it is where its stand-ins are bound
    already: in a swap session's fork, or once the sandbox has bound them in place."""
    plain = {**request, "op": CALL}
    plain.pop("substitutes", None)
    return plain


def swap_begin(substitutes: Iterable[str]) -> SwapBeginRequest:
    """Fork a swap session with ``substitutes`` bound to stand-ins; its channel is sent right after
    (one byte of ancillary data). Replied to with :func:`swap_reply`."""
    return {"op": SWAP_BEGIN, "substitutes": sorted(substitutes)}


def batch(requests: list[Any], cell_budget: float | None = None) -> BatchRequest:
    """``requests`` (:data:`BATCHABLE` ones) answered in order, one reply frame each."""
    request: BatchRequest = {"op": BATCH, "requests": requests}
    if cell_budget is not None:
        request["cell_budget"] = cell_budget
    return request


def held_batch(digest: str) -> BatchRequest:
    """The requests of the plan ``digest`` that the sandbox was forked holding (:func:`hold_plan`)."""
    return {"op": BATCH, "plan": digest}


def bye() -> ByeRequest:
    """The grader is done with this sandbox."""
    return {"op": BYE}


# Replies that are part of an operation's exchange.
SKIPPED: Final = "skipped"  # a batched cell not run: it would have started past the cell budget
SWAP: Final = "swap"  # swap_begin's reply: forked or refused (the grader then swaps call by call)
SWAP_FORKED: Final = "forked"
SWAP_REFUSED: Final = "refused"
# A stand-in's question to the trusted side while a swapped call runs, on the same channel.
CALLBACK: Final = "callback"


def swap_reply(forked: bool) -> dict[str, str]:
    return {"swap": SWAP_FORKED if forked else SWAP_REFUSED}


def callback(name: str, args: tuple | list, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A stand-in's call of the reference ``name`` (plain data only)."""
    return {"callback": name, "args": list(args), "kwargs": dict(kwargs)}


# -- the zygote's control socket (one JSON object with one descriptor, by SCM_RIGHTS) --------------

PLAN: Final = "plan"  # a control message holding this key hands over a plan, not a sandbox request


class SpawnRequest(TypedDict):
    """A new sandbox on the socket that comes with it (replied to with its pid)."""

    memory_mb: int
    cpu_seconds: int


class HoldPlanRequest(TypedDict):
    """A plan's batch frame, in the memfd that comes with it, to decode once and keep."""

    plan: str


def spawn(memory_mb: int, cpu_seconds: int) -> SpawnRequest:
    return {"memory_mb": memory_mb, "cpu_seconds": cpu_seconds}


def hold_plan(digest: str) -> HoldPlanRequest:
    return {"plan": digest}


def holds_plan(message: Mapping[str, Any]) -> bool:
    """Whether a control message is :func:`hold_plan`'s (else a :func:`spawn`)."""
    return PLAN in message


# -- the seed (``attnkit.driver.seed``): any non-empty message with a socket asks for a zygote --------------

ZYGOTE: Final = b"zygote"
