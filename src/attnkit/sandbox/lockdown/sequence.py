"""Every step that locks a fresh sandbox down, in order, in one function: :func:`lock_down`.

Modelled on nsjail's ``containProc``: the function body is the whole list, one small named call
per step, so what a sandbox gets (and in which order) reads from top to bottom. The OS primitives
themselves live in ``attnkit.sandbox.lockdown.zygote_namespace``; the figures in ``attnkit.boundary.policy``.

Before it, in the zygote (``attnkit.sandbox.fork_server._spawn``): a control group for the sandbox, a
folder of the host's /tmp when unisolated, the list of our modules, the fork (``clone_sandbox``,
with new user, mount, PID, network and IPC namespaces, when isolated); the sandbox's user mapped,
the sandbox placed in its group. The sandbox itself (``start_sandbox``) starts a session, takes
back the default SIGCHLD and waits for the zygote's one byte saying it is placed; then this.
No code of the student's runs until it returns.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from attnkit.sandbox.lockdown import chroot as chroot_root
from attnkit.sandbox.lockdown import without_namespaces
from attnkit.sandbox.lockdown.zygote_namespace import SANDBOX_HOME, Mode
from attnkit.sandbox.lockdown.namespace_steps import (
    become_sandbox_user,
    bind_stage,
    die_with_parent,
    drop_capabilities,
    forbid_nested_user_namespaces,
    leave_session_keyring,
    mount_private_proc,
    mount_scratch,
    pivot_into_stage,
)
from attnkit.boundary.policy import rlimits


@dataclass
class SandboxContext:
    """What the lock-down works on, and what it records."""

    mode: Mode  # the zygote's isolation: which layer this sandbox gets
    capped: bool  # the zygote placed it in a control group
    channel: int  # the descriptor of its channel to the grader: the one kept open
    settings: dict[str, Any]  # the grader's sandbox settings (memory_mb, cpu_seconds, workdir, ...)
    output: io.TextIOBase  # what sys.stdout and sys.stderr become
    obtained: list[str] = field(default_factory=list)  # what it got, in words (results.json)
    workdir: str = ""


def lock_down(context: SandboxContext) -> list[str]:
    """Lock this process down as the sandbox ``context`` describes; what it obtained.

    ====  ===================================  ==================================  ===================================
    step  namespaces (kinds root, userns)      no-namespaces (landlock, pool)      unisolated (kind none, trusted only)
    ====  ===================================  ==================================  ===================================
    1     record the namespaces the clone      as root without Landlock: close     record "unisolated"
          gave                                 descriptors, chroot into the
                                               allowlist's root (``chroot_root``)
                                               and chdir to the workdir, as root
    2     bind the staged root (our own        own, empty session keyring; as      then as no-namespaces, with what
          mount)                               root: workdir to the pool uid,      needs no privilege: the chroot (as
                                               bounding set dropped, become it     root without Landlock); own keyring;
    3     uid/gid 65534 in the namespace       no_new_privs                        as root the pool uid, else nobody
                                                                                   (the zygote tried which it can
                                                                                   become); no_new_privs
    4     private /proc (or none)              pool: record the zygote's probe     (no probe)
    5     tmpfs /tmp and home                  landlock: restrict_self to the      Landlock, same allowlist, where
                                               allowlist (``without_namespaces.enter``)   the kernel has it
    6     pivot into the allowlisted root
    7     no nested user namespaces
    8     own, empty session keyring
    9     drop every capability (and
          no_new_privs)
    ====  ===================================  ==================================  ===================================

    Then, whatever the layer: close every descriptor but the channel and the standard streams;
    record the control group; die with the zygote (armed after the change of user, which clears
    it); chdir to the work folder; its environment; rlimits (``attnkit.boundary.policy.rlimits``); stdin
    from /dev/null, stdout/stderr into a file and a bounded writer; our modules out of
    ``sys.modules``; then, in every layer, the seccomp filters (``without_namespaces.finish``: no metadata
    changes, nothing that reaches another process), last of all that may need a syscall they deny.
    A new layer is one more branch below.
    """
    kind = "namespaces" if context.mode.namespaced else "no-namespaces" if context.mode.isolated else "unisolated"
    if kind == "namespaces":
        _record_namespaces(context)
        bind_stage()
        _become_sandbox_user(context)
        _mount_proc(context)
        mount_scratch(context.mode)
        _pivot(context)
        _forbid_nested_namespaces(context)
        _own_keyring(context)
        _drop_capabilities(context)
        context.workdir = SANDBOX_HOME
    elif kind == "no-namespaces":
        # Landlock, or as root a pool uid checked by the zygote's probe (attnkit.sandbox.lockdown.without_namespaces):
        # as root without Landlock, descriptors closed, chroot into the allowlist's root and into
        # the work folder, still as root; own keyring; as root the workdir to the pool uid,
        # bounding set emptied, become it; no_new_privs; Landlock's allowlist where the mode has it.
        context.workdir = context.settings["workdir"]  # made by the zygote, which removes it afterwards
        _chroot(context)
        context.obtained += without_namespaces.enter(context.mode, context.workdir, context.settings.get("sandbox_uid"))
    else:
        # Trusted notebooks only (--no-isolation, or a learner checking their own): no layer could
        # be had, but whatever of the one without namespaces needs no privilege still applies
        # (the zygote readied it: without_namespaces._for_trusted_notebooks).
        context.obtained.append("unisolated")
        context.workdir = context.settings["workdir"]  # made by the zygote, which removes it afterwards
        _chroot(context)
        context.obtained += without_namespaces.enter(context.mode, context.workdir, context.settings.get("sandbox_uid"))
    _close_descriptors(context)
    _record_cgroup(context)
    die_with_parent()
    os.chdir(context.workdir)
    _set_environment(context)
    _set_rlimits(context)
    _redirect_output(context)
    _hide_our_modules()
    context.obtained += without_namespaces.finish(context.mode, context.obtained)  # the seccomp filters, last of all, in every layer
    return context.obtained


# -- the namespaces layer ---------------------------------------------------------------------------
def _record_namespaces(context: SandboxContext) -> None:
    context.obtained += ["user-namespace", "pid-namespace", "no-network", "no-ipc"]


def _become_sandbox_user(context: SandboxContext) -> None:
    become_sandbox_user()
    context.obtained.append(f"uid-{context.mode.sandbox_host_uid}")


def _mount_proc(context: SandboxContext) -> None:
    context.obtained.append("private-proc" if mount_private_proc() else "no-proc")


def _pivot(context: SandboxContext) -> None:
    pivot_into_stage()
    context.obtained.append("allowlisted-root")


def _forbid_nested_namespaces(context: SandboxContext) -> None:
    if forbid_nested_user_namespaces():
        context.obtained.append("no-nested-namespaces")


def _own_keyring(context: SandboxContext) -> None:
    if leave_session_keyring():
        context.obtained.append("own-keyring")


def _drop_capabilities(context: SandboxContext) -> None:
    drop_capabilities()
    context.obtained.append("no-capabilities")


# -- without namespaces ------------------------------------------------------------------------------
def _chroot(context: SandboxContext) -> None:
    """As root without Landlock (``without_namespaces._chroot``): into the root that holds only the
    allowlist. Descriptors first (an open folder of the host is a way out of any chroot), then
    chroot and chdir while still root (the pool uid may not chroot); the uid drop follows."""
    root = context.settings.get("chroot")
    if not root:
        return
    _close_descriptors(context)
    context.workdir = chroot_root.enter(chroot_root.Root(str(root), -1), context.workdir)
    context.obtained.append("chroot-root")


# -- every layer ------------------------------------------------------------------------------------
def _close_descriptors(context: SandboxContext) -> None:
    """Only the channel and the standard streams stay open: an inherited descriptor of a host
    folder would be a way out of the sandbox's root."""
    os.closerange(3, context.channel)
    os.closerange(context.channel + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _record_cgroup(context: SandboxContext) -> None:
    if context.capped:
        context.obtained.append("cgroup-memory-and-pids")


def _set_environment(context: SandboxContext) -> None:
    if os.environ.get("TMPDIR") != context.workdir:  # isolated: the zygote set them for every sandbox
        os.environ.update(home_environment(context.workdir))


def _set_rlimits(context: SandboxContext) -> None:
    for limit, value in rlimits(context.settings, context.capped):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass
    context.obtained.append("resource-limits" if context.capped else "resource-limits-single-process")


def _redirect_output(context: SandboxContext) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a huge write fails instead of killing us
    sink = os.open(os.path.join(context.workdir, ".output"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    os.close(null)
    sys.stdin = io.StringIO()
    sys.stdout = sys.stderr = context.output


def _hide_our_modules() -> None:
    """Our own modules stay loaded (we run on them) but not importable by name: their source
    folder is not in the sandbox's view, and student code should not find them in sys.modules
    either."""
    for name in our_modules():
        sys.modules.pop(name, None)


# -- shared with the zygote ---------------------------------------------------------------------------
def home_environment(home: str) -> dict[str, str]:
    """A sandbox's home, and where matplotlib, IPython and tempfile write: its work folder."""
    return {"HOME": home, "MPLCONFIGDIR": home, "IPYTHONDIR": home, "TMPDIR": home}


# len(sys.modules) when last listed, and attnkit's modules then: per process, listed again
# whenever the number of modules has changed (modules are only added in the zygote).
_OURS: list[Any] = [-1, ()]


def our_modules() -> tuple[str, ...]:
    """attnkit's modules in ``sys.modules``, listed in the zygote (see ``fork_server._spawn``) so
    that a sandbox need not walk all of ``sys.modules`` itself: touching every module name's
    reference count would copy some 700 pages of the zygote's memory into each sandbox."""
    if _OURS[0] != len(sys.modules):
        _OURS[:] = [len(sys.modules), tuple(name for name in list(sys.modules) if name == "attnkit" or name.startswith("attnkit."))]
    return _OURS[1]
