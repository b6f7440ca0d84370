"""The command line around grading: one run per output folder, Ctrl-C, --version, python -m,
--verbose, merge refusing missing or incomplete shard sets, Gradescope visibility."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from attnkit import __version__
from attnkit.course.gradescope import VISIBILITIES, to_gradescope
from commands import BIN, attnkit, python_m, tool_env
from notebooks import wait_in_last_cell

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "submitted"
ASSIGNMENT = "ch19-attention"
SLOW_SECONDS = 2  # a slow submission's wait in test_ctrl_c_stops_cleanly_and_says_how_to_resume


def small_class(folder: Path, students: tuple[str, ...] = ("xiaolin", "lilei")) -> Path:
    for student in students:
        shutil.copytree(DEMO / student / ASSIGNMENT, folder / student / ASSIGNMENT)
    return folder


def test_version_and_python_m() -> None:
    run = attnkit("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"attnkit {__version__}"
    script = attnkit("--version", script=True)
    assert script.stdout == run.stdout


@pytest.mark.parametrize("entry", ["script", "-m attnkit", "-m attnkit.cli"])
@pytest.mark.e2e
def test_grade_forks_its_workers_zygotes_from_one_seed(tmp_path: Path, entry: str) -> None:
    """However `attnkit grade` is started: is there one seed, started by the command itself, whose
    children are the only zygotes (no worker imports torch for a zygote of its own), and is every
    one of them gone when the command is?"""
    command = [str(BIN / "attnkit")] if entry == "script" else [sys.executable, *entry.split()]
    submitted = small_class(tmp_path / "submitted", ("xiaolin", "lilei", "wangfang", "chenjing"))
    process = subprocess.Popen(
        [*command, "grade", "--submitted", str(submitted), "--out", str(tmp_path / "out"), "--jobs", "2", "--quiet"],
        env=tool_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seeds: set[int] = set()
    zygotes: dict[int, int] = {}  # pid -> parent
    while process.poll() is None:
        arguments: dict[int, tuple[list[str], int]] = {}
        for proc in psutil.Process(process.pid).children(recursive=True):
            try:
                arguments[proc.pid] = (proc.cmdline(), proc.ppid())
            except psutil.Error:
                continue
        for pid, (words, parent) in arguments.items():
            if "attnkit.sandbox.zygote" not in words:
                continue
            if parent == process.pid and "--seed" in words:
                seeds.add(pid)
            # A worker's own zygote would count here; a sandbox's parent is a zygote. A parent
            # whose command line reads empty has exited (a zombie: a zygote ending before the
            # sandbox it is taking down) and tells nothing.
            elif parent in seeds or (parent in arguments and arguments[parent][0] and "attnkit.sandbox.zygote" not in arguments[parent][0]):
                zygotes[pid] = parent
        time.sleep(0.02)
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr[-2000:]
    assert len(seeds) == 1
    assert zygotes and set(zygotes.values()) == seeds, zygotes
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in [*seeds, *zygotes])


@pytest.mark.e2e
def test_a_second_run_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # Hold the lock the way a running `attnkit grade` does.
    with open(out / ".attnkit.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write("进程 4242，开始于 测试\n")
        handle.flush()
        run = attnkit("grade", "--submitted", str(small_class(tmp_path / "submitted")), "--out", str(out), "--quiet")
    assert run.returncode == 2
    assert "同一输出文件夹一次只能有一个运行" in run.stderr and "4242" in run.stderr
    assert "Traceback" not in run.stderr
    assert not list(out.glob("students/*/*/results.json")), "the refused run graded nothing"
    # Released: the same command now runs (and --verbose names each graded submission).
    again = attnkit("--verbose", "grade", "--submitted", str(tmp_path / "submitted"), "--out", str(out), "--jobs", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "xiaolin/ch19-attention：100/100" in again.stderr


@pytest.mark.e2e
def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path: Path) -> None:
    submitted = tmp_path / "submitted"
    count = 8
    for index in range(count):
        shutil.copytree(DEMO / "xiaolin" / ASSIGNMENT, submitted / f"s{index}" / ASSIGNMENT)
    # The second half ends with a cell that waits (the same grade, graded later): once the first
    # results.json is on disk (its batch is committed within about half a second of its grading),
    # the run is still going when Ctrl-C comes, however fast the first half was graded.
    for index in range(count // 2, count):
        wait_in_last_cell(submitted / f"s{index}" / ASSIGNMENT / "attention.ipynb", SLOW_SECONDS)
    out = tmp_path / "out"
    # A terminal's foreground job takes Ctrl-C: SIGINT at its default even where this test runs
    # with it ignored (a background job of a non-interactive shell, as CI may start it).
    process = subprocess.Popen(
        [sys.executable, "-m", "attnkit", "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1"],
        env=tool_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list(out.glob("students/*/*/results.json")):
        time.sleep(0.1)
    # What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert "再次运行同一条命令即可从中断处继续" in stderr
    resumed = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2")
    assert resumed.returncode == 0 and len(list(out.glob("students/*/*/results.json"))) == count


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("merge")
    submitted = small_class(base / "submitted", ("xiaolin", "lilei", "zhaoqiang"))
    for index in (1, 2, 3):
        run = attnkit("grade", "--submitted", str(submitted), "--out", str(base / f"shard{index}"), "--jobs", "1", "--quiet", "--shard", f"{index}/3")
        assert run.returncode == 0, run.stderr[-2000:]
    return base


@pytest.mark.e2e
def test_merge_refuses_a_missing_folder(shards: Path) -> None:
    run = attnkit("merge", str(shards / "shard1"), str(shards / "nowhere"), "--out", str(shards / "merged"))
    assert run.returncode != 0 and "nowhere" in run.stderr
    assert not (shards / "merged" / "grades.csv").exists()


@pytest.mark.e2e
def test_merge_refuses_an_incomplete_shard_set(shards: Path) -> None:
    run = attnkit("merge", str(shards / "shard1"), str(shards / "shard3"), "--out", str(shards / "merged"))
    assert run.returncode != 0 and "2/3" in run.stderr, run.stderr
    duplicate = attnkit("merge", str(shards / "shard1"), str(shards / "shard1"), str(shards / "shard2"), "--out", str(shards / "merged"))
    assert duplicate.returncode != 0 and "1/3" in duplicate.stderr
    complete = attnkit("merge", str(shards / "shard1"), str(shards / "shard2"), str(shards / "shard3"), "--out", str(shards / "merged"))
    assert complete.returncode == 0, complete.stderr
    assert (shards / "merged" / "grades.csv").read_text().count(ASSIGNMENT) == 3


def test_gradescope_visibility_is_configurable(tmp_path: Path) -> None:
    results = {"score": 1, "max_score": 2, "tests": []}
    assert to_gradescope(results)["visibility"] == "after_published"
    assert {to_gradescope(results, visibility=v)["visibility"] for v in VISIBILITIES} == set(VISIBILITIES)
    with pytest.raises(ValueError):
        to_gradescope(results, visibility="sometimes")
    source = tmp_path / "results.json"
    source.write_text(json.dumps(results))
    run = python_m("attnkit.course.gradescope", "results", str(source), str(tmp_path / "gs.json"), "--visibility", "hidden")
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "gs.json").read_text())["visibility"] == "hidden"
    assert 'ATTNKIT_VISIBILITY="${ATTNKIT_VISIBILITY:-after_published}"' in (ROOT / "gradescope" / "run_autograder").read_text()


@pytest.mark.e2e
def test_a_killed_runs_leftovers_are_repaired(tmp_path: Path) -> None:
    """A run killed between writing results.json and feedback.html leaves a temporary and no page;
    the next run (holding the lock) removes the one and writes the other, regrading nothing."""
    submitted, out = small_class(tmp_path / "submitted", ("xiaolin",)), tmp_path / "out"
    assert attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--quiet").returncode == 0
    folder = out / "students" / "xiaolin" / ASSIGNMENT
    page = (folder / "feedback.html").read_text(encoding="utf-8")
    (folder / "feedback.html").unlink()
    (folder / ".feedback.html.999999.tmp").write_text("half")
    run = attnkit("grade", "--submitted", str(submitted), "--out", str(out))
    assert run.returncode == 0 and "0 份需要评分" in run.stderr
    assert not list(out.rglob("*.tmp"))
    assert (folder / "feedback.html").read_text(encoding="utf-8") == page
    # A page left empty is repaired the same way.
    (folder / "feedback.html").write_text("")
    run = attnkit("grade", "--submitted", str(submitted), "--out", str(out))
    assert run.returncode == 0 and "0 份需要评分" in run.stderr
    assert (folder / "feedback.html").read_text(encoding="utf-8") == page
