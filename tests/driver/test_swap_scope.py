"""Swapped re-runs (issue 23): the reference answers only its own test, text from a swap fork never
carries its answers to the page, and nothing a swap fork leaves reaches the sandbox.

One real class graded by the real CLI: each student leaves ``scaled_attention`` unimplemented, so
the multi-head and future tests re-run with the reference swapped in, and does something hostile
with the stand-in it finds in that fork.
"""

from __future__ import annotations

import json

import pytest
from commands import attnkit

from attacks import ASSIGNMENT, SOLUTION, load, with_cells, write


STUB = """
def scaled_attention(query, key, value, allowed=None):
    raise NotImplementedError()
"""

# Every scaled_attention request the sandbox holds (the plan's hidden inputs), asked of the
# stand-in inside the swap fork, the answers carried out in the exception's message.
HARVESTER = (
    STUB
    + '''
import sys as _sys


def _planned():
    """The plan's requests, decoded and held by the zygote's module (reached through the frames
    of the sandbox's own serving loop, which calls us)."""
    frame = _sys._getframe()
    while frame is not None:
        plan = frame.f_globals.get("_plan")
        if isinstance(plan, tuple) and len(plan) == 2 and isinstance(plan[1], list):
            return plan[1]
        frame = frame.f_back
    return []


def multi_head_attention(*args, **kwargs):
    answers = []
    for item in _planned():
        if isinstance(item, dict) and item.get("op") == "call" and item.get("name") == "scaled_attention":
            try:
                output, _weights = scaled_attention(*item["args"], **item["kwargs"])
                answers += [f"{v:.5f}" for v in output.flatten().tolist()[:40]]
            except Exception:
                pass
    raise ValueError("LEAK:" + ",".join(answers[:300]))
'''
)

# The fork writes what the reference returned into the scratch folders and a shared mapping the
# sandbox made before forking; the sandbox's own scaled_attention (asked for the feedback page's
# heatmaps after the tests) returns it as its weights.
CROSSER = (
    STUB
    + """
import mmap as _mmap
import os as _os
import torch as _torch

_shared = _mmap.mmap(-1, 4096)  # MAP_SHARED: a fork of this process writes into the same page
_places = ["/tmp/attnkit-crossed", _os.path.expanduser("~/attnkit-crossed"), _os.path.abspath("attnkit-crossed")]
_honest_multi_head = multi_head_attention


def multi_head_attention(*args, **kwargs):
    result = _honest_multi_head(*args, **kwargs)
    output = result[0] if isinstance(result, (tuple, list)) else result
    text = "CROSSED " + " ".join(f"{v:.6f}" for v in (output.flatten().tolist() + [0.5] * 9)[:9])
    for place in _places:
        try:
            with open(place, "w") as handle:
                handle.write(text)
        except OSError:
            pass
    _shared.seek(0)
    _shared.write(text.encode().ljust(200, b" "))
    return result


def scaled_attention(query, key, value, allowed=None):
    found = [_shared[:200].decode(errors="replace").strip()]
    for place in _places:
        try:
            with open(place) as handle:
                found.append(handle.read())
        except OSError:
            pass
    for text in found:
        if text.startswith("CROSSED"):
            weights = _torch.tensor([float(v) for v in text.split()[1:10]], dtype=_torch.float64).reshape(3, 3)
            return value, weights
    raise NotImplementedError()
"""
)

# A 16000-position attention asked of the trusted side (each input under the protocol's
# element cap), then the honest computation: the test must still fail.
HUGE = (
    STUB
    + """
import torch as _torch

_honest_multi_head = multi_head_attention


def multi_head_attention(*args, **kwargs):
    big = _torch.zeros(16000, 62)
    try:
        scaled_attention(big, big, big)
    except Exception:
        pass
    return _honest_multi_head(*args, **kwargs)
"""
)

# What the stand-in returned, spelt in the sandbox's peak memory: 300 MB touched in each swapped
# call (the plain run never gets past the stub), for results.json's "max_rss_kb" to show.
SPELLER = (
    STUB
    + """
_honest_multi_head = multi_head_attention
_held = []


def multi_head_attention(*args, **kwargs):
    result = _honest_multi_head(*args, **kwargs)
    if not _held:
        _held.append(bytearray(300 * 1024 * 1024))
    return result
"""
)

