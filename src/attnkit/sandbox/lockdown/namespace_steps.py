"""The steps that lock down one sandbox process: its clone into new namespaces, its user, its
mounts, its capabilities (``attnkit.sandbox.lockdown.sequence`` runs them in order, per layer).

Each sandbox of the namespace layer is one ``clone(2)`` with new user, mount, PID, network and IPC
namespaces (:func:`clone_sandbox`). The zygote maps the sandbox's user to ``nobody`` on the host
when it can (root), otherwise to the grader's own uid, which owns nothing the sandbox can see
(:func:`map_sandbox_user`). The sandbox mounts its own /proc and empty writable /tmp and home,
pivots into the tree the zygote built (``attnkit.sandbox.lockdown.zygote_namespace.build_root``), becomes uid 65534 and
drops every capability; only then does student code run. Nothing of the host outside the tree
exists in its view. The steps without namespaces' own (the keyring, dying with the parent, the
capabilities) serve every layer.
"""

from __future__ import annotations

import ctypes
import os
import signal

from attnkit.sandbox.lockdown.zygote_namespace import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    KEYCTL_JOIN_SESSION_KEYRING,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_REC,
    NOBODY,
    PR_CAPBSET_DROP,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    SANDBOX_HOME,
    STAGE,
    SYS_CAPSET,
    SYS_CLONE,
    SYS_KEYCTL,
    SYS_PIVOT_ROOT,
    IsolationError,
    Mode,
    _check,
    _inside,
    _libc,
    _write,
    mount,
)
from attnkit.boundary.policy import SCRATCH_SIZE


def clone_sandbox(shared_network: bool = False) -> int:
    """``os.fork()``, but the child starts in new user, mount, PID, network and IPC namespaces
    (with ``shared_network``, in the zygote's own empty network namespace instead of a new one:
    ``zygote_namespace.enter_own_network``).

    One clone(2): no keeper process between the zygote and the sandbox. The sandbox is PID 1 of
    its namespace, so every process it leaves dies with it. Python's own fork bookkeeping runs
    around the call exactly as ``os.fork()`` does it.
    """
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if shared_network else CLONE_NEWNET) | signal.SIGCHLD
    assert SYS_CLONE is not None  # enter_private_namespace gives this layer only where it is known
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _libc.syscall(ctypes.c_long(SYS_CLONE), ctypes.c_long(flags), None, None, None, None)
    errno = ctypes.get_errno()
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise IsolationError(errno, f"clone: {os.strerror(errno)}")
    return pid


def map_sandbox_user(pid: int, mode: Mode) -> None:
    """In the zygote: make the sandbox's uid and gid 65534 mean ``nobody`` on the host (as root) or
    the grader's own ids (without root, where the kernel allows a user only its own id)."""
    outside = NOBODY if mode.sandbox_host_uid == "nobody" else 0  # 0 = the zygote's own id in its namespace
    _write(f"/proc/{pid}/uid_map", f"{NOBODY} {outside} 1\n")
    _write(f"/proc/{pid}/gid_map", f"{NOBODY} {outside} 1\n")


def _pivot_into(root: str) -> None:
    """Make ``root`` the whole filesystem: the host's tree is detached, not just covered."""
    os.chdir(root)
    assert SYS_PIVOT_ROOT is not None  # known wherever SYS_CLONE is (the namespace layer's)
    _check(_libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")


def leave_session_keyring() -> bool:
    """A new, empty session keyring: the grader's login keyring (tickets, keys) is inherited by
    every process it starts, namespaces or not. Whether the kernel has keyrings at all."""
    if SYS_KEYCTL is None:
        return False
    return _libc.syscall(ctypes.c_long(SYS_KEYCTL), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None) >= 0


def die_with_parent() -> None:
    """SIGKILL when our parent dies. The kernel clears it whenever a process's user changes, and
    a fork does not inherit it: each process arms it for itself, after any change of user."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAPABILITY_VERSION_3 = 0x20080522  # two _CapData: capabilities 0-31 and 32-63


def drop_capabilities() -> None:
    """No capability in any set, none to regain (bounding set emptied, no new privileges)."""
    for capability in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    empty = (_CapData * 2)()
    assert SYS_CAPSET is not None  # known on both machines the kit runs on (x86_64, aarch64)
    _check(_libc.syscall(ctypes.c_long(SYS_CAPSET), ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), empty), "capset")


# -- a sandbox's namespace layer, step by step (in the order ``attnkit.sandbox.lockdown.sequence`` calls them) ------
def bind_stage() -> None:
    """The tree came with our copy of the zygote's mounts, which the kernel locks for a less
    privileged namespace (and will not pivot into): a bind of it is our own mount."""
    mount(STAGE, STAGE, None, MS_BIND | MS_REC)


def become_sandbox_user() -> None:
    """uid/gid 65534 in the namespace. Our user first: the capabilities stay until dropped, and
    what we create on the scratch folders must belong to a user the namespace knows (the
    zygote's may be unmapped)."""
    try:
        os.setgroups([])
    except OSError:
        pass  # a namespace made without root forbids setgroups; the grader's own groups stay
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def mount_private_proc() -> bool:
    """The PID namespace's own /proc; whether the kernel gave one."""
    try:
        mount("proc", f"{STAGE}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return True
    except IsolationError:
        # The kernel mounts a new /proc in a user namespace only where the host's /proc is not
        # partly covered (as in some containers): then the sandbox simply has no /proc.
        return False


def mount_scratch(mode: Mode) -> None:
    """A fresh tmpfs on the sandbox's /tmp and its home."""
    for scratch, mode_bits in (("/tmp", "1777"), (SANDBOX_HOME, "700")):
        # A Python tree kept under /tmp (a checkout there) would vanish under the fresh scratch:
        # held open first, then bound again on top of it (read-only, as it was).
        covered = {folder: os.open(STAGE + folder, os.O_PATH | os.O_DIRECTORY) for folder in mode.visible if _inside(folder, scratch)}
        mount("tmpfs", STAGE + scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={SCRATCH_SIZE},mode={mode_bits},uid={NOBODY},gid={NOBODY}")
        for folder, descriptor in covered.items():
            os.makedirs(STAGE + folder, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{descriptor}", STAGE + folder, None, MS_BIND | MS_REC)
            os.close(descriptor)


def pivot_into_stage() -> None:
    """The allowlisted tree as the whole filesystem."""
    _pivot_into(STAGE)


def forbid_nested_user_namespaces() -> bool:
    """No user namespaces below ours: student code gets no capabilities anywhere, not even over
    namespaces of its own. Whether the kernel took it."""
    try:
        _write("/proc/sys/user/max_user_namespaces", "0")
        return True
    except OSError:
        return False
