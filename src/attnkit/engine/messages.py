"""What a worker tells its parent: one builder per message, and the one reading of its kind.

A worker (``attnkit.engine.worker.worker_main``) sends these on its result pipe, each with its pid added
(:func:`from_worker`), between the records of the submissions it graded; the parent
(``attnkit.engine.fan_out.grade_jobs``) tells them apart with :func:`kind_of` and nothing else. They are
plain dicts (TypedDicts for the type checker only): a pipe carries them as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

FATAL: Final = "fatal"  # grading itself cannot run (no zygote, no sandbox, a broken suite): stop
STARTED: Final = "started"  # the worker began this submission (whom a crash now belongs to)
CHUNK_DONE: Final = "chunk_done"  # every submission of the chunk has had its record
CHUNK_FAILED: Final = "chunk_failed"  # the chunk's pytest session broke: retry its ungraded ones
RECORD: Final = "record"  # anything else: a submission's record (``worker._run_suite``'s ``finished``)

# In the order the parent must read them: a fatal message wins over anything it also says.
Kind = Literal["fatal", "started", "chunk_done", "chunk_failed", "record"]
KINDS: Final[tuple[Kind, ...]] = (FATAL, STARTED, CHUNK_DONE, CHUNK_FAILED)


class Fatal(TypedDict):
    fatal: str


class Started(TypedDict):
    started: str  # the job's key, ``student/assignment``


class ChunkDone(TypedDict):
    chunk_done: Literal[True]


class ChunkFailed(TypedDict):
    chunk_failed: str


Message = Fatal | Started | ChunkDone | ChunkFailed


def fatal(reason: str) -> Fatal:
    return {"fatal": reason}


def started(key: str) -> Started:
    return {"started": key}


def chunk_done() -> ChunkDone:
    return {"chunk_done": True}


def chunk_failed(reason: str) -> ChunkFailed:
    return {"chunk_failed": reason}


def from_worker(message: Mapping[str, Any], pid: int) -> dict[str, Any]:
    """``message`` (one of the above, or a record) as the worker ``pid`` sends it."""
    return {**message, "pid": pid}


def kind_of(message: Mapping[str, Any]) -> Kind:
    """Which message this is; :data:`RECORD` for a submission's record."""
    for kind in KINDS:
        if kind in message:
            return kind
    return RECORD
