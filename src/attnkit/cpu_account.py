"""CPU time by process kind, for ``tools/bench.py``: each process of a grading run (the parent, its
workers, the seed, each zygote and, through the zygote, all of its sandboxes) appends what it used
to the file named by ``ATTNKIT_CPU_ACCOUNT`` as it ends. Off (nothing read, nothing written) when
the variable is not set.

Exact, not sampled: a process's own figure is ``getrusage(RUSAGE_SELF)`` taken as it ends, and the
sandboxes' figure is their zygote's ``getrusage(RUSAGE_CHILDREN)``: the kernel adds a child's whole
CPU time (and that of everything it reaped, a sandbox's own children included) to its parent's
when the parent reaps it, and a zygote reaps every sandbox it forked before it ends
(``Sandboxes.end_all``). What the zygote's start-up forks used (its lock-down probes) is counted
as the zygote's, by taking its children's figure once before its first sandbox
(``children_before``). A zygote opens the file before it covers its /tmp (``hold``) and takes the
variable out of its environment; its sandboxes close every inherited descriptor at lock-down
(``sequence._close_descriptors``, in every layer) before any student code runs, and only the
zygote writes, after they are gone.
"""

from __future__ import annotations

import json
import os
import resource

ENVIRONMENT = "ATTNKIT_CPU_ACCOUNT"


# A zygote's open file (``hold``): its own mount namespace covers where the file lies.
_held: int | None = None


def enabled() -> bool:
    return _held is not None or bool(os.environ.get(ENVIRONMENT))


def hold() -> None:
    """In a zygote, before it builds its own view of the file system: open the file now, and take
    the variable out of the environment that its sandboxes inherit."""
    global _held
    path = os.environ.pop(ENVIRONMENT, None)
    if path and _held is None:
        try:
            _held = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            pass


def _usage(who: int) -> tuple[float, float]:
    usage = resource.getrusage(who)
    return usage.ru_utime, usage.ru_stime


def children_before() -> tuple[float, float]:
    """The children's CPU so far (user, system): subtracted from what ``own`` reports as
    ``children_kind`` at the end."""
    return _usage(resource.RUSAGE_CHILDREN) if enabled() else (0.0, 0.0)


def own(kind: str, children_kind: str | None = None, since: tuple[float, float] = (0.0, 0.0)) -> None:
    """Append this process's CPU as ``kind`` and, with ``children_kind``, its reaped children's
    since ``since`` as that kind (their earlier part goes to ``kind``). Never raises: accounting
    must not change how a run ends."""
    path = os.environ.get(ENVIRONMENT)
    if not path and _held is None:
        return
    try:
        user, system = _usage(resource.RUSAGE_SELF)
        lines = []
        if children_kind is not None:
            children_user, children_system = _usage(resource.RUSAGE_CHILDREN)
            user, system = user + since[0], system + since[1]
            lines.append({"kind": children_kind, "pid": os.getpid(), "user": children_user - since[0], "system": children_system - since[1]})
        lines.insert(0, {"kind": kind, "pid": os.getpid(), "user": user, "system": system})
        text = "".join(json.dumps(line) + "\n" for line in lines).encode()
        # One write with O_APPEND: the lines of two processes never interleave.
        if _held is not None:
            os.write(_held, text)
            return
        descriptor = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(descriptor, text)
        finally:
            os.close(descriptor)
    except (OSError, ValueError):
        pass


def read(path: str) -> dict[str, dict[str, float]]:
    """The file's lines summed by kind: kind -> {"user", "system", "processes"} (seconds)."""
    totals: dict[str, dict[str, float]] = {}
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return totals
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            kind = str(entry["kind"])
            user, system = float(entry["user"]), float(entry["system"])
        except (ValueError, KeyError, TypeError):
            continue
        total = totals.setdefault(kind, {"user": 0.0, "system": 0.0, "processes": 0})
        total["user"] += user
        total["system"] += system
        total["processes"] += 1
    return totals
