"""``attnkit serve --status``: what the service's database says, read without the grading engine
(no torch, no workers), so that it answers in well under a second."""

from __future__ import annotations

import math
import time
from pathlib import Path

from attnkit.constants import GraderError
from attnkit.i18n import _
from attnkit.service.queue import DELIVERED, FAILED, GRADING, QUEUED, REFUSED, open_queue
from attnkit.service.settings import MIN_FREE_BYTES, PAUSED_FILE, STATE_FOLDER, free_bytes


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


def capacity(spans: list[tuple[float, float]]) -> float | None:
    """Pages per second this host (every replica on the queue) sustains, from the last hour's
    deliveries ``spans`` ((claimed, finished) each): the most submissions that were being graded at
    once (the workers seen busy together) divided by the mean seconds a submission spends from its
    claim to its page. A burst that filled every worker makes this the host's full rate; a quiet
    hour that never did counts only the workers it used (an underestimate, never an overestimate
    of what was seen). None without deliveries."""
    if not spans:
        return None
    edges = sorted([(start, 1) for start, _end in spans] + [(end, -1) for _start, end in spans], key=lambda edge: (edge[0], edge[1]))
    busy = most = 0
    for _when, step in edges:
        busy += step
        most = max(most, busy)
    mean = sum(end - start for start, end in spans) / len(spans)
    return max(most, 1) / mean if mean > 0 else None


def paused_lines(root: Path) -> list[str]:
    """The service paused by a transient fault (its PAUSED_FILE: since when, why), and the course's
    disk full whether or not it could write that file."""
    lines = []
    try:
        since, reason = (root / STATE_FOLDER / PAUSED_FILE).read_text().split(" ", 1)
        lines.append(_("已暂停接收（{seconds:.0f} 秒前起）：{reason}；故障消失后自动恢复").format(seconds=time.time() - float(since), reason=reason))
    except (OSError, ValueError):
        pass
    free = free_bytes(root)
    if free is not None and free < MIN_FREE_BYTES:
        lines.append(_("课程所在磁盘几乎已满（剩余 {free} 字节）：评分服务暂停接收，腾出空间后自动恢复").format(free=free))
    return lines


def problems(root: Path, autograder: Path | None) -> list[str]:
    """What stops the service at its start and a person must fix, as its start says it: the
    course's nbgrader_config.py and the hidden suites' Python files (each named with its line)."""
    from attnkit.constants import GraderError
    from attnkit.course.gradebook import course_config

    found: list[str] = []
    try:
        course_config(root)
    except GraderError as error:
        found.append(str(error))
    if autograder is not None and autograder.is_dir():
        from attnkit.assignment.folder import compile_suite

        for folder in sorted(path for path in autograder.iterdir() if (path / "manifest.toml").is_file()):
            try:
                compile_suite(folder)
            except GraderError as error:
                found.append(str(error))
    return found


def shown_url(url: str) -> str:
    """A database URL as it may be printed: its password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "…"


def unreachable(where: str, error: BaseException) -> GraderError:
    """The queue's database out of reach (refused, no answer within ``NETWORK_SECONDS``, its
    server gone, a wrong password) said in one line naming it and the driver's own first line,
    never a traceback: ``--status`` is what an operator runs when something is wrong."""
    cause = str(getattr(error, "orig", None) or error).strip().splitlines()
    return GraderError(
        _("无法读取评分队列 {where}：{cause}").format(where=where, cause=f"{type(error).__name__}: {cause[0] if cause else ''}")
    )


def status(root: Path, queue_url: str | None = None) -> str:
    """``attnkit serve --status``: the queue, what is in flight (and by which replica, with a
    shared queue), the last hour. The queue's database out of reach: GraderError naming it and
    why, within the database's connect timeout (``queue.postgres.NETWORK_SECONDS``)."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    database = root / STATE_FOLDER / "service.db"
    if queue_url is None and not database.is_file():
        return _("{root} 还没有运行过 attnkit serve").format(root=root)
    try:
        return queue_status(root, queue_url, database)
    except (SQLAlchemyError, sqlite3.Error) as error:
        raise unreachable(shown_url(queue_url) if queue_url else str(database), error) from None


def queue_status(root: Path, queue_url: str | None, database: Path) -> str:
    """``status``'s lines, read from the queue at ``queue_url`` (else the SQLite ``database``)."""
    queue = open_queue(queue_url or database, "status")
    try:
        counts = queue.counts()
        lines = [counted(counts)]
        lines += paused_lines(root)
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
        rate = capacity(queue.grading_spans_since(hour))
        if rate is not None:
            # The queue's expected wait: what is queued, at the rate the last hour sustained.
            lines.append(
                _("处理能力：每秒 {rate:.2f} 页（过去一小时）；排队中的 {queued} 份预计等待 {wait:.1f} 秒").format(
                    rate=rate, queued=counts[QUEUED], wait=counts[QUEUED] / rate
                )
            )
        lines.append(_("尚未写入成绩册：{count}").format(count=queue.unrecorded()))
        for state in (REFUSED, FAILED):
            for row in queue.in_state(state, limit=20, newest_first=True):
                lines.append(f"{state_name(state)} #{row['id']} {row['inbound']}: {row['cause']}")
        return "\n".join(lines)
    finally:
        queue.close()
