"""The Gradescope bundle: what it holds, and ``run_autograder`` against a simulated /autograder.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once, then, for each
submission, ``/autograder/run_autograder`` with the upload in ``/autograder/submission``; it reads
``/autograder/results/results.json``. Here the root is a temporary folder (``AUTOGRADER_ROOT``)
and ``setup.sh`` is pointed at this project's virtualenv (``ATTNKIT_VENV``) instead of building one.
The isolated cases use an image as Gradescope builds it instead: ``setup.sh`` run for real with the
image's Python in /usr (Debian's /usr/bin/python3), its virtualenv in ``$ROOT/venv``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnkit.course.gradescope import build_bundle, build_bundles, to_gradescope
from attnkit.report.isolation_level import level as isolation_level

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "ch19-attention" / "attention.ipynb"
RELEASE = ROOT / "assignments" / "ch19-attention" / "attention.ipynb"
VENV = Path(sys.executable).parent.parent
IMAGE_PYTHON = Path("/usr/bin/python3")  # where a Gradescope image keeps its Python (Ubuntu's: /usr/bin/python3)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Chapter 19's bundle, named: a course with a second assignment has one bundle per assignment.
    return build_bundle(tmp_path_factory.mktemp("dist") / "gradescope.zip", assignment="ch19-attention")


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
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")], env=environment(root), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
    return root


def run_autograder(root: Path, files: dict[str, Path]) -> dict:
    """Put ``files`` (name in the submission -> file) in submission/, run, return results.json."""
    result = start_autograder(root, files)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


def start_autograder(root: Path, files: dict[str, Path], prefix=None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Put ``files`` in submission/ and run ``run_autograder`` (``prefix``: a launcher of
    tests/support/settings.py, the command -> the argv that runs it in that setting; ``env``: by default
    this project's virtualenv as ATTNKIT_VENV)."""
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    submission.mkdir()
    for name, path in files.items():
        (submission / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, submission / name)
    command = [str(root / "run_autograder")]
    return subprocess.run(
        prefix(command) if prefix else command, env=env or environment(root), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600
    )


# -- an image as Gradescope builds it --------------------------------------------------------------
def image_environment(root: Path) -> dict[str, str]:
    """What setup.sh and run_autograder get in an image: a plain PATH (the image's python3 is
    /usr/bin's), root's HOME, and the machine's pip settings (its local wheels, as an image build
    has the network); no ATTNKIT_VENV, so setup.sh builds $ROOT/venv and run_autograder uses it."""
    env = {key: value for key, value in os.environ.items() if key.startswith("PIP_")}
    env.update(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME="/root", LANG="C.UTF-8", AUTOGRADER_ROOT=str(root))
    return env


