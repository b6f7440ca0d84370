"""The package's shape, held by its imports.

Every ``import attnkit.x.y`` / ``from attnkit.x import y`` anywhere in a module's text (at module level
or inside a function: a lazy import is still a dependency, only hidden) is an arrow. The arrows:

- make no circle;
- keep the trust boundary a missing arrow: ``attnkit.sandbox`` (the untrusted side, with its
  ``lockdown``) imports only ``attnkit.boundary`` and the shared base, and nothing else imports it;
- run one way between folders, down the layers below (a folder may import the layers under it,
  never one above it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "attnkit"

# The shared base: modules at the package root that any layer may use.
BASE = {"__init__", "constants", "files", "i18n", "records", "commands", "procfs", "notebook", "submitted_files", "source_analysis", "cpu_account"}
# Entry points at the root: they may import anything and nothing imports them.
ENTRY = {"__main__", "launch", "cli"}
# Kept only so that old paths go on working (assignment folders, nbgrader_config.py, ``-p``, ``-m``).
COMPAT = {"proxy", "checks", "mistakes", "plugin", "nbgrader_course", "release", "gradescope", "zygote"}
# Folders from the bottom up: a module may import from its own folder and from those before it.
LAYERS = ["base", "boundary", "sandbox", "driver", "assignment", "grading", "intake", "report", "course", "lms", "engine", "pipeline", "service", "entry"]
UNTRUSTED = "sandbox"


def module_name(path: Path, package: Path) -> str:
    """``sandbox/lockdown/seccomp.py`` -> ``sandbox.lockdown.seccomp``; ``x/__init__.py`` -> ``x``."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module name (dotted, below ``attnkit``) -> the attnkit modules it imports (anywhere in its text)."""
    modules = {module_name(path, package) for path in package.rglob("*.py")}

    def resolve(dotted: str) -> str | None:
        """The module a dotted name below ``attnkit`` names (``a.b.C`` -> ``a.b`` when ``C`` is a name in it)."""
        while dotted:
            if dotted in modules:
                return dotted
            dotted = dotted.rpartition(".")[0]
        return None

    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "attnkit" or node.module.startswith("attnkit."):
                    below = node.module.removeprefix("attnkit").lstrip(".")
                    for alias in node.names:
                        target = resolve(f"{below}.{alias.name}".lstrip(".")) if alias.name != "*" else None
                        target = target or resolve(below)
                        if target:
                            found.add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("attnkit."):
                        target = resolve(alias.name.removeprefix("attnkit."))
                        if target:
                            found.add(target)
        graph[name] = {target for target in found if target != name and target != "__init__"}
    return graph


def layer(module: str) -> str:
    folders = {"assignment", "boundary", "course", "lms", "driver", "engine", "grading", "intake", "pipeline", "report", "sandbox", "service"}
    if "." not in module and module not in folders:
        if module in BASE:
            return "base"
        if module in ENTRY or module in COMPAT:
            return "entry"
        raise AssertionError(f"attnkit.{module} is at the package root but in no list of tests/cli/test_import_graph.py: which layer is it?")
    return module.split(".")[0]


