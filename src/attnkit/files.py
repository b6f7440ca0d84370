"""Writing the grader's own files: atomically (a crash leaves the old file or the new one, never
half of one), reproducibly (a zip of unchanged files is byte-identical) and, in a CSV, as text a
spreadsheet will not run (``csv_text``). Many files at once (a class's records) are made durable
together (:class:`DurableBatch`): one sync of their file system instead of one per file."""

from __future__ import annotations

import ctypes
import json
import os
import time
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
    """Replace ``path`` with ``text``: written beside it, made durable, then renamed over it."""
    temporary = _write_beside(path, text, durable=True)
    os.replace(temporary, path)


def _write_beside(path: Path, text: str | bytes, durable: bool) -> Path:
    """``text`` in a temporary file beside ``path`` (a name ``store.repair_outputs`` removes if a
    run dies before the rename); fsync'd first if ``durable``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(text.encode("utf-8") if isinstance(text, str) else text)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    return temporary


_libc = ctypes.CDLL(None, use_errno=True)  # syncfs (Linux, glibc 2.14+)


def sync_file_system(folder: Path) -> bool:
    """Make everything written to the file system holding ``folder`` durable (``syncfs``: its
    dirty data and one journal commit); False where the call is missing or fails."""
    syncfs = getattr(_libc, "syncfs", None)
    if syncfs is None:
        return False
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        return bool(syncfs(descriptor) == 0)
    finally:
        os.close(descriptor)


class DurableBatch:
    """Files replaced as :func:`atomic_write` replaces one (a crash leaves the old file or the new
    one, never half of one), made durable together: each is written beside its path at once, and
    :meth:`commit` syncs their file system once and then renames each over its path, in the order
    written. A class's records take one sync per ``max_files`` files, or once the oldest has waited
    ``max_seconds`` (:meth:`commit_if_due`, which the grading loop calls at least twice a second),
    instead of one fsync each, whose journal commits cost a run of 1,000 submissions ~1.4 s
    (docs/speed.md). So a record is on disk at most about half a second after it was graded.

    Used as a context manager it commits on the way out, whatever ends the block: what was written
    is whole. A process killed before a commit leaves the old files and the temporaries, which the
    next run removes (``store.repair_outputs``); its records are then not current and are graded again."""

    def __init__(self, max_files: int = 64, max_seconds: float = 0.25) -> None:
        self.max_files = max_files
        self.max_seconds = max_seconds
        self._pending: dict[Path, Path] = {}  # path -> its temporary, in the order written
        self._since = 0.0  # when the oldest pending file was written

    def write(self, path: Path, text: str | bytes) -> None:
        """``path`` gets ``text`` at the next commit; a commit follows once enough is pending."""
        if not self._pending:
            self._since = time.monotonic()
        self._pending.pop(path, None)  # written again: renamed in its new place in the order
        self._pending[path] = _write_beside(path, text, durable=False)
        if len(self._pending) >= self.max_files:
            self.commit()
        else:
            self.commit_if_due()

    def commit_if_due(self) -> None:
        """Commit if the oldest pending file has waited ``max_seconds``."""
        if self._pending and time.monotonic() - self._since >= self.max_seconds:
            self.commit()

    def commit(self) -> None:
        """Sync every file system a pending file lies in (fsync each file where that fails), then
        rename each into place."""
        pending, self._pending = self._pending, {}
        device_of = {temporary: os.stat(temporary.parent).st_dev for temporary in pending.values()}
        folders: dict[int, Path] = {}
        for temporary, device in device_of.items():
            folders.setdefault(device, temporary.parent)
        unsynced = {device for device, folder in folders.items() if not sync_file_system(folder)}
        for temporary, device in device_of.items():
            if device in unsynced:
                with open(temporary, "rb") as handle:
                    os.fsync(handle.fileno())
        for path, temporary in pending.items():
            os.replace(temporary, path)

    def __enter__(self) -> DurableBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.commit()


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
