"""Is tests/support/settings.py faithful to the settings it stands in for, and what does `attnkit grade` do there today?

A probe (raw syscalls through ctypes, so the interpreter's own wrappers cannot hide an errno) reports
what the process may do. Under the Docker stand-in: no namespace of any kind (unshare, setns,
clone with a CLONE_NEW* flag, mount, umount2, pivot_root: EPERM), clone3 ENOSYS, a plain fork
still works, exactly Docker's capabilities (none inheritable), no_new_privs unset, a seccomp filter in force; with
and without Landlock. Under the Ubuntu stand-in: a user namespace is made, mounting inside it fails
with EPERM, and the process is the unprivileged user with no capabilities. The same probe outside
the harness reports the opposite, so each check can fail.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import textwrap
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, ROOT, SOLUTION, load, write
from commands import run_command
from settings import DOCKER_CAPABILITY_MASK, docker_default, unprivileged, userns_without_mount, without_user_namespaces
from ta_machine import hidden_from_others, lend_to_others

pytestmark = pytest.mark.root

if not sys.platform.startswith("linux") or os.geteuid() != 0 or sys.maxsize < 2**32:
    pytest.skip("loads seccomp filters and creates a user: needs root on 64-bit Linux (CI runs as root)", allow_module_level=True)
pytest.importorskip("pyseccomp")


SYSCALLS = {
    "x86_64": {"clone": 56, "clone3": 435, "pivot_root": 155, "setns": 308, "landlock_create_ruleset": 444},
    "aarch64": {"clone": 220, "clone3": 435, "pivot_root": 41, "setns": 268, "landlock_create_ruleset": 444},
}

PROBE = textwrap.dedent(
    r"""
    import ctypes, json, os, platform, sys
    numbers = json.loads(sys.argv[1])[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def outcome(result):
        return "ok" if result >= 0 else os.strerror(ctypes.get_errno())

    def in_child(call):
        # Run a call that changes the process (a namespace, a mount) in a throwaway child.
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, json.dumps(call()).encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        return json.loads(os.read(read, 4096))

    def clone_with(flags):
        pid = libc.syscall(numbers["clone"], flags | 17, 0, 0, 0, 0)  # 17: SIGCHLD
        if pid == 0:
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        return outcome(pid)

    def user_namespace_then_mount():
        made = outcome(libc.unshare(0x10000000 | 0x00020000))  # CLONE_NEWUSER | CLONE_NEWNS
        mounted = outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)) if made == "ok" else None
        pivot = outcome(libc.syscall(numbers["pivot_root"], b"/tmp", b"/tmp")) if made == "ok" else None
        return {"userns": made, "mount": mounted, "pivot_root": pivot}

    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    report = {
        "uid": os.getuid(),
        "caps": {name: int(status[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd")},
        "no_new_privs": status["NoNewPrivs"].strip(),
        "seccomp": status["Seccomp"].strip(),
        "unshare_user": in_child(lambda: outcome(libc.unshare(0x10000000))),
        "unshare_mount": in_child(lambda: outcome(libc.unshare(0x00020000))),
        "setns": outcome(libc.syscall(numbers["setns"], os.open("/proc/self/ns/uts", os.O_RDONLY), 0)),
        "mount": in_child(lambda: outcome(libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))),
        "umount2": outcome(libc.umount2(b"/nonexistent-attnkit", 0)),
        "clone_newuser": clone_with(0x10000000),
        "clone_newpid": clone_with(0x20000000),
        "clone_plain": clone_with(0),
        "clone3": outcome(libc.syscall(numbers["clone3"], 0, 0)),
        "landlock_abi": libc.syscall(numbers["landlock_create_ruleset"], 0, 0, 1),
        "landlock_errno": os.strerror(ctypes.get_errno()),
        "userns_then_mount": in_child(user_namespace_then_mount),
    }
    print(json.dumps(report))
    """
)


def probe(prefix_of, python: str = sys.executable) -> dict:
    command = prefix_of([python, "-c", PROBE, json.dumps(SYSCALLS)])
    done = run_command(command, env=os.environ, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


EPERM, ENOSYS = os.strerror(1), os.strerror(38)


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock-allowed", "landlock-denied"])
def test_the_docker_stand_in_is_docker_default(landlock: bool) -> None:
    """Root under the stand-in: no namespace by any call, clone3 ENOSYS, forks still work, exactly
    Docker's capabilities, no_new_privs unset; Landlock present or denied as asked."""
    seen = probe(lambda command: docker_default(command, landlock=landlock))
    assert seen["uid"] == 0
    expected = {**dict.fromkeys(("CapPrm", "CapEff", "CapBnd"), DOCKER_CAPABILITY_MASK), "CapInh": 0}  # as measured in Docker
    assert seen["caps"] == expected, {k: hex(v) for k, v in seen["caps"].items()}
    assert seen["no_new_privs"] == "0" and seen["seccomp"] == "2"
    for call in ("unshare_user", "unshare_mount", "setns", "mount", "umount2", "clone_newuser", "clone_newpid"):
        assert seen[call] == EPERM, (call, seen[call])
    assert seen["userns_then_mount"]["userns"] == EPERM
    assert seen["clone3"] == ENOSYS and seen["clone_plain"] == "ok"
    if landlock:
        assert seen["landlock_abi"] >= 1, seen  # this machine's kernel has Landlock (ABI 7)
    else:
        assert seen["landlock_abi"] == -1 and seen["landlock_errno"] == ENOSYS, seen


def test_the_ubuntu_stand_in_makes_a_user_namespace_that_cannot_mount(ta_user: pwd.struct_passwd) -> None:
    """The unprivileged TA under the stand-in: the user namespace is made, mount and pivot_root in it fail EPERM."""
    seen = probe(lambda command: userns_without_mount(command, ta_user), python="/usr/bin/python3")
    assert seen["uid"] == ta_user.pw_uid
    assert set(seen["caps"].values()) == {0}, seen["caps"]
    assert seen["userns_then_mount"] == {"userns": "ok", "mount": EPERM, "pivot_root": EPERM}, seen["userns_then_mount"]
    assert seen["unshare_user"] == "ok" and seen["clone_newuser"] == "ok"


def test_outside_the_harness_the_probe_sees_the_opposite(ta_user: pwd.struct_passwd) -> None:
    """The same probe without the harness: root may make namespaces and holds more than Docker's
    capabilities; the TA's user namespace can mount. So the checks above can fail."""
    root = probe(lambda command: command)
    assert root["seccomp"] == "0" and root["unshare_user"] == "ok" and root["clone3"] != ENOSYS
    assert root["caps"]["CapEff"] != DOCKER_CAPABILITY_MASK
    as_ta = probe(lambda command: unprivileged(command, ta_user), python="/usr/bin/python3")
    assert as_ta["uid"] == ta_user.pw_uid and as_ta["caps"]["CapEff"] == 0
    assert as_ta["userns_then_mount"]["mount"] == "ok" and as_ta["userns_then_mount"]["pivot_root"] != EPERM
    assert as_ta["unshare_user"] == "ok" and as_ta["landlock_abi"] >= 1


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock-allowed", "landlock-denied"])
def test_the_no_user_namespace_stand_in_gives_the_ta_none(ta_user: pwd.struct_passwd, landlock: bool) -> None:
    """The TA on a kernel without user namespaces: no capability, every new user namespace
    refused (ENOSPC: the limit is 0), Landlock present or denied (ENOSYS) as asked."""
    seen = probe(lambda command: without_user_namespaces(command, ta_user, landlock=landlock), python="/usr/bin/python3")
    assert seen["uid"] == ta_user.pw_uid
    assert seen["caps"]["CapEff"] == seen["caps"]["CapPrm"] == 0, seen["caps"]
    ENOSPC = os.strerror(28)
    assert seen["unshare_user"] == ENOSPC and seen["clone_newuser"] == ENOSPC, seen
    assert seen["clone_plain"] == "ok"
    if landlock:
        assert seen["landlock_abi"] >= 1, seen
    else:
        assert seen["landlock_abi"] == -1 and seen["landlock_errno"] == ENOSYS, seen


@pytest.mark.e2e
def test_grading_in_docker_default_without_landlock(tmp_path: Path) -> None:
    """`attnkit grade` as root under Docker's default profile with Landlock denied (Docker 20.10's
    profile). Before the no-namespace layer it refused with advice that misleads there (root and a
    sysctl, never seccomp). Now it grades on a pool uid checked by its probe, or, where that uid
    cannot even read the grader's Python (pyenv's under /root, mode 700, as on this project's
    machine), refuses before any cell runs, naming the container's seccomp profile, the unreadable
    trees and what works there; never a sysctl. Graded, each sandbox is chrooted into a root that
    holds only the allowlist (``chroot_root``)."""
    submitted, out = tmp_path / "submitted", tmp_path / "out"
    write(load(SOLUTION), submitted / "bystander" / ASSIGNMENT)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    grade = [sys.executable, "-m", "attnkit.cli", "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "1", "--quiet"]
    command = docker_default(grade, landlock=False)
    done = run_command(command, env=env, cwd=ROOT)
    print(done.stderr[-2000:], file=sys.stderr)
    assert "sysctl" not in done.stderr, done.stderr[-3000:]
    if "cannot read the Python trees" in done.stderr:
        assert done.returncode == 2, done.stderr[-3000:]
        assert "seccomp" in done.stderr and "attnkit-docker.json" in done.stderr and "install Python outside root's home" in done.stderr
        assert not list(out.rglob("results.json"))
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        record = json.loads(next(out.rglob("results.json")).read_text())
        assert record["score"] == 100 and record["isolation"] == "isolated", record["sandbox"]
        assert "uid-pool" in record["sandbox"]["isolation"] and "probe-passed" in record["sandbox"]["isolation"]
        # Chrooted into the allowlist's root: the checkout's course, readable by all here, is not
        # in the sandbox's view, so the probe (run there) no longer refuses the run over it.
        assert "chroot-root" in record["sandbox"]["isolation"], record["sandbox"]


def test_a_checkout_only_root_can_reach_is_lent_to_another_user(ta_user: pwd.struct_passwd, tmp_path: Path) -> None:
    """Issue 42: a clone under `mktemp -d` (0700): the TA cannot start the checkout's programs;
    through ta_machine.lend_to_others (what every test running the checkout's programs as another
    user uses) they can, and nothing else of the locked folder is shown to them."""
    locked = tmp_path / "mktemp-d"
    locked.mkdir(mode=0o700)
    program = locked / "attnkit" / ".venv" / "bin" / "hello"
    program.parent.mkdir(parents=True)
    for folder in (locked / "attnkit", locked / "attnkit" / ".venv", program.parent):
        folder.chmod(0o755)
    program.write_text("#!/bin/sh\necho hello from the checkout\n")
    program.chmod(0o755)
    (locked / "secret").write_text("root's\n")
    assert hidden_from_others(program) is not None
    alone = run_command(unprivileged([str(program)], ta_user), env=os.environ, cwd="/")
    assert alone.returncode != 0 and "Permission denied" in alone.stderr, alone.stdout + alone.stderr
    lent = run_command(lend_to_others(unprivileged([str(program)], ta_user), [program.parents[1]]), env=os.environ, cwd="/")
    assert lent.returncode == 0 and lent.stdout == "hello from the checkout\n", lent.stdout + lent.stderr
    peek = run_command(lend_to_others(unprivileged(["cat", str(locked / "secret")], ta_user), [program.parents[1]]), env=os.environ, cwd="/")
    assert peek.returncode != 0, peek.stdout
    assert oct(locked.stat().st_mode & 0o777) == "0o700" and (locked / "secret").is_file(), "nothing changed outside"
