"""A fresh clone's `make grade`: what the demo class was given, for tests/cli/test_install.py and
tests/cli/test_pythons.py (their shared clone is tests/cli/conftest.py's ``system_python_clone``)."""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from commands import run_command

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
OLD_PYTHON = next(iter(sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.10.*/bin/python")))), None) or shutil.which("python3.10")


@dataclass
class FreshClone:
    """A fresh clone after `make grade PYTHON=…`: where, the command's output, and what the demo
    class was given (grades.csv rows, and each student's tests: name, status, score, max score)."""

    clone: Path
    python: str  # the version the clone's .venv runs
    stdout: str
    grades: list[dict[str, str]] = field(default_factory=list)
    tests: dict[str, list[tuple]] = field(default_factory=dict)

    def graded(self) -> dict[str, object]:
        return {"python": self.python, "grades": self.grades, "tests": self.tests}


def graded_demo_class(clone: Path, python: str, stdout: str) -> FreshClone:
    graded = clone / "graded"
    with open(graded / "grades.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    tests = {}
    for results in sorted(graded.glob("students/*/*/results.json")):
        record = json.loads(results.read_text(encoding="utf-8"))
        tests[str(results.relative_to(graded))] = [(t["name"], t["status"], t["score"], t["max_score"]) for t in record["tests"]]
    return FreshClone(clone, python, stdout, rows, tests)


def python_version(python: str | Path) -> str:
    return run_command([python, "-c", "import platform; print(platform.python_version())"], env=os.environ, check=True).stdout.strip()


def make_grade_with_the_system_python(folder: Path) -> FreshClone:
    """`make grade PYTHON=/usr/bin/python3` on a fresh clone of the committed HEAD (after the trap
    of issue 24 where a 3.10 is on the machine: `make install` refused for it first, leaving a
    .venv the grade must rebuild)."""
    clone = folder / "attnkit"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    # Nothing of this test run's environment may leak into the clone's own venv.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    if OLD_PYTHON is not None:
        refused = run_command(["make", "install", f"PYTHON={OLD_PYTHON}"], cwd=clone, env=env)
        assert refused.returncode != 0 and (clone / ".venv" / "pyvenv.cfg").is_file()
    run = run_command(["make", "grade", f"PYTHON={SYSTEM_PYTHON}", "JOBS=2"], cwd=clone, env=env, timeout=2400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    return graded_demo_class(clone, python_version(clone / ".venv" / "bin" / "python"), run.stdout)
