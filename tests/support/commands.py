"""Running the kit's commands from a test: one way to start `attnkit`, `python -m …` or any tool.

Every test that starts a process goes through :func:`run_command`: output captured as text, a timeout (a
hung grader fails its test instead of the suite), stdin closed (a prompt fails instead of waiting),
and the environment of :func:`tool_env` unless the test gives its own (this venv's bin/ first on
PATH, so `attnkit` starts nbgrader and jupyter from the same venv).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # this venv's scripts: attnkit, nbgrader, jupyter
TIMEOUT = 600.0  # seconds; one `attnkit grade` of a small class takes well under a minute


def tool_module(name: str) -> ModuleType:
    """``tools/<name>.py`` loaded as a module, for a test of the tool's own functions (``tools/`` is
    never put on ``sys.path``: a tool's name must not shadow a test's import)."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool_env(**extra: str) -> dict[str, str]:
    """This process's environment with this venv's bin/ first on PATH, and ``extra`` on top."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def run_command(
    command: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = TIMEOUT,
    stdin: int | None = subprocess.DEVNULL,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``command``, its output captured as text; ``env`` by default :func:`tool_env`; ``check``: a
    non-zero exit raises (for a step that only prepares the test)."""
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(tool_env() if env is None else env),
        cwd=cwd,
        stdin=stdin,
        check=check,
    )


def python_m(
    module: str, *args: str | Path, env: Mapping[str, str] | None = None, cwd: Path | str | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` with this interpreter."""
    return run_command([sys.executable, "-m", module, *args], env=env, cwd=cwd, timeout=timeout)


def attnkit(
    *args: str | Path, script: bool = False, env: Mapping[str, str] | None = None, cwd: Path | str | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """The CLI: ``python -m attnkit args``, or with ``script`` the console script the venv installed
    (bin/attnkit, as a TA types it)."""
    if script:
        return run_command([BIN / "attnkit", *args], env=env, cwd=cwd, timeout=timeout)
    return python_m("attnkit", *args, env=env, cwd=cwd, timeout=timeout)


def start_attnkit(*args: str | Path, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python -m attnkit args`` started, not waited for (a test that stops it half way: an
    interrupted shard), in a process group of its own, its output into ``log``, stdin closed.
    The caller ends it (``os.killpg``) and waits for it."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "attnkit", *[str(part) for part in args]],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(tool_env() if env is None else env),
            start_new_session=True,
        )


def start_tool(command: Sequence[str | Path], *, log: Path, env: Mapping[str, str] | None = None, cwd: Path | str | None = None) -> subprocess.Popen[bytes]:
    """A long-running tool (a JupyterHub, a browser) started, not waited for: in a process group of
    its own (the caller ends the whole group with ``os.killpg`` and waits), its output into ``log``,
    stdin closed, ``env`` by default :func:`tool_env`."""
    with open(log, "ab") as handle:
        return subprocess.Popen(
            [str(part) for part in command],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(tool_env() if env is None else env),
            cwd=cwd,
            start_new_session=True,
        )


def stop_group(process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """End a process :func:`start_tool` started, with its whole group (SIGTERM, then SIGKILL)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # what the group's leader left behind (a proxy, a renderer)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def service_events(log: Path, kind: str) -> list[dict]:
    """The ``attnkit serve`` log's events of ``kind`` (its JSON lines' ``event``), in order."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == kind:
                found.append(event)
    return found


@contextmanager
def unix_users(*names: str) -> Iterator[tuple[str, ...]]:
    """Unix users ``names`` (no home, no login shell) for the block, removed after it; skips the
    test where users cannot be made (not root, no useradd)."""
    import pytest

    if shutil.which("useradd") is None or os.geteuid() != 0:
        pytest.skip("needs root to make unix users")
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        yield names
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)
