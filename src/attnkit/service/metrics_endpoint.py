"""The ``/metrics`` and ``/health`` port of ``attnkit serve``, served from the service's one loop
without ever blocking it on a client (issue 48).

The port is on 127.0.0.1 by default, which every local user reaches, and the loop that answers it
also grades and delivers: a read that waits for a client (the 1 s ``recv`` this replaced) lets
anyone who opens connections and sends nothing hold up every page. So nothing here waits: the
listener and every open connection are non-blocking and sit in the loop's
``multiprocessing.connection.wait`` set (``waitables``); each turn (``turn``) accepts at most
ACCEPT_PER_TURN new connections, reads what is there, answers a connection once its request line
is complete (one ``send`` of a small answer: whatever the socket does not take at once is dropped
with the connection), then half-closes it and reads what the client still sends until it closes
(so a close never resets the answer away). A connection is dropped after DEADLINE seconds (a
slow-loris request line, an idle connection, a client that never closes), or when it has sent
MAX_REQUEST bytes without a request line; at most MAX_OPEN are open at once, the oldest closed to
make room for a new one.

Why not a thread or a process of its own: the warm workers that replace a dead one are forked from
the service's process, which must hold no other thread at a fork (serve.py, engine/fan_out.py),
and a process of its own would need the loop's state (its workers' health, what is in flight)
through a pipe or the database, read as stale as this loop is slow. A turn's work here is bounded
(ACCEPT_PER_TURN accepts, one read per ready connection, MAX_OPEN connections), so the flood of a
local user costs the loop a few milliseconds a turn, never a wait.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

ACCEPT_PER_TURN = 16
MAX_OPEN = 64
DEADLINE = 2.0  # seconds a connection may stay open, answered or not
MAX_REQUEST = 8 * 1024  # bytes read without a complete request line: dropped
READ = 4096


@dataclass
class Connection:
    socket: socket.socket
    opened: float = field(default_factory=time.monotonic)
    received: bytes = b""
    answered: bool = False  # answered and half-closed: read until the client closes


class Endpoint:
    """The listener's connections, each non-blocking; ``answer(path) -> (status, content type, body)``."""

    def __init__(self, listener: socket.socket, answer: Callable[[bytes], tuple[bytes, bytes, bytes]]) -> None:
        listener.setblocking(False)
        self.listener = listener
        self.answer = answer
        self.open: dict[socket.socket, Connection] = {}  # in the order they were accepted

    def waitables(self) -> list[socket.socket]:
        return [self.listener, *self.open]

    def turn(self, ready: list[object]) -> None:
        """One turn of the loop: accept, read and answer what ``ready`` says can be, drop the expired."""
        if self.listener in ready:
            self.accept()
        for client in [r for r in ready if r in self.open]:
            self.read(self.open[client])
        self.expire()

    def accept(self) -> None:
        for _ in range(ACCEPT_PER_TURN):
            try:
                client, _address = self.listener.accept()
            except OSError:  # BlockingIOError: none left; or the client gave up (ECONNABORTED)
                return
            client.setblocking(False)
            while len(self.open) >= MAX_OPEN:
                self.drop(next(iter(self.open)))
            self.open[client] = Connection(client)

    def read(self, connection: Connection) -> None:
        try:
            data = connection.socket.recv(READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or reset): done with it
            self.drop(connection.socket)
            return
        if connection.answered:
            return  # what a client sends after its request line: read and thrown away
        connection.received += data
        line, newline, _rest = connection.received.partition(b"\n")
        if not newline:
            if len(connection.received) > MAX_REQUEST:
                self.drop(connection.socket)
            return
        parts = line.split(b" ")
        path = parts[1] if len(parts) >= 3 else b"/"
        try:
            status, kind, body = self.answer(path.split(b"?")[0])
        except Exception:  # whatever went wrong building the answer (the database): a 503, the loop goes on
            status, kind, body = b"503 Service Unavailable", b"text/plain", b"unavailable\n"
        head = b"HTTP/1.0 " + status + b"\r\nContent-Type: " + kind + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
        try:
            sent = connection.socket.send(head + body)
            if sent < len(head) + len(body):
                raise BlockingIOError  # a client that does not read: not waited for
            connection.socket.shutdown(socket.SHUT_WR)
        except OSError:
            self.drop(connection.socket)
            return
        connection.answered = True
        connection.received = b""

    def expire(self) -> None:
        now = time.monotonic()
        for client, connection in list(self.open.items()):
            if now - connection.opened <= DEADLINE:
                break  # in the order they were accepted: the rest are younger
            self.drop(client)

    def drop(self, client: socket.socket) -> None:
        self.open.pop(client, None)
        try:
            client.close()
        except OSError:
            pass

    def close(self) -> None:
        """Every connection and the listener (a clean stop; a forked child, which must keep none)."""
        for client in list(self.open):
            self.drop(client)
        self.listener.close()
