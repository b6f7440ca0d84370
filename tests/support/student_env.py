"""A student's environment made as docs/student-environment.md says, for the tests that use it
(``tests/conftest.py``'s ``student_env``): ``make student-wheels``, an empty venv of the host's own
Python (``/usr/bin/python3``: every user can run it, as a hub's students must), then the one
documented command, run as typed from the folder that holds ``dist/student/``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from commands import ROOT, run_command

DOC = ROOT / "docs" / "student-environment.md"
STUDENT_PYTHON = Path("/usr/bin/python3")
DOCUMENTED_VENV = "/opt/ch19-student"  # the venv the doc's commands name
INSTALL_SECONDS = 1800.0  # torch alone is some 700 MB to unpack on a loaded two-core machine


@dataclass(frozen=True)
class StudentEnv:
    base: Path  # holds dist/student/ (the wheels) and venv/
    venv: Path
    install_output: str

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def documented_install() -> str:
    """The doc's install command (the line that pip-installs ``attnkit[student]`` into the
    students' venv), as typed there."""
    found = [line.strip() for line in DOC.read_text(encoding="utf-8").splitlines() if re.search(r'/bin/pip install .*"attnkit\[student\]"', line)]
    assert found, f"{DOC} gives no `.../bin/pip install ... \"attnkit[student]\"` line"
    return found[0]


def build(base: Path) -> StudentEnv:
    """The wheels and the student's venv under ``base`` (0755: the students' users read it)."""
    base.chmod(0o755)
    wheels = base / "dist" / "student"
    run_command(["make", "--no-print-directory", "student-wheels", f"STUDENT_WHEELS={wheels}"], cwd=ROOT, timeout=900, check=True)
    venv = base / "venv"
    run_command([STUDENT_PYTHON, "-m", "venv", venv], cwd=base, timeout=300, check=True)
    # As root runs it (the doc's ``sudo``: the test runs as root, or as a user who owns ``base``).
    command = documented_install().removeprefix("sudo ").replace(DOCUMENTED_VENV, str(venv))
    assert command.startswith(str(venv)), command
    # As a TA types it: from the course root (here ``base``, which holds dist/student/), in a plain shell.
    # The machine's own pip settings (PIP_FIND_LINKS: where its torch CPU wheel lies) stay; this
    # venv's bin/ and any VIRTUAL_ENV do not.
    # PIP_NO_COMPILE: no byte-compiling of torch's thousands of modules at install (a minute of a
    # loaded machine); what the tests import is compiled as they import it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))} | {"PATH": "/usr/bin:/bin", "PIP_NO_COMPILE": "1"}
    done = run_command(["sh", "-c", command], cwd=base, env=env, timeout=INSTALL_SECONDS)
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return StudentEnv(base=base, venv=venv, install_output=done.stdout + done.stderr)