def wrong_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every arrow that crosses the trust boundary or runs up the layers, said in words."""
    wrong = []
    for module, targets in sorted(graph.items()):
        here = layer(module)
        for target in sorted(targets):
            there = layer(target)
            if here == there:
                continue
            if there == UNTRUSTED and module not in COMPAT:
                wrong.append(f"attnkit.{module} imports attnkit.{target}: nothing trusted imports the sandbox")
            elif here == UNTRUSTED and there not in {"base", "boundary"}:
                wrong.append(f"attnkit.{module} imports attnkit.{target}: the sandbox imports only attnkit.boundary and the shared base")
            elif LAYERS.index(there) > LAYERS.index(here):
                wrong.append(f"attnkit.{module} ({here}) imports attnkit.{target} ({there}): imports run down the layers {' < '.join(LAYERS)}")
    return wrong


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
    assert len(graph) > 60  # the package and its sub-packages were found
    assert {"sandbox.server", "sandbox.lockdown.seccomp", "grading.plugin", "boundary.wire"} <= set(graph)
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) + f" ({', '.join(f'{m} imports {sorted(graph[m] & set(c))}' for m in c)})" for c in found)


def test_the_sandbox_imports_only_the_boundary_and_nothing_trusted_imports_it() -> None:
    graph = import_graph()
    assert any(layer(module) == UNTRUSTED for module in graph)
    assert wrong_arrows(graph) == []


def test_every_folder_is_a_layer() -> None:
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            assert path.name in LAYERS, f"{path.name}/ is in no layer of tests/cli/test_import_graph.py"
            docstring = ast.get_docstring(ast.parse((path / "__init__.py").read_text(encoding="utf-8")))
            assert docstring, f"{path.name}/__init__.py says what the folder owns"


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


def plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(tmp_path).parents:
            if str(folder) != ".":
                (tmp_path / folder / "__init__.py").touch()
        path.write_text(text)
    return import_graph(tmp_path)


@pytest.mark.parametrize(
    ("planted", "said"),
    [
        # the sandbox reaches the trusted side (lazily, inside a function)
        ({"sandbox/server.py": "def f():\n    from attnkit.grading.plugin import GradingPlugin\n", "grading/plugin.py": ""}, "the sandbox imports only"),
        # the trusted side imports the sandbox
        ({"driver/seed.py": "from attnkit.sandbox import zygote\n", "sandbox/zygote.py": ""}, "nothing trusted imports the sandbox"),
        ({"engine/worker.py": "import attnkit.sandbox.lockdown.seccomp\n", "sandbox/lockdown/seccomp.py": ""}, "nothing trusted imports the sandbox"),
        # an arrow up the layers: the boundary importing the grading side
        ({"boundary/wire.py": "from attnkit.grading import student\n", "grading/student.py": ""}, "imports run down the layers"),
    ],
)
def test_the_check_finds_a_planted_wrong_import(tmp_path: Path, planted: dict[str, str], said: str) -> None:
    found = wrong_arrows(plant(tmp_path, planted))
    assert len(found) == 1 and said in found[0], found


def test_the_check_passes_a_right_import(tmp_path: Path) -> None:
    server = "from attnkit.boundary import wire\nfrom attnkit.constants import X\n"
    graph = plant(tmp_path, {"sandbox/server.py": server, "boundary/wire.py": "", "constants.py": ""})
    assert graph["sandbox.server"] == {"boundary.wire", "constants"}
    assert wrong_arrows(graph) == []


def private_imports(package: Path = PACKAGE) -> list[str]:
    """Every name with a leading underscore that a module imports from another folder's module (a
    folder's private helpers are its own: another layer asks for a public interface)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        here = module_name(path, package)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("attnkit.")):
                continue
            there = node.module.removeprefix("attnkit.")
            if there.split(".")[0] == here.split(".")[0]:
                continue
            found += [f"attnkit.{here} imports {alias.name} from attnkit.{there}" for alias in node.names if alias.name.startswith("_") and alias.name != "_"]
    return found


def test_no_folder_imports_another_folders_private_names() -> None:
    """Issue 52: the service's pool took the engine's ``_Worker`` and ``_adopt_orphans``; the engine
    now gives it a public interface (``WorkerProcess``, ``adopt_orphans``, ``FanOut.spare``/``alive``)."""
    assert private_imports() == []


def test_the_private_import_check_finds_one(tmp_path: Path) -> None:
    for name, text in {"service/pool.py": "from attnkit.engine.fan_out import FanOut, _Worker\n", "engine/fan_out.py": "", "engine/messages.py": ""}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "engine" / "worker.py").write_text("from attnkit.engine.messages import _kinds\n")  # within its own folder: allowed
    assert private_imports(tmp_path) == ["attnkit.service.pool imports _Worker from attnkit.engine.fan_out"]
