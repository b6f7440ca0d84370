"""The TA's side of the isolation tests (tests/sandbox/test_isolation*.py, tests/sandbox/test_settings_harness.py):
the ordinary user a TA is, the distribution's Python with the grader's packages, world-readable
folders the unprivileged grader can read. The fixtures built on these are in tests/conftest.py.

Every test that runs something as another user (a TA, students, the sandbox's pool uids) must work
from a checkout only root can reach (a clone under `mktemp -d`, pyenv under root's 0700 home):
it either runs what it needs from world-readable copies (``tempfile_folder``, ``thin_venv``, the
``user_python`` fixture) or runs the checkout's own programs through :func:`lend_to_others`."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
USER = "attnkit-ta"
# What the grader's virtualenv needs to grade (nbgrader and Jupyter are only for the course tools).
GRADER_PACKAGES = ["torch==2.13.0", "numpy", "ipython", "matplotlib", "rich", "jinja2", "pytest", "pyseccomp"]


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Held while one test process makes something the machine's test runs share (the TA's user,
    the grader's virtualenv under /var/tmp): `make test` runs its modules in parallel processes
    (pytest-xdist), and two of them may reach for it at once."""
    with open(f"/var/tmp/attnkit-test-{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ordinary_user(name: str = USER) -> pwd.struct_passwd:
    """The ordinary user ``name`` (no root, no sudo), made once for the machine (needs root)."""
    with machine_lock("users"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
            return pwd.getpwnam(name)


def lock_digest() -> str:
    """The key of the shared grader venv under /var/tmp: the lock, the packages, the Python."""
    text = (ROOT / "requirements.lock").read_text() + " ".join(GRADER_PACKAGES) + Path(SYSTEM_PYTHON).resolve().name
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def thin_venv(folder: Path, paths: list[Path]) -> str:
    """A virtualenv of the distribution's Python at ``folder`` (no pip) that finds ``paths``
    through a .pth file; its interpreter."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    (site / "attnkit-test.pth").write_text("".join(f"{path}\n" for path in paths))
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o644))
    return str(folder / "bin/python")


def tempfile_folder(prefix: str) -> str:
    """A world-readable temporary folder under /var/tmp (the unprivileged grader reads it)."""
    folder = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(folder, 0o755)
    return folder


def minimal_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}


def hidden_from_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that other users cannot pass through, if any."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & 0o001:
            return folder
    return None


# Root's, empty: where a locked folder's real content waits inside one lending namespace. A mount
# namespace is private to the command, so every concurrent command may use the same spares.
SPARES = Path(tempfile.gettempdir()) / "attnkit-lend"


def lend_to_others(command: list[str], paths: Iterable[Path]) -> list[str]:
    """``command`` (run as root, about to become another user: ``runuser``, ``setpriv``) in a private
    mount namespace where each folder on the way to ``paths`` that others cannot pass (root's 0700
    home, a `mktemp -d`) is a passable tmpfs holding just ``paths``, bind-mounted from the real
    tree: the interpreter's installation, the checkout's venv. Nothing changes for anyone else; with
    nothing locked, ``command`` as it is."""
    lent: dict[Path, list[Path]] = {}
    for path in sorted({Path(os.path.realpath(p)) for p in paths}, key=lambda p: len(p.parts)):
        locked = hidden_from_others(path)
        if locked is not None and path != locked:
            lent.setdefault(locked, []).append(path.relative_to(locked))
    if not lent:
        return command
    steps = ["set -e"]
    for number, (locked, inside) in enumerate(sorted(lent.items())):
        spare = SPARES / str(number)
        spare.mkdir(mode=0o700, parents=True, exist_ok=True)
        where, kept = shlex.quote(str(locked)), shlex.quote(str(spare))
        steps += [f"mount --bind {where} {kept}", f"mount -t tmpfs -o mode=755 tmpfs {where}"]
        for relative in inside:
            target, source = shlex.quote(str(locked / relative)), shlex.quote(str(spare / relative))
            steps += [f"mkdir -p {target}", f"mount --bind {source} {target}"]
    steps.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "; ".join(steps), "sh", *command]
