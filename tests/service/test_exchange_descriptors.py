"""The exchange's older entry points (``finished``, ``owner_problem``, ``stage``, ``feedback_name``),
which other code and tests still call, now on the descriptors of one opening (issue 48): each
case here is one the code before it got wrong (shown in the commit that added them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from attnkit.service import exchange
from test_owned_bytes import ASSIGNMENT, OWN, STAMP, Exchange, ex, ids, students, submit  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.root]


def test_feedback_name_of_a_copy_whose_secret_is_not_utf8_never_raises(tmp_path: Path) -> None:
    (tmp_path / "submission_secret.txt").write_bytes(b"\xff\xfe secret")
    (tmp_path / "attention.ipynb").write_bytes(OWN)
    assert exchange.feedback_name(tmp_path, "ch19", "ana", ASSIGNMENT, "attention", STAMP).endswith(".html")


def test_feedback_name_beside_a_folder_named_like_the_notebook_never_raises(tmp_path: Path) -> None:
    (tmp_path / "attention.ipynb").mkdir()  # no secret: nbgrader's legacy hash reads the notebook
    assert exchange.feedback_name(tmp_path, "ch19", "ana", ASSIGNMENT, "attention", STAMP).endswith(".html")


def test_feedback_name_is_nbgraders_for_a_real_secret_and_without_one(tmp_path: Path) -> None:
    from nbgrader.utils import make_unique_key, notebook_hash

    (tmp_path / "attention.ipynb").write_bytes(OWN)
    key = make_unique_key("ch19", ASSIGNMENT, "attention", "ana", STAMP)
    legacy = notebook_hash(str(tmp_path / "attention.ipynb"), key) + ".html"
    assert exchange.feedback_name(tmp_path, "ch19", "ana", ASSIGNMENT, "attention", STAMP) == legacy
    (tmp_path / "submission_secret.txt").write_text("ab" * 64)
    assert exchange.feedback_name(tmp_path, "ch19", "ana", ASSIGNMENT, "attention", STAMP) == notebook_hash(secret="ab" * 64, notebook_id="attention") + ".html"


def test_finished_takes_no_timestamp_of_year_9999(ex: Exchange) -> None:  # noqa: F811
    name = submit(ex, ex.ana, {"timestamp.txt": b"9999-12-31 23:59:59.999999 UTC"})
    assert exchange.finished(ex.inbound / name) is None
    assert exchange.finished(ex.inbound / submit(ex, ex.ana, tag="good")) == STAMP


def test_finished_is_none_for_a_link_to_a_finished_folder(ex: Exchange) -> None:  # noqa: F811
    name = submit(ex, ex.ana)
    os.symlink(ex.inbound / name, ex.inbound / "link")
    assert exchange.finished(ex.inbound / "link") is None


def test_owner_problem_refuses_a_folder_of_100000_entries(ex: Exchange) -> None:  # noqa: F811
    name = submit(ex, ex.ana, {"many": None})
    many = os.fsencode(ex.inbound / name / "many")
    second = os.path.join(many, b"second.txt")
    with open(second, "wb"):
        pass
    os.chown(second, *ids(ex.ana))
    for n in range(100_000):  # the student's own two files, hard-linked (at most 65,000 links a file on ext4)
        os.link(os.path.join(many, b"inside.txt") if n < 50_000 else second, os.path.join(many, b"%d" % n))
    problem = exchange.owner_problem(ex.inbound / name, ex.ana, os.geteuid())
    assert "many" in problem and "条目过多" in problem


def test_stage_keeps_a_sparse_notebook_sparse(ex: Exchange) -> None:  # noqa: F811
    name = submit(ex, ex.ana)
    with open(ex.inbound / name / "attention.ipynb", "r+b") as handle:
        handle.truncate(64_000_000)
    target = ex.attempts / "copy"
    assert exchange.stage(ex.inbound / name, target) == []
    copy = target / "attention.ipynb"
    assert copy.stat().st_size == 64_000_000 and copy.stat().st_blocks * 512 < 1024 * 1024
    with open(copy, "rb") as handle:
        assert handle.read(len(OWN)) == OWN


def test_stage_leaves_out_names_that_are_not_text_and_folders_named_like_notebooks(ex: Exchange) -> None:  # noqa: F811
    name = submit(ex, ex.ana, {b"caf\xe9.ipynb": b"{}", "x.ipynb": None})
    target = ex.attempts / "copy"
    left_out = exchange.stage(ex.inbound / name, target)
    assert sorted(entry.split(":")[0] for entry in left_out) == ["caf\\xe9.ipynb", "x.ipynb"]
    assert sorted(os.listdir(target)) == ["attention.ipynb", "submission_secret.txt", "timestamp.txt"]


def test_owner_problem_of_a_file_of_root_planted_in_a_finished_folder(ex: Exchange) -> None:  # noqa: F811
    """A finished folder is 0777: anyone may add to it. A file of another uid refuses it (as before)."""
    name = submit(ex, ex.ana)
    (ex.inbound / name / "planted.ipynb").write_bytes(b"{}")
    assert "planted.ipynb" in exchange.owner_problem(ex.inbound / name, ex.ana, os.geteuid())
    shutil.chown(ex.inbound / name / "planted.ipynb", ex.ana, ex.ana)
    assert exchange.owner_problem(ex.inbound / name, ex.ana, os.geteuid()) == ""
    assert ids(ex.ana)[0] != 0


def test_an_inbound_name_that_is_not_text_is_no_submission() -> None:
    """The service records names in its database (text): such a folder is ignored, never recorded."""
    assert exchange.parse_name("ana+ch19-attention+2026-12-05 06:00:00.000000 UTC+abc") is not None
    assert exchange.parse_name("ana\udce9+ch19-attention+2026-12-05 06:00:00.000000 UTC+abc") is None
    assert exchange.parse_name("ana\n+ch19-attention+2026-12-05 06:00:00.000000 UTC+abc") is None
