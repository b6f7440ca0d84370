"""Which Python gradescope/setup.sh builds the autograder's virtualenv with: the image's own
python3 when it is a supported final release (Ubuntu 24.04's 3.12), else a python3.13/3.12/3.11
on PATH; with none (Ubuntu 22.04's 3.10), it stops and says what to choose, and never apt-installs
22.04's `python3.11` (the release candidate 3.11.0~rc1).

The image is simulated by a PATH of symlinks to real interpreters (pyenv's), and an `apt-get`
that only records that it was called. The venv step is made to fail at once (a file where the
venv goes), so only the choice runs, in seconds.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import pytest

from commands import run_command

ROOT = Path(__file__).resolve().parents[2]


def pyenv(version: str) -> str:
    found = sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python")))
    if not found:
        pytest.skip(f"no pyenv Python {version} on this machine")
    return found[-1]


def run_setup(tmp_path: Path, pythons: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    """setup.sh in an image whose PATH holds only ``pythons`` (name -> interpreter) and the basics."""
    image = tmp_path / "bin"
    image.mkdir(parents=True)
    for name, target in pythons.items():
        (image / name).symlink_to(target)
    for tool in ("basename", "chmod", "dirname"):
        (image / tool).symlink_to(shutil.which(tool))
    apt_log = tmp_path / "apt-get.log"
    (image / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {apt_log}\n')
    (image / "apt-get").chmod(0o755)
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    (root / "venv").write_text("")  # the venv cannot be made: setup stops right after choosing
    env = {"PATH": str(image), "AUTOGRADER_ROOT": str(root), "HOME": str(tmp_path), **extra}
    return run_command(["/bin/bash", ROOT / "gradescope" / "setup.sh"], env=env, timeout=120)


def test_ubuntu_24_04_uses_its_own_python_3_12(tmp_path: Path) -> None:
    run = run_setup(tmp_path, {"python3": pyenv("3.12")})
    assert f"using {tmp_path}/bin/python3 (Python 3.12." in run.stdout, run.stdout + run.stderr
    assert not (tmp_path / "apt-get.log").exists()


def test_ubuntu_22_04_stops_and_says_what_to_choose_instead_of_installing_a_release_candidate(tmp_path: Path) -> None:
    run = run_setup(tmp_path, {"python3": pyenv("3.10")})
    assert run.returncode == 1
    assert "Ubuntu 24.04" in run.stderr and "ATTNKIT_PYTHON" in run.stderr, run.stderr
    assert not (tmp_path / "apt-get.log").exists(), "setup.sh apt-installed a Python: " + (tmp_path / "apt-get.log").read_text()


def test_a_supported_python_beside_an_old_python3_is_found(tmp_path: Path) -> None:
    run = run_setup(tmp_path, {"python3": pyenv("3.10"), "python3.13": pyenv("3.13")})
    assert f"using {tmp_path}/bin/python3.13 (Python 3.13." in run.stdout, run.stdout + run.stderr


def test_attnkit_python_names_the_interpreter_and_must_be_supported(tmp_path: Path) -> None:
    chosen = run_setup(tmp_path / "a", {"python3": pyenv("3.12"), "mine": pyenv("3.11")}, ATTNKIT_PYTHON="mine")
    assert f"using {tmp_path}/a/bin/mine (Python 3.11." in chosen.stdout, chosen.stdout + chosen.stderr
    refused = run_setup(tmp_path / "b", {"python3": pyenv("3.12"), "mine": pyenv("3.10")}, ATTNKIT_PYTHON="mine")
    assert refused.returncode == 1 and "using" not in refused.stdout, refused.stdout
