"""A sandbox's CPU time and peak memory, as the kernel counts them, read by the trusted side from /proc."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attnkit.procfs import stat_fields


def usage_of(pid: int, zygote: int) -> dict[str, Any]:
    """A sandbox's CPU time and peak memory as the kernel counts them, read here from /proc: asking
    the sandbox would cost a round trip, and its answer would be whatever its code made of
    ``resource.getrusage``. Nothing if ``pid`` is not the zygote's child any more."""
    try:
        fields = stat_fields(pid)  # after "pid (name) ": state, ppid, ...
        status = Path(f"/proc/{pid}/status").read_bytes()
    except (OSError, ValueError):
        return {}
    if len(fields) < 13 or fields[1] != str(zygote).encode():
        return {}
    try:  # nanoseconds on the CPU, where the kernel keeps them; else its ticks (10 ms)
        cpu_seconds = int(Path(f"/proc/{pid}/schedstat").read_bytes().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        cpu_seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = next((line.split()[1] for line in status.splitlines() if line.startswith(b"VmHWM:")), b"0")
    return {"cpu_seconds": round(cpu_seconds, 4), "max_rss_kb": int(peak)}



def open_schedstat(pid: int) -> int | None:
    """A descriptor on ``pid``'s /proc/<pid>/schedstat, held for :func:`wanted_seconds` (a read of
    a held descriptor costs a fraction of opening the file each time); None where there is none."""
    try:
        return os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def wanted_seconds(schedstat: int | None) -> float | None:
    """The seconds a process (its main thread) has run on a CPU or waited in the run queue for one,
    as the kernel counts them (its schedstat's first two fields, ``schedstat`` from
    :func:`open_schedstat`); None where the kernel does not say. Its wall-clock time beyond this it
    spent neither running nor wanting to run: stopped (SIGSTOP, a frozen cgroup), the whole machine
    paused, sleeping or blocked: time a timeout may not charge to the student's own CPU
    (``driver.submission.HostStalled``)."""
    if schedstat is None:
        return None
    try:
        fields = os.pread(schedstat, 128, 0).split()
        return (int(fields[0]) + int(fields[1])) / 1e9
    except (OSError, ValueError, IndexError):
        return None
