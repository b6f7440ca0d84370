"""The ``/metrics`` and ``/health`` port under a flood (issue 48): the port is on 127.0.0.1, open to
every local user, and the service's one loop also grades and delivers. A local user who opens
hundreds of connections and sends nothing, or one byte a second, must not stop ``/health`` from
answering nor a classmate's submission from being delivered. The real service, a real exchange and
real unix students (``test_service_exchange``'s course); nothing is mocked, and nothing is timed:
the client waits 10 s for ``/health`` (the code before issue 48 read each connection for up to 1 s
inside the loop, so 200 idle connections held it for minutes).
"""

from __future__ import annotations

import datetime
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from service_course import running_course
from test_service_exchange import CORRECT, WAIT, Course

pytestmark = [pytest.mark.e2e, pytest.mark.root]

IDLE = 200  # connections that send nothing
SLOW = 50  # connections that send one byte a second (a slow-loris request line)
CLIENT_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    with running_course("ak48f", ("student",), datetime.timedelta(days=1), attempts=0, visibility="full") as setup:
        yield setup


def get(port: int, path: str) -> tuple[int, bytes]:
    """One GET of ``path``, the client waiting at most CLIENT_TIMEOUT for the whole answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def opened(port: int) -> socket.socket:
    """A connection being made, without waiting for the server to take it (non-blocking connect)."""
    client = socket.socket()
    client.setblocking(False)
    client.connect_ex(("127.0.0.1", port))
    return client


class Flood:
    """IDLE connections that send nothing and SLOW that send a byte a second, opened at once and
    kept open (by this side) until the end; a thread sends the slow ones' bytes and keeps opening
    ten more idle connections every half second."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle = [opened(port) for _ in range(IDLE)]
        self.slow = [opened(port) for _ in range(SLOW)]
        self.more: list[socket.socket] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.keep_on, daemon=True)
        self.thread.start()

    def keep_on(self) -> None:
        byte = 0
        while not self.stopping.wait(0.5):
            self.more += [opened(self.port) for _ in range(10)]
            while len(self.more) > 400:  # this side's descriptors
                self.more.pop(0).close()
            byte += 1
            if byte % 2 == 0:
                for client in self.slow:
                    try:
                        client.send(b"GET /health HTTP/1.0"[(byte // 2) % 20 : (byte // 2) % 20 + 1])
                    except OSError:
                        pass  # not connected yet, or closed by the server: still ours, still open here

    def still_open(self) -> int:
        return sum(1 for client in self.idle + self.slow if client.fileno() != -1)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        for client in self.idle + self.slow + self.more:
            client.close()


def test_health_answers_and_a_submission_is_delivered_under_idle_and_slow_connections(course: Course) -> None:
    """200 idle and 50 slow-loris connections: /health answers (10 s client timeout) while they are open, then /metrics; a submission is delivered."""
    deadline = time.monotonic() + WAIT
    while True:  # ready before the flood (the warm workers started)
        try:
            status, body = get(course.port, "/health")
        except OSError:
            status, body = 0, b""
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200, body
    flood = Flood(course.port)
    try:
        time.sleep(1.0)  # the flood reaches the service first
        try:
            status, body = get(course.port, "/health")
        except OSError as error:
            raise AssertionError(f"/health did not answer within {CLIENT_TIMEOUT} s under the flood: {error!r}") from error
        assert flood.still_open() == IDLE + SLOW, "the flood's connections are still open on its side"
        assert status == 200 and json.loads(body)["status"] == "ready", body
        status, body = get(course.port, "/metrics")
        assert status == 200 and b"attnkit_serve_queue_length" in body
        student = course.users["student"]  # type: ignore[attr-defined]
        page = course.fetch(student, course.submit(student, CORRECT))
        assert 'id="score"' in page
    finally:
        flood.close()
    assert course.service is not None and course.service.poll() is None, course.log.read_text()[-3000:]
    # Afterwards the port is as before.
    status, body = get(course.port, "/health")
    assert status == 200, body
