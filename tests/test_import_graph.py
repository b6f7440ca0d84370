"""No import cycle among attnkit's modules: every ``import attnkit.x`` / ``from attnkit(.x) import``
in src/attnkit, at module level or inside a function, is an arrow, and the arrows make no circle
(a lazy import inside a function is still a dependency, only hidden)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "attnkit"


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module name -> the attnkit modules it imports (anywhere in its text)."""
    modules = {path.stem for path in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "attnkit":
                    found |= {alias.name for alias in node.names if alias.name in modules}
                elif node.module.startswith("attnkit."):
                    found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("attnkit.")}
        graph[path.stem] = {name for name in found if name in modules and name != path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_attnkit_modules() -> None:
    graph = import_graph()
    assert len(graph) > 30  # the package was found
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) + f" ({', '.join(f'{m} imports {sorted(graph[m] & set(c))}' for m in c)})" for c in found)


def test_the_check_finds_a_cycle() -> None:
    """The check itself: a two-module and a three-module circle are found, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_a_lazy_import_is_an_arrow(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("from attnkit.two import x\n")
    (tmp_path / "two.py").write_text("def f():\n    from attnkit import one\n")
    assert import_graph(tmp_path) == {"one": {"two"}, "two": {"one"}}
    assert cycles(import_graph(tmp_path)) == [["one", "two"]]
