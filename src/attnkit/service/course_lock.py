"""One ``attnkit serve`` per course (per replica name on a shared queue): a lock file in the
service's folder, held by a descriptor until the process ends."""

from __future__ import annotations

import os
from pathlib import Path

from attnkit.constants import GraderError
from attnkit.i18n import _


def one_service(state: Path, replica: str) -> int:
    """The course's service lock (``serve.lock`` in its folder; ``serve-<replica>.lock`` for a
    replica of a shared queue), taken without waiting and held by the returned descriptor until
    this process ends (a ``kill -9`` included: the kernel releases it). Held by another process:
    GraderError naming its pid and how to stop it."""
    import fcntl

    path = state / (f"serve-{replica}.lock" if replica else "serve.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise GraderError(
            _(
                "这个课程已有一个 attnkit serve 在运行（pid {pid}）：一个课程只能有一个评分服务。"
                "先停止它（kill -TERM {pid}，或 systemctl stop attnkit-serve），或用 --status 查看它"
            ).format(pid=holder)
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a full disk: the pid is only what a second start names; the lock is held all the same
    return fd
