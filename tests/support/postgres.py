"""A real PostgreSQL server for a test module: Debian's ``postgresql`` (``make postgresql``).

Started with the server's own ``initdb`` and ``pg_ctl`` as an unprivileged user (the package's
``postgres`` when the tests run as root, else the tests' own user), in a temporary folder of its
own: the data directory and the unix socket directory inside it, TCP on a free port of
127.0.0.1 and 127.0.0.2 only (``partition`` cuts the second off), ``trust`` for the local test connections, and no fsync unless ``durable`` (a
test's server needs speed; ``tools/bench_serve.py`` measures with PostgreSQL's own defaults). ``stop`` ends it with ``pg_ctl stop``
(its own postmaster, by its pid file) and removes the folder.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUPERUSER = "attnkit"
# A second address the server listens on: clients connected through it alone can be cut off
# (``partition``), as a replica on its own network is, while the others reach 127.0.0.1.
PARTITIONED = "127.0.0.2"


def server_binaries() -> Path | None:
    """The newest installed server's bin/ (``/usr/lib/postgresql/<version>/bin``), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]) if path.split("/")[4].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    def __init__(self, durable: bool = False) -> None:
        self.durable = durable
        binaries = server_binaries()
        if binaries is None:
            raise RuntimeError("PostgreSQL's server is not installed: `make postgresql` installs Debian's postgresql")
        self.bin = binaries
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.base = Path(tempfile.mkdtemp(prefix="attnkit-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "sockets"
        self.sockets.mkdir()
        self.port = free_port()
        self.log = self.base / "server.log"
        if os.geteuid() == 0:
            entry = pwd.getpwnam(self.user)
            for path in (self.base, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.base.chmod(0o700)
        self.started = False

    def run(self, *command: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            list(command),
            user=self.user if os.geteuid() == 0 else None,
            cwd=self.base,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        return result

    def start(self) -> PostgresServer:
        self.run(str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions")
        # Only 127.0.0.1 and our own socket folder; no fsync for a test's server (speed, not durability).
        options = f"-h 127.0.0.1,{PARTITIONED} -p {self.port} -k {self.sockets} -c max_connections=60"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self.options = options
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "120", "start")
        self.started = True
        return self

    def halt(self) -> None:
        """The server stopped (its clients' connections dropped, new ones refused), its data kept: ``resume`` starts it again."""
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "120", "stop")

    def resume(self) -> None:
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", self.options, "-w", "-t", "120", "start")

    def url(self, database: str = "postgres", address: str = "127.0.0.1") -> str:
        return f"postgresql://{SUPERUSER}@{address}:{self.port}/{database}"

    @contextmanager
    def partition(self) -> Iterator[None]:
        """Every client connected through PARTITIONED cut off from the server as by a network
        partition: each packet between them dropped both ways (iptables, as root), nothing
        refused or reset, so that only timeouts notice; whole again when the block ends."""
        rules = [["-d", PARTITIONED, "-p", "tcp", "--dport", str(self.port)], ["-s", PARTITIONED, "-p", "tcp", "--sport", str(self.port)]]
        for rule in rules:
            subprocess.run(["iptables", "-I", "OUTPUT", *rule, "-j", "DROP"], check=True, capture_output=True, timeout=60)
        try:
            yield
        finally:
            for rule in rules:
                subprocess.run(["iptables", "-D", "OUTPUT", *rule, "-j", "DROP"], capture_output=True, timeout=60)

    def create_database(self, name: str) -> str:
        """A new database; its URL (``postgresql://``: attnkit adds the psycopg driver itself)."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres", autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.started:
            subprocess.run(
                [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                user=self.user if os.geteuid() == 0 else None,
                cwd=self.base,
                capture_output=True,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )
            self.started = False
        shutil.rmtree(self.base, ignore_errors=True)
