"""Every limit a sandbox runs under, stated once: the grader's per-submission time limits
(:class:`Limits`), the figures the zygote applies to each sandbox, and which rlimit gets which.

Both sides import this module: it holds data only (no torch, no trusted-only module), so the
sandbox side may read it and the trusted side may change a figure in one place.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.constants import PROJECT_ROOT

MIB = 1024 * 1024

# Memory per sandbox beyond the libraries the zygote has loaded (``--memory-mb``). One figure
# caps two things, so two names with the same value: a sandbox's address space (RLIMIT_AS, on
# top of what it inherits from the zygote) and, where we can make a control group, what the
# whole submission allocates (all its processes together).
DEFAULT_MEMORY_MB = 2048
DEFAULT_ADDRESS_SPACE_HEADROOM_MB = DEFAULT_MEMORY_MB
DEFAULT_CGROUP_MEMORY_MB = DEFAULT_MEMORY_MB
# Processes per sandbox with a control group (its pids.max, and RLIMIT_NPROC).
DEFAULT_MAX_PROCESSES = 64
# Without a control group (no root), one process is the whole submission: a per-process memory
# limit then bounds the submission, and a fork bomb has nothing to fork.
UNCAPPED_PROCESSES = 1
# CPU seconds per sandbox (RLIMIT_CPU): a backstop behind the grader's wall-clock limits, which
# are what normally ends a busy submission.
DEFAULT_CPU_SECONDS = 120
# Descriptors a sandbox may hold: its channel, the standard streams and what a notebook opens.
OPEN_FILES = 64
# The largest file a sandbox may write: a runaway write fails (SIGXFSZ is ignored) long before
# its scratch tmpfs, which is memory, fills.
FILE_SIZE_BYTES = 8 * MIB
# No core dumps: a crash costs nothing and leaves nothing of the zygote's memory behind.
CORE_BYTES = 0
# Characters of stdout/stderr kept per cell (or per call): the rest is counted, not kept.
OUTPUT_LIMIT = 20_000
# Each of an isolated sandbox's scratch folders (/tmp and its home): a tmpfs, and so memory.
SCRATCH_SIZE = "64m"

# As root without namespaces, the pool of sandbox uids (``attnkit.sandbox.lockdown.uid_pool``): far above any uid
# a distribution gives out (useradd stops at 60000; systemd's dynamic users are 61184-65519;
# container runtimes map subordinate ids from 100000 in 65536 steps).
POOL_BASE = 2_000_000
UIDS_PER_ZYGOTE = 4  # the sandbox being graded, the one forked ahead, and slack for one being reaped
MAX_ZYGOTES = 1024
# The probe of the hidden trees under the pool uid (``attnkit.sandbox.lockdown.without_namespaces.probe``): its walk
# stops there (and says so).
MAX_PATHS_CHECKED = 200_000


@dataclass
class Limits:
    """The grader's limits for one submission (the trusted side's view; the zygote receives
    ``memory_mb`` and ``cpu_seconds`` as sandbox settings)."""

    cell_seconds: float = 10.0
    call_seconds: float = 10.0
    notebook_seconds: float = 60.0
    # All calls of one submission together: a function that sleeps just under call_seconds on
    # every call would otherwise cost (number of calls) x call_seconds.
    submission_seconds: float = 120.0
    memory_mb: int = DEFAULT_MEMORY_MB
    cpu_seconds: int = DEFAULT_CPU_SECONDS
    restarts: int = 3
    # Times a submission is graded again when the host, not its code, cut it short: its worker
    # killed by a signal (the OOM killer's included), or its sandbox stalled past a time limit
    # without spending the time on the CPU (stopped, a paused VM, swapping). Only then is it
    # charged: "not graded", or the time limit's failure (``driver.submission``, ``engine.fan_out``).
    host_retries: int = 2
    # The TA vouches for these notebooks (--no-isolation; a learner's own notebook): a plain
    # process may run them where the OS gives no isolated sandbox.
    trusted: bool = False


def cgroup_memory_bytes(settings: dict[str, Any]) -> int:
    """A sandbox's control group memory cap, from its settings (``memory_mb``)."""
    return int(settings.get("memory_mb", DEFAULT_CGROUP_MEMORY_MB)) * MIB


def address_space_bytes(settings: dict[str, Any]) -> int:
    """A sandbox's RLIMIT_AS: what it inherits from the zygote (``address_space_base``) plus its
    memory figure."""
    return int(settings["address_space_base"]) + int(settings.get("memory_mb", DEFAULT_ADDRESS_SPACE_HEADROOM_MB)) * MIB


def rlimits(settings: dict[str, Any], capped: bool) -> list[tuple[int, int]]:
    """(rlimit, value) for one sandbox, soft and hard alike. ``capped``: it is in a control group,
    so it may run several processes."""
    return [
        (resource.RLIMIT_AS, address_space_bytes(settings)),
        (resource.RLIMIT_CPU, int(settings.get("cpu_seconds", DEFAULT_CPU_SECONDS))),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
        (resource.RLIMIT_NPROC, DEFAULT_MAX_PROCESSES if capped else UNCAPPED_PROCESSES),
        (resource.RLIMIT_FSIZE, FILE_SIZE_BYTES),
        (resource.RLIMIT_CORE, CORE_BYTES),
    ]


def hidden_paths(*extra: Path) -> list[str]:
    """Folders never to be part of a sandbox's view, even where they lie on ``sys.path`` (the
    project's ``src/`` for an editable install): the whole project (grader, tests, solutions,
    gradebook), the submissions and the outputs. The sandbox's root is an allowlist of Python's
    own folders; a virtualenv kept inside the project still contributes its site-packages."""
    return [str(PROJECT_ROOT)] + [str(path.resolve()) for path in extra]
