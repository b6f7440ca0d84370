"""Intake (``attnkit grade``) reads a student's folders through one opening each, bounded (issue 48):
a folder of 100,000 entries is not listed on (its student gets a 0 that says why), and the
notebook is read from the descriptor its folder was listed from (``notebook.read_opened``)."""

from __future__ import annotations

import os
from pathlib import Path

from contract import CH19

from attnkit.intake import jobs
from attnkit.intake.jobs import find_jobs
from attnkit.submitted_files import Unsafe

NOTEBOOK = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def test_an_assignment_folder_of_100000_entries_gets_a_reason_not_a_listing(tmp_path: Path) -> None:
    folder = tmp_path / "submitted" / "ana" / CH19.name
    folder.mkdir(parents=True)
    (folder / CH19.notebook).write_bytes(NOTEBOOK)
    empty = os.fsencode(folder / "empty.txt")
    with open(empty, "wb"):
        pass
    for n in range(100_000):
        if n == 50_000:  # at most 65,000 links a file on ext4
            empty = os.fsencode(folder / "second.txt")
            with open(empty, "wb"):
                pass
        os.link(empty, os.fsencode(folder) + b"/%d" % n)
    (tmp_path / "submitted" / "bo" / CH19.name).mkdir(parents=True)
    (tmp_path / "submitted" / "bo" / CH19.name / CH19.notebook).write_bytes(NOTEBOOK)
    intake = find_jobs(tmp_path / "submitted", {CH19.name: CH19})
    by_student = {job.student_id: job for job in intake.jobs}
    assert by_student["ana"].problems and str(jobs.MAX_LISTED) in by_student["ana"].problems[0]
    assert not by_student["bo"].problems and by_student["bo"].notebooks


def test_read_opened_reads_what_it_opened_and_nothing_else(tmp_path: Path) -> None:
    from attnkit.submitted_files import read_opened

    (tmp_path / "real.ipynb").write_bytes(NOTEBOOK)
    (tmp_path / "folder.ipynb").mkdir()
    os.symlink(tmp_path / "real.ipynb", tmp_path / "link.ipynb")
    os.mkfifo(tmp_path / "pipe.ipynb")
    with open(tmp_path / "big.ipynb", "wb") as handle:
        handle.truncate(1025)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_opened(fd, "real.ipynb") == NOTEBOOK
        for name in ("folder.ipynb", "link.ipynb", "pipe.ipynb", "../real.ipynb", "missing.ipynb"):
            try:
                read_opened(fd, name)
            except Unsafe as error:
                assert str(error)
            else:
                raise AssertionError(f"{name} was read")
        try:
            read_opened(fd, "big.ipynb", limit=1024)
        except Unsafe as error:
            assert "文件过大" in str(error)
        else:
            raise AssertionError("over the cap")
    finally:
        os.close(fd)
