"""Batched grading: a submission's cells go to its sandbox in one batch, and the requests its hidden
tests will make (learned once per worker on the source notebook: the plan) are answered in a
second. These tests hold that to "exactly what asking one by one gives", with real sandboxes, for
right and wrong submissions and for the ones that hang, exit or run out of time."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import pytest

from attnkit.grading import sandbox_provider
from attnkit.constants import TIMEOUT
from attnkit.intake.jobs import find_jobs
from attnkit.notebook import CodeCell
from attnkit.boundary.policy import Limits
from attnkit.driver.submission import Submission
from attnkit.driver.zygote_handle import Zygote
from attnkit.engine.worker import run_chunk

ROOT = Path(__file__).resolve().parents[2]

from contract import CH19, comparable, write_submission

CATALOGUE = CH19.catalogue()

# Each replaces functions of the model answers by a later cell (a later definition wins).
OVERRIDES: dict[str, str] = {
    "correct": "",
    "no_scale": CATALOGUE.by_id("no_scale").source,
    "mask_after_softmax": CATALOGUE.by_id("mask_after_softmax").source,
    "causal_excludes_diagonal": CATALOGUE.by_id("causal_excludes_diagonal").source,
    "split_without_transpose": CATALOGUE.by_id("split_without_transpose").source,
    "raises": "def padding_allowed(lengths, size):\n    raise NotImplementedError()\n",
    "hangs_on_heads": "def split_heads(x, num_heads):\n    while True:\n        pass\n",
    "exits_in_merge": "import os\ndef merge_heads(x):\n    os._exit(3)\n",
    "wrong_answers": "trace_split = (1, 2)\nanswer_growth_factor = 2\n",
}


def grade(submitted: Path, limits: Limits, prefetch: bool, monkeypatch: pytest.MonkeyPatch, assignment: Any = CH19) -> tuple[dict[str, dict], dict[str, int]]:
    """Grade ``submitted`` in this process (one chunk, a real zygote): records by student and the
    number of single requests each submission's sandbox was sent."""
    sandbox_provider._plans.clear()
    requests: dict[str, int] = {}
    current = [""]
    original = Submission._request

    def counting(self: Submission, message: dict, *args: Any, **kwargs: Any) -> dict:
        requests[current[0]] = requests.get(current[0], 0) + 1
        return original(self, message, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Submission, "_request", counting)
        if not prefetch:
            patch.setattr(sandbox_provider.SandboxProvider, "_prefetch", lambda self, student, session: None)
        records: list[dict] = []

        def emit(message: dict) -> None:
            if "started" in message:
                current[0] = message["key"].split("/")[0]
            elif "record" in message:
                records.append(message["record"])

        zygote = Zygote()
        try:
            suites = {assignment.name: assignment}
            run_chunk(find_jobs(submitted, suites).jobs, suites, limits, zygote, emit)
        finally:
            zygote.close()
    sandbox_provider._plans.clear()
    return {record["student_id"]: record for record in records}, requests


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, dict, dict]:
    submitted = tmp_path_factory.mktemp("prefetch") / "submitted"
    for student, override in OVERRIDES.items():
        write_submission(submitted, student, override)
    limits = Limits(call_seconds=2.0, cell_seconds=5.0)
    with pytest.MonkeyPatch.context() as monkeypatch:
        batched, batched_requests = grade(submitted, limits, True, monkeypatch)
        single, single_requests = grade(submitted, limits, False, monkeypatch)
    return batched, single, batched_requests, single_requests


@pytest.mark.e2e
def test_batched_answers_grade_exactly_like_single_requests(both_ways) -> None:
    """Does every submission (right, wrong, raising, hanging, exiting) get the same scores,
    messages, diagnoses and cell results with the plan's answers fetched in one batch as when
    each request goes alone?"""
    batched, single, _, _ = both_ways
    assert set(batched) == set(single) == set(OVERRIDES)
    for student in OVERRIDES:
        assert comparable(batched[student]) == comparable(single[student]), student
    assert all(t["status"] == "passed" for t in batched["correct"]["tests"])
    assert any(t["status"] == "failed" for t in batched["hangs_on_heads"]["tests"])
    assert any("no_scale" in (t.get("diagnoses") or []) for t in batched["no_scale"]["tests"])


@pytest.mark.e2e
def test_the_batch_replaces_the_round_trips(both_ways) -> None:
    """Is a correct submission graded with a handful of single requests instead of one per cell
    and per call (so the batch is really used), while a wrong one still asks what it must?"""
    _, _, batched_requests, single_requests = both_ways
    assert single_requests["correct"] > 50, single_requests
    assert batched_requests.get("correct", 0) <= 3, batched_requests  # absent: not one
    assert batched_requests["no_scale"] < single_requests["no_scale"]