STUDENTS = {"honest": STUB, "harvester": HARVESTER, "crosser": CROSSER, "huge": HUGE, "speller": SPELLER, "correct": "pass"}
SWAPPED_NOTE = "这一项用参考的 scaled_attention 代替了你的实现"
OUT_OF_SCOPE = "参考实现只回答这一项自己的输入"


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("swap")
    submitted, out = base / "submitted", base / "out"
    for name, cell in STUDENTS.items():
        write(with_cells(load(SOLUTION), [cell], after_code_cell=-1), submitted / name / ASSIGNMENT)
    run = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1", "--quiet", "--force", script=True)
    assert run.returncode == 0, run.stderr[-3000:]
    pages = {}
    for name in STUDENTS:
        folder = out / "students" / name / ASSIGNMENT
        pages[name] = (json.loads((folder / "results.json").read_text(encoding="utf-8")), (folder / "feedback.html").read_text(encoding="utf-8"))
    return pages


def swapped_tests(results: dict) -> list[dict]:
    return [test for test in results["tests"] if SWAPPED_NOTE in (test.get("output") or "")]


@pytest.mark.e2e
def test_a_correct_function_still_passes_with_the_reference_swapped_in(graded):
    """Is the scope wide enough for honest code: does a correct multi_head_attention, whose own
    scaled_attention is a stub, pass every multi-head test with the reference in its place?"""
    results, _page = graded["honest"]
    multi_head = [test for test in results["tests"] if test.get("grade_id") == "check_multi_head"]
    assert multi_head and all(test["status"] == "passed" for test in multi_head), [(t["name"], t["output"][:300]) for t in multi_head]
    assert all(SWAPPED_NOTE in test["output"] for test in multi_head)


@pytest.mark.e2e
def test_harvested_reference_answers_reach_neither_results_nor_feedback(graded):
    """The lookup leak: a stub that calls the stand-in on every hidden scaled_attention input the
    sandbox holds and raises an exception carrying the answers: are its swapped tests failed as
    out of scope, with none of that text in results.json or feedback.html?"""
    results, page = graded["harvester"]
    text = json.dumps(results, ensure_ascii=False)
    assert "LEAK" not in text and "LEAK" not in page
    swapped = swapped_tests(results)
    assert swapped and all(test["status"] == "failed" for test in swapped)
    assert any(OUT_OF_SCOPE in test["output"] for test in swapped), [t["output"][:300] for t in swapped]


@pytest.mark.e2e
def test_nothing_a_swap_fork_writes_reaches_the_sandbox(graded):
    """The tmpfs crossing: the fork writes the reference's results into /tmp, home, its working
    folder and a shared mapping; the sandbox's own scaled_attention, asked for the page's
    heatmaps after the swapped tests, returns whatever it finds there. Does it find nothing?"""
    results, _page = graded["crosser"]
    swapped = swapped_tests(results)
    # They passed: the fork's code ran to the end, writing everywhere it could.
    assert swapped and all(test["status"] == "passed" for test in swapped), [(t["name"], t["output"][:300]) for t in swapped]
    panels = results.get("evidence", {}).get("panels") or []
    assert panels, "the heatmaps are asked for (scaled_attention's parts failed)"
    assert all(panel.get("student") is None for panel in panels), panels


@pytest.mark.e2e
def test_the_swapped_re_runs_wait_so_one_sandbox_serves_the_whole_submission(graded):
    """The re-runs with the reference swapped in come after every plain call (the tests' own, the
    diagnosis probes, the page's heatmaps): does a submission whose swapped tests all swap the
    same name keep one sandbox throughout, with its results still in the session's order?"""
    results, _page = graded["honest"]
    assert swapped_tests(results), "the multi-head and future tests are re-run with the reference"
    assert results["sandbox"]["replaced_after_swaps"] == 0, results["sandbox"]
    in_order = [(test["grade_id"], test["name"]) for test in graded["correct"][0]["tests"]]  # nothing waited there
    assert [(test["grade_id"], test["name"]) for test in results["tests"]] == in_order


@pytest.mark.e2e
def test_the_usage_in_results_is_the_sandboxs_before_its_swapped_calls(graded):
    """results.json shows the sandbox's peak memory: a notebook that touches 300 MB only once the
    reference's stand-in has answered it (its swapped re-runs, in the sandbox itself) could spell
    the answer in it. Is the peak shown that of before the swapped calls, no higher than an honest
    stub's, while the correct classmate graded beside keeps 100?"""
    speller, honest = graded["speller"][0], graded["honest"][0]
    assert swapped_tests(speller) and all(test["status"] == "passed" for test in swapped_tests(speller))
    assert speller["sandbox"]["max_rss_kb"] < honest["sandbox"]["max_rss_kb"] + 150 * 1024, (speller["sandbox"], honest["sandbox"])
    assert graded["correct"][0]["score"] == graded["correct"][0]["max_score"] == 100


