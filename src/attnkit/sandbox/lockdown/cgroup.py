"""A per-sandbox memory and process cap in a control group, where the OS lets us make one.

Resource limits (setrlimit) bind one process at a time: a submission that forks could multiply
its memory. A control group caps the whole submission. cgroup v1 (separate ``memory`` and
``pids`` hierarchies) and v2 (one unified hierarchy) are both handled; where neither is writable
(not root, a read-only /sys/fs/cgroup) the sandbox runs with its rlimits alone and says so.
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path ("" key for the v2 unified hierarchy)."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _parents() -> list[Path]:
    """Where our groups go: beside this process's own, in the memory and pids hierarchies."""
    own = _own_paths()
    if all((ROOT / controller).is_dir() and controller in own for controller in ("memory", "pids")):
        return [ROOT / controller / own[controller].lstrip("/") for controller in ("memory", "pids")]
    if (ROOT / "cgroup.controllers").is_file() and "" in own:
        return [ROOT / own[""].lstrip("/")]
    return []


class Cgroup:
    """Create with limits; ``add(pid)`` puts a process in (its children inherit); ``remove()``.

    Names are ``attnkit-<owner pid>-<n>``: a group whose owner is gone (a grader killed with
    SIGKILL) is removed by the next one to start (:func:`sweep_stale`)."""

    def __init__(self, name: str, memory_bytes: int, max_processes: int) -> None:
        self.made: list[Path] = []
        parents = _parents()
        if len(parents) == 2:  # cgroup v1: separate memory and pids hierarchies
            self._make(parents[0] / name, {"memory.limit_in_bytes": memory_bytes})
            self._make(parents[1] / name, {"pids.max": max_processes})
        elif parents:
            self._make(parents[0] / name, {"memory.max": memory_bytes, "pids.max": max_processes})
        else:
            raise OSError("no writable memory and pids controllers")

    def _make(self, path: Path, limits: dict[str, int]) -> None:
        path.mkdir()
        self.made.append(path)
        for limit_file, value in limits.items():
            (path / limit_file).write_text(str(value))

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and so everything it starts later) into the group."""
        for path in self.made:
            (path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Delete the group once its processes are gone."""
        for path in self.made:
            for _ in range(50):  # exiting processes leave the group a moment after they die
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)


def sweep_stale() -> int:
    """Remove the empty groups that graders which no longer run left behind; how many."""
    removed = 0
    for parent in _parents():
        for path in parent.glob("attnkit-*"):
            owner = path.name.split("-")[1]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                try:
                    path.rmdir()
                    removed += 1
                except OSError:
                    pass  # still has processes: not ours to touch
    return removed
