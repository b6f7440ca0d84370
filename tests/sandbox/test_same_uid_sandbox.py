"""Does a sandbox that runs under its grader's own uid still keep to itself (issue 37)?

A TA without root on an Ubuntu 24.04-style host (a user namespace that cannot mount,
`tests/support/settings.py`'s `userns_without_mount`) gets the layer without namespaces: Landlock and the
seccomp filters, and the sandbox runs under the TA's own uid, which owns the class's notebooks,
OUT and the gradebook. Landlock mediates no chmod, chown, utime or xattr, no truncate below its
ABI 3, no prlimit or setpriority on another process, and no signal below its ABI 6 (Linux 6.12):
the filters must. One small hostile class is graded by the real `attnkit grade` in each setting:

- the Landlock ABI the kit uses capped at 1 (Linux 5.13), at 4 (Ubuntu 24.04's 6.8) and the
  kernel's own (the cap: `ATTNKIT_LANDLOCK_ABI_MAX`, through `settings.with_landlock_abi`);
- `--no-isolation` where no layer is to be had (the same TA, Landlock capped at 0): the notebooks
  are trusted by definition and nothing keeps them from the TA's files' contents (the record says
  so: "unisolated", no Landlock); what the grader still guarantees there, and what is checked, is
  what the filters deny: no metadata change, no reach into another process.

The class: two bystanders (the solution), the stub (the release), and two attackers on the stub:
one changes the metadata of everything the TA owns in SUBMITTED, OUT and the gradebook
(`attacks.cells.metadata_changes`), one prlimits, renices, pins and kills every other pid and
kill(-1)s (`attacks.cells.reach_other_processes`). Each run: the grader finishes with every output
written; the bystanders score 100 with their files' modes, owners, times and attributes unchanged;
the attackers score no more than the stub, and their own reports show that no call succeeded.

The TA here is a user of this module's own (`ak37-ta`): on code without the filters the process
attack kills every process of its uid, and no other test's grader must be one of them.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import pwd
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, RELEASE, SOLUTION, load, with_cells, write
from attacks import cells as C
from settings import userns_without_mount
from ta_machine import minimal_env, ordinary_user, tempfile_folder

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.e2e]

if not sys.platform.startswith("linux") or os.geteuid() != 0:
    pytest.skip("creates a user and grades under a seccomp filter as the platform's: needs root on Linux (CI runs as root)", allow_module_level=True)

USER = "ak37-ta"
BYSTANDERS = ("bystander_1", "bystander_2")
ATTACKERS = ("attack_metadata", "attack_processes")
# setting -> (the Landlock ABI the kit may use (None: the kernel's), extra arguments)
SETTINGS = {
    "ubuntu-landlock-abi-1": (1, ()),
    "ubuntu-landlock-abi-4": (4, ()),
    "ubuntu-landlock-kernel-abi": (None, ()),
    "no-isolation-no-landlock": (0, ("--no-isolation",)),
}
ATTACK_SECONDS = 2.0  # the metadata attack walks SUBMITTED and OUT again for so long: outputs written meanwhile are hit too


@pytest.fixture(scope="module")
def ta_user() -> pwd.struct_passwd:
    """This module's TA (overrides conftest's for `user_python`): an ordinary user of its own."""
    return ordinary_user(USER)


def kernel_landlock_abi() -> int:
    from attnkit.sandbox.lockdown import landlock

    saved = os.environ.pop(landlock.ABI_CAP_VARIABLE, None)
    try:
        return landlock.abi_version()
    finally:
        if saved is not None:
            os.environ[landlock.ABI_CAP_VARIABLE] = saved


def metadata(path: Path) -> tuple:
    """What the attack may change: mode, owner, group, times, extended attributes."""
    status = path.lstat()
    try:
        attributes = sorted(os.listxattr(path, follow_symlinks=False))
    except OSError as error:
        attributes = [f"listxattr: {error.strerror}"]
    return (oct(status.st_mode), status.st_uid, status.st_gid, status.st_mtime_ns, attributes)


@dataclass
class Graded:
    setting: str
    abi: int | None
    returncode: int
    stderr: str
    out: Path
    results: dict[str, dict]
    before: dict[str, tuple]
    after: dict[str, tuple]
    rows: list[dict[str, str]]

    def score(self, student_id: str) -> float:
        return float(self.results[student_id]["score"])

    def report(self, student_id: str, name: str) -> dict:
        for cell in self.results[student_id]["cells"]:
            message = str(cell.get("message", ""))
            if message.startswith(f"ADVPROBE:{name}:"):
                return json.loads(message[len(f"ADVPROBE:{name}:") :])
        raise AssertionError(f"{student_id}: no {name} report in {self.results[student_id]['cells']}")


@pytest.fixture(scope="module", params=list(SETTINGS))
def graded(request, ta_user, user_python) -> Graded:
    """The hostile class graded in one setting, with the metadata of every file the attack aims at
    taken before and after."""
    from test_isolation import read_results, run_grader

    setting = request.param
    abi, extra = SETTINGS[setting]
    python, _course = user_python
    work = Path(tempfile_folder("attnkit-ak37-"))
    try:
        submitted, out, keep = work / "submitted", work / "out", work / "course"
        keep.mkdir()
        gradebook = keep / "gradebook.db"  # the TA's gradebook beside the course (nbgrader's place)
        gradebook.write_bytes(b"SQLite format 3\x00" + bytes(4080))
        release, solution = load(RELEASE), load(SOLUTION)
        notebooks = {student: submitted / student / ASSIGNMENT / "attention.ipynb" for student in (*ATTACKERS, "stub", *BYSTANDERS)}
        victims = [str(notebooks[student]) for student in BYSTANDERS] + [str(gradebook)]
        attacks = {
            "attack_metadata": lambda: C.metadata_changes(victims, [str(submitted), str(out)], str(notebooks["attack_metadata"]), ATTACK_SECONDS),
            "attack_processes": lambda: C.reach_other_processes(above_own=2000),
        }
        cells = {student: attacks[student]() for student in ATTACKERS}
        for student in BYSTANDERS:
            write(solution, notebooks[student].parent)
        write(release, notebooks["stub"].parent)
        for student, cell in cells.items():
            write(with_cells(release, [cell], after_code_cell=-1), notebooks[student].parent)
        out.mkdir()
        for path in [work, *work.rglob("*")]:
            os.chown(path, ta_user.pw_uid, ta_user.pw_gid)
        watched = [submitted, out, gradebook, *notebooks.values(), *(p.parent for p in notebooks.values()), *(p.parent.parent for p in notebooks.values())]
        before = {str(path): metadata(path) for path in watched}
        launch = functools.partial(userns_without_mount, user=ta_user, landlock_abi=abi)
        run = run_grader(launch, python, submitted, out, minimal_env(ta_user.pw_dir), *extra)
        after = {str(path): metadata(path) for path in watched}
        rows = list(csv.DictReader((out / "grades.csv").open(encoding="utf-8"))) if (out / "grades.csv").is_file() else []
        graded = Graded(setting, abi, run.returncode, run.stderr, out, read_results(out), before, after, rows)
        print(
            f"\n[same uid] {setting}: exit {run.returncode}, "
            + ", ".join(f"{sid} {r['score']:g}" for sid, r in sorted(graded.results.items()))
            + "".join(f"\n  {sid}: {graded.results[sid]['cells'][-1].get('message', '')[:600]}" for sid in ATTACKERS if sid in graded.results)
            + (f"\n  stderr: {run.stderr[-1500:]}" if run.returncode else ""),
            file=sys.stderr,
        )
        yield graded
    finally:
        for path in [work, *work.rglob("*")]:  # whatever the attack left unreadable
            try:
                path.chmod(0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
        shutil.rmtree(work, ignore_errors=True)


def test_the_grader_finishes_with_every_output_written(graded: Graded) -> None:
    """Exit 0, a row of grades.csv, a results.json and a feedback page for every student, and the
    class report: no grader process was killed or starved to death."""
    assert graded.returncode == 0, (graded.returncode, graded.stderr[-3000:])
    students = {*ATTACKERS, *BYSTANDERS, "stub"}
    assert {row["student_id"] for row in graded.rows} == students, graded.rows
    assert set(graded.results) == students, sorted(graded.results)
    for student in students:
        page = graded.out / "students" / student / ASSIGNMENT / "feedback.html"
        assert page.is_file() and page.stat().st_mode & 0o400, page
    assert (graded.out / "report.html").is_file()


def test_the_bystanders_score_100_and_their_files_are_as_they_were(graded: Graded) -> None:
    """Each correct classmate scores 100, and nothing of SUBMITTED, its notebooks and folders,
    the gradebook or OUT changed mode, owner, group or attributes; times neither, but OUT's, which
    the grader writes into."""
    for student in BYSTANDERS:
        assert graded.score(student) == 100, [t for t in graded.results[student]["tests"] if t["status"] != "passed"]
    changed = {path: (graded.before[path], graded.after[path]) for path in graded.before if graded.before[path] != graded.after[path]}
    out = str(graded.out)
    if out in changed:  # new entries change a folder's times: the rest of it must not change
        (mode, uid, gid, _time, attributes), (mode_after, uid_after, gid_after, time_after, attributes_after) = changed.pop(out)
        assert (mode, uid, gid, attributes) == (mode_after, uid_after, gid_after, attributes_after)
        assert time_after < 4102444800 * 10**9
    assert changed == {}, changed


def test_the_outputs_are_the_graders(graded: Graded) -> None:
    """No file of OUT had its mode, times or attributes set by the attack while it ran."""
    for path in [graded.out, *graded.out.rglob("*")]:
        mode, uid, _gid, mtime_ns, attributes = metadata(path)
        assert int(mode, 8) & 0o700 == (0o700 if path.is_dir() else 0o600) or int(mode, 8) & 0o600 == 0o600, (path, mode)
        assert mtime_ns < 4102444800 * 10**9, (path, mtime_ns)
        assert not [name for name in attributes if "attnkit37" in name], (path, attributes)


def test_the_attackers_earn_no_more_than_the_stub_and_every_attack_failed(graded: Graded) -> None:
    """The attackers score no more than the stub they started from, and by their own reports no
    call succeeded: every metadata change and every reach into another process was refused."""
    baseline = graded.score("stub")
    for student in ATTACKERS:
        assert graded.score(student) <= baseline, (student, graded.score(student), baseline)
    changes = graded.report("attack_metadata", "metadata")
    assert set(changes) >= {"utime_own_2001", "setxattr", "removexattr", "utime_2100", "truncate", "chown", "chmod_000"}, changes
    assert {operation: outcome for operation, outcome in changes.items() if "ok=" in outcome} == {}, changes
    processes = graded.report("attack_processes", "processes")
    assert set(processes) >= {"prlimit_cpu", "setpriority", "sched_setaffinity", "setpriority_user", "kill", "kill_minus_1"}, processes
    assert {operation: outcome for operation, outcome in processes.items() if "ok=" in outcome} == {}, processes
    assert "EPERM" in processes["kill_minus_1"] or "PermissionError" in processes["kill_minus_1"], processes


def test_the_layer_and_its_landlock_abi_are_recorded(graded: Graded) -> None:
    """Each results.json records the layer the setting gives: Landlock at the capped ABI (no
    signal scope below 6: the filters carry that guarantee) with the filters; --no-isolation
    without Landlock, "unisolated" with the filters and no Landlock."""
    kernel = kernel_landlock_abi()
    for student, results in graded.results.items():
        items = results["sandbox"]["isolation"]
        assert "seccomp-filter" in items and "no-capabilities" in items, (student, items)
        if graded.abi == 0:
            assert results["isolation"] == "unisolated" and "landlock-files" not in items, (student, items)
            continue
        abi = kernel if graded.abi is None else min(graded.abi, kernel)
        assert results["isolation"] == "isolated" and "landlock-files" in items, (student, items)
        assert f"landlock-abi-{abi}" in items, (student, items)
        assert ("landlock-scoped" in items) == (abi >= 6), (student, items)


# -- what the filters must not break --------------------------------------------------------------
@pytest.fixture(scope="module")
def correct_styles(ta_user, user_python):
    """The correct solutions in other styles (tests/grading/test_autograder.py's ALTERNATIVES: einsum,
    -1e9, a manual softmax, a loop over heads, printing and warning...), each the solution with
    its functions redefined in a last cell, graded as the same TA with Landlock capped at ABI 4:
    the strictest filters (no signal scope, so signals only to the sandbox itself)."""
    from test_autograder import ALTERNATIVES
    from test_isolation import read_results, run_grader

    python, _course = user_python
    work = Path(tempfile_folder("attnkit-ak37-styles-"))
    try:
        submitted, out = work / "submitted", work / "out"
        for name, source in ALTERNATIVES.items():
            write(with_cells(load(SOLUTION), [source], after_code_cell=-1), submitted / name / ASSIGNMENT)
        out.mkdir()
        for path in [work, *work.rglob("*")]:
            os.chown(path, ta_user.pw_uid, ta_user.pw_gid)
        launch = functools.partial(userns_without_mount, user=ta_user, landlock_abi=4)
        run = run_grader(launch, python, submitted, out, minimal_env(ta_user.pw_dir))
        yield run, read_results(out), list(ALTERNATIVES)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_correct_styles_score_100_under_the_filters(correct_styles) -> None:
    """Does every correct style still score 100 with no diagnosis, each in a sandbox that loaded
    the filters (nothing a correct notebook does is denied)?"""
    run, results, names = correct_styles
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(results) == sorted(names)
    for name, result in results.items():
        assert float(result["score"]) == 100, (name, [t for t in result["tests"] if t["status"] != "passed"])
        assert not result.get("diagnoses"), (name, result.get("diagnoses"))
        assert {"seccomp-filter", "landlock-abi-4"} <= set(result["sandbox"]["isolation"]), (name, result["sandbox"])
