"""/proc/PID/stat read in one place for the trusted side: a process's fields after its name
(the CLI's parent pids when it ends orphans, a sandbox's parent and CPU ticks for its usage)."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int | str) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after "pid (name) ": state, parent pid, ... (``[1]`` the
    parent, ``[11]`` and ``[12]`` user and system ticks). OSError if there is no such process,
    ValueError if the file is not one (no name's closing parenthesis)."""
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rindex(b")") + 2 :].split()
