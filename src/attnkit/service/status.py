"""``attnkit serve --status``: what the service's database says, read without the grading engine
(no torch, no workers), so that it answers in well under a second."""

from __future__ import annotations

import math
import time
from pathlib import Path

from attnkit.i18n import _
from attnkit.service.queue import DELIVERED, FAILED, GRADING, QUEUED, REFUSED, open_queue
from attnkit.service.settings import STATE_FOLDER


def state_name(state: str) -> str:
    """A submission's state as the TA reads it (the same words as the hub's pages); the database's
    own name for one it does not know."""
    return {QUEUED: _("排队中"), GRADING: _("评分中"), DELIVERED: _("已反馈"), FAILED: _("未能评分"), REFUSED: _("已拒收")}.get(state, state)


def counted(counts: dict[str, int]) -> str:
    """The counts by state, one sentence (in English the database's own names, as docs/service.md quotes them)."""
    every = dict.fromkeys((QUEUED, GRADING, DELIVERED, FAILED, REFUSED), 0) | counts
    return _("排队中={queued} 评分中={grading} 已反馈={delivered} 未能评分={failed} 已拒收={refused}").format(**every)


def finished(counts: dict[str, int]) -> str:
    every = dict.fromkeys((DELIVERED, FAILED, REFUSED), 0) | counts
    return _("已反馈={delivered} 未能评分={failed} 已拒收={refused}").format(**every)


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
        lines = [counted(counts)]
        for state in (GRADING, QUEUED):
            for row in queue.in_state(state, limit=20):
                held = f" {row['replica']}" if "replica" in row.keys() and row["replica"] else ""  # which replica grades it
                lines.append(f"{state_name(state)} #{row['id']} {row['student']} {row['assignment']} {time.time() - row['noticed']:.1f}s{held}")
        hour = time.time() - 3600
        latencies = queue.latencies_since(hour)
        hourly = finished(queue.finished_since(hour))
        if latencies:
            lines.append(
                _("过去一小时：{counts}；延迟 p50={p50:.3f}s p99={p99:.3f}s").format(
                    counts=hourly, p50=percentile(latencies, 0.5), p99=percentile(latencies, 0.99)
                )
            )
        else:
            lines.append(_("过去一小时：{counts}").format(counts=hourly))
        lines.append(_("尚未写入成绩册：{count}").format(count=queue.unrecorded()))
        for state in (REFUSED, FAILED):
            for row in queue.in_state(state, limit=20, newest_first=True):
                lines.append(f"{state_name(state)} #{row['id']} {row['inbound']}: {row['cause']}")
        return "\n".join(lines)
    finally:
        queue.close()
