"""What ``attnkit serve`` grades is what the student owns (issue 48): the folder in nbgrader's
``inbound/`` is opened once and every check and read goes through that opening's descriptors
(``attnkit.service.exchange.take``). Real unix students (useradd, removed at the end), real files:
a folder swapped for a link to the instructor's solutions after the check, a hard link to a
classmate's private notebook, names and secrets that are not UTF-8, timestamps nbgrader never
writes, a folder of 100,000 entries, a 64 MB sparse notebook hard-linked into six folders.
Each gives a reason, never an exception, never bytes the student does not own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from commands import unix_users

from attnkit.service import exchange

pytestmark = [pytest.mark.root]

ASSIGNMENT = "ch19-attention"
STAMP = "2026-12-05 06:00:00.000000 UTC"
OWN = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, "mine": "ana wrote this"}'
SOLUTIONS = b'{"cells": [], "the": "INSTRUCTOR SOLUTIONS"}'
PRIVATE = b'{"cells": [], "the": "CLASSMATE PRIVATE NOTEBOOK"}'


@dataclass
class Exchange:
    base: Path
    inbound: Path
    attempts: Path
    solutions: Path  # the instructor's (root's, 0700)
    private: Path  # bo's notebook in bo's 0700 home, 0600
    ana: str
    bo: str


@pytest.fixture(scope="module")
def students() -> Iterator[tuple[str, ...]]:
    with unix_users(f"ak48a{os.getpid() % 100000}", f"ak48b{os.getpid() % 100000}") as names:
        yield names


@pytest.fixture
def ex(students: tuple[str, str]) -> Iterator[Exchange]:
    ana, bo = students
    base = Path(tempfile.mkdtemp(prefix="attnkit-owned-"))
    base.chmod(0o755)
    inbound = base / "exchange" / "ch19" / "inbound"
    inbound.mkdir(parents=True)
    inbound.chmod(0o777)
    attempts = base / "state" / "attempts"
    attempts.mkdir(parents=True)
    solutions = base / "course" / "solutions" / ASSIGNMENT
    solutions.mkdir(parents=True)
    (solutions / "attention.ipynb").write_bytes(SOLUTIONS)
    (solutions / "timestamp.txt").write_text(STAMP)
    (base / "course").chmod(0o700)
    home = base / "home" / bo
    home.mkdir(parents=True)
    private = home / "attention.ipynb"
    private.write_bytes(PRIVATE)
    private.chmod(0o600)
    shutil.chown(private, bo, bo)
    shutil.chown(home, bo, bo)
    home.chmod(0o700)
    try:
        yield Exchange(base, inbound, attempts, solutions, private, ana, bo)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def submit(x: Exchange, owner: str, files: dict[bytes | str, bytes | None] | None = None, tag: str = "r") -> str:
    """What ``nbgrader submit`` leaves in inbound/ (every entry ``owner``'s, the folder 0777 last);
    ``files``: more entries (None: a folder), or replacements. Its inbound name."""
    name = f"{owner}+{ASSIGNMENT}+{STAMP}+{tag}"
    folder = x.inbound / name
    folder.mkdir()
    entries: dict[bytes | str, bytes | None] = {"attention.ipynb": OWN, "timestamp.txt": STAMP.encode(), "submission_secret.txt": b"5" * 128}
    entries.update(files or {})
    for entry, data in entries.items():
        path = os.path.join(os.fsencode(folder), entry if isinstance(entry, bytes) else entry.encode())
        if data is None:
            os.mkdir(path)
            with open(os.path.join(path, b"inside.txt"), "wb") as handle:
                handle.write(b"x")
            os.chown(os.path.join(path, b"inside.txt"), *ids(owner))
        else:
            with open(path, "wb") as handle:
                handle.write(data)
        os.chown(path, *ids(owner))
    shutil.chown(folder, owner, owner)
    folder.chmod(0o777)
    return name


def ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def every_byte(folder: Path) -> bytes:
    """All the bytes of the regular files below ``folder`` (links not followed)."""
    found = b""
    for root, _folders, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as handle:
                    found += handle.read()
    return found


def swap_for_link(x: Exchange, name: str, to: Path) -> None:
    """The attacker's move: their own folder renamed away, a symlink to ``to`` in its place."""
    os.rename(x.inbound / name, x.inbound / f".{name}.away")
    os.symlink(to, x.inbound / name)


# -- the race: what was checked is what is copied --------------------------------------------------


def test_a_link_to_the_solutions_swapped_in_after_the_opening_copies_the_students_own_bytes(ex: Exchange) -> None:
    name = submit(ex, ex.ana)
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target, after_open=lambda: swap_for_link(ex, name, ex.solutions))
    assert os.path.islink(ex.inbound / name), "the swap happened"
    assert taken.ok, taken.reason
    assert taken.timestamp == STAMP and taken.secret == "5" * 128
    copied = every_byte(target)
    assert b"INSTRUCTOR SOLUTIONS" not in copied
    assert (target / "attention.ipynb").read_bytes() == OWN
    # And taken again now (the link in place): nothing is copied, the folder is not a folder.
    again = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / "again")
    assert not again.ok and not (ex.attempts / "again").exists()


