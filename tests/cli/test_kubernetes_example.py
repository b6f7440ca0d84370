"""Does examples/kubernetes/ grade every shard exactly once, merge exactly those, under RuntimeDefault?

The Indexed Job's shell command is run by a real /bin/sh for each JOB_COMPLETION_INDEX the Job
creates, with `attnkit` replaced by a function that prints its arguments; those arguments are then
parsed by attnkit's own command-line parser, so a wrong shard syntax or an unknown option fails here.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from attnkit.cli import build_parser
from commands import run_command

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"


def job(name: str) -> dict:
    document = yaml.safe_load((EXAMPLE / name).read_text(encoding="utf-8"))
    assert document["kind"] == "Job" and document["apiVersion"] == "batch/v1", document
    return document


def grade_arguments(container: dict, index: int) -> list[str]:
    """What the pod with this completion index passes to `attnkit`, as its shell computes it."""
    shell, flag, script = [*container["command"], *container["args"]]
    assert (shell, flag) == ("/bin/sh", "-c")
    printed = run_command(
        [shell, "-c", "attnkit() { printf '%s\\n' \"$@\"; }\n" + script.replace("exec attnkit", "attnkit")],
        env={"JOB_COMPLETION_INDEX": str(index), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return printed.stdout.splitlines()


def test_the_indexed_job_grades_each_shard_once_and_the_merge_takes_them_all() -> None:
    grading, merging = job("grade-job.yaml"), job("merge-job.yaml")
    spec = grading["spec"]
    assert spec["completionMode"] == "Indexed"
    count = spec["completions"]
    (container,) = spec["template"]["spec"]["containers"]
    shards, outs = [], []
    for index in range(count):
        args = build_parser().parse_args(grade_arguments(container, index))
        assert args.command == "grade"
        shards.append(args.shard)
        outs.append(str(args.out))
    assert sorted(shards) == [(i, count) for i in range(1, count + 1)], shards
    assert len(set(outs)) == count, outs

    (merge,) = merging["spec"]["template"]["spec"]["containers"]
    merged = build_parser().parse_args(merge["command"][1:])
    assert merge["command"][0] == "attnkit"
    assert sorted(str(folder) for folder in merged.shards) == sorted(outs)


def test_both_jobs_run_under_the_runtime_default_seccomp_profile() -> None:
    for name in ("grade-job.yaml", "merge-job.yaml"):
        pod = job(name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            profile = container.get("securityContext", {}).get("seccompProfile")
            assert profile in (None, {"type": "RuntimeDefault"}), (name, profile)
            assert "--no-isolation" not in str(container), name
