"""Grade a class: find submissions, skip what is unchanged, fan out to workers, write once.

The parent process is the only writer: workers send records back, and each record is written
atomically as soon as it arrives, so an interrupted run loses nothing already graded and a
re-run grades only what changed (the submission's bytes or the grader's own files).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import queue
from pathlib import Path
from typing import Callable, Iterator

import attnkit
from attnkit.notebook import fingerprint
from attnkit.sandbox import Limits
from attnkit.worker import Job, worker_main

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_AUTOGRADER = PROJECT_ROOT / "autograder"


class GradingError(Exception):
    """Grading itself could not run (not a student's fault): the CLI exits non-zero."""


def grader_digest(autograder: Path) -> str:
    """What every result depends on besides the submission: the hidden suite and the engine."""
    files = [p for p in autograder.rglob("*.py")] + [p for p in Path(attnkit.__file__).parent.rglob("*") if p.is_file() and p.suffix in (".py", ".j2")]
    return fingerprint([p for p in files if "__pycache__" not in p.parts], salt=attnkit.__version__)


def find_jobs(submitted: Path, assignment: str | None, digest: str) -> list[Job]:
    """``submitted/<student_id>/<assignment>/*.ipynb``, sorted; every student folder is a job."""
    if not submitted.is_dir():
        raise GradingError(f"submissions folder not found: {submitted}")
    jobs = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir() and not p.name.startswith(".")):
        assignments = sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if assignment:
            assignments = [student_dir / assignment]
        for assignment_dir in assignments:
            notebooks = sorted(assignment_dir.glob("*.ipynb")) if assignment_dir.is_dir() else []
            notebooks = [p for p in notebooks if ".ipynb_checkpoints" not in p.parts]
            jobs.append(Job(student_dir.name, assignment_dir.name, [str(p) for p in notebooks], fingerprint(notebooks, salt=digest)))
    return jobs


def shard_of(jobs: list[Job], shard: tuple[int, int] | None) -> list[Job]:
    """The deterministic slice ``i/n`` (1-based) of the sorted jobs: every n-th one."""
    if shard is None:
        return jobs
    index, count = shard
    return [job for position, job in enumerate(jobs) if position % count == index - 1]


def results_path(out: Path, job: Job | dict) -> Path:
    student_id = job.student_id if isinstance(job, Job) else job["student_id"]
    assignment = job.assignment if isinstance(job, Job) else job["assignment"]
    return out / student_id / assignment / "results.json"


def is_current(out: Path, job: Job) -> bool:
    try:
        return json.loads(results_path(out, job).read_text(encoding="utf-8")).get("fingerprint") == job.fingerprint
    except (OSError, ValueError, AttributeError):
        return False


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def chunks(jobs: list[Job], workers: int) -> Iterator[list[Job]]:
    # Several chunks per worker balance the load; each chunk costs one pytest collection.
    size = max(1, min(50, math.ceil(len(jobs) / (workers * 4))))
    for start in range(0, len(jobs), size):
        yield jobs[start : start + size]


def grade_jobs(
    jobs: list[Job],
    autograder: Path,
    workers: int,
    limits: Limits,
    hide: list[str],
    on_record: Callable[[dict], None],
) -> None:
    """Run ``jobs`` on ``workers`` processes; call ``on_record`` (in this process) for each result."""
    if not jobs:
        return
    workers = max(1, min(workers, len(jobs)))
    # fork: workers start with torch already imported. Safe because this process has run no torch
    # op (so no OpenMP thread pool exists to deadlock a child) and runs no other threads.
    context = multiprocessing.get_context("fork")
    tasks = context.Queue()
    results = context.Queue()
    for chunk in chunks(jobs, workers):
        tasks.put(chunk)
    for _ in range(workers):
        tasks.put(None)
    processes = [
        context.Process(target=worker_main, args=(tasks, results, str(autograder), limits, hide), daemon=True)
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    done_workers = 0
    remaining = {job.key for job in jobs}
    try:
        while done_workers < workers:
            try:
                record = results.get(timeout=1.0)
            except queue.Empty:
                if not any(process.is_alive() for process in processes):
                    break
                continue
            if "fatal" in record:
                raise GradingError(record["fatal"])
            if "worker_done" in record:
                done_workers += 1
                continue
            remaining.discard(f"{record['student_id']}/{record['assignment']}")
            on_record(record)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
    if remaining:
        raise GradingError(f"{len(remaining)} submission(s) were not graded: a worker died")
