"""Reading submitted notebooks as they really arrive: edited, reordered, stripped or broken.

Uses ``json`` rather than ``nbformat``: importing nbformat costs ~0.9 s in a venv with jupyter
(its schema validator builds a grammar at import), and we only need the cells.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass
class Notebook:
    path: Path
    cells: list[CodeCell] = field(default_factory=list)
    problem: str = ""  # why it could not be read at all (student-facing, Chinese)
    notes: list[str] = field(default_factory=list)  # readable, but something is off

    @property
    def readable(self) -> bool:
        return not self.problem


def _text(source: object) -> str:
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def _heading(markdown: str) -> str:
    """The last markdown heading (``#`` .. ``######``) of a cell, without its hashes, or ""."""
    found = ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").startswith(" "):
            found = stripped.lstrip("#").strip()[:120]
    return found


def read_notebook(path: Path) -> Notebook:
    """Parse one .ipynb file; never raises for bad content, reports it instead."""
    notebook = Notebook(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        notebook.problem = f"无法读取文件：{error.strerror}"
        return notebook
    if len(raw) > MAX_NOTEBOOK_BYTES:
        notebook.problem = f"文件过大（{len(raw) // 1024 // 1024} MB），无法评分"
        return notebook
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as error:
        notebook.problem = f"不是有效的 Jupyter 笔记本（JSON 解析失败：{error}）"
        return notebook
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        notebook.problem = "笔记本里没有单元格列表（cells），可能不是 Jupyter 笔记本"
        return notebook
    seen_ids: set[str] = set()
    section = ""
    for index, cell in enumerate(cells):
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            section = _heading(_text(cell.get("source"))) or section
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        nbgrader = meta.get("nbgrader") if isinstance(meta.get("nbgrader"), dict) else {}
        grade_id = str(nbgrader.get("grade_id", ""))
        if grade_id and grade_id in seen_ids:
            notebook.notes.append(f"单元格 {grade_id} 出现了不止一次（按顺序全部运行，后定义的生效）")
        seen_ids.add(grade_id)
        is_check = bool(nbgrader.get("grade")) and not nbgrader.get("solution")
        tags = meta.get("tags") if isinstance(meta.get("tags"), list) else []
        notebook.cells.append(CodeCell(index, _text(cell.get("source")), grade_id, is_check, SKIP_TAG in tags, section))
    if not any(cell.source.strip() for cell in notebook.cells):
        notebook.problem = "笔记本中没有任何代码"
    elif not seen_ids - {""}:
        notebook.notes.append("单元格的 nbgrader 元数据已丢失；按顺序运行了全部代码单元格")
    return notebook


def fingerprint(paths: list[Path], salt: str = "") -> str:
    """A digest of the files' names and bytes (plus ``salt``): what a regrade depends on."""
    digest = hashlib.sha256(salt.encode())
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()
