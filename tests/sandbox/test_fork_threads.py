"""No process of the grader forks while it has a second thread.

A fork copies only the calling thread: a lock another thread held (an OpenBLAS or OpenMP pool's,
malloc's) stays held in the child forever. Python 3.12 warns "This process ... is multi-threaded,
use of fork() may lead to deadlocks in the child" when it sees more than one OS thread at
``os.fork()``. The trusted parent forks its workers (``engine.grade_jobs``) and the zygote forks
every sandbox; both must be single-threaded then, whatever thread counts the TA's shell asks of
numpy's OpenBLAS, OpenMP or MKL.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from commands import run_command

from attnkit.notebook import CodeCell
from attnkit.driver.submission import Submission
from attnkit.driver.zygote_handle import Zygote

ROOT = Path(__file__).resolve().parents[2]
# A TA's shell that asks numerical libraries for many threads.
MANY_THREADS = {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}

# Runs `attnkit grade` as the `attnkit` script does, recording at each fork of this process how
# many OS threads (/proc/self/task) and Python threads it has.
SPY = """
import json, os, sys, threading
def before():
    # Written at once: the command may end with os._exit, past any finally or atexit.
    with open(os.environ["FORK_SPY_OUT"], "a") as out:
        out.write(json.dumps({"tasks": len(os.listdir("/proc/self/task")), "threads": [t.name for t in threading.enumerate()]}) + "\\n")
os.register_at_fork(before=before)
sys.argv = ["attnkit", *sys.argv[1:]]
from attnkit.launch import run
run()
"""


@pytest.mark.e2e
def test_the_grade_command_forks_its_workers_with_one_thread(tmp_path: Path) -> None:
    spy = tmp_path / "forks.json"
    env = {**os.environ, **MANY_THREADS, "FORK_SPY_OUT": str(spy), "PYTHONWARNINGS": "always::DeprecationWarning"}
    run = run_command(
        [sys.executable, "-c", SPY, "grade", "--submitted", str(ROOT / "examples" / "submitted"), "--out", str(tmp_path / "graded"), "--jobs", "2"],
        cwd=tmp_path,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    forks = [json.loads(line) for line in spy.read_text().splitlines()]
    assert len(forks) == 2, forks  # one per worker
    assert all(fork == {"tasks": 1, "threads": ["MainThread"]} for fork in forks), forks
    # Python 3.12+ says so itself when it forks a multi-threaded process (3.11 never does).
    assert "multi-threaded" not in run.stderr, run.stderr[-4000:]


@pytest.mark.e2e
def test_the_zygote_has_one_thread_when_it_forks_sandboxes() -> None:
    """The zygote's environment pins every pool to one thread, and its warm-up runs torch ops:
    after a sandbox (forked from it) ran a cell, the zygote still has a single thread for the next."""
    zygote = Zygote()
    try:
        zygote.wait_ready()
        assert len(os.listdir(f"/proc/{zygote.pid}/task")) == 1  # warmed up, before its first fork
        session = Submission(zygote, [CodeCell(0, "import torch\nanswer = float((torch.ones(256, 256) @ torch.ones(256, 256)).sum())\n")])
        session.start()
        try:
            answer = session.variable("answer").value
        finally:
            session.close()
        tasks = os.listdir(f"/proc/{zygote.pid}/task")
        assert len(tasks) == 1, tasks
        assert answer == 256.0**3  # the sandbox ran its torch op: a fork of a multi-threaded pool may hang or fail here
    finally:
        zygote.close()
