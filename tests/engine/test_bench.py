"""``python tools/bench.py --quick`` runs end to end and prints its figures.

No timing asserts: the machines are shared and noisy. Only that every figure is there and sane.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic_class import ASSIGNMENT, NOTEBOOK, make_class, nbgrader_durations, sample_by_kind, spread
from commands import ROOT, run_command, tool_module

compare_results = tool_module("same_results").compare


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict]:
    figures = tmp_path_factory.mktemp("bench") / "figures.json"
    result = run_command([sys.executable, ROOT / "tools" / "bench.py", "--quick", "--json", figures], timeout=1200)
    assert result.returncode == 0, f"bench failed:\n{result.stdout}\n{result.stderr}"
    return result, json.loads(figures.read_text(encoding="utf-8"))


@pytest.mark.e2e
def test_prints_the_ratio_and_per_submission_figures(quick: tuple[subprocess.CompletedProcess, dict]) -> None:
    out = quick[0].stdout
    assert "ratio (nbgrader ÷ attnkit" in out
    assert "nbgrader autograde" in out
    assert "attnkit --jobs 2" in out
    for column in ("mean s/sub", "median s/sub", "peak Σ RSS", "peak Σ PSS"):
        assert column in out
    for goal in ("submissions in <", "faster per submission", "grows linearly", "one-by-one"):
        assert goal in out
    assert out.count("PASS") + out.count("MISS") == 4
    assert "CPU per submission by process kind" in out
    assert "attnkit's CPU per submission (n=20) by process kind: parent" in out


@pytest.mark.e2e
def test_figures(quick: tuple[subprocess.CompletedProcess, dict]) -> None:
    figures = quick[1]
    assert set(figures["attnkit"]) == {"10", "20"}
    for size, run in figures["attnkit"].items():
        assert run["seconds"] > 0
        assert math.isclose(run["per_submission_mean"], run["seconds"] / int(size))
        assert run["per_submission_median"] > 0
        assert run["peak_rss_bytes"] > 0 and run["peak_pss_bytes"] > 0
    nbgrader = figures["nbgrader"]
    assert nbgrader["count"] == 2 and nbgrader["per_submission_mean"] > 0 and nbgrader["per_submission_median"] > 0
    assert figures["ratio_mean"] > 0
    # Scores do not depend on grading the class at once or one submission per process.
    assert figures["goals"]["same_scores"]["pass"], figures["goals"]["same_scores"]


@pytest.mark.e2e
def test_cpu_by_process_kind(quick: tuple[subprocess.CompletedProcess, dict]) -> None:
    """Issue 55: every kind of process reports its CPU (the sandboxes through their zygote), and
    together they are the whole tree's: what no kind reported ("other": the preflight's own
    process) stays a small part of it."""
    for run in quick[1]["attnkit"].values():
        cpu = run["cpu_ms_per_submission"]
        for kind in ("parent", "worker", "seed", "zygote", "sandbox"):
            assert cpu[kind] > 0, (kind, cpu)
        assert math.isclose(sum(value for kind, value in cpu.items() if kind != "total"), cpu["total"], rel_tol=1e-6)
        assert -0.01 * cpu["total"] < cpu["other"] < 0.1 * cpu["total"], cpu


def test_synthetic_class_is_a_deterministic_mix(tmp_path: Path) -> None:
    first = make_class(tmp_path / "a", 30)
    second = make_class(tmp_path / "b", 30)
    assert first == second
    kinds = set(first.values())
    assert {"correct", "release", "half_3_of_8"} <= kinds
    assert any(kind.startswith("mistake:") for kind in kinds)
    notebooks = sorted((tmp_path / "a").glob(f"*/{ASSIGNMENT}/{NOTEBOOK}"))
    assert len(notebooks) == 30
    assert len({path.read_bytes() for path in notebooks}) == 30  # all distinct: no duplicate shortcuts
    correct = json.loads(notebooks[0].read_text(encoding="utf-8"))
    assert "BEGIN SOLUTION" not in json.dumps(correct)
    release = json.loads(notebooks[4].read_text(encoding="utf-8"))
    assert "NotImplementedError" in json.dumps(release)


def test_sampling_helpers() -> None:
    assert spread(list("abcdefghij"), 5) == list("acegi")
    assert spread(list("abc"), 5) == list("abc")
    roster = {f"s{i}": kind for i, kind in enumerate("aaabbc" * 3)}
    chosen = sample_by_kind(roster, 3)
    assert {roster[s] for s in chosen} == {"a", "b", "c"}


def test_nbgrader_log_parsing() -> None:
    log = "\n".join(
        [
            "22:21:12.287 [AutogradeApp | INFO] Creating/updating student with ID 'a': {}",
            "22:21:12.504 [AutogradeApp | INFO] Autograding x",
            "22:21:17.881 [AutogradeApp | INFO] Setting destination file permissions to 444",
            "[IPKernelApp] WARNING | noise",
            "22:21:17.881 [AutogradeApp | INFO] Creating/updating student with ID 'b': {}",
            "22:21:20.000 [AutogradeApp | INFO] Setting destination file permissions to 444",
            "22:21:23.300 [AutogradeApp | INFO] Setting destination file permissions to 444",
        ]
    )
    assert [round(d, 3) for d in nbgrader_durations(log)] == [5.594, 5.419]


@pytest.mark.e2e
def test_the_profiler_reports_every_phase(tmp_path: Path) -> None:
    """Does ``tools/profile_grading.py`` grade a small synthetic class and print the worker's CPU
    by phase, the sandboxes' CPU and the single requests?"""
    make_class(tmp_path / "submitted", 12)
    result = run_command([sys.executable, ROOT / "tools" / "profile_grading.py", tmp_path / "submitted", "7"], env=os.environ)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("7 submissions, per submission: wall"), out
    for phase in ("open: read, parse", "of which the batches", "tests (", "record (", "of which diagnosis", "close:"):
        assert phase in out, out
    assert "single requests besides the batches" in out


