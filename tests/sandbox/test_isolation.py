"""Is the sandbox the same wherever a TA grades: as root, as root without CAP_SYS_ADMIN, without root?

One hostile class is graded three ways with the real `attnkit grade`:
- as root (this machine's CI);
- as root without CAP_SYS_ADMIN (`setpriv --bounding-set -sys_admin`, as in Docker's default);
- as an unprivileged user created here, with the distribution's Python (/usr/bin/python3) and a
  virtualenv it can read.
In each, notebooks that exec the course's reference, exec a world-readable copy of it placed
outside the project (/opt, /var/lib), or hunt the whole filesystem for it (listing /, reading
/etc/shadow and the TA's home) must score no more than the same notebook without those cells; a
correct bystander scores 100; a memory hog and a fork bomb cost only themselves. Either the run
is isolated, or it refused with a non-zero exit before any cell ran.

Where neither root nor a user namespace is to be had (simulated: an unprivileged grader inside a
user namespace whose kernel limit on new user namespaces is 0), `attnkit grade` must refuse, name
the reason and the fix, and run nothing; `--no-isolation` then grades and says so everywhere.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, RELEASE, ROOT, SOLUTION, load, with_cells, write
from commands import run_command
from settings import as_root, root_without_sys_admin, unprivileged, without_user_namespaces
from ta_machine import minimal_env, tempfile_folder

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.e2e]

if not sys.platform.startswith("linux") or os.geteuid() != 0:
    pytest.skip("creates users and drops capabilities: needs root on Linux (CI runs as root)", allow_module_level=True)

MEMORY_MB = 1024
LIMITS = ["--cell-timeout", "8", "--call-timeout", "5", "--memory-mb", str(MEMORY_MB)]
# Top-level names a sandbox's root may hold: its own folders, the library links, and the first
# component of each Python tree (kept at its host path so lazy imports still resolve).
SANDBOX_ROOT_NAMES = {"dev", "etc", "home", "proc", "tmp", "lib", "lib64", "lib32", "libx32", "usr"}


# -- the hostile class ---------------------------------------------------------------------------------
def exec_cell(path: str) -> str:
    """Run a copy of the reference so its six functions become the student's."""
    return f"exec(open({path!r}).read(), globals())\n"


HUNT = textwrap.dedent(
    r"""
    import json, os, time
    _seen = {"root": sorted(os.listdir("/"))}
    for _path in ("/etc/shadow", "/etc/hostname", "/root", "HOME_OF_TA", "/var", "/opt", "/srv", "/work"):
        try:
            _seen[_path] = ("dir:" + ",".join(sorted(os.listdir(_path)))) if os.path.isdir(_path) else "read:" + open(_path).read(200)
        except Exception as _error:
            _seen[_path] = "no:" + type(_error).__name__
    import ctypes, platform
    _keyctl = {"x86_64": 250, "aarch64": 219}[platform.machine()]
    _key = ctypes.CDLL(None, use_errno=True).syscall(_keyctl, 10, -3, b"user", b"KEY_OF_TA", 0)  # KEYCTL_SEARCH @s
    _seen["keyring"] = "found" if _key > 0 else "no"
    _seen["fds"] = {_fd: os.readlink(f"/proc/self/fd/{_fd}") for _fd in os.listdir("/proc/self/fd") if os.path.islink(f"/proc/self/fd/{_fd}")}
    _found, _started = [], time.monotonic()
    for _folder, _dirs, _files in os.walk("/"):
        if _folder.startswith(("/proc", "/sys", "/dev")) or time.monotonic() - _started > 4:
            _dirs[:] = []
            continue
        for _name in _files:
            if _name.endswith((".py", ".ipynb")) and not _folder.startswith("/usr/lib/python3"):
                try:
                    with open(os.path.join(_folder, _name), errors="replace") as _file:
                        if "def scaled_attention" in _file.read(200_000):
                            _found.append(os.path.join(_folder, _name))
                except OSError:
                    pass
    for _path in _found:
        try:
            if _path.endswith(".py"):
                exec(open(_path).read(), globals())
        except Exception:
            pass
    _seen["found"] = _found
    raise RuntimeError("ISOPROBE:" + json.dumps(_seen))
    """
).lstrip()

