"""The TA's side of the isolation tests (tests/test_isolation*.py, tests/sandbox/test_settings_harness.py):
the ordinary user a TA is, the distribution's Python with the grader's packages, world-readable
folders the unprivileged grader can read. The fixtures built on these are in tests/conftest.py."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
USER = "attnkit-ta"
# What the grader's virtualenv needs to grade (nbgrader and Jupyter are only for the course tools).
GRADER_PACKAGES = ["torch==2.13.0", "numpy", "ipython", "matplotlib", "rich", "jinja2", "pytest", "pyseccomp"]


def lock_digest() -> str:
    """The key of the shared grader venv under /var/tmp: the lock, the packages, the Python."""
    text = (ROOT / "requirements.lock").read_text() + " ".join(GRADER_PACKAGES) + Path(SYSTEM_PYTHON).resolve().name
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def thin_venv(folder: Path, paths: list[Path]) -> str:
    """A virtualenv of the distribution's Python at ``folder`` (no pip) that finds ``paths``
    through a .pth file; its interpreter."""
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next((folder / "lib").glob("python3*/site-packages"))
    (site / "attnkit-test.pth").write_text("".join(f"{path}\n" for path in paths))
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o644))
    return str(folder / "bin/python")


def tempfile_folder(prefix: str) -> str:
    """A world-readable temporary folder under /var/tmp (the unprivileged grader reads it)."""
    folder = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(folder, 0o755)
    return folder


def minimal_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8"}
