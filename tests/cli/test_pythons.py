"""`make grade` on a fresh clone with each supported Python (3.11, 3.12, 3.13) grades the demo class
the same: grades.csv and every test's status and score are 3.11's.

Slow: each run builds a whole virtualenv with torch (for 3.12 and 3.13 pip fetches PyPI's torch
and its CUDA packages, ~2.6 GB). Downloads are kept between runs in a pip cache under
``~/.cache/attnkit-tests`` (ATTNKIT_TEST_PIP_CACHE moves it). The interpreters are pyenv's or the
``python3.X`` on PATH; ATTNKIT_TEST_PYTHON_3_12=/path/to/python (and so on) names another. A version
that is not on the machine is skipped, never faked with another.
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from fresh_clone import SYSTEM_PYTHON, graded_demo_class, python_version

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "3.11"
OTHERS = ["3.12", "3.13"]
PIP_CACHE = Path(os.environ.get("ATTNKIT_TEST_PIP_CACHE", Path.home() / ".cache" / "attnkit-tests" / "pip"))


def interpreter(version: str) -> str | None:
    """A CPython ``version`` (3.12, say) on this machine, or None."""
    named = os.environ.get("ATTNKIT_TEST_PYTHON_" + version.replace(".", "_"))
    candidates = (
        [named] if named else [shutil.which(f"python{version}"), *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python")), reverse=True)]
    )
    for candidate in filter(None, candidates):
        found = subprocess.run([candidate, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip().startswith(version + "."):
            return candidate
    return None


def grade_on_a_fresh_clone(python: str, folder: Path) -> dict[str, object]:
    """Clone the committed HEAD into ``folder``, run `make grade PYTHON=python` there, and return
    what the class was given: grades.csv and each student's tests (name, status, score, max score)."""
    clone = folder / "attnkit"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    # Nothing of this test run's environment may leak into the clone's own venv.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST", "PIP_"))}
    env["PIP_CACHE_DIR"] = str(PIP_CACHE)
    run = subprocess.run(
        ["make", "grade", f"PYTHON={python}", "JOBS=2"], cwd=clone, env=env, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    ran, wanted = python_version(clone / ".venv" / "bin" / "python"), python_version(python)
    assert ran == wanted, f"the clone's .venv runs {ran}, not {python}'s {wanted}"
    return {**graded_demo_class(clone, wanted, run.stdout).graded(), "clone": clone}


@pytest.fixture(scope="module")
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The demo class as a fresh clone's `make grade` with a 3.11 gives it: Debian's own 3.11 where
    that is the system's Python (the clone test_install.py checks, built once per session), else
    another 3.11 on this machine."""
    if SYSTEM_PYTHON.exists() and python_version(SYSTEM_PYTHON).startswith(REFERENCE + "."):
        graded = request.getfixturevalue("system_python_clone").graded()
    else:
        python = interpreter(REFERENCE)
        if python is None:
            pytest.skip(f"no Python {REFERENCE} on this machine")
        graded = grade_on_a_fresh_clone(python, tmp_path_factory.mktemp("python" + REFERENCE))
    students = {row["student_id"]: row for row in graded["grades"]}
    # The demo class is graded at all (not six crashes that happen to agree): its known scores.
    assert set(students) == {"chenjing", "lilei", "sunmei", "wangfang", "xiaolin", "zhaoqiang"}
    assert float(students["xiaolin"]["score"]) == 100 and float(students["sunmei"]["score"]) == 0
    assert len(graded["tests"]) == 6 and all(graded["tests"].values())
    return graded


@pytest.fixture(scope="module")
def others(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object] | BaseException | None]:
    """Each of OTHERS graded on its own fresh clone, the clones built at the same time (each
    install is one pip, mostly one core's unpacking: the two side by side take the time of the
    longer one): version -> what the class was given, the failure, or None (not on this machine)."""
    pythons = {version: interpreter(version) for version in OTHERS}
    found = {version: python for version, python in pythons.items() if python is not None}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(found))) as pool:
        futures = {version: pool.submit(grade_on_a_fresh_clone, python, tmp_path_factory.mktemp("python" + version)) for version, python in found.items()}
    return {version: (futures[version].exception() or futures[version].result()) if version in futures else None for version in OTHERS}


@pytest.mark.slow
@pytest.mark.parametrize("version", OTHERS)
@pytest.mark.e2e
def test_make_grade_on_a_fresh_clone_scores_the_demo_class_as_3_11_does(
    version: str, reference: dict[str, object], others: dict[str, dict[str, object] | BaseException | None]
) -> None:
    graded = others[version]
    if graded is None:
        pytest.skip(f"no Python {version} on this machine")
    if isinstance(graded, BaseException):
        raise graded
    assert graded["python"].startswith(version + ".")
    assert graded["grades"] == reference["grades"], f"{version}'s grades.csv differs from {reference['python']}'s"
    assert graded["tests"] == reference["tests"], f"{version}'s per-test results differ from {reference['python']}'s"


@pytest.mark.slow
@pytest.mark.e2e
def test_the_correct_styles_score_100_under_the_syscall_allowlist_on_3_12(others: dict[str, dict[str, object] | BaseException | None], tmp_path: Path) -> None:
    """Issue 37's default-deny seccomp filter on 3.12 as well as on 3.11: every correct style of
    tests/grading/test_autograder.py's ALTERNATIVES (einsum, -1e9, a manual softmax, a loop over
    heads, printing and warning...), each the solution with its functions redefined in a last cell,
    graded by the 3.12 clone's own .venv in sandboxes that load the filters, scores 100 with no
    diagnosis, as on 3.11 (tests/sandbox/test_same_uid_sandbox.py grades the same corpus there, as
    a TA under Landlock ABI 4: 3.12 is only under root's pyenv here, out of a TA's reach). The
    filters are the same syscall allowlist in every layer; here the namespaces layer's (as root)."""
    from attacks import ASSIGNMENT, SOLUTION, load, with_cells, write
    from test_autograder import ALTERNATIVES

    graded = others["3.12"]
    if graded is None:
        pytest.skip("no Python 3.12 on this machine")
    if isinstance(graded, BaseException):
        raise graded
    assert str(graded["python"]).startswith("3.12.")
    clone = Path(str(graded["clone"]))
    submitted, out = tmp_path / "submitted", tmp_path / "out"
    for name, source in ALTERNATIVES.items():
        write(with_cells(load(SOLUTION), [source], after_code_cell=-1), submitted / name / ASSIGNMENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    run = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-m", "attnkit", "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--quiet"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = {path.parent.parent.name: json.loads(path.read_text(encoding="utf-8")) for path in out.glob(f"students/*/{ASSIGNMENT}/results.json")}
    assert sorted(results) == sorted(ALTERNATIVES)
    for name, result in results.items():
        assert float(result["score"]) == 100, (name, [t for t in result["tests"] if t["status"] != "passed"])
        assert not result.get("diagnoses"), (name, result.get("diagnoses"))
        assert "seccomp-filter" in result["sandbox"]["isolation"], (name, result["sandbox"])


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_pins_every_direct_dependency_as_pyproject_does() -> None:
    """requirements.lock is made from pyproject.toml (`make lock`): each direct dependency, the dev
    extra's too, is pinned there once, at pyproject's version, for every Python (no marker). A
    dependency changed in pyproject without `make lock` fails here, in the fast suite."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    direct = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    pins: dict[str, list[str]] = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith((" ", "#")):
            name, _, rest = line.partition("==")
            pins.setdefault(normalized(name), []).append(rest.strip())
    own = {"attnkit-lab"}  # this repository's own packages (labextension/): wheels of `make student-wheels`, never resolved from an index
    for requirement in direct:
        name, _, version = requirement.partition("==")
        if normalized(name) in own:
            continue
        name = name.split("[")[0]  # pyjwt[crypto]: the lock pins the package, its extras' packages on their own lines
        assert pins.get(normalized(name)) == [version], f"{requirement}: the lock has {pins.get(normalized(name))}"
