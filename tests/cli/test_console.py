"""The console's summary table a TA reads after `attnkit grade` (issue 42): at 80 columns every
diagnosis whole, a problem's text whole below the table instead of in fragments, names beside ids
where roster.csv has them, an assignment column when there are several, and a total that cannot be
read as a penalty when the gradebook's maximum holds manual points not yet graded.

The records are results.json as `attnkit grade` writes them (the fields the table reads), the
table rendered by rich as the console renders it, at 80 columns."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console

from attnkit.pipeline.console import print_problems, summary, summary_table

PROBLEM = "单元格 3 运行出错：NameError: name 'torch_softmax' is not defined（之后定义的函数都无法使用）"


def results(student: str, assignment: str, score: float, diagnoses: list[str], problems: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"student_id": student, "assignment": assignment, "score": score, "max_score": 100.0, "diagnoses": diagnoses, "problems": problems or [], **extra}


def late(total: float, maximum: float, penalty: float = 0.0, manual: float | None = None) -> dict[str, Any]:
    return {"seconds_late": 0.0, "penalty": penalty, "total": total, "max": maximum, "timestamp": "", "duedate": "2025-10-01 00:00:00 UTC", "manual": manual}


CLASS = [
    results("1001", "ch19-attention", 85, ["mask_after_softmax", "multi_head_scale_by_model_width"], late=late(85, 108)),
    results("1002", "ch19-attention", 60, ["causal_true_means_blocked"], [PROBLEM], late=late(58, 108, penalty=2, manual=6)),
    results("1002", "ch20-softmax", 100, []),
    results("u2023003", "ch20-softmax", 0, ["softmax_wrong_axis"], [PROBLEM]),
]
NAMES = {"1001": "xiaolin", "1002": "李雷雷", "u2023003": "Ouyang Xiaoming-Longname"}


def rendered(width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(summary(CLASS, NAMES))
    print_problems(CLASS, NAMES, to=console)
    return console.export_text().splitlines()


def test_the_table_fits_80_columns_with_every_diagnosis_whole() -> None:
    lines = rendered()
    table = [line for line in lines if PROBLEM not in line]  # a problem is one line, for the terminal to wrap
    assert all(cell_len(line.rstrip()) <= 80 for line in table), "\n".join(lines)
    text = "\n".join(lines)
    for diagnosis in ("mask_after_softmax", "multi_head_scale_by_model_width", "causal_true_means_blocked", "softmax_wrong_axis"):
        assert any(diagnosis in line for line in lines), f"{diagnosis} cut or broken:\n{text}"
    assert "…" not in text, text


def test_a_problem_is_whole_on_one_line_below_the_table() -> None:
    lines = rendered()
    whole = [line for line in lines if PROBLEM in line]
    assert len(whole) == 2 and any("1002" in line and "ch19-attention" in line for line in whole), "\n".join(lines)


def test_names_beside_ids_and_an_assignment_column_with_several_assignments() -> None:
    lines = rendered()
    row = lines.index(next(line for line in lines if "1001" in line))
    assert lines[row + 1].lstrip().startswith("xiaolin"), "\n".join(lines)  # in the id's cell, under it
    row = lines.index(next(line for line in lines if "1002" in line))
    assert lines[row + 1].lstrip().startswith("李雷雷"), "\n".join(lines)
    header = next(line for line in lines if "分数" in line)
    assert "作业" in header, "the header names the assignment column"
    rows = [line.split() for line in lines if PROBLEM not in line and line.split() and line.split()[0] in ("1001", "1002", "u2023003")]
    assert [row[1] for row in rows] == ["ch19", "ch19", "ch20", "ch20"], "\n".join(lines)


def test_the_total_says_manual_points_are_pending_instead_of_reading_as_a_penalty() -> None:
    lines = rendered()
    text = "\n".join(lines)
    assert "扣分后总分" not in text, text
    row = lines.index(next(line for line in lines if "1001" in line))
    assert "85/108" in lines[row] and "其中 8 分" in lines[row + 1] and "人工评分待定" in lines[row + 2], text
    # Graded by hand already: the total counts those points and says so.
    row = lines.index(next(line for line in lines if "1002" in line and "ch19" in line))
    assert "58/108" in lines[row] and "含人工评分" in lines[row + 1] and "6/8" in lines[row + 2], text


def test_one_assignment_has_no_assignment_column() -> None:
    console = Console(width=80, record=True, color_system=None)
    console.print(summary_table([CLASS[0]], {}))
    assert "作业" not in console.export_text()


def test_on_time_with_manual_points_pending_the_table_has_no_penalty_columns_and_says_it_once() -> None:
    """The demo class in its gradebook: nobody late, nobody graded by hand yet. No column of zeros
    and "85/108" per row (read as 23 points lost): one line under the table says what 108 holds."""
    from attnkit.pipeline.console import manual_pending

    on_time = {**late(85, 108), "duedate": ""}  # no due date in the gradebook: no lateness to show
    graded = [results("chenjing", "ch19-attention", 85, []), results("xiaolin", "ch19-attention", 100, [])]
    graded = [{**r, "late": {**on_time, "total": r["score"]}} for r in graded]
    console = Console(width=80, record=True, color_system=None)
    console.print(summary(graded, {}))
    text = console.export_text()
    assert "迟交扣分" not in text and "/108" not in text, text
    [line] = manual_pending(graded)
    assert "ch19-attention" in line and "108" in line and "8 分由人工评分" in line and "尚未评分" in line, line
