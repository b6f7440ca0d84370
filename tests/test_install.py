"""`make grade` with Debian 12's own Python on a fresh clone: the lock must install there.

Slow (a whole virtualenv with torch is built), so it is marked ``slow``; `make test` runs it.
"""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.mark.slow
def test_make_grade_with_the_system_python_on_a_fresh_clone(tmp_path: Path) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    clone = tmp_path / "attnkit"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    # Nothing of this test run's environment may leak into the clone's own venv.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    run = subprocess.run(["make", "grade", f"PYTHON={SYSTEM_PYTHON}", "JOBS=2"], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=2400, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    version = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    system = subprocess.run([str(SYSTEM_PYTHON), "-c", "import platform; print(platform.python_version())"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert version == system
    with open(clone / "graded" / "grades.csv", encoding="utf-8", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"chenjing", "lilei", "sunmei", "wangfang", "xiaolin", "zhaoqiang"}
    assert float(rows["xiaolin"]["score"]) == 100 and float(rows["sunmei"]["score"]) == 0
    assert rows["xiaolin"]["total_source"] == "gradebook", "make grade records the demo class in a gradebook"
    # ... its own demo gradebook, never the course's.
    assert (clone / "graded" / "demo-gradebook.db").is_file() and not (clone / "gradebook.db").exists()
