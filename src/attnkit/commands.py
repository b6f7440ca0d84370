"""How the kit runs its tools (nbgrader, attnkit itself) from the interpreter it is installed in."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def tool_environment() -> dict[str, str]:
    """This interpreter's ``bin/`` first on PATH: nbgrader's gradebook runs ``alembic``, which
    lives next to the interpreter. A pytest run's marker variable is not passed on."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def nbgrader_command() -> list[str]:
    """nbgrader from this interpreter's environment."""
    script = Path(sys.executable).parent / "nbgrader"
    return [str(script)] if script.exists() else [sys.executable, "-m", "nbgrader"]


def attnkit_command() -> list[str]:
    """attnkit from this interpreter (the course's venv, when nbgrader runs it)."""
    return [sys.executable, "-m", "attnkit"]
