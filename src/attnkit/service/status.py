"""``attnkit serve --status``: what the service's database says, read without the grading engine
(no torch, no workers), so that it answers in well under a second."""

from __future__ import annotations

import math
import time
from pathlib import Path

from attnkit.i18n import _
from attnkit.service.queue import FAILED, GRADING, QUEUED, REFUSED, open_queue
from attnkit.service.settings import STATE_FOLDER


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))] if ordered else float("nan")


def status(root: Path, queue_url: str | None = None) -> str:
    """``attnkit serve --status``: the queue, what is in flight (and by which replica, with a
    shared queue), the last hour."""
    database = root / STATE_FOLDER / "service.db"
    if queue_url is None and not database.is_file():
        return _("{root} 还没有运行过 attnkit serve").format(root=root)
    queue = open_queue(queue_url or database, "status")
    try:
        counts = queue.counts()
        lines = [" ".join(f"{state}={count}" for state, count in counts.items())]
        for state in (GRADING, QUEUED):
            for row in queue.in_state(state, limit=20):
                held = f" {row['replica']}" if "replica" in row.keys() and row["replica"] else ""  # which replica grades it
                lines.append(f"{state:9} #{row['id']} {row['student']} {row['assignment']} {time.time() - row['noticed']:.1f}s{held}")
        hour = time.time() - 3600
        latencies = queue.latencies_since(hour)
        hourly = dict.fromkeys(("delivered", "failed", "refused"), 0) | queue.finished_since(hour)
        lines.append(
            "last hour: "
            + " ".join(f"{state}={count}" for state, count in hourly.items())
            + (f" latency p50={percentile(latencies, 0.5):.3f}s p99={percentile(latencies, 0.99):.3f}s" if latencies else "")
        )
        lines.append(f"not yet in the gradebook: {queue.unrecorded()}")
        for state in (REFUSED, FAILED):
            for row in queue.in_state(state, limit=20, newest_first=True):
                lines.append(f"{state:9} #{row['id']} {row['inbound']}: {row['cause']}")
        return "\n".join(lines)
    finally:
        queue.close()
