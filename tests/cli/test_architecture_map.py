"""ARCHITECTURE.md's module table is the package's own: every folder and module, in the words of its docstring.

The table is made by ``tools/module_table.py`` from each folder's ``__init__.py`` docstring and each
module's first docstring sentence; a module added, moved or re-described without ``--write`` fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from commands import run_command

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "module_table.py"


def test_the_map_holds_the_table_the_code_makes() -> None:
    made = run_command([sys.executable, TOOL])
    assert made.returncode == 0, made.stderr
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    begin, end = "<!-- module table: tools/module_table.py --write -->", "<!-- end of the module table -->"
    assert text[text.index(begin) + len(begin) : text.index(end)].strip() == made.stdout.strip(), "run tools/module_table.py --write"


def test_every_module_is_in_the_table() -> None:
    made = run_command([sys.executable, TOOL]).stdout
    package = ROOT / "src" / "attnkit"
    for path in package.rglob("*.py"):
        if path.name != "__init__.py":
            assert f"| `{path.relative_to(package)}` |" in made, path
        elif path.parent != package:
            assert f"| **`{path.parent.relative_to(package)}/`** |" in made, path
