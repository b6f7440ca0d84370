"""The sandbox layer that needs no namespaces: Landlock and the seccomp filter, each tried for
real in a forked child (the restriction is for life, so never in the test process itself)."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnkit import landlock, seccomp_filter

LANDLOCK = landlock.abi_version()
needs_landlock = pytest.mark.skipif(LANDLOCK < 1, reason="this kernel has no Landlock")


def in_child(body: Callable[[], dict]) -> dict:
    """Run ``body`` in a forked child and return the dict it returned (or its exception's text)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            answer = body()
        except BaseException as error:  # noqa: BLE001 - the child reports whatever happened
            answer = {"raised": f"{type(error).__name__}: {error}"}
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def attempt(action: Callable[[], object]) -> str:
    """"ok", or the errno name the action failed with."""
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return "ok"


def fork_and_reap() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def read(path: Path) -> Callable[[], bytes]:
    return lambda: path.read_bytes()


@pytest.fixture()
def course(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("mine")
    secret = tmp_path / "solutions.py"
    secret.write_text("def scaled_attention(): ...")
    return {"work": work, "secret": secret}


def allow_python(work: Path) -> landlock.Allowlist:
    from attnkit.isolation import allowlist
    return landlock.Allowlist(read_only=tuple(allowlist([str(work.parent)])), read_write=(str(work),))


@needs_landlock
def test_landlock_keeps_a_child_to_its_allowlist(course: dict[str, Path]) -> None:
    work, secret = course["work"], course["secret"]

    def body() -> dict:
        obtained = landlock.restrict_self(allow_python(work))
        return {
            "obtained": obtained,
            "secret": attempt(read(secret)),
            "overwrite secret": attempt(lambda: secret.write_text("x")),
            "mine": attempt(read(work / "mine.txt")),
            "new file": attempt(lambda: (work / "new.txt").write_text("new")),
            "etc": attempt(read(Path("/etc/passwd"))),
            "devnull": attempt(lambda: open("/dev/null", "w").write("x")),
            "import": attempt(lambda: __import__("json.tool")),
        }

    result = in_child(body)
    assert f"landlock-abi-{LANDLOCK}" in result["obtained"], result
    assert result["secret"] == "EACCES" and result["overwrite secret"] == "EACCES"
    assert result["etc"] == "EACCES"
    assert result["mine"] == "ok" and result["new file"] == "ok" and result["devnull"] == "ok"
    assert result["import"] == "ok"  # the Python trees stay readable
    assert secret.read_text().startswith("def"), "the restricted child changed a file outside"


@pytest.mark.skipif(LANDLOCK < 4, reason="TCP rules need Landlock ABI 4")
def test_landlock_denies_tcp_connect_and_bind(course: dict[str, Path]) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def body() -> dict:
        landlock.restrict_self(allow_python(course["work"]))
        return {"connect": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2)),
                "bind": attempt(lambda: socket.create_server(("127.0.0.1", 0)))}

    try:
        result = in_child(body)
    finally:
        listener.close()
    assert result == {"connect": "EACCES", "bind": "EACCES"}


@pytest.mark.skipif(LANDLOCK < 6, reason="signal scoping needs Landlock ABI 6")
def test_landlock_scopes_signals_to_the_sandbox(course: dict[str, Path]) -> None:
    bystander = os.fork()
    if bystander == 0:
        time.sleep(30)
        os._exit(0)
    try:
        def body() -> dict:
            before = attempt(lambda: os.kill(bystander, 0))
            landlock.restrict_self(allow_python(course["work"]))
            return {"before": before, "after": attempt(lambda: os.kill(bystander, signal.SIGKILL))}

        result = in_child(body)
        assert result == {"before": "ok", "after": "EPERM"}
        assert os.waitpid(bystander, os.WNOHANG) == (0, 0), "the restricted child killed a process outside"
    finally:
        os.kill(bystander, signal.SIGKILL)
        os.waitpid(bystander, 0)


def test_landlock_absent_is_an_error_not_a_silent_pass(course: dict[str, Path]) -> None:
    with pytest.raises(landlock.LandlockError):
        landlock.restrict_self(allow_python(course["work"]), abi=0)


def test_seccomp_filter_closes_sockets_namespaces_and_clone3() -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    sys_clone3 = 435  # the same number on every architecture

    def body() -> dict:
        obtained = seccomp_filter.install()
        clone3 = libc.syscall(ctypes.c_long(sys_clone3), None, ctypes.c_size_t(0))
        clone3_errno = ctypes.get_errno()
        unshare = libc.unshare(0x10000000)  # CLONE_NEWUSER
        unshare_errno = ctypes.get_errno()
        child = attempt(fork_and_reap)
        return {
            "obtained": obtained,
            "socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
            "unix": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
            "socketpair": attempt(socket.socketpair),
            "unshare": (unshare, errno.errorcode[unshare_errno]),
            "clone3": (clone3, errno.errorcode[clone3_errno]),
            "fork still works": child,
        }

    result = in_child(body)
    assert result["obtained"] == ["seccomp-filter"]
    assert result["socket"] == result["unix"] == result["socketpair"] == "EPERM"
    assert result["unshare"] == [-1, "EPERM"]
    assert result["clone3"] == [-1, "ENOSYS"]
    assert result["fork still works"] == "ok"
