"""What a student's source defines, read without running it: the names a cell binds, where a
cell is in the notebook (as a student finds it), the definitions a skip-grading cell holds that
graded cells use, and names defined more than once."""

from __future__ import annotations

import ast
import functools
import re

from attnkit.i18n import _
from attnkit.notebook import CodeCell


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
