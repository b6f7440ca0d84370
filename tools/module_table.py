"""The module table of ARCHITECTURE.md, built from the package's own docstrings.

Each folder of ``src/attnkit`` is a heading row with its ``__init__.py`` docstring (what the folder
owns); each module a row with the first sentence of its docstring (its one job). The root's
modules come first, split into the shared base, the entry points and the paths kept only for
compatibility (``tests/cli/test_import_graph.py`` names which is which). ``tests/cli/test_architecture_map.py``
holds ARCHITECTURE.md to this output, so the map cannot drift from the code:

    .venv/bin/python tools/module_table.py            # print the table
    .venv/bin/python tools/module_table.py --write    # put it into ARCHITECTURE.md
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnkit"
MAP = ROOT / "ARCHITECTURE.md"
BEGIN, END = "<!-- module table: tools/module_table.py --write -->", "<!-- end of the module table -->"
ORDER = [
    "boundary", "sandbox", "sandbox/lockdown", "driver", "assignment", "grading", "intake", "report", "course", "lms", "engine", "pipeline", "service",
    "service/queue",
]
BASE = {"__init__", "constants", "files", "i18n", "records", "commands", "procfs", "notebook", "submitted_files", "source_analysis", "cpu_account"}
ENTRY = {"__main__", "launch", "cli"}


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def first_sentence(text: str) -> str:
    paragraph = " ".join(text.split("\n\n")[0].split())
    found = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    return (found.group(1) if found else paragraph).replace("|", "\\|")


def table() -> str:
    rows = ["| module | one job |", "|---|---|"]
    root = sorted(PACKAGE.glob("*.py"))
    for title, names in (("shared base", BASE), ("entry points", ENTRY)):
        rows.append(f"| **`attnkit/`: {title}** | |")
        rows += [f"| `{path.relative_to(PACKAGE)}` | {first_sentence(docstring(path))} |" for path in root if path.stem in names]
    rows.append("| **`attnkit/`: kept only for compatibility** | re-exports of the paths courses and assignment folders already name |")
    rows += [f"| `{path.relative_to(PACKAGE)}` | {first_sentence(docstring(path))} |" for path in root if path.stem not in BASE | ENTRY]
    for folder in [f for f in ORDER if (PACKAGE / f).is_dir()]:
        rows.append(f"| **`{folder}/`** | {first_sentence(docstring(PACKAGE / folder / '__init__.py'))} |")
        modules = sorted(p for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py")
        rows += [f"| `{path.relative_to(PACKAGE)}` | {first_sentence(docstring(path))} |" for path in modules]
    if (PACKAGE / "report" / "templates").is_dir():
        rows.append("| `report/templates/` | the pages' jinja2 templates (feedback, report) |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the table in ARCHITECTURE.md")
    args = parser.parse_args()
    made = table()
    if not args.write:
        print(made)
        return 0
    text = MAP.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    MAP.write_text(text[:start] + "\n" + made + "\n" + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
