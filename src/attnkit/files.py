"""Writing the grader's own files: atomically (a crash leaves the old file or the new one, never
half of one) and reproducibly (a zip of unchanged files is byte-identical)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from collections.abc import Iterable

ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can carry: no real time


def atomic_write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(text.encode("utf-8") if isinstance(text, str) else text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


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
