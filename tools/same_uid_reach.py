"""What a sandbox under the same uid as its victims obtains, per Landlock ABI (docs/same-uid-sandbox.md).

As root: ``python tools/same_uid_reach.py 1 4 7 0`` (0: no Landlock, as --no-isolation without it).
For each ABI, a child becomes a uid no account has, restricts itself with Landlock at that ABI
(the Python trees read-only, a work folder read-write) and loads the kit's seccomp filters, then
tries each attack on a file and a process of that same uid, outside its allowlist: one line of
JSON per ABI, "ok" or the errno. Signals are sent as signal 0 (permission checked, nothing sent).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from attnkit.sandbox.lockdown import landlock, seccomp
from attnkit.sandbox.lockdown.zygote_namespace import allowlist

UID = 3_737_373  # a uid no account and no process has: whatever the child reaches is its own


def become() -> None:
    os.setgroups([])
    os.setresgid(UID, UID, UID)
    os.setresuid(UID, UID, UID)


def attempt(action: Callable[[], object]) -> str:
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return "ok"


def attacks(victim_file: Path, victim: int) -> dict[str, str]:
    path = str(victim_file)
    return {
        "chmod": attempt(lambda: os.chmod(path, 0o644)),
        "chown": attempt(lambda: os.chown(path, UID, UID)),
        "utime": attempt(lambda: os.utime(path, (4102444800, 4102444800))),
        "setxattr": attempt(lambda: os.setxattr(path, "user.attnkit", b"x")),
        "truncate": attempt(lambda: os.truncate(path, 2)),
        "prlimit": attempt(lambda: resource.prlimit(victim, resource.RLIMIT_CORE, (0, 0))),
        "setpriority": attempt(lambda: os.setpriority(os.PRIO_PROCESS, victim, 1)),
        "sched_setaffinity": attempt(lambda: os.sched_setaffinity(victim, os.sched_getaffinity(victim))),
        "kill(pid)": attempt(lambda: os.kill(victim, 0)),
        "kill(-1)": attempt(lambda: os.kill(-1, 0)),
    }


def measure(abi: int, victim_file: Path, work: Path) -> dict[str, str]:
    ready_read, ready_write = os.pipe()
    victim = os.fork()
    if victim == 0:
        become()
        os.write(ready_write, b"1")
        time.sleep(30)
        os._exit(0)
    os.read(ready_read, 1)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.setsid()
        become()
        got = landlock.restrict_self(landlock.Allowlist(tuple(allowlist([str(victim_file.parent)])), (str(work),)), abi) if abi else []
        got += seccomp.install(scoped="landlock-scoped" in got)  # as a sandbox of that layer does (without_namespaces.finish)
        os.write(write_end, json.dumps({"obtained": ",".join(got), **attacks(victim_file, victim)}).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        row = json.loads(answer.read())
    os.waitpid(child, 0)
    os.kill(victim, signal.SIGKILL)
    os.waitpid(victim, 0)
    return row


def main(abis: list[int]) -> None:
    if os.geteuid() != 0:
        raise SystemExit("run as root: the child becomes a uid of its own")
    folder = Path(tempfile.mkdtemp(prefix="attnkit-reach-", dir="/var/tmp"))
    work = Path(tempfile.mkdtemp(prefix="attnkit-reach-work-", dir="/var/tmp"))
    try:
        folder.chmod(0o755)
        victim_file = folder / "classmate.ipynb"
        victim_file.write_text("{}")
        os.chown(victim_file, UID, UID)
        os.chown(work, UID, UID)
        seccomp.compiled()
        for abi in abis:
            print(abi, json.dumps(measure(abi, victim_file, work)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main([int(argument) for argument in sys.argv[1:]] or [1, 4, landlock.abi_version(), 0])
