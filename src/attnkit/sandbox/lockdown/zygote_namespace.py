"""The zygote's side of isolation: its private namespace and the allowlisted root it builds.

Two steps, because the kernel gives a new user namespace only to a single-threaded process and
the zygote must have torch, numpy and IPython imported before it forks sandboxes:

1. :func:`enter_private_namespace`, in the zygote before those imports: a private mount
   namespace for the zygote. As root with CAP_SYS_ADMIN that is all it takes; otherwise (a TA
   without root, or root without CAP_SYS_ADMIN as in Docker's default) the zygote enters a user
   namespace of its own first, which the kernel grants to unprivileged users.
2. :func:`build_root`, in the zygote after the imports: a read-only tree that holds only what
   running a notebook needs (the Python trees on ``sys.path``, the folders of the shared
   libraries the process has loaded, a minimal /etc and /dev). It is built once per zygote.

Each sandbox is then one ``clone(2)`` with new user, mount, PID and IPC namespaces, in the zygote's own
empty network namespace (:func:`enter_own_network`; a new one per sandbox where that fails), and
locks itself down step by step: those steps are ``attnkit.sandbox.lockdown.namespace_steps``. What a sandbox and
a class got, in words, is ``attnkit.report.isolation_level``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass, field


CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 0x400, 0x800, 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(platform.machine())
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
KEYCTL_JOIN_SESSION_KEYRING = 1
NOBODY = 65534
# Where the zygote builds the sandbox's root, in its own mount namespace only (the host's /tmp
# is untouched; the zygote needs no /tmp of its own once its imports are done).
STAGE = "/tmp"
SANDBOX_HOME = "/home/student"
DEVICES = ("null", "zero", "random", "urandom")
# statvfs flags -> mount flags: a read-only remount inside a user namespace must keep the flags
# the host mount has (the kernel locks them), as bubblewrap does.
_KEPT_FLAGS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}
MINIMAL_ETC = {
    "passwd": "root:x:0:0:root:/nonexistent:/nonexistent\nnobody:x:65534:65534:student:/home/student:/nonexistent\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}

_libc = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    """The OS refused a step of the sandbox's isolation."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    _check(_libc.mount(*encoded[:3], ctypes.c_ulong(flags), encoded[3]), f"mount {target}")


@dataclass
class Mode:
    """How the zygote got its private mount namespace, and what that allows its sandboxes."""

    # "root": init user namespace with CAP_SYS_ADMIN; "userns": a user namespace of its own;
    # without namespaces (attnkit.sandbox.lockdown.without_namespaces): "landlock" (Landlock + seccomp, a pool uid as
    # root) or "pool" (root: a pool uid + seccomp, checked by a probe); "none"
    kind: str
    why: str = ""  # what the kernel refused (kind "none"; for the layers without namespaces, why not namespaces)
    sandbox_host_uid: str = "nobody"  # who the sandbox is on the host: "nobody", "grader" or "pool"
    can_make_cgroups: bool = False
    visible: list[str] = field(default_factory=list)  # the host folders the sandbox may read
    landlock_abi: int = 0
    exposed: list[dict] = field(default_factory=list)  # kind "none" after the pool's probe: what it found
    # The zygote is in an empty network namespace of its own (``enter_own_network``): its sandboxes,
    # one student's at a time, are cloned into it instead of each into a new one.
    own_network: bool = False

    @property
    def isolated(self) -> bool:
        return self.kind != "none"

    @property
    def namespaced(self) -> bool:
        return self.kind in ("root", "userns")


