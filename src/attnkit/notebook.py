"""Reading submitted notebooks as they really arrive: edited, reordered, stripped, broken, or hostile.

Uses ``json`` rather than ``nbformat``: importing nbformat costs ~0.9 s in a venv with jupyter
(its schema validator builds a grammar at import), and we only need the cells.

A submission folder holds whatever a zip, a tar or an LMS download can: symlinks to anything,
FIFOs, sockets, device nodes, sparse files of any size, names that are not UTF-8. So a file is
read only through :func:`read_submitted`: every path component below the submissions folder is
opened without following links, the file itself with O_NOFOLLOW | O_NONBLOCK (a FIFO cannot
block us), and it must be a regular file no larger than the cap, checked on the open descriptor.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.i18n import _

# The cap on what is graded: the notebook without its outputs and attachments. A student's file
# may be larger (one embedded image makes 20 MB), up to MAX_SUBMITTED_BYTES, the cap on reading it.
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
MAX_SUBMITTED_BYTES = 64 * 1024 * 1024
# Cell tag for instructor demo cells (figures, experiments) whose results nothing later uses.
# Skipping them is most of a notebook's run time; a student who tags their own code only skips it.
SKIP_TAG = "skip-grading"

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a terminal device never
# becomes our controlling terminal. Neither matters for a regular file, the only kind we read.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unsafe(Exception):
    """A submitted path that is not a regular file inside the student's own folder (message: Chinese)."""


def display_name(name: str) -> str:
    """A file or folder name as it can be shown and stored: bytes that are not UTF-8 become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def kind_of(mode: int) -> str:
    """What a non-regular file is, in the student's language."""
    if stat.S_ISLNK(mode):
        return _("符号链接")
    if stat.S_ISDIR(mode):
        return _("文件夹")
    if stat.S_ISFIFO(mode):
        return _("命名管道（FIFO）")
    if stat.S_ISSOCK(mode):
        return _("套接字")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return _("设备文件")
    return _("特殊文件")


