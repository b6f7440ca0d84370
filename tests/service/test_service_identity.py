"""Whose a submission in nbgrader's inbound/ is, for ``attnkit serve`` (attnkit.service.exchange):
the uid that owns the folder and its files, never the folder's name. Real unix users (useradd)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from commands import unix_users

from attnkit.service import exchange

pytestmark = [pytest.mark.root]


@pytest.fixture(scope="module")
def students() -> Iterator[tuple[str, ...]]:
    with unix_users(f"ak39i{os.getpid() % 100000}", f"ak39j{os.getpid() % 100000}") as names:
        yield names


def submission(inbound: Path, claimed: str, owner: str) -> Path:
    """What nbgrader submit leaves, named after ``claimed``, every part owned by ``owner``."""
    folder = inbound / f"{claimed}+ch19-attention+2026-12-05 06:00:00.000000 UTC+abc"
    folder.mkdir(parents=True)
    (folder / "attention.ipynb").write_text("{}")
    (folder / "timestamp.txt").write_text("2026-12-05 06:00:00.000000 UTC")
    (folder / "submission_secret.txt").write_text("s" * 128)
    for path in (folder, *folder.iterdir()):
        shutil.chown(path, owner, owner)
    return folder


def test_the_owner_must_be_the_student_the_name_claims(students: tuple[str, str], tmp_path: Path) -> None:
    ana, bo = students
    own = submission(tmp_path / "a", ana, ana)
    assert exchange.owner_problem(own, ana, os.geteuid()) == ""
    forged = submission(tmp_path / "b", ana, bo)  # bo names his folder after ana
    problem = exchange.owner_problem(forged, ana, os.geteuid())
    assert problem and f"uid {exchange.student_uid(bo)}" in problem
    planted = submission(tmp_path / "c", ana, ana)
    shutil.chown(planted / "attention.ipynb", bo, bo)  # one file of someone else's inside
    assert "attention.ipynb" in exchange.owner_problem(planted, ana, os.geteuid())


def test_names_without_a_user_of_their_own_are_refused(students: tuple[str, str], tmp_path: Path) -> None:
    ana, _bo = students
    folder = submission(tmp_path, "nosuchstudent39", ana)
    assert exchange.owner_problem(folder, "nosuchstudent39", os.geteuid())
    # Where every student is the service's own uid (or root), files cannot tell them apart.
    assert exchange.owner_problem(folder, "root", os.geteuid())


def test_finished_only_once_nbgrader_made_the_folder_0777(students: tuple[str, str], tmp_path: Path) -> None:
    ana, _bo = students
    folder = submission(tmp_path, ana, ana)
    folder.chmod(0o755)
    assert exchange.finished(folder) is None
    folder.chmod(0o777)
    assert exchange.finished(folder) == "2026-12-05 06:00:00.000000 UTC"


def test_the_copy_takes_regular_files_only(students: tuple[str, str], tmp_path: Path) -> None:
    ana, _bo = students
    folder = submission(tmp_path / "in", ana, ana)
    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's")
    os.symlink(secret, folder / "link.ipynb")
    os.mkfifo(folder / "pipe.ipynb")
    left_out = exchange.stage(folder, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["attention.ipynb", "submission_secret.txt", "timestamp.txt"]
    assert {entry.split(":")[0] for entry in left_out} == {"link.ipynb", "pipe.ipynb"}


def test_the_page_is_named_by_nbgraders_hash_of_the_secret(tmp_path: Path) -> None:
    from nbgrader.utils import notebook_hash

    staged = tmp_path / "s"
    staged.mkdir()
    (staged / "submission_secret.txt").write_text("abc")
    assert exchange.feedback_name(staged, "ch19", "ana", "ch19-attention", "attention", "t") == notebook_hash(secret="abc", notebook_id="attention") + ".html"
    course = exchange.Course(tmp_path, tmp_path / "exchange", "ch19")
    placed = exchange.place_feedback(course, "h.html", b"<p>page</p>")
    assert oct(placed.parent.stat().st_mode & 0o777) == oct(0o711) and oct(placed.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(os.listdir(placed.parent)) == ["h.html"], "no temporary left behind"
