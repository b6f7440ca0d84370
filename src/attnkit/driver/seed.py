"""The zygotes' shared start: one process that imports torch, numpy, matplotlib and IPython while
the grader is still importing its own, and then forks each worker a zygote.

Started before the command's heavy imports (see :func:`start_for`), so that its ~1 s of imports
runs on the CPU the grader's single-threaded start leaves idle; one set of imports serves every
worker instead of one per worker. A worker asks for a zygote by sending the seed one end of a
fresh socketpair (``Zygote(seed=...)``); the seed forks a child that takes that socket, receives
the worker's configuration on it and goes on exactly as a zygote started on its own would
(``attnkit.sandbox.seed_server.serve_seed``). A worker for which the seed cannot answer starts its own zygote.

This module stays light (no torch, no attnkit module that imports it): it runs first.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys

from attnkit import cpu_account

# Variables a zygote keeps from the grader's environment; everything else (tokens, the grader's
# settings) stays out of student code's reach.
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TZ", "ATTNKIT_HUGE_PAGES", "ATTNKIT_LANDLOCK_ABI_MAX")
CLOSE_SECONDS = 5.0


def zygote_environment() -> dict[str, str]:
    """The environment a zygote (and so every sandbox) starts with."""
    env = {key: value for key, value in os.environ.items() if key in KEPT_VARIABLES}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    # The zygote may run in a user namespace where it is uid 0: its home (matplotlib's font
    # cache, IPython's folder) is still the grader's. A sandbox sets its own.
    env["HOME"] = os.path.expanduser("~")
    if cpu_account.enabled():  # the zygote takes it out of its environment before its first sandbox
        env[cpu_account.ENVIRONMENT] = os.environ[cpu_account.ENVIRONMENT]
    return env


def start_zygote_process(descriptor: int, *arguments: str) -> subprocess.Popen:
    """``python -I -m attnkit.sandbox.zygote ...`` (a seed, or a zygote of a worker's own): isolated mode,
    the environment above, no stdin, ``/`` as its folder, and of our descriptors ``descriptor``
    alone (its end of the socket to us)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-m", "attnkit.sandbox.zygote", *arguments],
        pass_fds=[descriptor],
        stdin=subprocess.DEVNULL,
        env=zygote_environment(),
        cwd="/",
    )


class Seed:
    """The seed process and our end of its request socket (datagram-like: two workers asking at
    once never interleave their requests)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = start_zygote_process(theirs.fileno(), "--seed", str(theirs.fileno()), str(os.getpid()))
        theirs.close()
        self.requests = ours

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        """No more zygotes: the seed waits for those it forked to end (each ends when its worker
        closes it), then exits; one still running after ``CLOSE_SECONDS`` is killed with it."""
        self.requests.close()
        try:
            self.process.wait(timeout=CLOSE_SECONDS + 1)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# The seed this process started (``start_for``), until its one user ``take``s it: state, not a cache.
_seed: Seed | None = None


def start_for(argv: list[str]) -> None:
    """Start the seed if ``argv`` (the command line after the program) is a ``grade`` or ``serve`` command.
    Any other command, or a seed that cannot start, just leaves workers to start their own."""
    global _seed
    if _seed is not None or not {"grade", "serve"} & set(argv) or {"-h", "--help", "--version", "--status"} & set(argv):
        return
    try:
        _seed = Seed()
    except OSError:
        _seed = None


def take() -> Seed | None:
    """The seed started for this command, handed to its one user (the grading engine)."""
    global _seed
    seed, _seed = _seed, None
    return seed


def wait_for_exit(pidfd: int | None, seconds: float = CLOSE_SECONDS) -> None:
    """Wait until the process behind ``pidfd`` (not our child: a seed's) has exited; kill it after
    ``seconds``. The pidfd was opened while it ran, so a recycled pid can never be hit."""
    if pidfd is None:
        return
    try:
        readable, _, _ = select.select([pidfd], [], [], seconds)
        if not readable:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)
