"""What a worker tells its parent: one builder per message, and the one reading of its kind.

A worker (``attnkit.engine.worker.worker_main``) sends these on its result pipe, each with its pid added
(:func:`from_worker`); the parent (``attnkit.engine.fan_out.FanOut``) tells them apart with
:func:`kind_of` and nothing else. They are plain dicts (TypedDicts for the type checker only): a
pipe carries them as before.

Every message about a submission carries that submission's own id (``Job.id``: the service's
queue row id, or its place in a grade run), never only its student and assignment: the service
may give a worker the same student's next submission while the last one's messages are still on
the way, and a message is only ever taken for the very job it names (issue 50).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

FATAL: Final = "fatal"  # grading itself cannot run (no zygote, no sandbox, a broken suite): stop
STARTED: Final = "started"  # the worker began this submission (whom a crash now belongs to)
CHUNK_DONE: Final = "chunk_done"  # every submission of the chunk has had its record
CHUNK_FAILED: Final = "chunk_failed"  # the chunk's pytest session broke: retry its ungraded ones
RECORD: Final = "record"  # a submission's record (``worker.SubmissionRecords.finished``)

# In the order the parent must read them: a fatal message wins over anything it also says.
Kind = Literal["fatal", "started", "chunk_done", "chunk_failed", "record"]
KINDS: Final[tuple[Kind, ...]] = (FATAL, STARTED, CHUNK_DONE, CHUNK_FAILED, RECORD)
JOBS: Final = "jobs"  # the ids of the chunk a chunk_done or chunk_failed is about


class Fatal(TypedDict):
    fatal: str


class Started(TypedDict):
    started: int  # the job's id
    key: str  # ``student/assignment``, for the log


class ChunkDone(TypedDict):
    chunk_done: Literal[True]
    jobs: list[int]


class ChunkFailed(TypedDict):
    chunk_failed: str
    jobs: list[int]


class Record(TypedDict):
    record: Mapping[str, Any]  # a ``records.SubmissionRecord``
    job: int  # the id of the job it was computed for


Message = Fatal | Started | ChunkDone | ChunkFailed | Record


def fatal(reason: str) -> Fatal:
    return {"fatal": reason}


def started(job_id: int, key: str) -> Started:
    return {"started": job_id, "key": key}


def chunk_done(job_ids: list[int]) -> ChunkDone:
    return {"chunk_done": True, "jobs": job_ids}


def chunk_failed(reason: str, job_ids: list[int]) -> ChunkFailed:
    return {"chunk_failed": reason, "jobs": job_ids}


def record(job_id: int, submission: Mapping[str, Any]) -> Record:
    return {"record": submission, "job": job_id}


def from_worker(message: Mapping[str, Any], pid: int) -> dict[str, Any]:
    """``message`` (one of the above) as the worker ``pid`` sends it."""
    return {**message, "pid": pid}


def kind_of(message: Mapping[str, Any]) -> Kind | None:
    """Which message this is; None for none of them (the parent discards it and says so)."""
    for kind in KINDS:
        if kind in message:
            return kind
    return None
