"""examples/slurm/ on a real Slurm: a single-host cluster of Debian's slurm-wlm and munge (`make slurm`
installs them; `make test` depends on it), started here on 127.0.0.1 with its own configuration,
state, munge key and socket under tmp_path and ports the OS gives, torn down at the end.

The array (submit.sh: SHARDS tasks counted from 0, a fixed count, --jobs from the task's CPUs) and
its afterany merge give the grades.csv of one run; a task cancelled half way is refused by the
merge, then resubmitted alone and resumes (two of its students wait a few seconds in a cell, so that the
cancel lands half way); a late student is graded by one task only.
Five students of the demo class in two shards (sunmei, wangfang -> 1; lilei, xiaolin, zhaoqiang ->
2; the late chenjing -> 1), one CPU per task so both tasks run at once on two cores.
"""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from notebooks import wait_in_last_cell
from commands import BIN, ROOT, attnkit, run_command, tool_env

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.e2e]

DEMO = ROOT / "examples" / "submitted"
EXAMPLE = ROOT / "examples" / "slurm"
ASSIGNMENT = "ch19-attention"
STUDENTS = ("lilei", "sunmei", "wangfang", "xiaolin", "zhaoqiang")
LATE = "chenjing"
SHARDS = 2
SBIN = "/usr/sbin:/usr/bin:/sbin:/bin"
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for handle in sockets:
            handle.bind(("127.0.0.1", 0))
        return [handle.getsockname()[1] for handle in sockets]
    finally:
        for handle in sockets:
            handle.close()


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]

    def run(self, *command: str | Path, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_command(list(command), env=env or self.env, check=check, timeout=120)

    def sbatch(self, script: Path, *options: str, env: dict[str, str]) -> str:
        """Submit ``script`` (from examples/slurm) as a TA would by hand; its job id."""
        return self.run("sbatch", "--parsable", *options, "--export=ALL", script, env=env).stdout.strip().split(";")[0]

    def jobs(self, job: str) -> list[dict[str, str]]:
        """Every record of ``job`` (an array: one per task) as scontrol shows it."""
        shown = self.run("scontrol", "show", "job", "-o", job, check=False).stdout
        return [dict(field.split("=", 1) for field in line.split() if "=" in field) for line in shown.splitlines() if line.strip()]

    def wait(self, job: str, timeout: float = 600) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = self.jobs(job)
            if records and all(record["JobState"] in DONE for record in records):
                return records
            time.sleep(0.5)
        raise AssertionError(f"job {job} did not end: {self.jobs(job)}\n{self.run('squeue', check=False).stdout}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("starts munged, slurmctld and slurmd: needs root")
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol") if shutil.which(tool, path=SBIN) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `make slurm` installs Debian's slurm-wlm and munge (make test does it first)")
    folder = tmp_path_factory.mktemp("slurm")
    for name in ("munge", "state", "spool", "log", "work"):
        (folder / name).mkdir()
    (folder / "munge").chmod(0o711)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = folder / "munge" / "munge.sock"
    controller_port, node_port = free_ports(2)
    host = socket.gethostname()
    conf = folder / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=ak38",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={controller_port}",
                f"SlurmdPort={node_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={munge_socket}",
                f"StateSaveLocation={folder / 'state'}",
                f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}",
                f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
                # No cgroups: the test's host (a container, perhaps) need not delegate any.
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "SchedulerType=sched/backfill",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                "ReturnToService=2",
                "MinJobAge=3600",  # finished jobs stay in scontrol's view for the whole test
                f"NodeName=ak38node NodeHostname={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=16000 State=UNKNOWN",
                "PartitionName=ak38 Nodes=ak38node Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        ),
        encoding="utf-8",
    )
    env = tool_env(SLURM_CONF=str(conf), ATTNKIT=str(BIN / "attnkit"), ATTNKIT_PROGRESS_SECONDS="0")
    env["PATH"] = f"{env['PATH']}:{SBIN}"
    for variable in [name for name in env if name.startswith("SLURM_") and name != "SLURM_CONF"]:
        del env[variable]
    started: list[Path] = []
    cluster = Cluster(folder, env)
    try:
        cluster.run(
            "munged", "--force", f"--key-file={key}", f"--socket={munge_socket}", f"--pid-file={folder / 'munge' / 'munged.pid'}",
            f"--log-file={folder / 'log' / 'munged.log'}", f"--seed-file={folder / 'munge' / 'seed'}",
        )  # fmt: skip
        started.append(folder / "munge" / "munged.pid")
        cluster.run("slurmctld", "-f", conf)
        started.append(folder / "slurmctld.pid")
        cluster.run("slurmd", "-f", conf, "-N", "ak38node")
        started.append(folder / "slurmd.pid")
        deadline = time.monotonic() + 60
        while "idle" not in cluster.run("sinfo", "-h", "-o", "%t", check=False).stdout:
            assert time.monotonic() < deadline, (folder / "log" / "slurmctld.log").read_text() + (folder / "log" / "slurmd.log").read_text()
            time.sleep(0.5)
        yield cluster
    finally:
        cluster.run("scancel", "--full", "--user=root", check=False)
        deadline = time.monotonic() + 60
        while cluster.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid_file in reversed(started):  # the daemons this fixture started, by their pids
            stop(pid_file)


def stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)


def rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", encoding="utf-8", newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


# Two of shard 2's three students end their notebook with a cell that waits (the same grade, more
# time): whichever order the task grades them in, once its first results.json is written at
# least one of these is still being graded for SLOW_SECONDS, so a cancel sent then lands half way.
# Without them the cancel raced the task's last two submissions (≈ 0.1 s) and sometimes lost.
SLOW = ("xiaolin", "zhaoqiang")
SLOW_SECONDS = 4


