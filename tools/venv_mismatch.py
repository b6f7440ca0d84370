"""Say why a virtualenv was not made by the Python running this script; print nothing if it was.

`make` runs it with ``$(PYTHON)`` before it installs anything: a ``.venv`` left by another Python
(an earlier ``PYTHON=python3.12``, say, perhaps one whose install was refused) would otherwise be
reused by every later ``make`` and fail in ways that do not say "rm -rf .venv". The answer comes
from the venv's ``pyvenv.cfg`` (written by ``python -m venv``), so a venv whose own interpreter is
gone or broken is recognised too. Standard library only: nothing is installed yet.

    python tools/venv_mismatch.py .venv
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def read_pyvenv_cfg(venv: Path) -> dict[str, str]:
    """The ``key = value`` lines of ``venv/pyvenv.cfg`` (empty if there is none)."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip()] = value.strip()
    return settings


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def mismatch(venv: Path) -> str:
    """Why ``venv`` was made by another interpreter than this one, or "" if it was not (or is absent)."""
    if not venv.exists():
        return ""
    settings = read_pyvenv_cfg(venv)
    ours = f"Python {platform.python_version()} ({sys.executable})"
    if not settings:
        return f"{venv} has no pyvenv.cfg (not made by python -m venv); PYTHON is {ours}"
    # `python -m venv` writes `version`; virtualenv writes `version_info` (3.12.1.final.0).
    version = settings.get("version") or ".".join(settings.get("version_info", "").split(".")[:3])
    executable = settings.get("executable", "")
    theirs = f"Python {version or '?'} ({executable or settings.get('home', '?')})"
    if version != platform.python_version():
        return f"{venv} was made by {theirs}; PYTHON is {ours}"
    # Same version, another installation (a distribution's 3.12.1 and pyenv's, say): the executable tells.
    if executable and not same_file(executable, sys.executable) and not same_file(executable, sys._base_executable):
        return f"{venv} was made by {theirs}; PYTHON is {ours}"
    return ""


if __name__ == "__main__":
    print(mismatch(Path(sys.argv[1] if len(sys.argv) > 1 else ".venv")))
