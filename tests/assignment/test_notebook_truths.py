"""The notebook says what is true (issue 41): the parts it lists are the grader's parts, by the
grader's names; what it says it needs covers what its cells import; exercise 6.3's table counts
the heads the exercise asks for. Checked on the source notebook and on the released one (made by
``make release`` from it)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from contract import CH19

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [ROOT / "solutions" / "ch19-attention" / "attention.ipynb", ROOT / "assignments" / "ch19-attention" / "attention.ipynb"]


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def text(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.parent.parent.name)
def test_the_parts_table_names_the_graders_parts(path):
    intro = text(cells(path)[0])
    rows = [line for line in intro.splitlines() if line.startswith("| ") and not line.startswith("| 部分") and "合计" not in line]
    assert len(rows) == len(CH19.parts)
    for grade_id, row in zip(CH19.parts, rows, strict=True):
        assert CH19.part_title(grade_id) in row, (grade_id, row)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.parent.parent.name)
def test_what_the_notebook_says_it_needs_covers_what_it_imports(path):
    intro = text(cells(path)[0])
    imported = set()
    for cell in cells(path):
        if cell["cell_type"] != "code":
            continue
        source = "\n".join(line for line in text(cell).splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    standard = {"math", "sys", "warnings", "itertools", "functools", "collections", "random", "time"}
    named = {name for name in imported - standard if f"`{name}`" in intro}
    assert imported - standard == named, f"imported but not named in the first cell: {sorted(imported - standard - named)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.parent.parent.name)
def test_exercise_6_3_counts_the_heads_it_asks_for(path):
    (exercise,) = [text(cell) for cell in cells(path) if text(cell).startswith("### 练习 6.3")]
    asked = re.search(r"\*\*(.)个头\*\*", exercise)
    assert asked, exercise[:300]
    split_rows = [line for line in exercise.splitlines() if "trace_split" in line]
    assert split_rows and all(f"拆成{asked.group(1)}个头" in row for row in split_rows), split_rows


def test_a_skipped_cells_definitions_that_answers_use_are_run_without_its_experiments():
    """Issue 41's skip-grading helper policy, on parsed cells: the definitions an answer uses
    (and what they use in turn) are run in a cell of their own after the demo; its experiments,
    the definitions nobody uses and any answer function are not."""
    from attnkit.source_analysis import with_skipped_definitions
    from attnkit.notebook import CodeCell

    demo = CodeCell(
        1,
        "%matplotlib inline\nimport math\nimport os\n\n@staticmethod\ndef unused():\n    pass\n\ndef scale_of(q):\n    return math.sqrt(width(q))\n\n"
        "def width(t):\n    return t.shape[-1]\n\ndef scaled_attention(q, k, v, allowed=None):\n    return None\n\nprint(scale_of)\nvalue = 3\n",
        skip=True,
    )
    answer = CodeCell(2, "def scaled_attention(query, key, value, allowed=None):\n    return query @ key / scale_of(query) + value\n")
    cells, gave = with_skipped_definitions([demo, answer], ("scaled_attention",))
    assert [cell.index for cell in cells] == [1, 1, 2] and cells[0] is demo and cells[1].definitions_only and not cells[1].skip
    assert gave == [(demo, ["math", "scale_of", "width"])]
    namespace: dict = {}
    exec(cells[1].source, namespace)
    assert {"math", "scale_of", "width"} <= set(namespace) and "unused" not in namespace and "os" not in namespace
    assert "scaled_attention" not in namespace and "value" not in namespace and "print" not in cells[1].source
    # Nothing needed: nothing added.
    assert with_skipped_definitions([demo, CodeCell(2, "x = 1\n")], ("scaled_attention",)) == ([demo, CodeCell(2, "x = 1\n")], [])
