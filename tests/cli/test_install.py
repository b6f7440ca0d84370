"""`make grade` with Debian 12's own Python on a fresh clone: the lock must install there.

Slow (a whole virtualenv with torch is built), so it is marked ``slow``; `make test` runs it.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import subprocess
from pathlib import Path

import pytest

from commands import run_command

ROOT = Path(__file__).resolve().parents[2]
from fresh_clone import OLD_PYTHON, SYSTEM_PYTHON, FreshClone, python_version


@pytest.mark.slow
@pytest.mark.e2e
def test_make_grade_with_the_system_python_on_a_fresh_clone(system_python_clone: FreshClone) -> None:
    """The fresh clone's `make grade PYTHON=/usr/bin/python3` (``conftest.system_python_clone``)."""
    clone, stdout = system_python_clone.clone, system_python_clone.stdout
    if OLD_PYTHON is not None:
        assert "rebuilding .venv" in stdout, stdout[-3000:]
    assert system_python_clone.python == python_version(SYSTEM_PYTHON)
    rows = {row["student_id"]: row for row in system_python_clone.grades}
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
    if (ROOT / "tools" / "install_plan.py").is_file():
        shutil.copy(ROOT / "tools" / "install_plan.py", tmp_path / "tools")
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


def two_pythons() -> tuple[str, str]:
    """Two real interpreters of different versions: this suite's own and another (pyenv's 3.12 or
    3.13, or Debian's /usr/bin/python3), by their real paths."""
    ours = os.path.realpath(sys._base_executable)
    candidates = [*sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1[123]*/bin/python3.1?"))), str(SYSTEM_PYTHON), shutil.which("python3.12") or ""]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.path.realpath(candidate) != ours:
            version = run_command([candidate, "-c", "import sys; print(sys.version_info[:2])"], env=os.environ).stdout
            if version.strip() != str(tuple(sys.version_info[:2])):
                return ours, candidate
    pytest.skip("no second Python of another version on this machine")


def finished_venv(tmp_path: Path, python: str) -> Path:
    """A checkout whose .venv ``python`` made and `make install` finished (its stamp newer than the
    lock), holding a file of the user's that must survive every command below."""
    make_install_says(python, python, tmp_path)  # the checkout's files, and .venv made by ``python``
    (tmp_path / ".venv" / ".installed").touch()
    (tmp_path / ".venv" / ".dev-installed").touch()
    mine = tmp_path / ".venv" / "lib" / "work-of-an-hour.txt"
    mine.write_text("kept\n", encoding="utf-8")
    return mine


def make(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return run_command(["make", "--no-print-directory", *args], cwd=cwd, env=env, timeout=300)


def test_make_without_python_uses_a_venv_another_python_made(tmp_path: Path) -> None:
    """Issue 42: the Quick start's `make grade PYTHON=python3.12`, then the Self-study's plain
    `make check`: the 3.12 .venv is used as it is, never removed (it was by 225e1c5: 13 minutes lost)."""
    ours, other = two_pythons()
    mine = finished_venv(tmp_path, other)
    planned = make("-n", "install", cwd=tmp_path).stdout
    assert "rm -rf" not in planned and "rebuilding" not in planned, planned
    run = make("install", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rm -rf" not in run.stdout and mine.is_file()
    made_by = run_command([tmp_path / ".venv" / "bin" / "python", "-c", "import sys; print(sys._base_executable)"], env=os.environ, check=True)
    assert os.path.realpath(made_by.stdout.strip()) == os.path.realpath(other)


def test_make_with_another_python_keeps_a_finished_venv_and_says_how_to_replace_it(tmp_path: Path) -> None:
    """PYTHON naming another interpreter than the one of a finished .venv: nothing is removed; make
    stops, naming both Pythons and the explicit target that would replace it."""
    ours, other = two_pythons()
    mine = finished_venv(tmp_path, other)
    planned = make("-n", "install", f"PYTHON={ours}", cwd=tmp_path).stdout
    assert "rm -rf" not in planned, planned
    run = make("install", f"PYTHON={ours}", cwd=tmp_path)
    said = run.stdout + run.stderr
    assert run.returncode != 0, said
    assert mine.is_file() and (tmp_path / ".venv" / "pyvenv.cfg").is_file(), said
    assert "rm -rf" not in said and "kept" in said, said
    assert other in said or os.path.realpath(other) in said, said  # it names the Python that made it
    assert f"make venv-rebuild PYTHON={ours}" in said, said
    # The explicit target says what it removes (its size, the Python that made it) before removing it.
    planned = make("-n", "venv-rebuild", f"PYTHON={ours}", cwd=tmp_path).stdout
    assert "removing .venv" in planned and "rm -rf .venv" in planned, planned
    assert planned.index("removing .venv") < planned.index("rm -rf .venv") < planned.index(f"{ours} -m venv .venv"), planned


def test_the_install_says_what_it_downloads_and_shows_pips_progress(tmp_path: Path) -> None:
    """The big install names torch's build and size and how long it takes, and runs pip without --quiet."""
    ours, _other = two_pythons()
    make_install_says(ours, ours, tmp_path)  # the checkout's files
    shutil.rmtree(tmp_path / ".venv")
    planned = make("-n", "install", cwd=tmp_path).stdout
    pip = next(line for line in planned.splitlines() if "pip install" in line and "requirements.lock -e ." in line)
    assert "--quiet" not in pip and "-q " not in pip, pip
    assert "tools/install_plan.py" in planned
    said = run_command([ours, ROOT / "tools" / "install_plan.py"], env=os.environ, check=True).stdout
    assert "torch 2.13.0" in said and ("MB" in said or "GB" in said) and "minutes" in said, said


def test_the_learners_and_the_tas_paths_go_through_make() -> None:
    """Issue 42's holes: `make check` keeps its page (and `attnkit check` prints where), `make lab`
    opens the learner's own copy of the notebook, `make collect` is the LMS path on a fresh clone
    (every target installs first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}

    def planned(*args: str) -> str:
        run = run_command(["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=env, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        return run.stdout

    assert "attnkit check mywork/attention.ipynb --out checked" in planned("check", "NB=mywork/attention.ipynb")
    lab = planned("lab")
    assert "cp assignments/ch19-attention/attention.ipynb mywork/" in lab and "jupyter lab" in lab and "mywork/attention.ipynb" in lab, lab
    assert "test -e mywork/attention.ipynb ||" in lab, "never over the learner's own copy"
    collect = planned("collect", "DOWNLOAD=moodle.zip", "LMS=moodle")
    assert "attnkit collect moodle.zip --submitted submitted --lms moodle" in collect, collect
