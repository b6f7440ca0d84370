"""The Gradescope bundle: what it holds, and ``run_autograder`` against a simulated /autograder.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once, then, for each
submission, ``/autograder/run_autograder`` with the upload in ``/autograder/submission``; it reads
``/autograder/results/results.json``. Here the root is a temporary folder (``AUTOGRADER_ROOT``)
and ``setup.sh`` is pointed at this project's virtualenv (``ATTNKIT_VENV``) instead of building one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from attnkit.gradescope import build_bundle, to_gradescope
from attnkit.isolation import level as isolation_level

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "ch19-attention" / "attention.ipynb"
RELEASE = ROOT / "assignments" / "ch19-attention" / "attention.ipynb"
VENV = Path(sys.executable).parent.parent


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(tmp_path_factory.mktemp("dist") / "gradescope.zip")


def unpack(bundle: Path, source: Path) -> None:
    with zipfile.ZipFile(bundle) as opened:
        for info in opened.infolist():
            target = source / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(opened.read(info))
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode or 0o644)


def environment(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    env.update(AUTOGRADER_ROOT=str(root), ATTNKIT_VENV=str(VENV))
    return env


@pytest.fixture(scope="module")
def autograder_root(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated /autograder: the bundle unpacked in source/, setup.sh run, run_autograder in place."""
    root = tmp_path_factory.mktemp("autograder")
    unpack(bundle, root / "source")
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=environment(root),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
    return root


def run_autograder(root: Path, files: dict[str, Path]) -> dict:
    """Put ``files`` (name in the submission -> file) in submission/, run, return results.json."""
    result = start_autograder(root, files)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


def start_autograder(root: Path, files: dict[str, Path], prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """Put ``files`` in submission/ and run ``run_autograder`` (``prefix``: in a setting of tests/settings.py)."""
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    for name, path in files.items():
        (submission / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, submission / name)
    command = [str(root / "run_autograder")]
    return subprocess.run(prefix(command) if prefix else command, env=environment(root), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=600)


def test_bundle_contents(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as opened:
        infos = {info.filename: info for info in opened.infolist()}
    for name in ("setup.sh", "run_autograder", "requirements.lock", "pyproject.toml", "README.md",
                 "src/attnkit/cli.py", "src/attnkit/zygote.py", "src/attnkit/templates/feedback.html.j2",
                 "autograder/ch19_attention/catalogue.py", "autograder/ch19_attention/reference.py",
                 "autograder/ch19_attention/manifest.toml", "assignments/ch19-attention/attention.ipynb"):
        assert name in infos, name
    assert any(name.startswith("autograder/ch19_attention/test_") for name in infos)
    for script in ("setup.sh", "run_autograder"):
        assert (infos[script].external_attr >> 16) & 0o777 == 0o755
        assert infos[script].date_time == (1980, 1, 1, 0, 0, 0)
    for name in infos:
        assert not name.startswith(("solutions/", "tests/", "examples/", ".git")), name
        # The release notebook (points from its grade cells), which students have anyway.
        assert not name.startswith("assignments/") or name == "assignments/ch19-attention/attention.ipynb", name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name


def test_bundle_is_reproducible(bundle: Path, tmp_path: Path) -> None:
    assert build_bundle(tmp_path / "again.zip").read_bytes() == bundle.read_bytes()


@pytest.mark.e2e
def test_solution_gets_full_marks(autograder_root: Path) -> None:
    results = run_autograder(autograder_root, {"attention.ipynb": SOLUTION})
    assert results["max_score"] > 0
    assert results["score"] == results["max_score"]
    assert results["tests"] and all(test["status"] == "passed" for test in results["tests"])
    assert set(results["tests"][0]) <= {"name", "score", "max_score", "status", "output", "extra_data"}
    assert results["extra_data"]["diagnoses"] == []


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock-allowed", "landlock-denied"])
@pytest.mark.root
@pytest.mark.e2e
def test_solution_gets_full_marks_isolated_in_docker_default(autograder_root: Path, landlock: bool) -> None:
    """As Gradescope runs the bundle: root in a container under Docker's default seccomp profile and
    capabilities (tests/settings.py), without ATTNKIT_NO_ISOLATION. The solution scores full marks in
    a sandbox the result calls isolated. Never sysctl advice in a container. Where the grader's own
    Python is unreadable by the sandbox's pool uid (pyenv's under /root), the refusal says so and
    the case is skipped."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("loads a seccomp filter without no_new_privs: needs root on Linux")
    pytest.importorskip("pyseccomp")
    from settings import docker_default

    assert "ATTNKIT_NO_ISOLATION" not in environment(autograder_root)
    done = start_autograder(autograder_root, {"attention.ipynb": SOLUTION}, prefix=lambda command: docker_default(command, landlock=landlock))
    assert "sysctl" not in done.stderr, done.stderr[-3000:]  # never advice for the host inside a container
    if done.returncode == 2 and "cannot read the Python trees" in done.stderr:
        # This machine's grader runs on pyenv's Python under /root (mode 700): the sandbox's pool uid
        # cannot start it, and the grader refuses, naming why and the fix. Gradescope's images keep
        # Python in /usr (setup.sh), where the layer isolates.
        assert not (autograder_root / "results" / "results.json").exists() or "install Python outside root's home" in done.stdout + done.stderr
        pytest.skip("the grader's Python is under root's 0700 home here; the refusal says so: " + done.stderr.strip()[-300:])
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((autograder_root / "results" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == results["max_score"] > 0
    assert "--no-isolation" not in done.stdout + done.stderr
    obtained = results["extra_data"]["sandbox"]["isolation"]
    assert isolation_level(obtained) == "isolated", obtained


@pytest.mark.e2e
def test_release_gets_zero(autograder_root: Path) -> None:
    # Nested in a folder, as when a student uploads a zip of the assignment folder.
    results = run_autograder(autograder_root, {"ch19-attention/attention.ipynb": RELEASE})
    assert results["max_score"] > 0
    assert results["score"] == 0
    assert "总分 0/" in results["output"]


@pytest.mark.e2e
def test_no_notebook_is_graded_zero_with_a_reason(autograder_root: Path, tmp_path: Path) -> None:
    readme = tmp_path / "notes.txt"
    readme.write_text("我忘了上传笔记本", encoding="utf-8")
    results = run_autograder(autograder_root, {"notes.txt": readme})
    assert results["score"] == 0
    assert "ipynb" in results["output"]


def test_to_gradescope_moves_our_keys_to_extra_data() -> None:
    ours = {
        "score": 12, "max_score": 20, "seconds": 0.25, "student_id": "me", "assignment": "ch19-attention",
        "diagnoses": ["no_scale"], "parts": {"check_scaled_attention": {"score": 12, "max_score": 20}},
        "problems": [], "notes": [], "cells": [],
        "tests": [{"name": "t", "score": 0, "max_score": 8, "status": "failed", "output": "差了 √d_k",
                   "grade_id": "check_scaled_attention", "diagnoses": ["no_scale"]}],
    }
    converted = to_gradescope(ours, {"no_scale": {"section": "第 3 节", "zh": "没有除以 √d_k。"}})
    assert converted["score"] == 12 and converted["max_score"] == 20
    assert converted["tests"][0] == {"name": "t", "score": 0, "max_score": 8, "status": "failed", "output": "差了 √d_k",
                                     "extra_data": {"grade_id": "check_scaled_attention", "diagnoses": ["no_scale"]}}
    assert converted["extra_data"]["diagnoses"] == ["no_scale"]
    assert "no_scale（第 3 节）：没有除以 √d_k。" in converted["output"]
    assert "student_id" not in converted
