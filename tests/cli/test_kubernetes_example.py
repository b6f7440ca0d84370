"""Does examples/kubernetes/ grade every shard exactly once, merge exactly those, under RuntimeDefault?

The Indexed Job's shell command is run by a real /bin/sh for each JOB_COMPLETION_INDEX the Job
creates, with `attnkit` replaced by a function that prints its arguments; those arguments are then
parsed by attnkit's own command-line parser, so a wrong shard syntax or an unknown option fails here.

No cluster runs here: every manifest is validated offline, strictly (no unknown field), against
the API schemas of several Kubernetes versions (kubernetes-validate, a dev dependency).
"""

from __future__ import annotations

import math
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from attnkit.cli import build_parser
from attnkit.course.settings import KitSettings, command_line_values
from commands import run_command

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"


def job(name: str) -> dict:
    document = yaml.safe_load((EXAMPLE / name).read_text(encoding="utf-8"))
    assert document["kind"] == "Job" and document["apiVersion"] == "batch/v1", document
    return document


def container_env(container: dict) -> dict[str, str]:
    """The variables Kubernetes gives ``container``: plain values, a resource limit through
    the downward API (rounded up to the divisor, as the kubelet does), the pod's name, a Secret's
    key (a stand-in naming it)."""
    found = {}
    for variable in container.get("env", []):
        if "value" in variable:
            found[variable["name"]] = str(variable["value"])
        elif "fieldRef" in variable["valueFrom"]:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            found[variable["name"]] = "attnkit-serve-7d9f-x2x4q"
        elif "secretKeyRef" in variable["valueFrom"]:
            secret = variable["valueFrom"]["secretKeyRef"]
            found[variable["name"]] = f"secret:{secret['name']}/{secret['key']}"
        else:
            field = variable["valueFrom"]["resourceFieldRef"]
            kind, resource = field["resource"].split(".")
            limit = str(container["resources"][kind][resource])
            cpus = float(limit[:-1]) / 1000 if limit.endswith("m") else float(limit)
            found[variable["name"]] = str(math.ceil(cpus / float(field.get("divisor", "1"))))
    return found


