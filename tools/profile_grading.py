"""``python tools/profile_grading.py SUBMITTED [N]``: where one worker's grading time goes.

Grades the first N submissions of SUBMITTED (nbgrader's layout, e.g. a class that
``tools/bench.py --keep DIR`` left in DIR/submitted) in this process, as one worker does (a real
zygote and real sandboxes, the suites of this checkout), after a warm-up chunk, and prints per
submission:

- the worker's CPU (user, system) and the sandboxes' and zygote's (children of this process:
  counted when the zygote exits), wall time;
- the worker's CPU spent in garbage collection, by generation (``gc.callbacks``; the worker's
  heap is frozen first, as ``worker_main`` does);
- the worker's CPU by phase (opening a submission and its batches, the tests, recording and
  diagnosis, closing), from ``time.process_time`` around each phase;
- the single requests sent to sandboxes besides the two batches, by kind.

With ``--profile`` it also prints cProfile's top functions of the worker (sorted by
``$PROFILE_SORT``, default cumulative; ``$PROFILE_TOP`` of them, default 40; ``$PROFILE_DUMP``: also
save the stats there). The submissions go in one chunk, so after the warm-up chunk the worker's
session collects each test once, as a worker's later sessions do. For the
kernel's share inside sandboxes use ``perf record -a -g`` around this command. Numbers on a shared
machine vary by about ±10 % between runs: compare several.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

import torch

from attnkit.boundary import operations
from attnkit.grading import plugin
from attnkit.driver import submission
from attnkit.grading import sandbox_provider
from attnkit.engine import worker
from attnkit.assignment.folder import discover
from attnkit.intake.jobs import find_jobs
from attnkit.boundary.policy import Limits
from attnkit.driver.zygote_handle import Zygote

PHASES = (
    (sandbox_provider.SandboxProvider, "open", "open: read, parse, sandbox, both batches"),
    (submission.Submission, "_batch", "  of which the batches (send, receive, decode)"),
    (plugin.GradingPlugin, "_within_test", "tests (their checks, swapped re-runs, single requests)"),
    (plugin.GradingPlugin, "record", "record (diagnosis included)"),
    (plugin.GradingPlugin, "diagnose", "  of which diagnosis"),
    (sandbox_provider.SandboxProvider, "close", "close: the record, evidence, usage"),
)


def timed(spent: collections.Counter, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - started

    return wrapper


def asker() -> str:
    """Where a single request was asked: the innermost function of a hidden suite on the stack
    (``module.function``), or of the grading plugin when no suite's code is (a diagnosis probe)."""
    frame = sys._getframe(2)
    grading = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        if "/autograder/" in filename:
            return f"{Path(filename).stem}.{frame.f_code.co_name}"
        if not grading and "/attnkit/grading/" in filename and not filename.endswith("/student.py"):
            grading = f"{Path(filename).stem}.{frame.f_code.co_name}"
        frame = frame.f_back
    return grading or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submitted", type=Path)
    parser.add_argument("count", type=int, nargs="?", default=200)
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions of the worker")
    args = parser.parse_args()
    torch.set_num_threads(1)
    suites = discover()
    jobs = find_jobs(args.submitted, suites).jobs
    warm, graded = jobs[:5], jobs[5 : 5 + args.count]
    if not graded:
        parser.error(f"{args.submitted}: fewer than 6 submissions")

    spent: collections.Counter = collections.Counter()
    requests: collections.Counter = collections.Counter()
    asked_from: collections.Counter = collections.Counter()
    for owner, name, label in PHASES:
        setattr(owner, name, timed(spent, label, getattr(owner, name)))
    single = submission.Submission._request

    def counted(self: submission.Submission, message: dict, *rest: Any, **kwargs: Any) -> dict:
        requests[f"{message.get(operations.OP)}{' (swapped)' if kwargs.get('swap') or (len(rest) > 2 and rest[2]) else ''}"] += 1
        asked_from[asker()] += 1
        return single(self, message, *rest, **kwargs)

    submission.Submission._request = counted  # type: ignore[method-assign]
    zygote = Zygote(
        warm_up="\n".join(s.warm_up_source() for s in suites.values()),
        cells=[cell for s in suites.values() for cell in s.release_cells()],
        warm_up_cells=[cell for s in suites.values() for cell in s.warm_up_cells()],
    )
    records: list[dict] = []
    collecting = {"started": 0.0, "spent": 0.0, "collections": 0}

    def collector(phase: str, info: dict) -> None:
        if phase == "start":
            collecting["started"] = time.process_time()
        else:
            collecting["spent"] += time.process_time() - collecting["started"]
            collecting["collections"] += 1
            collecting[info["generation"]] = collecting.get(info["generation"], 0) + time.process_time() - collecting["started"]

    # As worker_main does: what is loaded now stays out of the collector's view.
    gc.collect()
    gc.freeze()
    try:
        worker.run_chunk(warm, suites, Limits(), zygote, lambda message: None)
        spent.clear()
        requests.clear()
        asked_from.clear()
        profile = cProfile.Profile(time.process_time) if args.profile else None
        before, started = os.times(), time.perf_counter()
        gc.callbacks.append(collector)
        if profile:
            profile.enable()
        worker.run_chunk(graded, suites, Limits(), zygote, records.append)
        if profile:
            profile.disable()
        gc.callbacks.remove(collector)
        wall, after = time.perf_counter() - started, os.times()
    finally:
        zygote.close()
    children = os.times()
    # The worker's messages: a record travels wrapped with its job's id (``worker_messages.record``, issue 50).
    n = len([message for message in records if "tests" in message.get("record", message)])
    per = 1000 / n
    print(
        f"{n} submissions, per submission: wall {wall * per:.1f} ms; worker CPU {(after.user - before.user) * per:.1f} user + "
        f"{(after.system - before.system) * per:.1f} system ms; sandboxes and zygote (whole life, warm-up included) "
        f"{children.children_user * per:.1f} user + {children.children_system * per:.1f} system ms"
    )
    print(
        f"  of the worker's CPU, garbage collection: {collecting['spent'] * per:.1f} ms in {collecting['collections'] / n:.1f} "
        f"collections (by generation: {', '.join(f'{collecting.get(g, 0) * per:.1f}' for g in range(3))})"
    )
    print("worker CPU by phase (ms per submission):")
    for _owner, _name, label in PHASES:
        print(f"  {label}: {spent[label] * per:.1f}")
    print("single requests besides the batches (per submission):")
    for kind, count in requests.most_common():
        print(f"  {kind}: {count / n:.2f}")
    print("  asked from (innermost suite function, else the grading module), per submission:")
    for where, count in asked_from.most_common(12):
        print(f"    {where}: {count / n:.2f}")
    if args.profile and profile is not None:
        stats = pstats.Stats(profile)
        if os.environ.get("PROFILE_DUMP"):
            stats.dump_stats(os.environ["PROFILE_DUMP"])
        stats.sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(int(os.environ.get("PROFILE_TOP", "40")))


if __name__ == "__main__":
    main()