# Modules neither torch's import nor the zygote's warm-up loads, imported only once the sandbox
# runs, inside its root: a C extension whose shared library no process has mapped yet (sqlite3),
# pure-Python modules, torch's own lazily imported submodules (tests/sandbox/test_isolation_layers.py
# checks the same in a locked-down child). Every layer must still import them.
LAZY_MODULES = ("sqlite3", "xml.dom.minidom", "colorsys", "torch.nn.utils.prune", "torch.utils.benchmark")
LAZY_IMPORTS = (
    textwrap.dedent(
        r"""
    import json as _json, sys as _sys
    _lazy = {"loaded_before": [_n for _n in LAZY_MODULES if _n in _sys.modules]}
    for _n in LAZY_MODULES:
        try:
            __import__(_n)
            _lazy[_n] = "ok"
        except BaseException as _error:
            _lazy[_n] = f"{type(_error).__name__}: {_error}"[:200]
    try:
        import sqlite3 as _sqlite3
        _lazy["sqlite3_query"] = _sqlite3.connect(":memory:").execute("select 41 + 1").fetchone()[0]
    except BaseException as _error:
        _lazy["sqlite3_query"] = type(_error).__name__
    raise RuntimeError("ISOPROBE:" + _json.dumps(_lazy))
    """
    )
    .lstrip()
    .replace("LAZY_MODULES", repr(LAZY_MODULES))
)


def assert_lazy_imports(report: dict) -> None:
    """Every lazily imported module imported in the sandbox, sqlite3 for the first time there."""
    assert {name: report[name] for name in LAZY_MODULES if report[name] != "ok"} == {}, report
    assert report["sqlite3_query"] == 42, report
    assert report["loaded_before"] == [], report


MEMORY_HOG = textwrap.dedent(
    """
    import os, torch
    _hoard = []
    try:
        for _ in range(40):  # 40 x 512 MiB: far past the cap
            _hoard.append(torch.ones(128 * 1024 * 1024, dtype=torch.float32))
    except (MemoryError, RuntimeError):
        pass
    del _hoard
    _children = 0
    try:
        for _ in range(50):
            if os.fork() == 0:
                _big = bytearray(512 * 1024 * 1024)
                os._exit(0)
            _children += 1
    except OSError:
        pass
    """
).lstrip()


def hostile_class(folder: Path, reference: Path, outside: list[Path], ta_home: str, key_name: str) -> None:
    """bystander (the solution), stub (the release as given), and attackers: the release with
    attack cells appended after every stub, so a stolen function would replace the stub."""
    solution, release = load(SOLUTION), load(RELEASE)
    last = -1  # after the last code cell: stubs defined earlier are overwritten by the theft
    students = {
        "bystander": solution,
        "stub": release,
        "exec_course": with_cells(release, [exec_cell(str(reference))], after_code_cell=last),
        "hunter": with_cells(release, [HUNT.replace("HOME_OF_TA", ta_home).replace("KEY_OF_TA", key_name)], after_code_cell=last),
        "hog": with_cells(solution, [MEMORY_HOG], after_code_cell=0),
        "lazy": with_cells(solution, [LAZY_IMPORTS], after_code_cell=-1),
    }
    for number, copy in enumerate(outside):
        students[f"exec_outside_{number}"] = with_cells(release, [exec_cell(str(copy))], after_code_cell=last)
    for student_id, notebook in students.items():
        write(notebook, folder / student_id / ASSIGNMENT)


# -- running the grader as someone -------------------------------------------------------------------------
@dataclass
class Run:
    returncode: int
    stderr: str
    results: dict[str, dict] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.returncode != 0 and not self.results

    def score(self, student_id: str) -> float:
        return float(self.results[student_id]["score"])

    def probe(self, student_id: str) -> dict:
        for cell in self.results[student_id]["cells"]:
            if str(cell.get("message", "")).startswith("ISOPROBE:"):
                return json.loads(cell["message"][len("ISOPROBE:") :])
        raise AssertionError(f"{student_id}'s probe did not report: {self.results[student_id]['cells']}")


def read_results(out: Path) -> dict[str, dict]:
    found = {}
    for path in out.rglob("results.json"):
        results = json.loads(path.read_text(encoding="utf-8"))
        found[results["student_id"]] = results
    return found


