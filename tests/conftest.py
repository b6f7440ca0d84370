"""pytest's view of tests/.

The test folders mirror the package (tests/sandbox/ tests attnkit.sandbox, and so on; tests/cli/ the
command line and the whole kit). tests/support/ holds what they share: helper modules (imported by
name: ``from commands import run_command``), the hostile cells of tests/support/attacks/, and
tests/support/course/, a course with a second assignment's hidden suite, graded by
tests/assignment/test_plugin_assignment.py through attnkit and never collected as the project's own
tests. A few test modules take a fixture builder of another by name (``from test_autograder import
grade_in_one_session``): every test folder is importable by its modules' names, as pytest's default
``prepend`` import mode makes each one when it collects it.
"""

import functools
import os
import re
import sys
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

# -- a second assignment in the project (issue 42) -------------------------------------------------
# `--second-assignment` (or ATTNKIT_TEST_SECOND_ASSIGNMENT=1; `make test` runs the fast tests so)
# puts a second assignment into the project as a course that added one has it (ARCHITECTURE.md,
# "Adding an assignment"): tests/support/course's warm-up, renamed ch20-softmax, in autograder/,
# solutions/ and assignments/. Every test must pass with it there: `discover()` (and every
# `attnkit` a test starts) then finds two assignments. Removed at the end of the session, and at the
# start of the next one if a session was killed (the marker file says a folder is this copy).
SECOND = {"package": "ch20_softmax", "name": "ch20-softmax"}
SECOND_MARKER = ".second-assignment-of-the-tests"
_PROJECT = Path(__file__).resolve().parents[1]
_COURSE = _PROJECT / "tests" / "support" / "course"


def _second_folders() -> list[Path]:
    return [_PROJECT / "autograder" / SECOND["package"], _PROJECT / "solutions" / SECOND["name"], _PROJECT / "assignments" / SECOND["name"]]


def _remove_second_assignment() -> None:
    for folder in _second_folders():
        if (folder / SECOND_MARKER).is_file():
            shutil.rmtree(folder)


def _add_second_assignment() -> None:
    suite, source, release = _second_folders()
    for folder in (suite, source, release):
        if folder.exists():
            raise pytest.UsageError(f"{folder} exists and is not the tests' second assignment: not touched")
    # Without locale/: English is optional for an assignment (ARCHITECTURE.md), as the was.
    shutil.copytree(_COURSE / "autograder" / "warmup_softmax", suite, ignore=shutil.ignore_patterns("__pycache__", "locale"))
    manifest = suite / "manifest.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('name = "warmup-softmax"', f'name = "{SECOND["name"]}"'), encoding="utf-8")
    shutil.copytree(_COURSE / "solutions" / "warmup-softmax", source)
    # The release, as `make release` makes it (nbgrader's generate_assignment, normalised).
    from attnkit.course.release import generate_release

    generate_release(_PROJECT, SECOND["name"])
    for folder in (suite, source, release):
        (folder / SECOND_MARKER).write_text("tests/conftest.py's second assignment: removed after the session\n", encoding="utf-8")


@pytest.fixture(scope="module")
def second_assignment(pytestconfig: pytest.Config) -> Iterator[str]:
    """The name of a second assignment in the project (``--second-assignment``'s, or one added for
    this module's tests and removed after them)."""
    if pytestconfig.getoption("--second-assignment"):
        yield SECOND["name"]
        return
    if in_parallel_worker(pytestconfig):
        # Adding it would change the checkout under the other processes' tests (every `discover()`
        # would find two assignments): make test's --second-assignment pass runs this test instead.
        pytest.skip("in make test's parallel run: this test runs in its --second-assignment pass, where the project holds the second assignment")
    _add_second_assignment()
    try:
        yield SECOND["name"]
    finally:
        _remove_second_assignment()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--second-assignment",
        action="store_true",
        default=os.environ.get("ATTNKIT_TEST_SECOND_ASSIGNMENT") == "1",
        help="run with a second assignment folder in the project (autograder/ch20_softmax/ and the rest: tests/support/course's warm-up)",
    )