def test_check_then_copy_by_path_never_copies_the_solutions_swapped_in_between(ex: Exchange) -> None:
    """The service's old path (``owner_problem`` by path, then ``stage`` by path): the same swap
    between the two made it copy the instructor's solutions as the student's (score 100)."""
    name = submit(ex, ex.ana)
    folder = ex.inbound / name
    assert exchange.owner_problem(folder, ex.ana, os.geteuid()) == ""
    swap_for_link(ex, name, ex.solutions)
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    left_out = exchange.stage(folder, target)
    assert b"INSTRUCTOR SOLUTIONS" not in every_byte(ex.attempts), left_out
    assert left_out, "the refusal says why"


def test_a_link_to_a_classmates_private_notebook_swapped_in_after_the_opening_is_never_read(ex: Exchange) -> None:
    name = submit(ex, ex.ana)
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target, after_open=lambda: swap_for_link(ex, name, ex.private.parent))
    assert taken.ok and b"CLASSMATE" not in every_byte(ex.attempts)
    assert (target / "attention.ipynb").read_bytes() == OWN


def test_a_hard_link_to_a_classmates_private_notebook_refuses_the_submission(ex: Exchange) -> None:
    """A hard link is the classmate's file under another name: its owner (fstat of what was opened) is theirs."""
    name = submit(ex, ex.ana)
    folder = ex.inbound / name

    def link() -> None:
        os.unlink(folder / "attention.ipynb")
        os.link(ex.private, folder / "attention.ipynb")

    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target, after_open=link)
    assert not taken.ok and f"uid {ids(ex.bo)[0]}" in taken.reason and "attention.ipynb" in taken.reason
    assert not target.exists() and b"CLASSMATE" not in every_byte(ex.attempts)
    assert not [n for n in os.listdir(ex.attempts) if n.startswith(".attnkit-staging-")], "no copy left behind"


def test_a_hard_link_of_the_students_own_file_is_theirs(ex: Exchange) -> None:
    name = submit(ex, ex.ana)
    mine = ex.base / "mine.ipynb"
    mine.write_bytes(OWN)
    shutil.chown(mine, ex.ana, ex.ana)
    os.unlink(ex.inbound / name / "attention.ipynb")
    os.link(mine, ex.inbound / name / "attention.ipynb")
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / name / ex.ana / ASSIGNMENT)
    assert taken.ok and taken.files_copied == 3


# -- bytes validated before use --------------------------------------------------------------------


def test_a_secret_that_is_not_utf8_refuses_the_submission_and_never_raises(ex: Exchange) -> None:
    name = submit(ex, ex.ana, {"submission_secret.txt": b"\xff\xfe\x00secret\n"})
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target)
    assert not taken.ok and "submission_secret.txt" in taken.reason and not target.exists()
    # The page's name from a copy holding such a secret (an older copy): nbgrader's legacy hash, no exception.
    staged = ex.base / "staged"
    staged.mkdir()
    (staged / "submission_secret.txt").write_bytes(b"\xff\xfe\x00secret\n")
    (staged / "attention.ipynb").write_bytes(OWN)
    assert exchange.feedback_name(staged, "ch19", ex.ana, ASSIGNMENT, "attention", STAMP).endswith(".html")


