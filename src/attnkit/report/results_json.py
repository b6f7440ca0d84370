"""Turn a worker's record into the results.json contract (Gradescope's schema plus diagnoses)."""

from __future__ import annotations

import heapq
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from attnkit.assignment.folder import Assignment
from attnkit.files import readable_json
from attnkit.i18n import N_, _
from attnkit.report.isolation_level import level as isolation_level
from attnkit.records import PartScore, ResultsJson, SubmissionRecord

Results = TypeVar("Results", bound=Mapping[str, Any])  # a results.json, typed or as read back

# Per-student output caps, whatever the notebook prints or raises: each message is cut to a fixed
# size, and the whole results.json (feedback.html) is then cut, largest text first, to stay
# under its cap. The grader's own fields (scores, ids, digests) are never cut.
MAX_TEXT = 2_000  # characters of one message, output, problem or note
MAX_ITEMS = 100  # failed cells, problems, notes kept per submission
MAX_RESULTS_BYTES = 1_000_000
MAX_FEEDBACK_BYTES = 4_000_000
TRUNCATED_NOTE = N_("反馈内容过长，部分信息已被截断（评分不受影响）")


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def clip(text: Any, limit: int = MAX_TEXT) -> str:
    """``text`` (whatever came back) as a string of at most about ``limit`` characters."""
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[:limit] + _("……（已截断，共 {count} 个字符）").format(count=len(text))


def _clip_items(items: list[Any], limit: int = MAX_ITEMS) -> list[str]:
    kept = [clip(item) for item in items[:limit]]
    if len(items) > limit:
        kept.append(_("……另有 {count} 条未显示").format(count=len(items) - limit))
    return kept


def _student_texts(results: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """(container, key) of every field whose text the submission controls."""
    places: list[tuple[Any, Any]] = [(t, "output") for t in results["tests"]]
    places += [(cell, key) for cell in results["cells"] for key in ("message", "output")]
    places += [(results[name], i) for name in ("problems", "notes") for i in range(len(results[name]))]
    return places


def fit(results: Results, max_bytes: int = MAX_RESULTS_BYTES) -> Results:
    """Cut the longest texts (in place) until the JSON encoding is at most ``max_bytes``.

    The longest text is halved, again and again (the first of equal ones first). Each cut
    changes the encoding by exactly its text's own encoded size (``readable_json`` writes every
    string with the same encoder), so the size is counted down instead of re-encoding the whole
    record per cut: a hostile record needing thousands of cuts then costs milliseconds, not the
    seconds of a re-encoding per cut that would hold up every other submission's record."""
    cut = False
    size = _encoded_size(results)
    if size > max_bytes:
        # The longest first; of equal lengths, the first in _student_texts' order.
        places = enumerate(_student_texts(results))
        longest = [(-len(container[key]), order, container, key) for order, (container, key) in places if isinstance(container[key], str)]
        heapq.heapify(longest)
        while size > max_bytes and longest:
            _negative_length, order, container, key = heapq.heappop(longest)
            text = container[key]
            if len(text) <= 16:
                break
            shorter = text[: len(text) // 2] + _("……（已截断）")
            size += _string_size(shorter) - _string_size(text)
            container[key] = shorter
            cut = True
            heapq.heappush(longest, (-len(shorter), order, container, key))
    if cut and _(TRUNCATED_NOTE) not in results["notes"]:
        results["notes"].append(_(TRUNCATED_NOTE))
    return results


def _encoded_size(results: Mapping[str, Any]) -> int:
    return len(readable_json(results).encode())  # as results.json is written


def _string_size(text: str) -> int:
    """What one string adds to ``readable_json``'s bytes (quotes and escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode())


def results_json(record: SubmissionRecord, assignment: Assignment) -> ResultsJson:
    """The per-submission results.json: Gradescope's keys first, then ours. Texts that come from
    the submission are cut to fixed sizes, and the whole stays under MAX_RESULTS_BYTES."""
    tests = record.get("tests", [])
    parts: dict[str, PartScore] = {grade_id: {"score": 0.0, "max_score": 0.0} for grade_id in assignment.parts}
    for test in tests:
        part = parts.setdefault(test.get("grade_id") or "other", {"score": 0.0, "max_score": 0.0})
        part["score"] += test["score"]
        part["max_score"] += test["max_score"]
    results: ResultsJson = {
        "score": round(sum(t["score"] for t in tests), 4),
        "max_score": round(sum(t["max_score"] for t in tests), 4),
        "output_format": "text",
        "tests": [
            {
                "name": t["name"],
                "score": t["score"],
                "max_score": t["max_score"],
                "output": clip(t["output"]),
                "status": t["status"],
                "grade_id": t["grade_id"],
                "diagnoses": t["diagnoses"],
                # Only when not empty (ResultsTest: NotRequired), by keys mypy cannot follow through the loop.
                **{key: t[key] for key in ("substituted", "functions", "error", "charge", "concept") if t.get(key)},  # type: ignore[typeddict-item]
            }
            for t in tests
        ],
        "diagnoses": unique([d for t in tests for d in t["diagnoses"]]),
        "student_id": record["student_id"],
        "assignment": record["assignment"],
        "fingerprint": record["fingerprint"],
        "parts": parts,
        "problems": _clip_items(record.get("problems", [])),
        "notes": _clip_items(record.get("notes", [])),
        "cells": [
            {
                **c,
                "message": clip(c.get("message", "")),
                "output": clip(c.get("output", "")),
                "error_type": clip(c.get("error_type", ""), 200),
                "text": clip(c.get("text", ""), 300),
            }
            for c in [c for c in record.get("cells", []) if not c.get("ok")][:MAX_ITEMS]
        ],
        "sandbox": record.get("sandbox", {}),
        "isolation": isolation_level(record.get("sandbox", {}).get("isolation", [])),
        "evidence": record.get("evidence", {}),
        "seconds": round(record.get("seconds", 0.0), 4),
        "notebooks": record.get("notebooks", []),
        "not_graded": record.get("not_graded", ""),
    }
    return fit(results)