@pytest.fixture(scope="module")
def image_root(bundle: Path) -> Iterator[Path]:
    """/autograder as a Gradescope image holds it: root's and open to all (755), the bundle in
    source/, and setup.sh run for real with the image's Python in /usr, so that it builds
    $ROOT/venv (every pool uid can read it, as in the image) and closes source/ (700).

    Building a virtualenv with torch takes minutes, so the image is kept under /var/tmp, keyed by
    the bundle's bytes (reproducible: the same sources, the same key) and the Python's version.
    Each test run holds it alone (a lock) while it writes submission/ and results/."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("grades under a seccomp filter loaded without no_new_privs: needs root on Linux")
    if not IMAGE_PYTHON.is_file():
        pytest.skip(f"no {IMAGE_PYTHON} on this machine")
    version = subprocess.run([str(IMAGE_PYTHON), "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(bundle.read_bytes() + version.encode()).hexdigest()[:12]
    root = Path(f"/var/tmp/attnkit-gradescope-image-{key}")
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(mode=0o755)
            root.chmod(0o755)
            unpack(bundle, root / "source")
            setup = subprocess.run(
                ["bash", str(root / "source" / "setup.sh")], env=image_environment(root), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=2400
            )
            assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
            assert f"using {IMAGE_PYTHON}" in setup.stdout, setup.stdout
            shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope does
            (root / ".complete").touch()
        yield root


def test_bundle_contents(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as opened:
        infos = {info.filename: info for info in opened.infolist()}
    for name in (
        "setup.sh",
        "run_autograder",
        "requirements.lock",
        "pyproject.toml",
        "README.md",
        "src/attnkit/cli.py",
        "src/attnkit/sandbox/zygote.py",
        "src/attnkit/report/templates/feedback.html.j2",
        "autograder/ch19_attention/catalogue.py",
        "autograder/ch19_attention/reference.py",
        "autograder/ch19_attention/manifest.toml",
        "assignments/ch19-attention/attention.ipynb",
    ):
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
    assert build_bundle(tmp_path / "again.zip", assignment="ch19-attention").read_bytes() == bundle.read_bytes()


@pytest.mark.e2e
def test_solution_gets_full_marks(autograder_root: Path) -> None:
    results = run_autograder(autograder_root, {"attention.ipynb": SOLUTION})
    assert results["max_score"] > 0
    assert results["score"] == results["max_score"]
    assert results["tests"] and all(test["status"] == "passed" for test in results["tests"])
    assert set(results["tests"][0]) <= {"name", "score", "max_score", "status", "output", "extra_data"}
    assert results["extra_data"]["diagnoses"] == []


def docker_default_setting(landlock: bool):
    pytest.importorskip("pyseccomp")
    from settings import docker_default

    return lambda command: docker_default(command, landlock=landlock)


def theft_notebooks(root: Path, tmp_path: Path) -> dict[str, Path]:
    """The release notebook (the stub) and the release with one theft each: exec of the bundle's
    reference (in source/, which setup.sh closed), a hunt of the whole filesystem for a copy of it,
    and a cell that writes a full score into results/ and a test into the hidden suite."""
    from attacks import load, with_cells, write
    from attacks.cells import _probe
    from test_isolation import HUNT, exec_cell

    reference = next((root / "source" / "autograder").rglob("reference.py"))
    forge = _probe(
        "forge",
        """
        import json, os
        _try("results", lambda: open($results, "w").write(json.dumps({"score": 100, "max_score": 100, "tests": []})))
        _try("hidden_suite", lambda: open(os.path.join($suite, "test_forged.py"), "w").write("def test_ok(): pass\\n"))
        """,
        results=str(root / "results" / "results.json"),
        suite=str(reference.parent),
    )
    cells = {"exec_reference": exec_cell(str(reference)), "hunter": HUNT.replace("HOME_OF_TA", "/root").replace("KEY_OF_TA", "none"), "forge": forge}
    release = load(RELEASE)
    notebooks = {"stub": RELEASE}
    for name, cell in cells.items():
        notebooks[name] = write(with_cells(release, [cell], after_code_cell=-1), tmp_path / name)
    return notebooks


def forge_report(results: dict) -> dict:
    for cell in results["extra_data"]["cells"]:
        message = str(cell.get("message", ""))
        if message.startswith("ADVPROBE:forge:"):
            return json.loads(message[len("ADVPROBE:forge:") :])
    raise AssertionError(f"the forging cell did not report: {results['extra_data']['cells']}")


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock-allowed", "landlock-denied"])
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_graded_isolated_in_docker_default(image_root: Path, tmp_path: Path, landlock: bool) -> None:
    """As Gradescope runs the bundle: root in a container under Docker's default seccomp profile and
    capabilities (tests/support/settings.py), with and without Landlock, without ATTNKIT_NO_ISOLATION, in an
    image whose Python is in /usr. The solution scores full marks in a sandbox the result calls
    isolated (the layer the setting gives: Landlock, else the pool uid in a chroot of the allowlist,
    checked by its probe); no theft scores more than the release notebook. Never sysctl advice in a container."""
    setting, env = docker_default_setting(landlock), image_environment(image_root)
    assert "ATTNKIT_NO_ISOLATION" not in env and "ATTNKIT_VENV" not in env

    def grade(name: str, notebook: Path) -> dict:
        done = start_autograder(image_root, {"attention.ipynb": notebook}, prefix=setting, env=env)
        assert "sysctl" not in done.stderr, done.stderr[-3000:]  # never advice for the host inside a container
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "--no-isolation" not in done.stdout + done.stderr
        results = json.loads((image_root / "results" / "results.json").read_text(encoding="utf-8"))
        obtained = results["extra_data"]["sandbox"]["isolation"]
        assert isolation_level(obtained) == "isolated", obtained
        assert "seccomp-filter" in obtained and "uid-pool" in obtained, obtained
        assert ("landlock-files" in obtained) == landlock, obtained
        assert ("probe-passed" in obtained) == (not landlock), obtained
        assert ("chroot-root" in obtained) == (not landlock), obtained  # without Landlock: a root of the allowlist only
        print(f"\n[gradescope] landlock={landlock} {name}: {results['score']:g}/{results['max_score']:g} {obtained}", file=sys.stderr)
        return results

    solution = grade("solution", SOLUTION)
    assert solution["score"] == solution["max_score"] > 0, solution["tests"]
    thefts = theft_notebooks(image_root, tmp_path)
    stub = grade("stub", thefts.pop("stub"))["score"]
    # Every theft, the hunt included: without Landlock the sandbox is chrooted into the allowlist's
    # root, so the world-readable checkouts under /work are out of its view as well.
    for name, notebook in thefts.items():
        results = grade(name, notebook)
        assert results["score"] <= stub, (name, results["score"], stub)
        if name == "exec_reference":  # refused by the sandbox, not missed: the file is there
            errors = [cell.get("error_type") for cell in results["extra_data"]["cells"]]
            # Landlock denies the path; the chroot has no such path at all.
            assert ("PermissionError" if landlock else "FileNotFoundError") in errors, results["extra_data"]["cells"]
        if name == "forge":
            assert all(not value.startswith("ok") for value in forge_report(results).values()), forge_report(results)
    assert not list((image_root / "source" / "autograder").rglob("test_forged.py"))


def grader_python_unreadable_by_others() -> bool:
    """Is the grader's Python under a folder others may not enter (pyenv's under /root, 700)?"""
    path = Path(os.path.realpath(sys.base_prefix))
    return any(not folder.stat().st_mode & 0o001 for folder in [path, *path.parents])


@pytest.mark.root
@pytest.mark.e2e
def test_refused_in_docker_default_when_the_grader_python_is_under_root(autograder_root: Path) -> None:
    """The bundle on this project's virtualenv, whose Python (pyenv's) lies under /root (700), with
    Landlock: the sandbox's pool uid could not even start it, so the grader refuses before any cell
    runs, says why and what fixes it, never a sysctl; no result is written."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("loads a seccomp filter without no_new_privs: needs root on Linux")
    if not grader_python_unreadable_by_others():
        pytest.skip(f"this machine's grader Python ({sys.base_prefix}) is readable by all: nothing to refuse")
    done = start_autograder(autograder_root, {"attention.ipynb": SOLUTION}, prefix=docker_default_setting(True))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "sysctl" not in done.stderr, done.stderr[-3000:]
    assert "cannot read the Python trees" in done.stderr and "install Python outside root's home" in done.stderr, done.stderr[-3000:]
    assert "seccomp" in done.stderr, done.stderr[-3000:]
    assert not (autograder_root / "results" / "results.json").exists()