def host_root() -> bool:
    """Root of the host's own user namespace (uid 0 of a user namespace of ours is not: it owns
    none of the host's files and cannot become any other of its users)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map") as uid_map:
            return uid_map.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True  # no /proc: nothing says otherwise


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _enter_user_namespace() -> str:
    """unshare(CLONE_NEWUSER | CLONE_NEWNS), with the maps written from outside by a short-lived
    child that stays in the parent namespace: only it may map more than our own id (as root it
    maps both root and nobody, so that sandboxes can be nobody). Returns who sandboxes are."""
    euid, egid = os.geteuid(), os.getegid()
    if euid == 0:
        uid_lines, gid_lines, deny = "0 0 1\n65534 65534 1\n", "0 0 1\n65534 65534 1\n", False
    else:
        uid_lines, gid_lines, deny = f"0 {euid} 1\n", f"0 {egid} 1\n", True
    parent = os.getpid()
    go_read, go_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(go_write)
        code = 1
        try:
            if os.read(go_read, 1) == b"1":
                if deny:
                    _write(f"/proc/{parent}/setgroups", "deny")
                _write(f"/proc/{parent}/uid_map", uid_lines)
                _write(f"/proc/{parent}/gid_map", gid_lines)
                code = 0
        finally:
            os._exit(code)
    os.close(go_read)
    result = _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
    errno = ctypes.get_errno()
    os.write(go_write, b"1" if result == 0 else b"0")
    os.close(go_write)
    _pid, status = os.waitpid(child, 0)
    if result != 0:
        raise IsolationError(errno, f"unshare(CLONE_NEWUSER): {os.strerror(errno)}")
    if status != 0:
        raise IsolationError(0, "could not write the user namespace's uid/gid maps")
    return "nobody" if euid == 0 else "grader"


def _user_namespace_can_mount() -> str:
    """Whether a user namespace of ours may mount, tried in a short-lived child ("" if so, else
    why not). A user namespace cannot be left once entered: where the kernel grants one but
    denies mounting inside it (Ubuntu 24.04's AppArmor restriction of unconfined programs), a
    zygote that entered it would be stuck in a half-built namespace where its own uid is unmapped."""
    euid, egid = os.geteuid(), os.getegid()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        answer, step = b"", "unshare"
        try:
            if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                answer = f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}".encode()
            else:
                step = "the user namespace's uid/gid maps"
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {euid} 1\n")
                _write("/proc/self/gid_map", f"0 {egid} 1\n")
                step = "mount inside the user namespace"
                mount("none", "/", None, MS_REC | MS_PRIVATE)
                mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")
        except OSError as error:
            answer = f"{step}: {os.strerror(error.errno or 0)}".encode()
        finally:
            os.write(write_end, answer)
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        refusal = pipe.read().decode()
    os.waitpid(child, 0)
    return refusal


def enter_private_namespace() -> Mode:
    """Step 1, in a single-threaded zygote: a private mount namespace (see the module's doc)."""
    if not sys.platform.startswith("linux") or SYS_CLONE is None:
        return Mode("none", f"namespaces are Linux-only (this is {sys.platform}/{platform.machine()})")
    if os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS) == 0:
        mode = Mode("root", can_make_cgroups=True)
    else:
        refused_as_root = os.strerror(ctypes.get_errno()) if os.geteuid() == 0 else ""
        why = f"unshare(CLONE_NEWNS) as root: {refused_as_root}; " if refused_as_root else ""
        refused = _user_namespace_can_mount()
        if refused:  # never entered: the zygote stays as it was, and falls back cleanly
            return Mode("none", f"{why}{refused}")
        try:
            mode = Mode("userns", sandbox_host_uid=_enter_user_namespace())
        except (IsolationError, OSError) as error:
            return Mode("none", f"{why}{error}")
    try:
        mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the host
    except IsolationError as error:
        return Mode("none", str(error))
    return mode


def own_mount_namespace(mode: Mode) -> Mode:
    """In a zygote forked by the seed (``attnkit.driver.seed``): a mount namespace of its own, a copy of
    the seed's private one. Two zygotes sharing one would build their sandboxes' roots on top of
    each other, and one could clone a sandbox while the other's root is still writable."""
    if not mode.namespaced:
        return mode
    if _libc.unshare(CLONE_NEWNS) != 0:
        return Mode("none", f"unshare(CLONE_NEWNS) in a zygote: {os.strerror(ctypes.get_errno())}")
    return mode


def enter_own_network(mode: Mode) -> Mode:
    """In a namespaced zygote, once, before its first sandbox: an empty network namespace of its
    own (no interface up, nothing routed), which every sandbox it clones then shares.

    A new network namespace per sandbox costs the zygote about half a millisecond to make and the
    kernel about as much again to tear down (``cleanup_net``), some 2 % of a class's CPU. One per
    zygote isolates as well: a zygote's sandboxes are one student's at a time (the next is cloned
    after the last is killed, with every process of its PID namespace), none of them can open a
    socket (the seccomp filter denies ``socket`` and ``socketpair``; the zygote needs none either,
    it speaks over descriptors it inherited), none holds a capability over the namespace, and a
    zygote's network namespace is never another zygote's. Where the kernel refuses, each sandbox
    gets its own as before."""
    if not mode.namespaced or mode.own_network:
        return mode
    if _libc.unshare(CLONE_NEWNET) == 0:
        mode.own_network = True
    return mode


# -- step 2: the sandbox's root ---------------------------------------------------------------------
def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def allowlist(hidden: list[str]) -> list[str]:
    """The host folders a sandbox sees, read-only: every existing folder on ``sys.path`` (the
    standard library, lib-dynload, the virtualenv's site-packages) and the folders of the shared
    libraries this process has mapped (libc, libstdc++, libgomp...). A folder inside a hidden one
    (the project: its ``src/`` may be on ``sys.path`` for an editable install) is left out, unless
    it lies inside the Python installation itself (a virtualenv kept in the project)."""
    python_trees = [os.path.realpath(p) for p in {sys.prefix, sys.base_prefix}]
    hidden_real = [os.path.realpath(p) for p in hidden]
    # Each folder at the path Python knows it by (modules found later are looked up there) and,
    # where a symlink makes that differ, at its real path too. A zip on sys.path: its folder.
    entries = [os.path.abspath(p if os.path.isdir(p) else os.path.dirname(p)) for p in sys.path if p and os.path.exists(p)]
    candidates = set(entries) | {os.path.realpath(p) for p in entries}
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            path = parts[5].strip() if len(parts) == 6 else ""
            # Shared libraries only: the interpreter's own binary lies in a folder of programs.
            if path.startswith("/") and ".so" in os.path.basename(path) and os.path.isfile(path):
                candidates.add(os.path.dirname(os.path.realpath(path)))
    allowed = []
    for folder in candidates:
        real = os.path.realpath(folder)
        if not any(_inside(real, tree) for tree in python_trees):
            if any(_inside(real, system) for system in ("/proc", "/sys", "/dev", "/run")):
                continue
            if any(_inside(real, h) or _inside(h, real) for h in hidden_real):
                continue
        allowed.append(folder)
    # Only the outermost: a bind of /usr/lib/x86_64-linux-gnu already holds its subfolders.
    return sorted(f for f in allowed if not any(f != other and _inside(f, other) for other in allowed))


def _kept_flags(descriptor: int) -> int:
    # By descriptor: the source's path may already lie under the tree being built (a checkout in /tmp).
    flags = os.fstatvfs(descriptor).f_flag
    return sum(mount_flag for stat_flag, mount_flag in _KEPT_FLAGS.items() if flags & stat_flag)


def _bind_read_only(source_fd: int, target: str) -> None:
    mount(f"/proc/self/fd/{source_fd}", target, None, MS_BIND)
    mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(source_fd))


