"""As root, a block of uids of its own for each zygote, so that no two students' sandboxes that
run at the same time share a uid.

Where the sandbox has no user namespace of its own, its uid is the host's: two sandboxes under
one uid could signal, trace or read each other's files, and RLIMIT_NPROC (which counts per uid)
would count them together. Each zygote claims a block with an exclusive ``flock`` on a lock file
(held for the zygote's life: the kernel frees it when the zygote dies, however it dies), and its
sandboxes take the block's uids in turn: the sandbox being graded and the one forked ahead of it
never share one. Jobe (CodeRunner's sandbox server) runs its jobs the same way.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from attnkit.boundary.policy import MAX_ZYGOTES, POOL_BASE, UIDS_PER_ZYGOTE

LOCK_DIR = "/run/attnkit-uids"


class PoolExhausted(OSError):
    """Every block of uids is held by a running zygote."""


@dataclass
class UidBlock:
    first: int
    lock_fd: int  # kept open (and locked) for as long as the zygote lives

    def uid(self, sandbox_number: int) -> int:
        return self.first + sandbox_number % UIDS_PER_ZYGOTE


def claim(lock_dir: str = LOCK_DIR) -> UidBlock:
    """The first block no running zygote holds. Root only (the lock folder is root's, mode 700)."""
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    for index in range(MAX_ZYGOTES):
        descriptor = os.open(os.path.join(lock_dir, f"{index}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue
        return UidBlock(POOL_BASE + index * UIDS_PER_ZYGOTE, descriptor)
    raise PoolExhausted(0, f"all {MAX_ZYGOTES} blocks of sandbox uids under {lock_dir} are held")