@pytest.mark.root
@pytest.mark.e2e
def test_graded_in_a_chroot_without_landlock_when_the_grader_python_is_under_root(autograder_root: Path) -> None:
    """The same bundle without Landlock (Docker 20.10's profile): the pool layer's chroot holds its own
    links or copies of the Python trees, readable by the pool uid, so a Python under /root is no
    reason to refuse: the solution scores full marks in the chroot, isolated."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("loads a seccomp filter without no_new_privs: needs root on Linux")
    if not grader_python_unreadable_by_others():
        pytest.skip(f"this machine's grader Python ({sys.base_prefix}) is readable by all: the case does not arise")
    done = start_autograder(autograder_root, {"attention.ipynb": SOLUTION}, prefix=docker_default_setting(False))
    assert done.returncode == 0 and "sysctl" not in done.stderr, done.stdout[-2000:] + done.stderr[-3000:]
    results = json.loads((autograder_root / "results" / "results.json").read_text(encoding="utf-8"))
    obtained = results["extra_data"]["sandbox"]["isolation"]
    assert isolation_level(obtained) == "isolated" and "chroot-root" in obtained and "uid-pool" in obtained, obtained
    assert results["score"] == results["max_score"] > 0, results["tests"]


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
        "score": 12,
        "max_score": 20,
        "seconds": 0.25,
        "student_id": "me",
        "assignment": "ch19-attention",
        "diagnoses": ["no_scale"],
        "parts": {"check_scaled_attention": {"score": 12, "max_score": 20}},
        "problems": [],
        "notes": [],
        "cells": [],
        "tests": [
            {
                "name": "t",
                "score": 0,
                "max_score": 8,
                "status": "failed",
                "output": "差了 √d_k",
                "grade_id": "check_scaled_attention",
                "diagnoses": ["no_scale"],
            }
        ],
    }
    converted = to_gradescope(ours, {"no_scale": {"section": "第 3 节", "zh": "没有除以 √d_k。"}})
    assert converted["score"] == 12 and converted["max_score"] == 20
    assert converted["tests"][0] == {
        "name": "t",
        "score": 0,
        "max_score": 8,
        "status": "failed",
        "output": "差了 √d_k",
        "extra_data": {"grade_id": "check_scaled_attention", "diagnoses": ["no_scale"]},
    }
    assert converted["extra_data"]["diagnoses"] == ["no_scale"]
    assert "no_scale（第 3 节）：没有除以 √d_k。" in converted["output"]
    assert "student_id" not in converted


# -- a course with two suites: one bundle per assignment ---------------------------------------------
COURSE = ROOT / "tests" / "support" / "course"  # the tests' second assignment (a softmax warm-up)
WARMUP = "warmup-softmax"


@pytest.fixture(scope="module")
def two_suites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project tree holding chapter 19 and the warm-up under autograder/, the warm-up released
    by the real ``python -m attnkit.course.release`` (nbgrader generate_assignment)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    tree = tmp_path_factory.mktemp("two-suites") / "project"
    tree.mkdir()
    for name in ("requirements.lock", "pyproject.toml", "nbgrader_config.py"):
        shutil.copy2(ROOT / name, tree / name)
    for folder in ("gradescope", "src", "autograder", "solutions", "assignments"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    shutil.copytree(COURSE / "autograder" / "warmup_softmax", tree / "autograder" / "warmup_softmax", ignore=ignore)
    shutil.copytree(COURSE / "solutions" / WARMUP, tree / "solutions" / WARMUP)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    released = subprocess.run(
        [sys.executable, "-m", "attnkit.course.release", "--root", str(tree), "--assignment", WARMUP, "--zip", str(tree / "dist" / "warmup.zip")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert released.returncode == 0, released.stdout + released.stderr
    return tree


@pytest.mark.e2e
def test_two_suites_give_one_bundle_each(two_suites: Path) -> None:
    """With two suites and no --assignment (``make gradescope``), is there one bundle per
    assignment beside --out, each holding its own suite and release and nothing of the other's,
    and does --assignment still write the one chosen to --out, byte for byte the same?"""
    out = two_suites / "dist" / "gradescope.zip"
    bundles = build_bundles(out, root=two_suites)
    assert bundles == {"ch19-attention": out.with_name("gradescope-ch19-attention.zip"), WARMUP: out.with_name(f"gradescope-{WARMUP}.zip")}
    own = {
        "ch19-attention": ("autograder/ch19_attention/", "assignments/ch19-attention/attention.ipynb"),
        WARMUP: ("autograder/warmup_softmax/", f"assignments/{WARMUP}/softmax.ipynb"),
    }
    for name, bundle in bundles.items():
        suite, release = own[name]
        with zipfile.ZipFile(bundle) as opened:
            names = opened.namelist()
        assert f"{suite}manifest.toml" in names and release in names, name
        assert all(not entry.startswith("autograder/") or entry.startswith(suite) for entry in names), name
        assert [entry for entry in names if entry.startswith("assignments/")] == [release], name
        assert not any(entry.startswith(("solutions/", "tests/")) for entry in names), name
    chosen = build_bundles(two_suites / "dist" / "warmup.zip", root=two_suites, assignment=WARMUP)
    assert chosen == {WARMUP: two_suites / "dist" / "warmup.zip"}
    assert chosen[WARMUP].read_bytes() == bundles[WARMUP].read_bytes()


@pytest.mark.e2e
def test_the_second_assignments_bundle_grades_its_own_notebook(two_suites: Path, tmp_path: Path) -> None:
    """Does the warm-up's bundle, unpacked as Gradescope does, grade the warm-up (its source
    notebook full marks, its release 0) and not chapter 19?"""
    bundle = build_bundles(two_suites / "dist" / "gradescope.zip", root=two_suites)[WARMUP]
    root = tmp_path / "autograder"
    unpack(bundle, root / "source")
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")], env=environment(root), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    solved = run_autograder(root, {"softmax.ipynb": COURSE / "solutions" / WARMUP / "softmax.ipynb"})
    assert solved["max_score"] == 10 and solved["score"] == 10, solved["output"]
    assert solved["extra_data"]["assignment"] == WARMUP
    assert solved["tests"] and all(test["status"] == "passed" for test in solved["tests"])
    stub = run_autograder(root, {"softmax.ipynb": two_suites / "assignments" / WARMUP / "softmax.ipynb"})
    assert stub["score"] == 0 and stub["max_score"] == 10, stub["output"]
