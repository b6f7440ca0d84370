"""A class's records are made durable in batches: one sync of OUT's file system per batch, before
any of the batch's files is renamed into place, instead of an fsync per file (whose journal
commits cost a class of 1,000 about 1.4 s, docs/speed.md).

The batch itself on real files (``files.DurableBatch``); then the real ``attnkit grade`` command
with an audit hook and two wrappers that log, in order, each temporary file opened for writing,
each fsync (with the file it was for), each sync of a file system and each rename into OUT: every
per-student file must be renamed only after a sync that came after it was written, and none may
take an fsync of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnkit.files import DurableBatch

from synthetic_class import ASSIGNMENT, make_named_class

ROOT = Path(__file__).resolve().parents[2]


def test_a_batch_shows_nothing_until_it_commits_and_then_exactly_what_was_written_last(tmp_path: Path) -> None:
    old = tmp_path / "a" / "results.json"
    old.parent.mkdir()
    old.write_text("old", encoding="utf-8")
    with DurableBatch(max_files=10, max_seconds=3600) as batch:
        batch.write(old, "first")
        batch.write(tmp_path / "b" / "feedback.html", "页面")
        batch.write(old, "second")  # written again before the commit: the last text wins
        assert old.read_text(encoding="utf-8") == "old"
        assert not (tmp_path / "b" / "feedback.html").exists()
    assert old.read_text(encoding="utf-8") == "second"
    assert (tmp_path / "b" / "feedback.html").read_text(encoding="utf-8") == "页面"
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_batch_commits_once_it_holds_max_files(tmp_path: Path) -> None:
    batch = DurableBatch(max_files=3, max_seconds=3600)
    for name in ("one", "two"):
        batch.write(tmp_path / name, name)
    assert not (tmp_path / "one").exists()
    batch.write(tmp_path / "three", "three")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "three", "two"]


def test_a_batch_commits_once_its_oldest_file_has_waited_max_seconds(tmp_path: Path) -> None:
    batch = DurableBatch(max_files=100, max_seconds=0.2)
    batch.write(tmp_path / "graded", "soon")
    batch.commit_if_due()  # just written: not due
    assert not (tmp_path / "graded").exists()
    time.sleep(0.3)
    batch.commit_if_due()  # what the grading loop calls at least twice a second
    assert (tmp_path / "graded").read_text(encoding="utf-8") == "soon"


def test_where_the_file_system_cannot_be_synced_each_file_is_fsynced_before_its_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No syncfs (another libc, or the call fails): each pending file gets its own fsync, still
    before any file of the batch replaces its path."""
    from attnkit import files

    fsynced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        fsynced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        assert not (tmp_path / "one").exists() and not (tmp_path / "two").exists()  # nothing renamed yet
        real_fsync(descriptor)

    monkeypatch.setattr(files, "sync_file_system", lambda folder: False)
    monkeypatch.setattr(os, "fsync", fsync)
    with DurableBatch(max_files=10, max_seconds=3600) as batch:
        batch.write(tmp_path / "one", "1")
        batch.write(tmp_path / "two", "2")
    assert sorted(Path(path).name for path in fsynced) == sorted([f".one.{os.getpid()}.tmp", f".two.{os.getpid()}.tmp"])
    assert (tmp_path / "one").read_text(encoding="utf-8") == "1" and (tmp_path / "two").read_text(encoding="utf-8") == "2"


def test_a_batch_left_by_an_exception_is_committed_whole(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with DurableBatch(max_files=10, max_seconds=3600) as batch:
            batch.write(tmp_path / "graded", "whole")
            raise KeyboardInterrupt
    assert (tmp_path / "graded").read_text(encoding="utf-8") == "whole"


# The command as the `attnkit` script runs it; the log gets one line per event, in order.
LOGGING = """
import os, sys
out, log = sys.argv.pop(1), sys.argv.pop(1)
events = open(log, "a", encoding="utf-8", buffering=1)
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith(out) and args[0].endswith(".tmp"):
        events.write("write " + os.path.relpath(args[0], out) + "\\n")
    elif event == "os.rename" and str(args[1]).startswith(out):
        events.write("rename " + os.path.relpath(str(args[1]), out) + "\\n")
sys.addaudithook(hook)
real_fsync = os.fsync
def fsync(fd):
    target = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    events.write("fsync " + (os.path.relpath(target, out) if target.startswith(out) else "elsewhere") + "\\n")
    return real_fsync(fd)
os.fsync = fsync
from attnkit import files
real_sync = getattr(files, "sync_file_system", None)
def sync_file_system(folder):
    done = real_sync(folder)
    events.write(f"sync {done}\\n")
    return done
if real_sync is not None:
    files.sync_file_system = sync_file_system
sys.argv[0] = "attnkit"
from attnkit.launch import run
run()
"""


@pytest.mark.e2e
def test_grading_a_class_syncs_its_records_once_per_batch_before_they_appear(tmp_path: Path) -> None:
    submitted, out, log = tmp_path / "submitted", tmp_path / "graded", tmp_path / "events.log"
    make_named_class(submitted, {"ada": "correct", "bo": "release", "chen": "mistake:no_scale", "dai": "half_3_of_8"})
    command = [sys.executable, "-c", LOGGING, str(out), str(log), "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--quiet"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]  # 1: the release is not graded whole
    events = [line.split(" ", 1) for line in log.read_text(encoding="utf-8").splitlines()]
    per_student = {f"students/{s}/{ASSIGNMENT}/{name}" for s in ("ada", "bo", "chen", "dai") for name in ("results.json", "feedback.html")}
    renamed = [path for kind, path in events if kind == "rename" and path in per_student]
    assert sorted(renamed) == sorted(per_student)  # each written once
    # No per-student file takes an fsync of its own: they wait for their batch's sync.
    assert not [path for kind, path in events if kind == "fsync" and Path(path).name.startswith((".results.json", ".feedback.html"))], events
    syncs = [i for i, (kind, _) in enumerate(events) if kind == "sync"]
    assert 1 <= len(syncs) <= len(per_student) // 2, events  # at most one per record, not one per file
    assert all(events[i][1] == "True" for i in syncs), events  # syncfs worked here (Linux)
    for path in per_student:
        temporary = (Path(path).parent, f".{Path(path).name}.")
        written = max(i for i, (kind, name) in enumerate(events) if kind == "write" and (Path(name).parent, Path(name).name[: len(temporary[1])]) == temporary)
        moved = next(i for i, (kind, name) in enumerate(events) if kind == "rename" and name == path)
        assert any(written < i < moved for i in syncs), (path, events)
    # Each page goes before its results.json: a new results.json never stands beside an old page.
    for student in ("ada", "bo", "chen", "dai"):
        folder = f"students/{student}/{ASSIGNMENT}"
        assert renamed.index(f"{folder}/feedback.html") < renamed.index(f"{folder}/results.json")