def build_root(hidden: list[str]) -> list[str]:
    """Step 2, in the zygote after its imports: the read-only tree at ``STAGE``; the folders in it."""
    folders = allowlist(hidden)
    # Open every source before covering anything: a source may lie under /tmp (a checkout there)
    # or in a home the sandbox's user could not even enter.
    sources = {folder: os.open(folder, os.O_PATH | os.O_DIRECTORY) for folder in folders}
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in DEVICES}
    mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for folder in ("proc", "tmp", "dev", "etc", SANDBOX_HOME.strip("/")):
        os.makedirs(f"{STAGE}/{folder}", mode=0o755, exist_ok=True)
    os.chmod(f"{STAGE}/tmp", 0o1777)
    for name, text in MINIMAL_ETC.items():
        _write(f"{STAGE}/etc/{name}", text)
    for name, descriptor in devices.items():
        os.close(os.open(f"{STAGE}/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
        _bind_read_only(descriptor, f"{STAGE}/dev/{name}")
        os.close(descriptor)
    # Merged-/usr systems reach their libraries through /lib and /lib64: keep those links.
    for link in ("lib", "lib64", "lib32", "libx32"):
        if os.path.islink(f"/{link}"):
            os.symlink(os.readlink(f"/{link}"), f"{STAGE}/{link}")
    for folder, descriptor in sources.items():
        target = STAGE + folder
        os.makedirs(target, mode=0o755, exist_ok=True)
        _bind_read_only(descriptor, target)
        os.close(descriptor)
    mount("none", STAGE, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return folders


def detach_stage(device: int) -> None:
    """Undo a half-built root: what was mounted on ``STAGE`` since it was on ``device`` is
    detached (in the zygote's own mount namespace only)."""
    while os.stat(STAGE).st_dev != device and _libc.umount2(STAGE.encode(), MNT_DETACH) == 0:
        pass
