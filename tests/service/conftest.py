"""Fixtures the service's test modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres import PostgresServer


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the module (``tests/support/postgres.py``; ``make postgresql``
    installs Debian's), stopped and removed after it; each test makes its own database."""
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()