@pytest.mark.e2e
def test_sandboxes_forked_holding_the_plan_grade_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the zygote holds the plan, its sandboxes have it decoded from the fork: is each asked
    for it in a few bytes instead of the whole batch, and does every submission (right, wrong,
    hanging, exiting) grade exactly as when its sandbox is sent the whole batch (here: where the
    plan cannot be handed to the zygote at all)?"""
    students = ["correct", "no_scale", "hangs_on_heads", "exits_in_merge", "mask_after_softmax", "raises"]
    for student in students:
        write_submission(tmp_path, student, OVERRIDES[student])
    limits = Limits(call_seconds=2.0, cell_seconds=5.0)
    frames: list[int] = []
    original = Submission.prefetch

    def recording(self: Submission, requests: list[dict], frame: bytes | None = None) -> list:
        if frame is not None:  # the plan's batch (calls a check asks ahead come without a frame)
            frames.append(len(frame))
        return original(self, requests, frame)

    monkeypatch.setattr(Submission, "prefetch", recording)
    held, _ = grade(tmp_path, limits, True, monkeypatch)
    held_frames = list(frames)
    frames.clear()

    def no_memfd(*args: Any) -> int:
        raise OSError("no memfd on this system")

    monkeypatch.setattr(os, "memfd_create", no_memfd)  # the zygote cannot be handed the plan
    sent, _ = grade(tmp_path, limits, True, monkeypatch)
    assert len(held_frames) == len(frames) == len(students)
    whole = max(frames)
    assert min(frames) == whole > 10_000
    # The plan is handed over as soon as planning ends, before the first sandbox is forked.
    assert all(size < 200 for size in held_frames), held_frames
    for student in students:
        assert comparable(held[student]) == comparable(sent[student]), student
    assert any(t["status"] == "failed" for t in held["hangs_on_heads"]["tests"])


@pytest.mark.e2e
def test_a_stateful_submission_grades_the_same_alone_and_in_a_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A function that changes with every call sees the plan's requests in the plan's order: is
    its grade the same whether it is graded alone or after others in the same worker?"""
    counter = (
        "_calls = [0]\n_model = scaled_attention\ndef scaled_attention(*args, **kwargs):\n    _calls[0] += 1\n"
        "    output, weights = _model(*args, **kwargs)\n    return (output * 2, weights) if _calls[0] % 5 == 0 else (output, weights)\n"
    )
    alone, with_others = tmp_path / "alone", tmp_path / "class"
    write_submission(alone, "s1", counter)
    for student, override in (("s0", ""), ("s1", counter), ("s2", OVERRIDES["no_scale"])):
        write_submission(with_others, student, override)
    first, _ = grade(alone, Limits(), True, monkeypatch)
    second, _ = grade(with_others, Limits(), True, monkeypatch)
    assert comparable(first["s1"]) == comparable(second["s1"])
    assert any(t["status"] == "failed" for t in first["s1"]["tests"])


@pytest.mark.e2e
def test_the_time_budget_holds_across_a_batch() -> None:
    """Functions that each take 0.3 s, with a 1 s budget for all calls: does the batch stop about
    when asking one by one would have, the later calls refused with the budget's message?"""
    zygote = Zygote()
    limits = Limits(call_seconds=5.0, submission_seconds=1.0)
    source = "import time\ndef f(x):\n    time.sleep(0.3)\n    return x\n"
    session = Submission(zygote, [CodeCell(0, source)], limits)
    try:
        session.start()
        started = time.monotonic()
        requests = [{"op": "call", "name": "f", "args": [n], "kwargs": {}} for n in range(20)]
        outcomes = session.prefetch(requests)
        elapsed = time.monotonic() - started
        assert 3 <= len(outcomes) <= 6 and all(o.value == n for n, o in enumerate(outcomes)), outcomes
        assert elapsed < 1.0 + 0.3 + 1.0, elapsed
        refused = session.call("f", (1,), {})
        assert refused.error_type == TIMEOUT and "总运行时间" in refused.message, refused
    finally:
        session.close()
        zygote.close()


@pytest.mark.e2e
def test_cells_past_the_notebook_limit_are_not_run() -> None:
    """Cells that each take 0.4 s with a 1 s limit for the notebook: are the cells past the limit
    reported as not run (the batch does not run the whole notebook regardless)?"""
    zygote = Zygote()
    limits = Limits(cell_seconds=5.0, notebook_seconds=1.0)
    cells = [CodeCell(n, f"import time\ntime.sleep(0.4)\nx{n} = {n}") for n in range(8)]
    session = Submission(zygote, cells, limits)
    try:
        started = time.monotonic()
        session.start()
        elapsed = time.monotonic() - started
        ran = [run for run in session.runs if run.ok]
        assert 2 <= len(ran) <= 4, session.runs
        assert all(not run.ok and "未运行" in run.message for run in session.runs[len(ran) :]), session.runs
        assert elapsed < 1.0 + 0.4 + 1.0, elapsed
    finally:
        session.close()
        zygote.close()


@pytest.mark.e2e
def test_a_cell_that_hangs_mid_batch_costs_only_itself() -> None:
    """A notebook whose third cell loops forever: are the cells after it still run (on a
    recovered sandbox, with the first two re-run), and the hang named?"""
    zygote = Zygote()
    cells = [CodeCell(0, "a = 1"), CodeCell(1, "b = a + 1"), CodeCell(2, "while True:\n    pass"), CodeCell(3, "c = b + 1"), CodeCell(4, "d = c + 1")]
    session = Submission(zygote, cells, Limits(cell_seconds=1.0))
    try:
        session.start()
        assert [run.ok for run in session.runs] == [True, True, False, True, True], session.runs
        assert session.runs[2].error_type == TIMEOUT, session.runs[2]
        assert session.variable("d").value == 4
        assert session.restarts == 1
    finally:
        session.close()
        zygote.close()