def _results(out: Path, student: str, record: dict) -> None:
    path = out / "students" / student / ASSIGNMENT / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")


def test_same_results_leaves_out_timings_and_nothing_else(tmp_path: Path) -> None:
    """``tools/same_results.py``: two runs that differ only in timings (and the grader's
    fingerprint) are the same; a test's message, a diagnosis or a missing student is not."""
    record = {
        "student_id": "a",
        "score": 7.0,
        "seconds": 0.5,
        "fingerprint": "x",
        "sandbox": {"cpu_seconds": 0.1, "max_rss_kb": 10, "restarts": 0},
        "tests": [{"name": "t", "status": "failed", "message": "m", "diagnoses": ["no_scale"], "seconds": 0.01}],
        "cells": [{"index": 1, "ok": True, "seconds": 0.2}],
        "evidence": {"panels": [{"student": [[0.5, float("nan")]]}]},
    }
    timed_otherwise = json.loads(json.dumps(record))
    timed_otherwise.update(seconds=0.9, fingerprint="y")
    timed_otherwise["sandbox"].update(cpu_seconds=0.3, max_rss_kb=20)
    timed_otherwise["tests"][0]["seconds"] = 0.02
    timed_otherwise["cells"][0]["seconds"] = 0.4
    _results(tmp_path / "first", "a", record)
    _results(tmp_path / "second", "a", timed_otherwise)
    assert compare_results(tmp_path / "first", tmp_path / "second") == (1, [])
    for change in (("message", "n"), ("diagnoses", []), ("status", "passed")):
        other = json.loads(json.dumps(timed_otherwise))
        other["tests"][0][change[0]] = change[1]
        _results(tmp_path / "third", "a", other)
        compared, found = compare_results(tmp_path / "first", tmp_path / "third")
        assert compared == 1 and len(found) == 1 and f".tests[0].{change[0]}" in found[0], found
    restarted = json.loads(json.dumps(timed_otherwise))
    restarted["sandbox"]["restarts"] = 1
    _results(tmp_path / "fourth", "a", restarted)
    _results(tmp_path / "fourth", "b", record)
    compared, found = compare_results(tmp_path / "first", tmp_path / "fourth")
    assert compared == 1 and any("restarts" in line for line in found) and any("only in" in line and "/b/" in line for line in found), found
