"""`make grade` with Debian 12's own Python on a fresh clone: the lock must install there.

Slow (a whole virtualenv with torch is built), so it is marked ``slow``; `make test` runs it.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import sys
import subprocess
from pathlib import Path

import pytest

from commands import run_command

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
OLD_PYTHON = next(iter(sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.10.*/bin/python")))), None) or shutil.which("python3.10")


@pytest.mark.slow
@pytest.mark.e2e
def test_make_grade_with_the_system_python_on_a_fresh_clone(tmp_path: Path) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    clone = tmp_path / "attnkit"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    # Nothing of this test run's environment may leak into the clone's own venv.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    # The trap of issue 24: an install refused for another Python (here 3.10, below requires-python)
    # leaves a .venv made by it, which the next `make` must not reuse.
    if OLD_PYTHON is not None:
        refused = run_command(["make", "install", f"PYTHON={OLD_PYTHON}"], cwd=clone, env=env)
        assert refused.returncode != 0 and (clone / ".venv" / "pyvenv.cfg").is_file()
    run = run_command(["make", "grade", f"PYTHON={SYSTEM_PYTHON}", "JOBS=2"], cwd=clone, env=env, timeout=2400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    if OLD_PYTHON is not None:
        assert "rebuilding .venv" in run.stdout, run.stdout[-3000:]
    version = run_command(
        [clone / ".venv" / "bin" / "python", "-c", "import platform; print(platform.python_version())"], env=os.environ, check=True
    ).stdout.strip()
    system = run_command([SYSTEM_PYTHON, "-c", "import platform; print(platform.python_version())"], env=os.environ, check=True).stdout.strip()
    assert version == system
    with open(clone / "graded" / "grades.csv", encoding="utf-8", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"chenjing", "lilei", "sunmei", "wangfang", "xiaolin", "zhaoqiang"}
    assert float(rows["xiaolin"]["score"]) == 100 and float(rows["sunmei"]["score"]) == 0
    assert rows["xiaolin"]["total_source"] == "gradebook", "make grade records the demo class in a gradebook"
    # ... its own demo gradebook, never the course's.
    assert (clone / "graded" / "demo-gradebook.db").is_file() and not (clone / "gradebook.db").exists()


def make_install_says(python: str, venv_python: str, tmp_path: Path) -> str:
    """What `make -n install PYTHON=python` would do in a checkout whose .venv ``venv_python`` made."""
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "tools").mkdir(exist_ok=True)
    shutil.copy(ROOT / "tools" / "venv_mismatch.py", tmp_path / "tools")
    if not (tmp_path / ".venv").exists():
        subprocess.run([venv_python, "-m", "venv", "--without-pip", str(tmp_path / ".venv")], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return run_command(["make", "-n", "install", f"PYTHON={python}"], cwd=tmp_path, env=env, check=True, timeout=120).stdout


def test_make_rebuilds_a_venv_made_by_another_python(tmp_path: Path) -> None:
    """A .venv made by another Python (another version, or the same version installed elsewhere) is
    removed and made again by PYTHON, saying why; one made by PYTHON itself is kept."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    # Another interpreter: the suite's own (pyenv's 3.11.7, say) unless that is Debian's too.
    others = [sys._base_executable, *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1*/bin/python")))]
    ours = next((other for other in others if not os.path.samefile(other, SYSTEM_PYTHON)), None)
    if ours is None:
        pytest.skip("no second Python on this machine")
    kept = make_install_says(str(SYSTEM_PYTHON), str(SYSTEM_PYTHON), tmp_path)
    assert "rebuilding" not in kept and "rm -rf .venv" not in kept, kept
    rebuilt = make_install_says(ours, str(SYSTEM_PYTHON), tmp_path)
    assert "rebuilding .venv" in rebuilt and "rm -rf .venv" in rebuilt, rebuilt
    assert str(SYSTEM_PYTHON) in rebuilt  # it names the Python that made it
    assert rebuilt.index("rm -rf .venv") < rebuilt.index(f"{ours} -m venv .venv")