def test_a_file_name_that_is_not_utf8_is_left_out_with_its_reason(ex: Exchange) -> None:
    name = submit(ex, ex.ana, {b"caf\xe9.ipynb": b"{}", b"tab\tname.txt": b"x"})
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target)
    assert taken.ok, taken.reason
    assert any(entry.startswith("caf\\xe9.ipynb: ") and "UTF-8" in entry for entry in taken.left_out), taken.left_out
    assert any(entry.startswith("tab\\tname.txt: ") for entry in taken.left_out), taken.left_out
    assert sorted(os.listdir(target)) == ["attention.ipynb", "submission_secret.txt", "timestamp.txt"]


@pytest.mark.parametrize("folder_name", ["x.ipynb", "attention.ipynb"])
def test_a_folder_named_like_a_notebook_never_raises(ex: Exchange, folder_name: str) -> None:
    name = submit(ex, ex.ana, {folder_name: None})  # beside the notebook, or in its place
    if folder_name == "attention.ipynb":
        os.unlink(ex.inbound / name / "submission_secret.txt")  # the legacy page name reads the notebook
    target = ex.attempts / name / ex.ana / ASSIGNMENT
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), target)
    assert taken.ok, taken.reason
    assert any(entry.startswith(f"{folder_name}: ") for entry in taken.left_out), taken.left_out
    for notebook in ("attention", "x"):
        assert exchange.feedback_name(target, "ch19", ex.ana, ASSIGNMENT, notebook, STAMP).endswith(".html")
    # A copy made before (a folder of that name in it, as the old copy made one): still no IsADirectoryError.
    old_copy = ex.base / "old-copy"
    (old_copy / folder_name).mkdir(parents=True)
    assert exchange.feedback_name(old_copy, "ch19", ex.ana, ASSIGNMENT, folder_name.removesuffix(".ipynb"), STAMP).endswith(".html")


@pytest.mark.parametrize(
    "stamp",
    [
        b"9999-12-31 23:59:59.999999 UTC",
        b"2026-12-05 06:00:00.000000 Mars/Olympus",
        b"2026-12-05 06:00:00.000000 UTC\x1b[2J",
        b"\xff\xfe2026",
        b"2026-02-30 06:00:00.000000 UTC",
        b"",
    ],
)
def test_a_timestamp_nbgrader_never_writes_refuses_the_submission(ex: Exchange, stamp: bytes) -> None:
    name = submit(ex, ex.ana, {"timestamp.txt": stamp})
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / name / ex.ana / ASSIGNMENT)
    assert not taken.ok and "timestamp.txt" in taken.reason and taken.timestamp is None
    assert exchange.finished(ex.inbound / name) is None
    assert exchange.valid_timestamp(stamp)[0] is None


def test_valid_timestamps_and_secrets() -> None:
    assert exchange.valid_timestamp(b"2026-12-05 06:00:00.000000 UTC\n") == ("2026-12-05 06:00:00.000000 UTC", "")
    assert exchange.valid_timestamp(b"2026-12-05 07:00:00.000000 CET")[0] == "2026-12-05 07:00:00.000000 CET"
    assert exchange.valid_timestamp(b"2026-12-05 07:00:00.000000 +0100")[0]
    assert exchange.valid_timestamp(b"1" * 10_000)[0] is None
    assert exchange.valid_secret(b"ab" * 64) == ("ab" * 64, "")
    assert exchange.valid_secret(b"") == (None, "")
    for bad in (b"\xff", b"a b", b"a\n", "密".encode(), b"a" * 10_000):
        secret, reason = exchange.valid_secret(bad)
        assert secret is None and reason


# -- bounded ----------------------------------------------------------------------------------------