def run_grader(
    setting: Callable[[list[str]], list[str]], python: str, submitted: Path, out: Path, env: dict[str, str], *extra: str, cwd: Path | None = None
) -> Run:
    """``attnkit grade`` as the TA would start it, in ``setting`` (a launcher of tests/support/settings.py:
    the command -> the argv that runs it there); ``cwd``: the folder it starts in (by default the
    one these tests run in, wherever the checkout lies)."""
    command = setting(
        [python, "-m", "attnkit.cli", "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--quiet", "--force", *LIMITS, *extra]
    )
    process = run_command(command, env=env, cwd=cwd)
    return Run(process.returncode, process.stderr, read_results(out))


# -- the three settings ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(ta_user, user_python, outside_copies) -> dict[str, Run]:
    """The same hostile class graded in the three settings."""
    graded: dict[str, Run] = {}
    python, course = user_python
    reference = next((ROOT / "autograder").rglob("reference.py"))
    settings = {
        "root": (as_root, sys.executable, reference, "/root", minimal_env("/root")),
        "root-without-sys-admin": (root_without_sys_admin, sys.executable, reference, "/root", minimal_env("/root")),
        "unprivileged": (
            functools.partial(unprivileged, user=ta_user),
            python,
            next(course.rglob("reference.py")),
            ta_user.pw_dir,
            minimal_env(ta_user.pw_dir),
        ),
    }
    work = Path(tempfile_folder("attnkit-iso-"))
    key_name = plant_session_key()
    try:
        for name, (setting, interpreter, course_reference, home, env) in settings.items():
            submitted, out = work / name / "submitted", work / name / "out"
            hostile_class(submitted, course_reference, outside_copies, home, key_name)
            out.mkdir(parents=True)
            for path in [work / name, *(work / name).rglob("*")]:
                os.chown(path, ta_user.pw_uid, ta_user.pw_gid)
            graded[name] = run_grader(setting, interpreter, submitted, out, env)
            print(
                f"\n[isolation] {name}: exit {graded[name].returncode}, "
                + ", ".join(f"{sid} {r['score']:g} ({r.get('isolation')})" for sid, r in sorted(graded[name].results.items())),
                file=sys.stderr,
            )
        yield graded
    finally:
        shutil.rmtree(work, ignore_errors=True)


SETTINGS = ["root", "root-without-sys-admin", "unprivileged"]


def plant_session_key() -> str:
    """A secret in this process's session keyring, which every process it starts inherits (a
    TA's login keyring may hold tickets or keys); its description."""
    import ctypes
    import platform

    name = f"attnkit-iso-{secrets.token_hex(4)}"
    add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
    key = ctypes.CDLL(None, use_errno=True).syscall(add_key, b"user", name.encode(), b"s3cret", 6, -3)  # @s
    if key <= 0:
        pytest.skip("this kernel has no keyrings")
    return name


@pytest.mark.parametrize("setting", SETTINGS)
def test_isolated_or_refused(runs: dict[str, Run], setting: str) -> None:
    """Is every submission graded in an isolated sandbox, or did the grader refuse before any cell ran?"""
    run = runs[setting]
    if run.refused:
        assert "--no-isolation" in run.stderr, run.stderr
        return
    assert run.returncode == 0, run.stderr[-3000:]
    for student_id, results in run.results.items():
        assert results["isolation"] == "isolated", (student_id, results["sandbox"])
        assert "allowlisted-root" in results["sandbox"]["isolation"] and "no-capabilities" in results["sandbox"]["isolation"]


@pytest.mark.parametrize("setting", SETTINGS)
def test_the_bystander_scores_full_marks(runs: dict[str, Run], setting: str) -> None:
    """Does a correct notebook score 100 next to the attackers, in every setting, with its
    sandbox's CPU time and peak memory read by the grader (from /proc, also without root)?"""
    run = runs[setting]
    if not run.refused:
        assert run.score("bystander") == 100, run.results["bystander"]["tests"]
        assert run.score("lazy") == 100, run.results["lazy"]["tests"]
        assert_lazy_imports(run.probe("lazy"))
        usage = run.results["bystander"]["sandbox"]
        assert usage.get("cpu_seconds", 0) > 0 and usage.get("max_rss_kb", 0) > 10_000, usage


