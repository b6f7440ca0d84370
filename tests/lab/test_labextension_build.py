"""The lab extension's shipped build is its source's (issue 51).

labextension/attnkit_lab/labextension/ is committed so that pip installs the extension without
Node. Here it is rebuilt from labextension/src with the packages of labextension/package-lock.json
(``make labextension`` runs ``npm ci``) and JupyterLab's own builder (``@jupyterlab/builder``'s
build-labextension, against the installed JupyterLab's core): the rebuilt files must be the shipped
ones, byte for byte. A change to src/ not rebuilt fails here.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import jupyterlab
import pytest
from commands import ROOT, run_command

LAB = ROOT / "labextension"
SHIPPED = LAB / "attnkit_lab" / "labextension"

pytestmark = [pytest.mark.e2e]


def differences(left: Path, right: Path) -> list[str]:
    """Files only on one side, or different, under two folders (relative names)."""
    found: list[str] = []

    def walk(compared: filecmp.dircmp[str], where: str) -> None:
        found.extend(f"{where}{name}" for name in compared.left_only + compared.right_only + compared.diff_files + compared.funny_files)
        for name, below in compared.subdirs.items():
            walk(below, f"{where}{name}/")

    walk(filecmp.dircmp(left, right, ignore=[]), "")
    return sorted(found)


def test_shipped_build_is_the_sources_build(tmp_path: Path) -> None:
    """Rebuilt where it is built (webpack's module names follow the folder's place), the shipped
    files kept aside first and put back when the rebuild differs (the failure names the files)."""
    modules = LAB / "node_modules"
    if not (modules / "@jupyterlab" / "builder").is_dir():
        pytest.fail("labextension/node_modules is missing: `make labextension` (make test does it) installs it with npm ci")
    kept = tmp_path / "shipped"
    shutil.copytree(SHIPPED, kept)
    differing: list[str] = []
    try:
        shutil.rmtree(SHIPPED)
        compiled = run_command([modules / ".bin" / "tsc", "--sourceMap", "false"], cwd=LAB, timeout=300)
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
        core = Path(jupyterlab.__file__).parent / "staging"
        built = run_command(["node", modules / "@jupyterlab" / "builder" / "lib" / "build-labextension.js", "--core-path", core, "."], cwd=LAB, timeout=600)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert (SHIPPED / "package.json").is_file()
        differing = differences(SHIPPED, kept)
    finally:
        if differing or not (SHIPPED / "package.json").is_file():
            shutil.rmtree(SHIPPED, ignore_errors=True)
            shutil.copytree(kept, SHIPPED)
    assert differing == [], f"the shipped build is not the source's ({differing}): `make labextension-build`, commit attnkit_lab/labextension/"