def _open_below(root: Path, path: Path) -> int:
    """A descriptor of ``path``'s parent folder, every component below ``root`` opened without
    following links. The caller closes it."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise Unsafe(_("文件不在提交文件夹内，未读取")) from None
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise Unsafe(_("文件路径不合法，未读取"))
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the TA's own folder: trusted
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=folder)
            except OSError as error:
                raise Unsafe(_("路径中的“{name}”不是普通文件夹（可能是符号链接），未读取").format(name=display_name(part))) from error
            os.close(folder)
            folder = inner
        return folder
    except BaseException:
        os.close(folder)
        raise


def read_submitted(root: Path, path: Path, limit: int = MAX_SUBMITTED_BYTES) -> bytes:
    """The bytes of ``path`` (below the submissions folder ``root``) if it is a regular file of at
    most ``limit`` bytes reached through real folders only; otherwise :class:`Unsafe` saying why."""
    folder = _open_below(root, path)
    try:
        return read_opened(folder, path.name, limit)
    finally:
        os.close(folder)


def read_opened(folder: int, name: str, limit: int = MAX_SUBMITTED_BYTES) -> bytes:
    """The bytes of the entry ``name`` of the folder open at ``folder`` (a descriptor the caller
    opened without following links), read as :func:`read_submitted` reads: the name is one
    component, not followed if a link (O_NOFOLLOW), opened without blocking (a FIFO), and the
    descriptor opened must be a regular file of at most ``limit`` bytes (``fstat``, checked before
    anything is read; never more than ``limit + 1`` bytes read, whatever it grows to), else
    :class:`Unsafe` saying why. Every check is on what is read: nothing is reopened by path."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Unsafe(_("文件路径不合法，未读取"))
    try:
        before = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    # Checked before open: opening a device node can itself have effects (a tape rewinds).
    if not stat.S_ISREG(before.st_mode):
        raise Unsafe(_("这是{kind}而不是普通文件，未读取").format(kind=kind_of(before.st_mode)))
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=folder)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    try:
        info = os.fstat(handle)
        # Checked again on the descriptor: the name may have been swapped since the lstat.
        if not stat.S_ISREG(info.st_mode):
            raise Unsafe(_("这是{kind}而不是普通文件，未读取").format(kind=kind_of(info.st_mode)))
        if info.st_size > limit:
            raise Unsafe(_("文件过大（{size} MB，上限 {limit} MB），无法评分").format(size=info.st_size // 1024 // 1024, limit=limit // 1024 // 1024))
        chunks = bytearray()
        while len(chunks) <= limit:  # never more than limit + 1 bytes, whatever st_size said
            chunk = os.read(handle, min(1 << 20, limit + 1 - len(chunks)))
            if not chunk:
                break
            chunks += chunk
        if len(chunks) > limit:
            raise Unsafe(_("文件过大（超过 {limit} MB），无法评分").format(limit=limit // 1024 // 1024))
        return bytes(chunks)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    finally:
        os.close(handle)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def defined_names(source: str) -> set[str]:
    """The names a cell binds at its top level (``def``, ``class`` and plain assignments), read
    without running it; none for a cell Python cannot parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


@functools.lru_cache(maxsize=64)  # never invalidated: a pure function of the names (the API's, a few)
def _binding(names: tuple[str, ...]) -> re.Pattern[str]:
    """A line at column 0 that starts binding one of ``names``: ``def name``, ``class name`` or
    ``name =`` (the name in the group that matched)."""
    alternatives = "|".join(map(re.escape, names))
    return re.compile(
        rf"^(?:(?:async\s+)?def\s+(?P<function>{alternatives})(?!\w)|class\s+(?P<cls>{alternatives})(?!\w)"
        rf"|(?P<variable>{alternatives})\s*(?::|=(?!=)))",
        re.MULTILINE,
    )


def _bound(match: re.Match[str]) -> str:
    return match.group("function") or match.group("cls") or match.group("variable")


def defines(source: str, name: str) -> bool:
    """Whether a cell means to bind ``name`` at its top level (``_binding``). Read as text, so a
    cell Python cannot parse (the usual reason the name is then missing) still counts."""
    return _binding((name,)).search(source) is not None


def place_of(cell: CodeCell) -> str:
    """How a student finds a cell on the page: its section, else its number."""
    if cell.section:
        return _("「{section}」一节").format(section=cell.section)
    return _("第 {number} 个单元格").format(number=cell.index % 10_000 + 1)


def _tree(source: str) -> ast.Module | None:
    """A cell's syntax tree, IPython's magic and shell lines blanked (so line numbers stay)."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None


def _bound_at_top(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            names.update(target.id for target in ast.walk(node) if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store))
    return names


def _loaded(node: ast.AST) -> set[str]:
    return {name.id for name in ast.walk(node) if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load)}


def with_skipped_definitions(cells: list[CodeCell], api: tuple[str, ...]) -> tuple[list[CodeCell], list[tuple[CodeCell, list[str]]]]:
    """The cells grading runs, with the definitions that graded cells need from skip-grading cells.

    A skip-grading cell is a demo (an experiment, a plot) that grading does not run. But a helper
    a student defined there and uses in an answer exists when the notebook runs top to bottom in
    Jupyter; so its *definitions* (``def``, ``class``, ``import``) that the graded cells use,
    directly or through one another, run in its place, in a cell of their own after it, and its
    experiments do not (issue 41). Never an answer function of ``api``: an answer defined only in a
    demo cell stays missing, as the page says. Returns the cells and, for each skip-grading cell
    that gave definitions, the names they bind."""
    import builtins

    skipped = [cell for cell in cells if cell.skip and not cell.is_check]
    if not skipped:
        return cells, []
    offered: list[tuple[CodeCell, ast.stmt, set[str]]] = []
    for cell in skipped:
        tree = _tree(cell.source)
        for node in tree.body if tree is not None else []:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
                names = _bound_at_top(ast.Module(body=[node], type_ignores=[]))
                if names and not names & set(api):
                    offered.append((cell, node, names))
    graded = [cell for cell in cells if not (cell.skip or cell.is_check)]
    # A definition is taken only for a name a graded cell loads, and a loaded name is in its text:
    # where no offered name is, nothing is taken, and the graded cells need not be parsed (this
    # runs for every submission; the release's demo cells import what no answer uses).
    if not any(name in cell.source for _cell, _node, names in offered for name in names for cell in graded):
        return cells, []
    used: set[str] = set()
    bound: set[str] = set()
    for cell in graded:
        tree = _tree(cell.source)
        if tree is not None:
            used |= _loaded(tree)
            bound |= _bound_at_top(tree)
    known = bound | set(api) | set(dir(builtins))
    needed = used - known
    chosen: set[int] = set()
    while True:  # helpers of helpers: until nothing more is needed
        more = [i for i, (_cell, _node, names) in enumerate(offered) if i not in chosen and names & needed]
        if not more:
            break
        for i in more:
            chosen.add(i)
            needed |= _loaded(offered[i][1]) - known
    if not chosen:
        return cells, []
    given: dict[int, list[int]] = {}
    for i in sorted(chosen):
        given.setdefault(id(offered[i][0]), []).append(i)
    result: list[CodeCell] = []
    gave: list[tuple[CodeCell, list[str]]] = []
    for cell in cells:
        result.append(cell)
        picks = given.get(id(cell))
        if not picks:
            continue
        lines = cell.source.splitlines()
        parts = []
        defined: list[str] = []
        for i in picks:
            node = offered[i][1]
            start = min([node.lineno, *[decorator.lineno for decorator in getattr(node, "decorator_list", [])]])
            parts.append("\n".join(lines[start - 1 : node.end_lineno]))
            defined += sorted(offered[i][2])
        result.append(CodeCell(cell.index, "\n".join(parts) + "\n", cell.grade_id, False, False, cell.section, definitions_only=True))
        gave.append((cell, list(dict.fromkeys(defined))))
    return result, gave


def redefinitions(cells: list[CodeCell], names: tuple[str, ...]) -> dict[str, list[CodeCell]]:
    """Each of ``names`` (the answer functions) bound in more than one of the cells grading runs,
    with those cells in order. Grading runs them top to bottom, as Jupyter's "Run All" does, so
    the last of them is the definition graded."""
    # A cell without a ``_binding`` line binds none of them at its top level: cheap to find, and
    # only names found in two cells are parsed for.
    if not names:
        return {}
    pattern = _binding(tuple(names))
    candidates: dict[str, list[CodeCell]] = {}
    for cell in cells:
        if cell.is_check or cell.skip:
            continue
        for name in {_bound(match) for match in pattern.finditer(cell.source)}:
            candidates.setdefault(name, []).append(cell)
    found: dict[str, list[CodeCell]] = {}
    for name, where in candidates.items():
        if len(where) > 1:
            bound = [cell for cell in where if name in defined_names(cell.source)]
            if len(bound) > 1:
                found[name] = bound
    return found


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


def fingerprint(paths: list[Path], salt: str = "") -> str:
    """A digest of the (trusted) files' names and bytes (plus ``salt``): what a regrade depends on."""
    digest = hashlib.sha256(salt.encode())
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()
