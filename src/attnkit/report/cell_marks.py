"""The feedback in machine form for the student's JupyterLab (issue 51): one mark per graded function.

The kit's lab extension (labextension/) marks the cell that defines each graded function: full
marks or the points lost, and on the cell where a mistake starts its diagnosis, the chapter section
and the first failing check. It reads this JSON, written beside the page (``<hash>.json`` next to
``<hash>.html`` in the exchange, readable by the student alone like the page; on ``--hub`` the
service answers it for the student's own attempt). What it shows follows the page's visibility:
a ``scores`` page's marks carry scores only, a withheld page's none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnkit.assignment.folder import Assignment
from attnkit.i18n import _

FORMAT = 1  # bumped when a field changes meaning; the extension ignores a format it does not know


def function_marks(results: Mapping[str, Any], assignment: Assignment, with_diagnosis: bool = True) -> list[dict[str, Any]]:
    """One entry per graded function of ``assignment`` that some test grades: its points (a test
    that grades several functions shares its points among them equally), and, where the mistake
    starts in that function, the diagnoses (id, text, chapter section) and the first failing check
    (its title and what it said)."""
    catalogue = assignment.mistakes
    marks: dict[str, dict[str, Any]] = {
        name: {"function": name, "score": 0.0, "max_score": 0.0, "diagnoses": [], "first_failure": None} for name in assignment.functions
    }
    for test in results.get("tests", []):
        graded = [name for name in test.get("functions") or [] if name in marks]
        for name in graded:
            share = len(graded)
            marks[name]["score"] += float(test["score"]) / share
            marks[name]["max_score"] += float(test["max_score"]) / share
        if not with_diagnosis or test.get("status") == "passed" or not graded:
            continue
        # Where the mistake starts: the function a catalogued mistake replaces, else the function
        # whose own line raised, else the test's first graded function.
        starts = [catalogue[id_]["function"] for id_ in test.get("diagnoses") or [] if id_ in catalogue and catalogue[id_]["function"] in marks]
        raised = (test.get("error") or {}).get("function")
        for name in dict.fromkeys(starts or ([raised] if raised in marks else graded[:1])):
            mark = marks[name]
            if mark["first_failure"] is None:
                mark["first_failure"] = {"check": str(test["name"]), "said": str(test.get("output") or "")}
            for id_ in test.get("diagnoses") or []:
                known = catalogue.get(id_)
                if known and known["function"] == name and id_ not in [d["id"] for d in mark["diagnoses"]]:
                    mark["diagnoses"].append({"id": id_, "text": known["text"], "section": known["section"]})
    found = []
    for mark in marks.values():
        if mark["max_score"] <= 0:
            continue
        mark["score"], mark["max_score"] = round(mark["score"], 4), round(mark["max_score"], 4)
        mark["full"] = mark["score"] >= mark["max_score"] - 1e-9
        found.append(mark)
    return found


def marks_json(results: Mapping[str, Any] | None, assignment: Assignment, shown: str, limit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the extension reads for one delivered submission. ``shown`` is the page's visibility
    ("full", "scores", "withheld", "after-due", "not-graded"); ``limit`` the attempts the window
    allows and the times of the counted ones (``attempts``, ``window_seconds``, ``counted``)."""
    answer: dict[str, Any] = {"format": FORMAT, "assignment": assignment.name, "shown": shown, "functions": [], "labels": labels()}
    if results is not None and shown in ("full", "scores", "released"):
        answer["score"], answer["max_score"] = results["score"], results["max_score"]
        answer["functions"] = function_marks(results, assignment, with_diagnosis=shown != "scores")
    if limit is not None:
        answer["limit"] = dict(limit)
    return answer


def labels() -> dict[str, str]:
    """The extension's words, in the page's language (the extension has no catalogue of its own)."""
    return {
        "full": _("满分 {score} / {max_score}"),
        "lost": _("失分 {lost}（得分 {score} / {max_score}）"),
        "diagnosis": _("诊断：{text}"),
        "section": _("对应章节：{section}"),
        "first_failure": _("第一个没有通过的检查：{check}"),
        "ready": _("{assignment} 的反馈已就绪（{time} 提交）"),
        "open": _("打开反馈"),
        "panel": _("反馈"),
        "left": _("本时间窗口内还能获得 {left} 次反馈（每 {hours} 小时 {attempts} 次）"),
        "next": _("下一次反馈：{time}"),
        "no_limit": _("反馈次数不限"),
        "submit": _("提交并获取反馈"),
        "submitted": _("已提交，正在评分……"),
    }
