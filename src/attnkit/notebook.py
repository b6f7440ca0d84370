"""Parsing notebooks as they really arrive: edited, reordered, stripped, broken, or hostile.

Uses ``json`` rather than ``nbformat``: importing nbformat costs ~0.9 s in a venv with jupyter
(its schema validator builds a grammar at import), and we only need the cells. The bytes of a
submitted notebook come from ``submitted_files`` (a hostile file's reading); what its source
defines is ``source_analysis``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.i18n import _
from attnkit.submitted_files import MAX_SUBMITTED_BYTES, Unsafe, read_submitted

# The cap on what is graded: the notebook without its outputs and attachments. A student's file
# may be larger (one embedded image makes 20 MB), up to ``submitted_files.MAX_SUBMITTED_BYTES``, the cap on reading it.
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
# Cell tag for instructor demo cells (figures, experiments) whose results nothing later uses.
# Skipping them is most of a notebook's run time; a student who tags their own code only skips it.
SKIP_TAG = "skip-grading"


@dataclass
class CodeCell:
    index: int  # position among the notebook's cells
    source: str
    grade_id: str = ""
    is_check: bool = False  # a visible nbgrader test cell: the hidden suite replaces it
    skip: bool = False  # tagged by the instructor as a demo (a plot, an experiment) grading needs not run
    section: str = ""  # the nearest markdown heading above the cell: how a student finds it
    # The definitions a skip-grading cell holds that the graded cells use (``with_skipped_definitions``):
    # run in its place, without its experiments.
    definitions_only: bool = False

    @property
    def runs_in_sandbox(self) -> bool:
        """Whether grading runs this cell: not a visible check (the hidden suite replaces it), not
        a skip-grading demo, not empty. The zygote prepares and warms up on exactly these."""
        return not (self.is_check or self.skip or not self.source.strip())


@dataclass
class Notebook:
    path: Path
    cells: list[CodeCell] = field(default_factory=list)
    problem: str = ""  # why it could not be read at all (student-facing, Chinese)
    notes: list[str] = field(default_factory=list)  # readable, but something is off

    @property
    def readable(self) -> bool:
        return not self.problem


def _object(value: object) -> dict[str, Any]:
    """A field that should hold a JSON object: itself if it does, else an empty one."""
    return value if isinstance(value, dict) else {}


def _text(source: object) -> str:
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


# Inline markdown a heading may use, replaced by the text a student sees in Jupyter: the page
# quotes the title as plain text, so "`scaled_attention`" must read "scaled_attention".
_INLINE_MARKDOWN = (
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # [text](url), ![alt](src)
    (re.compile(r"`+([^`]*)`+"), r"\1"),  # `code`, ``code``
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),  # **bold**, __bold__
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"\1"),  # *italic*
)


def plain_heading(text: str) -> str:
    """A heading's text without inline markdown (code spans, emphasis, links)."""
    for pattern, replacement in _INLINE_MARKDOWN:
        text = pattern.sub(replacement, text)
    return text.strip()


def _heading(markdown: str) -> str:
    """The last markdown heading (``#`` .. ``######``) of a cell, without its hashes and inline
    markdown, or ""."""
    found = ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").startswith(" "):
            found = plain_heading(stripped.lstrip("#").strip())[:120]
    return found


def read_notebook(path: Path) -> Notebook:
    """Parse one .ipynb file of trusted origin (a path the user named); never raises for bad content.
    Submitted files go through :func:`read_submitted` and :func:`parse_notebook` instead."""
    try:
        raw = read_submitted(path.parent, path)
    except Unsafe as error:
        notebook = Notebook(path)
        notebook.problem = str(error)
        return notebook
    return parse_notebook(raw, path)