@pytest.mark.e2e
def test_a_plan_from_a_notebook_of_stubs_changes_no_grade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the only notebook beside the suite is the release (stubs: a Gradescope bundle), the
    plan is learned from stubs and asks little: are the grades still exactly those of single
    requests?"""
    release = dataclasses.replace(CH19, source=ROOT / "assignments" / CH19.name / CH19.notebook)
    submitted = tmp_path / "submitted"
    for student in ("correct", "no_scale", "raises"):
        write_submission(submitted, student, OVERRIDES[student])
    planned, _ = grade(submitted, Limits(), True, monkeypatch, assignment=release)
    single, _ = grade(submitted, Limits(), False, monkeypatch, assignment=release)
    assert {s: comparable(r) for s, r in planned.items()} == {s: comparable(r) for s, r in single.items()}
    assert all(t["status"] == "passed" for t in planned["correct"]["tests"])


# A wrong scale no catalogue entry reproduces (so the masking, empty-row and future tests judge it
# against its own attention: one call per pattern of allowed keys), and the same that, called on
# exactly two keys without a mask, hangs: a sub-problem of the section 7 causal case, asked ahead
# in a batch.
FOURTH_ROOT_SCALE = CATALOGUE.by_id("no_scale").source.replace(
    "scores = query @ key.transpose(-2, -1)\n", "scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.25\n", 1
)
HANGS_ON_TWO_KEYS = FOURTH_ROOT_SCALE.replace(
    "def scaled_attention(query, key, value, allowed=None):\n",
    "def scaled_attention(query, key, value, allowed=None):\n    while allowed is None and key.shape[-2] == 2:\n        pass\n",
    1,
)
ASKED_AHEAD = {
    "fourth_root_scale": FOURTH_ROOT_SCALE,
    "scale_by_dk": CATALOGUE.by_id("scale_by_dk").source,
    "mask_after_softmax": CATALOGUE.by_id("mask_after_softmax").source,
    "hangs_on_two_keys": HANGS_ON_TWO_KEYS,
}


def one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call asked alone: nothing asked ahead, every diagnosis probe on its own."""
    from attnkit.grading.student import Student

    monkeypatch.setattr(Student, "ask_ahead", lambda self, calls: None)
    monkeypatch.setattr(Student, "probe_many", lambda self, calls: [self.probe(name, args, kwargs) for name, args, kwargs in calls])


@pytest.mark.e2e
def test_calls_asked_ahead_grade_exactly_like_calls_asked_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that calls the student's function once per sub-problem (a wrong scale judged against
    its own attention), the catalogue's diagnosis probes and the page's heatmaps ask their calls
    ahead in one batch (``Student.ask_ahead``, ``Student.probe_many``): is every result, the
    heatmaps and a hang in the middle of such a batch included, what asking each alone gives, with
    fewer round trips?"""
    assert "** 0.25" in FOURTH_ROOT_SCALE and "while allowed is None" in HANGS_ON_TWO_KEYS
    submitted = tmp_path / "submitted"
    for student, override in ASKED_AHEAD.items():
        write_submission(submitted, student, override)
    limits = Limits(call_seconds=1.0, cell_seconds=5.0)
    ahead, ahead_requests = grade(submitted, limits, True, monkeypatch)
    with monkeypatch.context() as patch:
        one_by_one(patch)
        alone, alone_requests = grade(submitted, limits, True, patch)
    assert set(ahead) == set(alone) == set(ASKED_AHEAD)
    for student in ASKED_AHEAD:
        assert comparable(ahead[student]) == comparable(alone[student]), student
        assert ahead[student].get("evidence") == alone[student].get("evidence"), student
    # The judged-by-own path ran (a wrong scale is not charged again for masking) ...
    judged = [t for t in ahead["fourth_root_scale"]["tests"] if "按你自己的" in (t.get("output") or "")]
    assert judged and all(t["status"] == "passed" for t in judged), ahead["fourth_root_scale"]["tests"]
    # ... and the hang, met on a call asked ahead (the section 7 causal case's row with two keys),
    # cost that judgement only: the other tests judged against its own attention still pass.
    status = {student: {t["nodeid"].split("::")[-1]: t["status"] for t in ahead[student]["tests"]} for student in ("fourth_root_scale", "hangs_on_two_keys")}
    assert status["fourth_root_scale"]["test_section7_causal"] == "passed" and status["hangs_on_two_keys"]["test_section7_causal"] == "failed", status
    assert status["hangs_on_two_keys"]["test_padding_mask_broadcast"] == "passed", status
    for student in ("fourth_root_scale", "scale_by_dk"):
        assert ahead_requests[student] < alone_requests[student] - 3, (ahead_requests, alone_requests)
