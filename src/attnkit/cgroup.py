"""A per-sandbox memory and process cap in a control group, where the OS lets us make one.

Resource limits (setrlimit) bind one process at a time: a submission that forks could multiply
its memory. A control group caps the whole submission. cgroup v1 (separate ``memory`` and
``pids`` hierarchies) and v2 (one unified hierarchy) are both handled; where neither is writable
(not root, a read-only /sys/fs/cgroup) the sandbox runs with its rlimits alone and says so.
"""

from __future__ import annotations

import os
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


class Cgroup:
    """Create with limits; ``enter()`` moves the caller in (children inherit); ``remove()``."""

    def __init__(self, name: str, memory_bytes: int, max_processes: int) -> None:
        self.made: list[Path] = []
        own = _own_paths()
        v1 = {"memory": ("memory.limit_in_bytes", memory_bytes), "pids": ("pids.max", max_processes)}
        if all((ROOT / controller).is_dir() and controller in own for controller in v1):
            for controller, (limit_file, value) in v1.items():
                self._make(ROOT / controller / own[controller].lstrip("/") / name, {limit_file: value})
        elif (ROOT / "cgroup.controllers").is_file() and "" in own:
            self._make(ROOT / own[""].lstrip("/") / name, {"memory.max": memory_bytes, "pids.max": max_processes})
        else:
            raise OSError("no writable memory and pids controllers")

    def _make(self, path: Path, limits: dict[str, int]) -> None:
        path.mkdir()
        self.made.append(path)
        for limit_file, value in limits.items():
            (path / limit_file).write_text(str(value))

    def enter(self) -> None:
        for path in self.made:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def leave_and_remove(self) -> None:
        """Move the caller back to its parent group, then delete ours once its processes are gone."""
        for path in self.made:
            try:
                (path.parent / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                pass
        for path in self.made:
            for _ in range(50):  # exiting processes leave the group a moment after they die
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)