@pytest.mark.parametrize("setting", SETTINGS)
def test_stealing_the_reference_earns_nothing(runs: dict[str, Run], setting: str) -> None:
    """Does exec'ing the course's reference, a copy under /opt or /var/lib, or whatever a search of
    the whole filesystem finds, score no more than the stubs alone?"""
    run = runs[setting]
    if run.refused:
        return
    baseline = run.score("stub")
    for student_id in run.results:
        if student_id.startswith(("exec_", "hunter")):
            assert run.score(student_id) <= baseline, (student_id, run.score(student_id), baseline)
    for student_id in ("exec_course", "exec_outside_0", "exec_outside_1"):
        failed = [c for c in run.results[student_id]["cells"] if "exec(open" in str(c.get("output", "")) or c.get("error_type") == "FileNotFoundError"]
        assert failed, f"{student_id}: the exec cell should have failed to find the file: {run.results[student_id]['cells']}"


@pytest.mark.parametrize("setting", SETTINGS)
def test_the_host_is_not_in_view(runs: dict[str, Run], setting: str) -> None:
    """Does listing / from a cell show only the allowlisted tree, with no /etc/shadow, no homes,
    no /var, /opt, /srv, and no copy of the reference anywhere?"""
    run = runs[setting]
    if run.refused:
        return
    seen = run.probe("hunter")
    python_tops = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, "/usr")}
    assert set(seen["root"]) <= SANDBOX_ROOT_NAMES | python_tops | {"var"}, seen["root"]
    assert seen["found"] == [], seen["found"]
    assert seen["keyring"] == "no", "the grader's session keyring is reachable"
    # Open descriptors: the standard streams, the channel to the grader and the listing itself.
    leaked = {fd: target for fd, target in seen["fds"].items() if not target.startswith(("/dev/null", "/home/student/", "socket:", "/proc/"))}
    assert leaked == {}, leaked
    assert seen["/etc/shadow"].startswith("no:"), seen["/etc/shadow"]
    assert seen["/etc/hostname"].startswith("no:"), "host configuration is visible"
    for folder in ("/opt", "/srv"):
        assert seen[folder].startswith("no:"), (folder, seen[folder])
    for home in (h for h in seen if h.startswith(("/root", "/home/", "/var/tmp"))):
        listing = seen[home]
        # A home may exist only as the path to a Python tree (e.g. /root/.pyenv): nothing else.
        assert listing.startswith("no:") or listing in ("dir:.pyenv", "dir:"), (home, listing)


@pytest.mark.parametrize("setting", SETTINGS)
def test_memory_hog_and_fork_bomb_cost_only_themselves(runs: dict[str, Run], setting: str) -> None:
    """With or without a memory control group, does a notebook that allocates 20 GiB and forks
    children that allocate more stay under its cap, while its own functions still grade?"""
    run = runs[setting]
    if run.refused:
        return
    hog = run.results["hog"]
    assert hog["sandbox"].get("max_rss_kb", 0) <= (MEMORY_MB + 1024) * 1024, hog["sandbox"]
    assert run.score("hog") == run.score("bystander"), [t for t in hog["tests"] if t["status"] != "passed"]


# -- no isolation to be had ----------------------------------------------------------------------------------
# A submission that leaves what it can in its working folder: files, a link out, and folders it
# made unreadable (its own, so the grader must still remove them).
LITTER = (
    "import os\n"
    "os.makedirs('deep/er/est', exist_ok=True)\n"
    "open('deep/er/file.txt', 'w').write('x' * 1000)\n"
    "os.symlink('/etc', 'etc_link')\n"
    "os.chmod('deep/er', 0)\n"
    "os.chmod('deep', 0)\n"
    "os.chmod('.', 0)\n"
)


def sandbox_folders(uid: int) -> set[Path]:
    """The unisolated sandboxes' working folders in /tmp that belong to ``uid``."""
    return {path for path in Path(tempfile.gettempdir()).glob("sandbox-*") if path.lstat().st_uid == uid}