def results_files(out: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for path in out.glob(f"students/*/{ASSIGNMENT}/results.json"):
        info = path.stat()
        found[path.parent.parent.name] = (info.st_ino, info.st_mtime_ns)
    return found


def exit_code(record: dict[str, str]) -> int:
    return int(record["ExitCode"].split(":")[0])


def test_an_array_and_its_afterany_merge_equal_one_run_resume_a_cancelled_task_and_take_a_late_student(cluster: Cluster, tmp_path: Path) -> None:
    submitted = tmp_path / "submitted"
    for student in STUDENTS:
        shutil.copytree(DEMO / student / ASSIGNMENT, submitted / student / ASSIGNMENT)
    for student in SLOW:
        wait_in_last_cell(submitted / student / ASSIGNMENT / "attention.ipynb", SLOW_SECONDS)
    shard_dir, merged = tmp_path / "shards", tmp_path / "merged"
    env = {**cluster.env, "SHARDS": str(SHARDS), "SUBMITTED": str(submitted), "SHARD_DIR": str(shard_dir), "OUT": str(merged)}

    started = time.perf_counter()
    single = attnkit("grade", "--submitted", submitted, "--out", tmp_path / "single", "--jobs", "2", "--quiet")
    single_seconds = time.perf_counter() - started
    assert single.returncode == 0, single.stderr[-3000:]

    # The array and its merge, as a TA submits them.
    started = time.perf_counter()
    array, merge = run_command([EXAMPLE / "submit.sh", "--cpus-per-task=1"], env=env, check=True).stdout.split()
    merge_record = cluster.wait(merge)[0]
    array_seconds = time.perf_counter() - started
    tasks = cluster.wait(array)
    logs = "".join(path.read_text(encoding="utf-8") for path in shard_dir.glob("*.log"))
    assert [(record["JobState"], exit_code(record)) for record in tasks] == [("COMPLETED", 0)] * SHARDS, logs
    assert sorted(int(record["ArrayTaskId"]) for record in tasks) == list(range(SHARDS))
    assert (merge_record["JobState"], exit_code(merge_record)) == ("COMPLETED", 0), logs
    assert (merged / "grades.csv").read_text(encoding="utf-8") == (tmp_path / "single" / "grades.csv").read_text(encoding="utf-8")
    assert "3/3" in (shard_dir / f"attnkit-grade-{array}_1.log").read_text(encoding="utf-8"), "progress lines in the task's log"
    print(f"\nslurm: one run {single_seconds:.1f} s (--jobs 2); array of {SHARDS} x 1 CPU + merge {array_seconds:.1f} s (submit to merge's end)")

    # Task 1 (shard 2/2) regraded from nothing, cancelled once it wrote its first result.
    shutil.rmtree(shard_dir / "shard-2")
    task = cluster.sbatch(EXAMPLE / "grade-array.sbatch", "--array=1", "--cpus-per-task=1", f"--chdir={shard_dir}", env=env)
    deadline = time.monotonic() + 300
    while not list((shard_dir / "shard-2").glob(f"students/*/{ASSIGNMENT}/results.json")):
        assert time.monotonic() < deadline and cluster.jobs(task)[0]["JobState"] not in DONE, cluster.jobs(task)
        time.sleep(0.1)
    cluster.run("scancel", task)
    assert cluster.wait(task)[0]["JobState"] == "CANCELLED"
    graded_before_cancel = results_files(shard_dir / "shard-2")
    assert 0 < len(graded_before_cancel) < 3, "cancelled half way"
    refused_record = cluster.wait(cluster.sbatch(EXAMPLE / "merge.sbatch", f"--dependency=afterany:{task}", f"--chdir={shard_dir}", env=env))[0]
    merge_log = (shard_dir / f"attnkit-merge-{refused_record['JobId']}.log").read_text(encoding="utf-8")
    assert exit_code(refused_record) == 2 and "--shard 2/2" in merge_log, merge_log
    # Resubmitted alone, with the same fixed count: it resumes, keeping what it graded before.
    resumed = cluster.sbatch(EXAMPLE / "grade-array.sbatch", "--array=1", "--cpus-per-task=1", f"--chdir={shard_dir}", env=env)
    assert exit_code(cluster.wait(resumed)[0]) == 0
    after = results_files(shard_dir / "shard-2")
    assert len(after) == 3 and all(after[student] == seen for student, seen in graded_before_cancel.items())
    assert exit_code(cluster.wait(cluster.sbatch(EXAMPLE / "merge.sbatch", f"--chdir={shard_dir}", env=env))[0]) == 0
    assert (merged / "grades.csv").read_text(encoding="utf-8") == (tmp_path / "single" / "grades.csv").read_text(encoding="utf-8")

    # A late student: the whole array again; only shard 1 grades anything.
    shutil.copytree(DEMO / LATE / ASSIGNMENT, submitted / LATE / ASSIGNMENT)
    untouched = results_files(shard_dir / "shard-2")
    array, merge = run_command([EXAMPLE / "submit.sh", "--cpus-per-task=1"], env=env, check=True).stdout.split()
    merge_record = cluster.wait(merge)[0]
    assert [exit_code(record) for record in cluster.wait(array)] == [0] * SHARDS
    assert exit_code(merge_record) == 0
    assert results_files(shard_dir / "shard-2") == untouched, "nobody moved to or from shard 2"
    late = rows(merged)
    assert sorted(late) == sorted([*STUDENTS, LATE])
    assert {student: late[student] for student in STUDENTS} == rows(tmp_path / "single")