def grade_arguments(container: dict, index: int) -> list[str]:
    """What the pod with this completion index passes to `attnkit`, as its shell computes it."""
    shell, flag, script = [*container["command"], *container["args"]]
    assert (shell, flag) == ("/bin/sh", "-c")
    printed = run_command(
        [shell, "-c", "attnkit() { printf '%s\\n' \"$@\"; }\n" + script.replace("exec attnkit", "attnkit")],
        env={**container_env(container), "JOB_COMPLETION_INDEX": str(index), "PATH": "/usr/bin:/bin"},
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
    merged = build_parser().parse_args(grade_arguments(merge, 0))
    assert merged.command == "merge"
    assert sorted(str(folder) for folder in merged.shards) == sorted(outs)


def test_both_jobs_run_under_the_runtime_default_seccomp_profile() -> None:
    for name in ("grade-job.yaml", "merge-job.yaml"):
        pod = job(name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            profile = container.get("securityContext", {}).get("seccompProfile")
            assert profile in (None, {"type": "RuntimeDefault"}), (name, profile)
            assert "--no-isolation" not in str(container), name


# Several minor versions: 1.29 is the first whose Job has backoffLimitPerIndex and
# podReplacementPolicy on by default (beta; GA in 1.33 and 1.34); the newest the validator knows.
VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.33.0", "1.35.0", "1.37.0"]
MANIFESTS = ["grade-job.yaml", "merge-job.yaml", "volumes.yaml", "serve-deployment.yaml"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_api_schema_of(version: str) -> None:
    assert version in kubernetes_validate.utils.all_versions()
    for name in MANIFESTS:
        for document in yaml.safe_load_all((EXAMPLE / name).read_text(encoding="utf-8")):
            # strict: an unknown or misspelt field (backofLimitPerIndex) is an error, not ignored.
            kubernetes_validate.validate(document, version, strict=True)


def test_the_schema_check_can_fail() -> None:
    document = job("grade-job.yaml")
    document["spec"]["backofLimitPerIndex"] = document["spec"].pop("backoffLimitPerIndex")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, VERSIONS[-1], strict=True)


def test_retries_are_per_shard_and_follow_attnkits_exit_codes() -> None:
    """Each index has its own retries; exit 2 (grading cannot run here) fails that index at once,
    exit 1 (a submission not graded) is retried, and a disrupted pod costs no retry."""
    spec = job("grade-job.yaml")["spec"]
    assert spec["backoffLimitPerIndex"] >= 1 and "backoffLimit" not in spec
    assert spec["podReplacementPolicy"] == "Failed"
    rules = spec["podFailurePolicy"]["rules"]
    assert all(rule["action"] in ("FailJob", "FailIndex", "Ignore", "Count") for rule in rules)
    by_code = {}
    for rule in rules:
        if "onExitCodes" in rule and rule["onExitCodes"]["operator"] == "In":
            by_code.update(dict.fromkeys(rule["onExitCodes"]["values"], rule["action"]))
    assert by_code.get(2) == "FailIndex"
    assert by_code.get(1, "Count") == "Count"
    assert any(rule["action"] == "Ignore" and rule.get("onPodConditions", [{}])[0].get("type") == "DisruptionTarget" for rule in rules)


def test_a_retried_shard_resumes_and_every_pod_has_resources_and_the_language() -> None:
    grading, merging = job("grade-job.yaml"), job("merge-job.yaml")
    (grade,) = grading["spec"]["template"]["spec"]["containers"]
    (merge,) = merging["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(grade_arguments(grade, 0))
    assert not args.force, "a retried pod resumes its shard; --force would regrade it all"
    assert args.jobs == int(grade["resources"]["limits"]["cpu"]), "one worker per CPU of the limit"
    merged = build_parser().parse_args(grade_arguments(merge, 0))
    assert args.lang == merged.lang == container_env(grade)["ATTNKIT_LANG"]
    assert merged.gradebook is not None and merged.submitted == args.submitted
    for container in (grade, merge):
        assert container["resources"]["requests"] and container["resources"]["limits"], container["name"]


def test_the_volumes_the_jobs_mount_are_claimed_and_reachable_for_copying() -> None:
    documents = list(yaml.safe_load_all((EXAMPLE / "volumes.yaml").read_text(encoding="utf-8")))
    claims = {d["metadata"]["name"] for d in documents if d["kind"] == "PersistentVolumeClaim"}
    for name in ("grade-job.yaml", "merge-job.yaml"):
        volumes = job(name)["spec"]["template"]["spec"]["volumes"]
        assert {v["persistentVolumeClaim"]["claimName"] for v in volumes} <= claims, name
    (transfer,) = [d for d in documents if d["kind"] == "Pod"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in transfer["spec"]["volumes"]} == claims
    steps = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    assert "kubectl cp" in steps and "attnkit-transfer:/course/submitted" in steps and "attnkit-transfer:/shards/class" in steps


def deployment() -> dict:
    document = yaml.safe_load((EXAMPLE / "serve-deployment.yaml").read_text(encoding="utf-8"))
    assert document["kind"] == "Deployment" and document["apiVersion"] == "apps/v1", document
    return document


def test_the_serve_replicas_share_a_queue_from_a_secret_and_are_probed_on_health() -> None:
    """Several replicas, each `attnkit serve` with its pod's name, its queue's URL from a Secret
    (never in the manifest), /health and /metrics where the readiness probe looks (not only on
    127.0.0.1), one warm worker per CPU of the limit, under RuntimeDefault."""
    spec = deployment()["spec"]
    assert spec["replicas"] >= 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container.get("securityContext", {}).get("seccompProfile") in (None, {"type": "RuntimeDefault"})
    assert "--no-isolation" not in str(container)
    environment = container_env(container)
    assert environment["ATTNKIT_QUEUE_URL"] == "secret:attnkit-database/url", "the database URL comes from the Secret"
    assert "postgresql" not in str(container), "no URL (and no password) in the manifest"
    args = build_parser().parse_args(grade_arguments(container, 0))
    given = command_line_values(args)
    settings = KitSettings.load(None, given, {})  # what the command line makes of the declared settings (course.settings)
    assert args.command == "serve" and given["AttnkitServe.queue_url"] is None, "the URL is read from ATTNKIT_QUEUE_URL, not the command line"
    assert args.replica_id == environment["POD_NAME"], "each replica named after its pod"
    assert args.jobs == int(container["resources"]["limits"]["cpu"]), "one warm worker per CPU of the limit"
    assert settings.serve.metrics_host == "0.0.0.0", "the kubelet's probe comes from outside the pod's loopback"
    assert 0 < settings.serve.lease_seconds <= pod["terminationGracePeriodSeconds"]
    probe = container["readinessProbe"]["httpGet"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert probe["path"] == "/health" and ports[probe["port"]] == args.metrics_port
    assert container["resources"]["requests"] and container["resources"]["limits"]
    claims = {d["metadata"]["name"] for d in yaml.safe_load_all((EXAMPLE / "volumes.yaml").read_text(encoding="utf-8")) if d["kind"] == "PersistentVolumeClaim"}
    assert {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]} <= claims


def test_the_deployments_schema_check_can_fail() -> None:
    document = deployment()
    document["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paths"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, VERSIONS[-1], strict=True)
