"""Say what `make install` is about to download, how big it is, and how long it usually takes.

`make` runs it with the venv's Python just before ``pip install`` (whose own progress follows):
without it a first install is minutes of silence. The big item is torch 2.13.0 (pinned): which
build pip takes depends on where it finds one for this Python. A wheel in pip's find-links (a
machine's own wheel directory: ``pip config list``) is named with its size; else, on Linux,
PyPI's build, which brings NVIDIA's CUDA packages; else (macOS, Windows) PyPI's CPU build.
Standard library only: nothing is installed yet.

    .venv/bin/python tools/install_plan.py
"""

from __future__ import annotations

import configparser
import os
import platform
import sys
from pathlib import Path

TORCH = "2.13.0"
# Measured for this project (README, "Quick start"): the installed .venv and PyPI's CUDA download.
CPU_VENV_GB = 1.4
CUDA_DOWNLOAD_GB = 2.6
CUDA_VENV_GB = 5.0


def find_links() -> list[Path]:
    """The local folders pip looks in for wheels: PIP_FIND_LINKS, then pip's config files."""
    places = os.environ.get("PIP_FIND_LINKS", "").split()
    for config in ("/etc/pip.conf", "~/.config/pip/pip.conf", "~/.pip/pip.conf", os.environ.get("PIP_CONFIG_FILE", "")):
        parser = configparser.ConfigParser()
        try:
            parser.read(os.path.expanduser(config))
        except configparser.Error:
            continue
        places += parser.get("global", "find-links", fallback="").split()
    folders = []
    for place in places:
        path = Path(place.removeprefix("file://"))
        if path.is_dir() and path not in folders:
            folders.append(path)
    return folders


def local_torch() -> Path | None:
    """A torch wheel of the pinned version for this Python in pip's find-links, if there is one."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for folder in find_links():
        for wheel in sorted(folder.glob(f"torch-{TORCH}*-{tag}-{tag}-*.whl")):
            if platform.machine() in wheel.name:
                return wheel
    return None


def plan() -> list[str]:
    python = f"Python {platform.python_version()} ({sys.executable})"
    lines = [f"installing attnkit's pinned dependencies (requirements.lock) into .venv with {python}:"]
    wheel = local_torch()
    if wheel is not None:
        build = "the CPU build" if "+cpu" in wheel.name else "a local build"
        lines.append(f"  torch {TORCH}: {build} from {wheel.parent} ({wheel.stat().st_size / 2**20:.0f} MB, already on disk)")
        lines.append(f"  then jupyterlab, nbgrader, numpy, matplotlib and their dependencies from the package index; .venv ends near {CPU_VENV_GB} GB")
        lines.append("  usually 3-6 minutes (317 s measured on two cores with Python 3.11)")
    elif "download.pytorch.org/whl/cpu" in os.environ.get("PIP_EXTRA_INDEX_URL", "") + os.environ.get("PIP_INDEX_URL", ""):
        lines.append(f"  torch {TORCH}: the CPU build from PyTorch's CPU index (about 0.2 GB to download); .venv ends near {CPU_VENV_GB} GB")
        lines.append("  usually 4-8 minutes")
    elif sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64"):
        lines.append(
            f"  torch {TORCH}: PyPI's Linux build, with NVIDIA's CUDA packages (nvidia-*): about {CUDA_DOWNLOAD_GB} GB to download,"
            f" .venv ends near {CUDA_VENV_GB:.0f} GB"
        )
        lines.append("  the grader never uses a GPU: the CPU build is the small install (about 0.2 GB; .venv near 1.4 GB):")
        lines.append("    PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make venv-rebuild   (or set it before the first make)")
        lines.append("  usually 5-10 minutes (447 s measured on two cores with Python 3.12 on a fast line); longer on a slow one")
    else:
        lines.append(f"  torch {TORCH}: PyPI's CPU build for {sys.platform} (some 100-250 MB); .venv ends near {CPU_VENV_GB} GB")
        lines.append("  usually 3-6 minutes")
    lines.append("  pip's own progress follows")
    return lines


if __name__ == "__main__":
    print("\n".join(plan()), flush=True)