def parse_notebook(raw: bytes, path: Path) -> Notebook:
    """Parse a notebook's bytes; never raises for bad content, reports it instead."""
    notebook = Notebook(path)
    if len(raw) > MAX_SUBMITTED_BYTES:
        notebook.problem = _("文件过大（{size} MB），无法评分").format(size=len(raw) // 1024 // 1024)
        return notebook
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except RecursionError:
        # json's decoder recurses once per level: a notebook nested 100,000 deep must cost this
        # notebook, not the worker.
        notebook.problem = _("不是有效的 Jupyter 笔记本（JSON 嵌套层数过深）")
        return notebook
    except (UnicodeDecodeError, ValueError) as error:
        notebook.problem = _("不是有效的 Jupyter 笔记本（JSON 解析失败：{error}）").format(error=str(error)[:200])
        return notebook
    del raw
    if isinstance(data, dict) and data.get("nbformat") == 3:
        converted = _from_v3(data)
        if isinstance(converted, str):
            notebook.problem = converted
            return notebook
        data = converted
        notebook.notes.append(_("笔记本是旧的 nbformat 3 格式，已转换为 nbformat 4 后评分"))
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        notebook.problem = _("笔记本里没有单元格列表（cells），可能不是 Jupyter 笔记本")
        return notebook
    seen_ids: set[str] = set()
    section = ""
    for index, cell in enumerate(cells):
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            section = _heading(_text(cell.get("source"))) or section
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = _object(cell.get("metadata"))
        nbgrader = _object(meta.get("nbgrader"))
        raw_id = nbgrader.get("grade_id", "")
        # str() of a deeply nested list would recurse too; an id is a short string or nothing.
        grade_id = raw_id[:200] if isinstance(raw_id, str) else ""
        if grade_id and grade_id in seen_ids:
            notebook.notes.append(_("单元格 {grade_id} 出现了不止一次（按顺序全部运行，后定义的生效）").format(grade_id=grade_id))
        seen_ids.add(grade_id)
        is_check = bool(nbgrader.get("grade")) and not nbgrader.get("solution")
        tags = found if isinstance(found := meta.get("tags"), list) else []
        notebook.cells.append(CodeCell(index, _text(cell.get("source")), grade_id, is_check, SKIP_TAG in tags, section))
    # What is graded is the cells' text: outputs and attachments (an embedded image) do not count.
    graded = sum(len(_text(cell.get("source")).encode("utf-8", "surrogatepass")) for cell in cells if isinstance(cell, dict))
    if graded > MAX_NOTEBOOK_BYTES:
        notebook.problem = _("笔记本的代码和文字过多（去掉输出后 {size} MB，上限 {limit} MB），无法评分").format(
            size=graded // 1024 // 1024, limit=MAX_NOTEBOOK_BYTES // 1024 // 1024
        )
        notebook.cells = []
        return notebook
    if not any(cell.source.strip() for cell in notebook.cells):
        notebook.problem = _("笔记本中没有任何代码")
    elif not seen_ids - {""}:
        notebook.notes.append(_("单元格的 nbgrader 元数据已丢失；按顺序运行了全部代码单元格"))
    return notebook


def _from_v3(data: dict) -> dict | str:
    """An nbformat 3 notebook (cells in ``worksheets``) as nbformat 4, or why it cannot be converted.

    nbformat is imported only here: its import costs ~0.9 s, which a v4 notebook never pays."""
    import nbformat

    try:
        return dict(nbformat.convert(nbformat.from_dict(data), 4))
    except Exception as error:  # nbformat's converters raise anything on a malformed v3 notebook
        return _("nbformat 3 笔记本无法转换：{error}").format(error=str(error)[:200])


def grade_cells(notebook: Path) -> list[dict[str, Any]]:
    """The nbgrader grade cells of a source notebook, in order: ``{grade_id, points, autograded}``
    (autograded: a code cell; a markdown grade cell is graded by hand)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            found.append({"grade_id": meta["grade_id"], "points": float(meta.get("points", 0)), "autograded": cell.get("cell_type") == "code"})
    return found