def test_a_folder_of_100000_entries_is_refused_with_its_reason(ex: Exchange) -> None:
    """The attacker's slow walk (hard links of one file): refused once a folder lists more than MAX_ENTRIES."""
    name = submit(ex, ex.ana, {"many": None})
    many = os.fsencode(ex.inbound / name / "many")
    first = os.path.join(many, b"inside.txt")
    for n in range(100_000):
        if n == 50_000:  # a file has at most 65,000 links on ext4
            first = os.path.join(many, b"0")
            with open(first, "wb"):
                pass
            os.chown(first, *ids(ex.ana))
        os.link(first, os.path.join(many, b"%d" % (n + 1)))
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / name / ex.ana / ASSIGNMENT)
    assert not taken.ok and "many" in taken.reason and str(exchange.MAX_ENTRIES) in taken.reason
    assert exchange.owner_problem(ex.inbound / name, ex.ana, os.geteuid()) == taken.reason


def test_a_sparse_64mb_notebook_hard_linked_into_six_folders_stays_within_the_quota(ex: Exchange) -> None:
    sparse = ex.base / "sparse.ipynb"
    with open(sparse, "wb") as handle:
        handle.write(b'{"cells": []}')
        handle.truncate(64_000_000)
    shutil.chown(sparse, ex.ana, ex.ana)
    names = []
    for n in range(6):
        name = submit(ex, ex.ana, tag=f"s{n}")
        os.unlink(ex.inbound / name / "attention.ipynb")
        os.link(sparse, ex.inbound / name / "attention.ipynb")
        names.append(name)
    results = []
    for name in names:
        held = exchange.held_by(ex.attempts, ex.ana)
        results.append(exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / name / ex.ana / ASSIGNMENT, held=held))
    assert [r.ok for r in results] == [True, True, False, False, False, False]
    assert all("上限" in r.reason for r in results[2:])
    assert exchange.held_by(ex.attempts, ex.ana) <= exchange.STUDENT_QUOTA_BYTES
    on_disk = sum(os.lstat(os.path.join(root, f)).st_blocks * 512 for root, _d, files in os.walk(ex.attempts) for f in files)
    assert on_disk < 1024 * 1024, f"the copies kept the holes: {on_disk} bytes on disk"
    copy = ex.attempts / names[0] / ex.ana / ASSIGNMENT / "attention.ipynb"
    assert copy.stat().st_size == 64_000_000
    with open(copy, "rb") as a, open(sparse, "rb") as b:
        assert hashlib.sha256(a.read()).digest() == hashlib.sha256(b.read()).digest()


def test_a_file_over_the_cap_is_left_out_without_reading_it(ex: Exchange) -> None:
    name = submit(ex, ex.ana, {"huge.bin": b""})
    with open(ex.inbound / name / "huge.bin", "r+b") as handle:
        handle.truncate(exchange.MAX_FILE_BYTES + 1)
    taken = exchange.take(ex.inbound, name, ex.ana, os.geteuid(), ex.attempts / name / ex.ana / ASSIGNMENT)
    assert taken.ok and any(entry.startswith("huge.bin: ") for entry in taken.left_out)


def test_prune_keeps_the_newest_and_follows_no_link(ex: Exchange) -> None:
    for n in range(5):
        (ex.attempts / f"a{n}" / ex.ana / ASSIGNMENT).mkdir(parents=True)
        (ex.attempts / f"a{n}" / ex.ana / ASSIGNMENT / "attention.ipynb").write_bytes(OWN)
    os.symlink(ex.solutions, ex.attempts / "link")
    recorded = [(f"a{n}", ex.ana, ASSIGNMENT, float(n)) for n in range(5)] + [("link", ex.ana, ASSIGNMENT, -1.0), ("../state", ex.ana, ASSIGNMENT, -2.0)]
    assert exchange.prune(ex.attempts, recorded, keep=2) == ["a0", "a1", "a2"]
    assert sorted(os.listdir(ex.attempts)) == ["a3", "a4", "link"]
    assert (ex.solutions / "attention.ipynb").read_bytes() == SOLUTIONS
    assert exchange.held_by(ex.attempts, ex.ana) == 2 * len(OWN)