def in_parallel_worker(config: pytest.Config) -> bool:
    """A process of a parallel run (pytest-xdist's worker), beside others over the same checkout."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if in_parallel_worker(config):
        return  # the run's first process (xdist's controller) adds and removes it, before and after its workers
    _remove_second_assignment()  # a killed session's leftovers
    if config.getoption("--second-assignment"):
        _add_second_assignment()


# -- `make test`'s parallel processes (pytest-xdist, `-n 2`) ----------------------------------------
# A test module runs whole in one process: its module-scoped fixtures (a course with unix students,
# a running service, a hub) are built once. Modules that ask for an expensive session-scoped fixture
# run in the same process, so that it too is built once (the student's venv, the system Python's
# clone). xdist's own `--dist loadgroup` marks cannot do this under pytest 9 (it rewrites a test's
# id, which pytest 9 no longer lets a plugin change), so the run's scheduler is ours.
SESSION_GROUPS = {"student_env": "student-env", "system_python_clone": "system-python", "graded_demo_class": "demo-class"}


@functools.cache  # asked once per test by xdist's scheduler
def module_group(module: str) -> str:
    """The process group of the test module at ``module`` (its path from the rootdir): the
    session-scoped fixture it names, else the module itself."""
    try:
        source = (Path(__file__).resolve().parent.parent / module).read_text(encoding="utf-8")
    except OSError:
        source = ""
    return next((group for fixture, group in SESSION_GROUPS.items() if re.search(rf"\b{fixture}\b", source)), module)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        """xdist's loadscope with a module's group as its scope."""

        def _split_scope(self, nodeid: str) -> str:
            return module_group(nodeid.split("::")[0])

    return ModuleGroupScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.getoption("--second-assignment") and not in_parallel_worker(config):
        _remove_second_assignment()


_TESTS = Path(__file__).resolve().parent
collect_ignore = ["support", "artifacts"]
sys.path[:0] = [str(_TESTS / "support")] + sorted(str(folder) for folder in _TESTS.iterdir() if folder.is_dir() and any(folder.glob("test_*.py")))

# This process forks grader workers itself (tests/engine/test_worker_session.py, as the engine does):
# like `attnkit grade` (cli.py), it keeps numpy's OpenBLAS and torch's OpenMP pools at one thread
# from the start, so that no thread of theirs is alive at a fork. Set before any test module
# imports numpy or torch.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"


# -- the TA of the isolation tests (tests/sandbox/test_isolation.py, test_isolation_layers.py, test_settings_harness.py)
from ta_machine import GRADER_PACKAGES, ROOT, SYSTEM_PYTHON, USER, lock_digest, machine_lock, ordinary_user, tempfile_folder, thin_venv


@pytest.fixture(scope="session")
def ta_user() -> pwd.struct_passwd:
    """An ordinary user, as a TA on a shared machine is: no root, no sudo (needs root to create;
    the tests that ask for it skip themselves without root)."""
    return ordinary_user(USER)


@pytest.fixture(scope="module")
def user_python(ta_user: pwd.struct_passwd) -> tuple[str, Path]:
    """The distribution's Python with a world-readable virtualenv holding the grader's packages
    (kept between runs under /var/tmp, keyed by the lock), and a readable copy of the course."""
    if not Path(SYSTEM_PYTHON).is_file():
        pytest.skip(f"{SYSTEM_PYTHON} is missing")
    venv = Path(f"/var/tmp/attnkit-test-venv-{lock_digest()}")
    with machine_lock("grader-venv"):  # built by one test process, while the others wait for it
        if not (venv / ".complete").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(venv / "bin/pip"), "install", "--quiet", "--disable-pip-version-check", "-c", str(ROOT / "requirements.lock"), *GRADER_PACKAGES],
                check=True,
                capture_output=True,
            )
            (venv / ".complete").touch()
    course = Path(tempfile_folder("attnkit-course-")) / "course"
    for part in ("src", "autograder", "solutions"):  # solutions/: the grade cells give the points
        shutil.copytree(ROOT / part, course / part, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [course.parent, *course.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # The shared virtualenv's packages and this checkout's src, through a virtualenv of this run's
    # own: a .pth written into the shared one would be another concurrent run's checkout by the
    # time the grader starts.
    shared = next((venv / "lib").glob("python3*/site-packages"))
    return thin_venv(Path(tempfile_folder("attnkit-test-python-")) / "venv", [shared, course / "src"]), course


@pytest.fixture(scope="module")
def outside_copies() -> Iterator[list[Path]]:
    """World-readable copies of the reference outside any project, where a careless TA or
    another course might leave them."""
    tag = secrets.token_hex(4)
    folders = [Path(f"/opt/attnkit-leak-{tag}"), Path(f"/var/lib/attnkit-leak-{tag}")]
    reference = next((ROOT / "autograder").rglob("reference.py"))
    copies = []
    for folder in folders:
        folder.mkdir(parents=True)
        folder.chmod(0o755)
        copy = folder / "reference.py"
        shutil.copy(reference, copy)
        copy.chmod(0o644)
        copies.append(copy)
    yield copies
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


# -- the demo class graded once per session (tests/report/test_i18n.py, tests/report/test_feedback_browser.py) --------
from collections.abc import Callable

from commands import ROOT as CHECKOUT
from commands import attnkit, tool_env

GradedClass = tuple[Path, subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def graded_demo_class(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], GradedClass]:
    """``graded_demo_class(lang)``: examples/submitted graded by the console script (--jobs 2) in
    ``lang`` ("zh": no --lang, the default; "en": --lang en), ATTNKIT_LANG unset and COLUMNS=200
    (the summary table unwrapped): its output folder and the run, each language graded once per
    session. Tests only read it (a test that changes an output copies it first)."""
    graded: dict[str, GradedClass] = {}

    def grade(lang: str) -> GradedClass:
        if lang not in graded:
            out = tmp_path_factory.mktemp(f"demo-class-{lang}") / "out"
            env = {k: v for k, v in tool_env(COLUMNS="200").items() if k != "ATTNKIT_LANG"}
            run = attnkit(
                "grade",
                "--submitted",
                str(CHECKOUT / "examples" / "submitted"),
                "--out",
                str(out),
                "--jobs",
                "2",
                *(() if lang == "zh" else ("--lang", lang)),
                script=True,
                env=env,
            )
            assert run.returncode == 0, run.stderr[-3000:]
            graded[lang] = (out, run)
        return graded[lang]

    return grade


# -- the student's environment (docs/student-environment.md) ---------------------------------------
@pytest.fixture(scope="session")
def student_env() -> Iterator[object]:
    """``make student-wheels``, an empty venv and the doc's one install command (tests/support/student_env.py):
    minutes, once per session, shared by tests/cli/test_student_environment.py and the hub's test of
    ``attnkit submit`` from a student's server."""
    import tempfile

    from student_env import build

    base = Path(tempfile.mkdtemp(prefix="attnkit-student-env-"))
    try:
        yield build(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