# The fork's writes, in files and a shared mapping; the sandbox's own reader, asked after.
CROSSING = """
import mmap, os
_shared = mmap.mmap(-1, 4096)
_places = ["/tmp/attnkit-crossed", os.path.expanduser("~/attnkit-crossed"), os.path.abspath("attnkit-crossed")]


def helper(x):
    raise NotImplementedError()


def writer(x):
    text = f"CROSSED {helper(x)}"
    for place in _places:
        try:
            with open(place, "w") as handle:
                handle.write(text)
        except OSError:
            pass
    _shared.seek(0)
    _shared.write(text.encode().ljust(200))
    return text


def reader():
    found = [_shared[:200].decode(errors="replace").strip()]
    for place in _places:
        try:
            with open(place) as handle:
                found.append(handle.read())
        except OSError:
            pass
    return [text for text in found if text.startswith("CROSSED")]
"""


@pytest.mark.e2e
def test_a_plain_call_after_swapped_calls_finds_nothing_the_fork_left() -> None:
    """Whatever order the plugin asks in: after calls with the reference swapped in (their fork
    writes the reference's answer to /tmp, home, its folder and a shared mapping), does the next
    plain call run in a replaced sandbox that finds none of it, and is the replacement counted?"""
    from attnkit.notebook import CodeCell
    from attnkit.boundary.policy import Limits
    from attnkit.driver.submission import Submission
    from attnkit.driver.zygote_handle import Zygote

    zygote = Zygote()
    session = Submission(zygote, [CodeCell(0, CROSSING)], Limits())
    try:
        session.start()
        assert session.call("reader", (), {}).value == []
        swapped = session.call_with("writer", (21,), {}, {"helper": lambda x: x * 2})
        assert swapped.value == "CROSSED 42", swapped
        assert session.replaced_after_swaps == 0
        after = session.call("reader", (), {})
        assert after.error_type is None and after.value == [], after
        assert session.replaced_after_swaps == 1
        assert session.call_with("writer", (1,), {}, {"helper": lambda x: x + 1}).value == "CROSSED 2"
    finally:
        session.close()
        zygote.close()


@pytest.mark.e2e
def test_a_huge_callback_is_refused_and_fails_its_test(graded):
    """A 16000x16000 attention asked of the trusted side (today 2-3.5 GiB and 7-8 s per call): is
    it refused, and does the test fail although the code then computes the right answer?"""
    results, _page = graded["huge"]
    swapped = swapped_tests(results)
    assert swapped and all(test["status"] == "failed" and OUT_OF_SCOPE in test["output"] for test in swapped), [
        (t["name"], t["status"], t["output"][:200]) for t in swapped
    ]
    # Each refusal costs a comparison of shapes, not an attention: the whole submission grades
    # in well under one such call's former cost per swapped test.
    assert results["seconds"] < 5 * len(swapped), results["seconds"]


# -- the scope itself, in-process ----------------------------------------------------------------
def test_the_scope_answers_the_planned_call_however_it_is_written_and_nothing_else():
    """Is a planned call answered whether written positionally, with keywords or with its default
    spelled out, and with values equal up to rounding; is any other input refused, counted, and
    a huge one refused without computing it?"""
    import time

    import torch

    from attnkit.assignment.folder import discover
    from attnkit.grading.scope import OutOfScope, ScopedReference, refusals, wire_of_call

    reference = discover()[ASSIGNMENT].catalogue().reference_namespace()["scaled_attention"]
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=generator) for _ in range(3))
    scoped = ScopedReference("scaled_attention", reference, [wire_of_call((q, k, v), {})])
    expected = reference(q, k, v)
    for answer in (scoped(q, k, v), scoped(q, k, v, None), scoped(query=q, key=k, value=v), scoped(q * (1 + 1e-7), k, v)):
        assert torch.allclose(answer[0], expected[0])
    assert scoped.refused == 0 and refusals({"scaled_attention": scoped}) == []
    for other in ((q + 0.01, k, v), (q, k, v, torch.ones(3, 3, dtype=torch.bool)), (q.double(), k.double(), v.double())):
        with pytest.raises(OutOfScope):
            scoped(*other)
    big = torch.zeros(16000, 62)
    started = time.process_time()
    with pytest.raises(OutOfScope):
        scoped(big, big, big)
    assert time.process_time() - started < 0.5  # a 16000x16000 attention takes seconds
    assert scoped.refused == 4 and refusals({"scaled_attention": scoped}) == ["scaled_attention"]


