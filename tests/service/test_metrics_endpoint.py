"""``metrics_endpoint.Endpoint``, the service's /metrics and /health port, in a loop of its own here
(the service's loop does the same: ``waitables`` in ``multiprocessing.connection.wait``, then
``turn``). No service, no timing asserted: a turn that waited for a client would show as a test
that never ends (each turn's wait is bounded)."""

from __future__ import annotations

import multiprocessing.connection
import socket
import time

from attnkit.service import metrics_endpoint
from attnkit.service.metrics_endpoint import Endpoint


def answer(path: bytes) -> tuple[bytes, bytes, bytes]:
    return b"200 OK", b"text/plain", b"path " + path


def turns(endpoint: Endpoint, count: int) -> None:
    for _ in range(count):
        endpoint.turn(multiprocessing.connection.wait(endpoint.waitables(), timeout=0.01))


def connected(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    return client


def test_answers_past_idle_slow_and_oversized_connections_and_caps_what_it_holds() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    endpoint = Endpoint(listener, answer)
    idle = [connected(port) for _ in range(100)]
    slow = connected(port)
    slow.sendall(b"GET /hea")
    big = connected(port)
    big.sendall(b"x" * (metrics_endpoint.MAX_REQUEST + 10))
    client = connected(port)
    client.sendall(b"GET /health?x=1 HTTP/1.0\r\nHost: a\r\n\r\n")
    turns(endpoint, 40)
    assert len(endpoint.open) <= metrics_endpoint.MAX_OPEN
    reply = b""
    while chunk := client.recv(4096):  # the answer, then the server's half-close (no reset)
        reply += chunk
    assert reply.startswith(b"HTTP/1.0 200 OK\r\n") and reply.endswith(b"\r\n\r\npath /health")
    client.close()
    assert big.recv(10) == b""  # dropped: 8 KiB without a request line
    # Past the deadline every connection is dropped, the slow one too.
    time.sleep(metrics_endpoint.DEADLINE + 0.1)
    turns(endpoint, 2)
    assert endpoint.open == {}
    slow.settimeout(5)
    assert slow.recv(10) == b""
    endpoint.close()
    for other in (*idle, slow, big):
        other.close()


def test_a_client_that_does_not_read_is_not_waited_for() -> None:
    """An answer the socket does not take at once is dropped with the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    endpoint = Endpoint(listener, lambda path: (b"200 OK", b"text/plain", b"y" * 50_000_000))
    client = connected(port)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    turns(endpoint, 20)
    assert endpoint.open == {}
    endpoint.close()
    client.close()
