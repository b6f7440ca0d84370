"""What ``attnkit serve``'s ``/metrics`` and ``/health`` say (``metrics_endpoint`` serves them
from the loop): this run's counters in Prometheus' text format, the readiness a load balancer
asks, and the LMS's key set (``/lti/jwks``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnkit.service.faults import is_transient
from attnkit.service.queue import GRADING, QUEUED

BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class Metrics:
    """What /metrics serves (Prometheus' text format) and --status prints of this run."""

    graded: int = 0
    refused: int = 0
    failed: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0
    unfinished_ignored: int = 0

    def observe(self, seconds: float) -> None:
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.latency_counts[index] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def text(self, queued: int, in_flight: int, replica: str = "", mine: int = 0, ready: bool = True) -> str:
        """``queued``, ``in_flight``: the whole queue's (every replica's); ``mine``: this replica's."""
        name = replica.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines = [
            "# HELP attnkit_serve_replica_info This replica's name (the holder of its queue leases).",
            "# TYPE attnkit_serve_replica_info gauge",
            f'attnkit_serve_replica_info{{replica="{name}"}} 1',
            "# HELP attnkit_serve_ready 1 when this replica's warm workers are up (what /health says).",
            "# TYPE attnkit_serve_ready gauge",
            f'attnkit_serve_ready{{replica="{name}"}} {int(ready)}',
            "# HELP attnkit_serve_replica_in_flight Submissions this replica is grading.",
            "# TYPE attnkit_serve_replica_in_flight gauge",
            f'attnkit_serve_replica_in_flight{{replica="{name}"}} {mine}',
            "# HELP attnkit_serve_queue_length Submissions waiting to be graded.",
            "# TYPE attnkit_serve_queue_length gauge",
            f"attnkit_serve_queue_length {queued}",
            "# HELP attnkit_serve_in_flight Submissions being graded.",
            "# TYPE attnkit_serve_in_flight gauge",
            f"attnkit_serve_in_flight {in_flight}",
            "# TYPE attnkit_serve_graded_total counter",
            f"attnkit_serve_graded_total {self.graded}",
            "# TYPE attnkit_serve_refused_total counter",
            f"attnkit_serve_refused_total {self.refused}",
            "# TYPE attnkit_serve_failed_total counter",
            f"attnkit_serve_failed_total {self.failed}",
            "# HELP attnkit_serve_unfinished_ignored_total Unfinished names in inbound/ ignored over their owner's cap.",
            "# TYPE attnkit_serve_unfinished_ignored_total counter",
            f"attnkit_serve_unfinished_ignored_total {self.unfinished_ignored}",
            "# HELP attnkit_serve_latency_seconds From the folder noticed complete to the page fetchable.",
            "# TYPE attnkit_serve_latency_seconds histogram",
        ]
        lines += [f'attnkit_serve_latency_seconds_bucket{{le="{bound:g}"}} {count}' for bound, count in zip(BUCKETS, self.latency_counts, strict=True)]
        lines += [
            f'attnkit_serve_latency_seconds_bucket{{le="+Inf"}} {self.latency_count}',
            f"attnkit_serve_latency_seconds_sum {self.latency_sum:.6f}",
            f"attnkit_serve_latency_seconds_count {self.latency_count}",
        ]
        return "\n".join(lines) + "\n"


def lti_jwks(course_root: Path) -> tuple[bytes, bytes, bytes]:
    """The tool's public key set for the LMS (docs/lms.md); its private half never leaves the file."""
    from attnkit.lms.keys import jwks
    from attnkit.lms.settings import registration_of

    registration = registration_of(course_root)
    if registration is None:
        return b"404 Not Found", b"text/plain", b"no LMS is connected to this course\n"
    return b"200 OK", b"application/json", json.dumps(jwks(registration.key_path)).encode()


def answer(
    path: bytes,
    metrics: Metrics,
    readiness: Callable[[], tuple[bool, str]],
    counts: Callable[[], dict[str, int]],
    course_root: Path,
    replica: str,
    workers: int,
    in_flight: int,
) -> tuple[bytes, bytes, bytes]:
    """``GET /health``: 200 "ready" (or 503 and why not, ``readiness``), for a readiness probe or a
    load balancer; ``/lti/jwks``: the LMS's key set; any other path: ``/metrics`` (Prometheus' text
    format, ``counts``: the queue's by state). (status, type, body)."""
    if path == b"/lti/jwks":
        return lti_jwks(course_root)
    ready, why = readiness()
    if path == b"/health":
        status = b"200 OK" if ready else b"503 Service Unavailable"
        body = json.dumps({"status": why, "replica": replica, "workers": workers, "in_flight": in_flight}).encode()
        return status, b"application/json", body
    try:
        by_state = counts()
    except Exception as error:
        if not is_transient(error):
            raise
        by_state = {QUEUED: -1, GRADING: -1}  # unknown while the database is out of reach
    body = metrics.text(by_state[QUEUED], by_state[GRADING], replica, in_flight, ready).encode()
    return b"200 OK", b"text/plain; version=0.0.4", body