def test_planning_records_the_calls_between_the_notebooks_functions():
    """Does planning see the calls a notebook's multi-head function makes of its own
    scaled_attention (what a swapped-in reference will be asked), not only the test's own?"""
    import torch

    from attnkit.grading.student import LocalBackend
    from attnkit.grading.scope import record_inner_calls

    backend = LocalBackend.from_cells(["def inner(x):\n    return x * 2\n\ndef outer(x):\n    return inner(x + 1)\n"], "<cells>")
    sink: list = []
    record_inner_calls(backend.namespace, ["inner", "outer"], sink)
    backend.call("outer", (torch.ones(2),), {})
    assert [name for name, _wire in sink] == ["outer", "inner"]


QUITTER = """
import os


def helper(x):
    raise NotImplementedError()


def quitter(x):
    if helper(x) == 0:
        os._exit(3)
    return helper(x) + 1
"""


@pytest.mark.e2e
def test_an_exit_in_a_swapped_call_crashes_that_call_only_and_costs_no_restart() -> None:
    """Swapped calls run in the sandbox itself: does a student's exit inside one crash only that
    call, charge no restart (as when a swap fork died), and leave later swapped calls (now in a
    fork) and plain calls working, in a replaced sandbox?"""
    from attnkit.notebook import CodeCell
    from attnkit.boundary.policy import Limits
    from attnkit.driver.submission import CRASHED, Submission
    from attnkit.driver.zygote_handle import Zygote

    zygote = Zygote()
    session = Submission(zygote, [CodeCell(0, QUITTER)], Limits())
    try:
        session.start()
        assert session.call_with("quitter", (4,), {}, {"helper": lambda x: x}).value == 5
        died = session.call_with("quitter", (0,), {}, {"helper": lambda x: x})
        assert died.error_type == CRASHED, died
        assert session.restarts == 0
        for _ in range(3):  # each exit now ends a fork, never the sandbox
            assert session.call_with("quitter", (0,), {}, {"helper": lambda x: x}).error_type == CRASHED
        assert session.call_with("quitter", (6,), {}, {"helper": lambda x: x}).value == 7
        plain = session.call("helper", (1,), {})
        assert plain.error_type == "NotImplementedError", plain
        assert session.restarts == 0 and session.replaced_after_swaps == 1
    finally:
        session.close()
        zygote.close()


# The reference's answer spelt in the sandbox's own usage: memory touched and CPU burnt in a
# swapped call, in proportion to what the stand-in returned (here, 300 MB and a second of CPU).
SPELLER = """
import time


def helper(x):
    raise NotImplementedError()


def speller(x):
    answer = helper(x)
    held = bytearray(answer * 1024 * 1024)  # touched: the peak resident size grows by that much
    started = time.process_time()
    while time.process_time() - started < answer / 300:
        pass
    return len(held) // (1024 * 1024)
"""


@pytest.mark.e2e
def test_a_swapped_call_cannot_spell_the_reference_in_the_sandbox_usage() -> None:
    """Swapped calls run in the sandbox itself, and results.json shows the sandbox's peak memory and
    CPU time: can code that got the reference's answer there spell it in them (300 MB, 1 s of CPU
    for an answer of 300)? The usage shown must be what the sandbox used before its first swapped
    call."""
    from attnkit.notebook import CodeCell
    from attnkit.boundary.policy import Limits
    from attnkit.driver.submission import Submission
    from attnkit.driver.zygote_handle import Zygote

    zygote = Zygote()
    session = Submission(zygote, [CodeCell(0, SPELLER)], Limits())
    try:
        session.start()
        before = session.describe()
        assert before["max_rss_kb"] > 0, before
        spelt = session.call_with("speller", (1,), {}, {"helper": lambda x: 300})
        assert spelt.value == 300, spelt  # it held the answer, and used it
        after = session.describe()
        assert after["max_rss_kb"] < before["max_rss_kb"] + 100 * 1024, (before, after)
        assert after["cpu_seconds"] < before["cpu_seconds"] + 0.5, (before, after)
    finally:
        session.close()
        zygote.close()
