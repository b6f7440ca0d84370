"""Writing the grader's own files: atomically (a crash leaves the old file or the new one, never
half of one), reproducibly (a zip of unchanged files is byte-identical) and, in a CSV, as text a
spreadsheet will not run (``csv_text``)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any
from collections.abc import Iterable

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can carry: no real time

# OWASP, CSV injection: a cell starting with one of these is a formula to a spreadsheet; a
# leading single quote makes it text. Only text cells are escaped: our scores stay numbers.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA_START) else value


def atomic_write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(text.encode("utf-8") if isinstance(text, str) else text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def readable_json(value: Any) -> str:
    """JSON for files people open too (results.json): each top-level field on a line, and each
    item of a top-level list (a test's result) on a line of its own. Written with the C encoder
    (``indent`` would make json use its pure-Python one, most of a record's cost here)."""
    if not isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    lines = []
    for key, item in value.items():
        name = json.dumps(key, ensure_ascii=False)
        if isinstance(item, list) and item:
            inner = ",\n  ".join(json.dumps(element, ensure_ascii=False) for element in item)
            lines.append(f" {name}: [\n  {inner}\n ]")
        else:
            lines.append(f" {name}: {json.dumps(item, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}" if lines else "{}"


def write_zip(destination: Path, entries: Iterable[tuple[str, bytes]], executable: frozenset[str] = frozenset()) -> Path:
    """Write ``(name, data)`` entries to ``destination`` atomically, each with a fixed date and a
    fixed mode (0755 for the names in ``executable``, else 0644), as a regular file of a Unix zip."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    with zipfile.ZipFile(partial, "w") as bundle:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100000 | (0o755 if name in executable else 0o644)) << 16
            info.create_system = 3  # unix, so unzip honours the mode
            bundle.writestr(info, data)
    partial.replace(destination)
    return destination