@pytest.fixture(scope="module")
def without_namespaces(ta_user, user_python):
    """The same class graded where the kernel gives the TA no user namespace: with Landlock (the
    layer without namespaces), then without it as is, and without it with --no-isolation. Each
    starts in a folder the TA cannot enter, as a shell in a checkout under a root-only
    ``mktemp -d`` would: the grader must not depend on where it starts."""
    python, course = user_python
    work = Path(tempfile_folder("attnkit-nons-"))
    locked = work / "root-only"
    locked.mkdir(mode=0o700)  # owned by root: the TA can neither list nor enter it
    runs = {}
    try:
        for name, landlock, extra in (("landlock", True, ()), ("strict", False, ()), ("trusted", False, ("--no-isolation",))):
            setting = functools.partial(without_user_namespaces, user=ta_user, landlock=landlock)
            submitted, out = work / name / "submitted", work / name / "out"
            marker = work / name / "ran"
            canary = with_cells(load(SOLUTION), [f"open({str(marker)!r}, 'w').write('student code ran')\n"])
            write(canary, submitted / "canary" / ASSIGNMENT)
            write(load(SOLUTION), submitted / "bystander" / ASSIGNMENT)
            theft = with_cells(load(RELEASE), [exec_cell(str(next(course.rglob("reference.py"))))], after_code_cell=-1)
            write(theft, submitted / "exec_course" / ASSIGNMENT)
            write(with_cells(load(SOLUTION), [LITTER]), submitted / "litter" / ASSIGNMENT)
            out.mkdir(parents=True)
            for path in [work / name, *(work / name).rglob("*")]:
                os.chown(path, ta_user.pw_uid, ta_user.pw_gid)
            before = sandbox_folders(ta_user.pw_uid)
            run = run_grader(setting, python, submitted, out, minimal_env(ta_user.pw_dir), *extra, cwd=locked)
            runs[name] = (run, marker, out, sandbox_folders(ta_user.pw_uid) - before)
        yield runs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_without_namespaces_landlock_isolates(without_namespaces) -> None:
    """Without root or user namespaces but with Landlock, is the class graded isolated (the layer
    without namespaces), the theft of the course's reference earning nothing and the canary's
    write outside its work folder refused?"""
    run, marker, _out, left = without_namespaces["landlock"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert {r["isolation"] for r in run.results.values()} == {"isolated"}
    assert all("landlock-files" in r["sandbox"]["isolation"] for r in run.results.values())
    assert run.score("bystander") == 100 and run.score("litter") == 100
    assert run.score("exec_course") == 0, run.results["exec_course"]["tests"]
    assert not marker.exists(), "a sandbox wrote outside its work folder"
    assert not left, sorted(left)


def test_no_isolation_means_no_grading(without_namespaces) -> None:
    """Without root, user namespaces or Landlock, does `attnkit grade` refuse with a non-zero exit,
    name the reason and the fix, and run no student code at all?"""
    run, marker, out, _left = without_namespaces["strict"]
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.results == {} and not (out / "grades.csv").exists()
    assert not marker.exists(), "student code ran although the grader refused"
    assert "unshare" in run.stderr and "--no-isolation" in run.stderr and "landlock: not available" in run.stderr, run.stderr[-2000:]


def test_trusted_notebooks_grade_unisolated_and_say_so(without_namespaces) -> None:
    """With --no-isolation, does the same class grade, with the missing isolation recorded in
    every results.json and shown on report.html?"""
    run, marker, out, left = without_namespaces["trusted"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.score("bystander") == 100
    assert run.score("litter") == 100, run.results["litter"]["tests"]
    # No surprises: each sandbox's working folder is gone with it, unreadable folders included.
    assert not left, sorted(left)
    assert {r["isolation"] for r in run.results.values()} == {"unisolated"}
    # The TA's own uid is all there is, and no Landlock: still the seccomp filter, and the record says so.
    for results in run.results.values():
        assert {"unisolated", "seccomp-filter", "no-capabilities"} <= set(results["sandbox"]["isolation"]), results["sandbox"]
        assert "landlock-files" not in results["sandbox"]["isolation"]
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "未隔离" in report and "没有 Landlock" in report and "seccomp" in report
    # What the isolated runs are protected from: unisolated, the same theft does pay.
    assert run.score("exec_course") > 50, run.results["exec_course"]["tests"]
