"""Turn a worker's record into the results.json contract (Gradescope's schema plus diagnoses)."""

from __future__ import annotations

from typing import Any

# The notebook's autograded grade cells, in notebook order, with the chapter section each covers.
PARTS: dict[str, str] = {
    "check_scaled_attention": "缩放点积注意力（第 1–4 节）",
    "check_masking": "带掩码的注意力（第 5、7 节）",
    "check_empty_row": "整行被屏蔽时报错（第 5 节）",
    "check_masks": "因果掩码与填充掩码（第 5 节）",
    "check_future": "修改未来位置的实验（第 7 节）",
    "check_heads": "拆分与合并多头（第 6 节）",
    "check_multi_head": "多头注意力（第 6 节）",
    "check_shape_trace": "形状追踪（第 6 节）",
    "check_self_test": "自测题（第 8 节）",
}

# The parts whose failures the attention weights can explain: the feedback page shows the
# student's weights beside the expected ones when one of these fails.
HEATMAP_PARTS = frozenset({"check_scaled_attention", "check_masking", "check_future"})


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def results_json(record: dict[str, Any]) -> dict[str, Any]:
    """The per-submission results.json: Gradescope's keys first, then ours."""
    tests = record.get("tests", [])
    parts: dict[str, dict[str, float]] = {grade_id: {"score": 0.0, "max_score": 0.0} for grade_id in PARTS}
    for test in tests:
        part = parts.setdefault(test.get("grade_id") or "other", {"score": 0.0, "max_score": 0.0})
        part["score"] += test["score"]
        part["max_score"] += test["max_score"]
    return {
        "score": round(sum(t["score"] for t in tests), 4),
        "max_score": round(sum(t["max_score"] for t in tests), 4),
        "output_format": "text",
        "tests": [
            {
                "name": t["name"],
                "score": t["score"],
                "max_score": t["max_score"],
                "output": t["output"],
                "status": t["status"],
                "grade_id": t["grade_id"],
                "diagnoses": t["diagnoses"],
                **{key: t[key] for key in ("substituted", "functions", "error") if t.get(key)},
            }
            for t in tests
        ],
        "diagnoses": unique([d for t in tests for d in t["diagnoses"]]),
        "student_id": record["student_id"],
        "assignment": record["assignment"],
        "fingerprint": record["fingerprint"],
        "parts": parts,
        "problems": record.get("problems", []),
        "notes": record.get("notes", []),
        "cells": [c for c in record.get("cells", []) if not c.get("ok")],
        "sandbox": record.get("sandbox", {}),
        "evidence": record.get("evidence", {}),
        "seconds": round(record.get("seconds", 0.0), 4),
    }
