"""The sandbox layer that needs no namespaces, for where the OS refuses them.

Tried, in the zygote, whenever ``isolation.enter_private_namespace`` was refused and before any
refusal (see :func:`choose`):

- ``landlock``: Landlock keeps the sandbox's files to an allowlist (the Python trees read-only,
  a private work folder read-write) and, on newer kernels, denies TCP and scopes signals and
  abstract unix sockets to the sandbox; the seccomp filter closes the rest; as root the sandbox
  also runs under a uid of the zygote's own block (``uid_pool``).
- ``pool`` (root, no Landlock: an old kernel, or a profile that denies its syscalls): the pool
  uid and the seccomp filter, each sandbox chrooted into a root that holds only the allowlist
  (``chroot_root``: nothing of the course, the class, the outputs, nor anything else of the host,
  such as a world-readable copy of the reference in /opt), and before any cell runs a probe
  under that uid, chrooted, that it can write nothing there and read nothing hidden (suites,
  solutions, submissions, outputs, gradebook). Where no root can be built or entered, the probe
  runs on the host's own files instead. The probe's findings refuse the run, naming each path
  and the chmod that fixes it.

Whatever the layer, the sandbox installs the seccomp filters last (:func:`finish`). Without root,
the sandbox keeps the grader's own uid, and Landlock mediates neither a file's metadata (chmod,
chown, utime, xattr) nor ``prlimit``/``setpriority`` on another process, nor, below its ABI 6,
signals: the filters do (``seccomp``), so :func:`choose` offers that layer only where a child
could load them.

Where neither layer can be had (kind "none"), the grader refuses untrusted notebooks; for trusted
ones (``--no-isolation``) :func:`choose` still readies whatever of this layer needs no privilege
(:func:`_for_trusted_notebooks`): Landlock with the same allowlist where the kernel has it, the
seccomp filter, and as root an unprivileged uid (the pool's, else nobody), chrooted as above
where Landlock is missing. Such a sandbox is recorded as "unisolated", with what it still obtained.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

from attnkit.sandbox.lockdown import chroot as chroot_root
from attnkit.sandbox.lockdown import landlock
from attnkit.sandbox.lockdown import seccomp as seccomp_filter
from attnkit.sandbox.lockdown import uid_pool
from attnkit.sandbox.lockdown.zygote_namespace import NOBODY, Mode, allowlist, host_root
from attnkit.sandbox.lockdown.namespace_steps import drop_capabilities, leave_session_keyring
from attnkit.boundary.policy import MAX_PATHS_CHECKED, MAX_ZYGOTES, POOL_BASE, UIDS_PER_ZYGOTE

PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Exposure:
    """A hidden path the sandbox's uid could read or write, and the command that closes it."""

    path: str
    access: str  # "read", "write", "read, write"
    fix: str


@dataclass
class Layer:
    """What the zygote holds for its sandboxes of this layer."""

    read_only: list[str] = field(default_factory=list)
    block: uid_pool.UidBlock | None = None
    fixed_uid: int | None = None  # kind "none" as root without a usable block: every sandbox's uid (nobody)
    chroot: chroot_root.Root | None = None  # root without Landlock: the root every sandbox is chrooted into
    chroot_error: str = ""  # why there is none (in the mode's why when the host's files are probed instead)

    def uid(self, sandbox_number: int) -> int | None:
        """The host uid sandbox number ``sandbox_number`` becomes (None: it keeps the grader's)."""
        return self.block.uid(sandbox_number) if self.block is not None else self.fixed_uid


def choose(mode: Mode, hide: list[str]) -> tuple[Mode, Layer]:
    """In the zygote, after its imports, when ``mode`` holds no namespaces: the best layer the
    OS gives (kind "none", when there is none; ``why`` then tells all, and the mode carries what
    ``--no-isolation``'s sandboxes still get: :func:`_for_trusted_notebooks`)."""
    layer = Layer(read_only=allowlist(hide))
    seccomp_filter.compiled()  # built here once; each sandbox only loads it
    # Root of the host only: root of a user namespace the zygote could not finish owns no pool.
    root = host_root()
    abi = landlock.abi_version()
    if root:
        try:
            layer.block = uid_pool.claim()
        except OSError as error:
            return _for_trusted_notebooks(Mode("none", f"{mode.why}; uid pool: {error}"), layer, abi)
    sandbox_user = "pool" if root else "grader"
    if layer.block is not None:
        # Without Landlock, the sandbox will see the chroot's root: its trees are checked there
        # (the folders above them enter-only, so a pyenv under /root, mode 700, still serves).
        chrooted = abi < 1 and _chroot(layer, layer.block.uid(0))
        unreadable = unreadable_trees(layer.block.uid(0), layer.read_only, layer.chroot.path if chrooted else None)  # type: ignore[union-attr]
        if unreadable:  # e.g. a pyenv under /root (mode 700): the pool uid could not even start Python
            return _for_trusted_notebooks(
                Mode(
                    "none",
                    f"{mode.why}; the sandbox's uid {layer.block.uid(0)} cannot read the Python trees: "
                    f"{', '.join(unreadable)} (install Python outside root's home, or chmod o+x each folder above them)",
                ),
                layer,
                abi,
            )
    if abi >= 1:
        if not root:
            # The sandbox keeps the grader's own uid: Landlock keeps it off the grader's files'
            # contents, but only the seccomp filters keep it off their modes, owners and times, and
            # off the grader's processes (prlimit, setpriority; signals too where Landlock's ABI
            # has no signal scope). No layer without them.
            refused = seccomp_filter.loads()
            if refused:
                return _for_trusted_notebooks(
                    Mode("none", f"{mode.why}; landlock: the sandbox would share the grader's uid, and the seccomp filter does not load: {refused}"),
                    layer,
                    abi,
                )
        return Mode("landlock", mode.why, sandbox_host_uid=sandbox_user, visible=layer.read_only, landlock_abi=abi), layer
    if not root:
        return _for_trusted_notebooks(Mode("none", f"{mode.why}; landlock: not available"), layer, abi)
    uid = layer.block.uid(0)  # type: ignore[union-attr]
    why = mode.why
    if layer.chroot is not None:
        # What the sandbox sees is the root alone: the probe checks it there (nothing writable,
        # nothing hidden), so a course readable by all no longer refuses the run.
        exposed = probe(uid, hide, layer.read_only, layer.chroot.path)
        exposed += writable_inside(uid, layer.chroot)
    else:
        why = f"{why}; chroot: {layer.chroot_error}"
        exposed = probe(uid, hide, layer.read_only)
    if exposed:
        return _for_trusted_notebooks(Mode("none", f"{mode.why}; landlock: not available", exposed=[e.__dict__ for e in exposed]), layer, abi)
    return Mode("pool", why, sandbox_host_uid="pool", visible=layer.read_only), layer


POOL_UIDS = range(POOL_BASE, POOL_BASE + MAX_ZYGOTES * UIDS_PER_ZYGOTE)


def _chroot(layer: Layer, uid: int) -> bool:
    """As root without Landlock: the root the sandboxes of ``layer`` are chrooted into, built or
    found (``chroot_root.prepare``), where a child of ours can chroot into it and become ``uid``
    there. Whether there is one; else ``layer.chroot_error`` says why not."""
    if layer.chroot is not None:
        return True
    try:
        root = chroot_root.prepare(layer.read_only, POOL_UIDS)
    except OSError as error:
        layer.chroot_error = f"could not build {chroot_root.ROOTS}: {error}"
        return False
    failed = [line.split("\t", 1)[1] for line in _access_as(uid, [], (), root.path) if line.startswith("error\t")]
    if failed:  # a profile that denies chroot(2), say: the host's files are probed instead
        os.close(root.lock_fd)
        layer.chroot_error = failed[0]
        return False
    layer.chroot = root
    return True


def writable_inside(uid: int, root: chroot_root.Root) -> list[Exposure]:
    """What of ``root`` (its devices and work folders aside) ``uid`` could write, chrooted."""
    exposed = []
    for line in _access_as(uid, chroot_root.entries(root.path), (("write", os.W_OK),), root.path):
        access, path = line.split("\t", 1)
        # A hard link shares its file's modes: the chmod on the host's own path closes it.
        exposed.append(Exposure("?", "", path) if access == "error" else Exposure(path, "write", f"chmod o-w,g-w {path}"))
    return exposed


def _for_trusted_notebooks(mode: Mode, layer: Layer, abi: int) -> tuple[Mode, Layer]:
    """Kind "none": untrusted notebooks are refused, but ``--no-isolation``'s sandboxes still get
    what of this layer needs no privilege: Landlock with the same allowlist (``abi`` >= 1), the
    seccomp filter, and as root an unprivileged uid: the pool's where it can be become, else
    nobody; where neither can be (root of a user namespace that could not be finished), the
    grader's own uid with no capability."""
    mode.visible, mode.landlock_abi = layer.read_only, max(abi, 0)
    if os.geteuid() != 0:
        mode.sandbox_host_uid = "grader"
        return mode, layer
    if layer.block is not None and _can_become(layer.block.uid(0)):
        mode.sandbox_host_uid = "pool"
    else:
        layer.block = None
        if _can_become(NOBODY):
            mode.sandbox_host_uid, layer.fixed_uid = "nobody", NOBODY
        else:
            mode.sandbox_host_uid = "grader"
    sandbox_uid = layer.uid(0)
    if abi < 1 and sandbox_uid is not None and host_root():
        # No Landlock: the chroot is what keeps the host's files out, trusted notebooks or not.
        _chroot(layer, sandbox_uid)
    return mode, layer


def _can_become(uid: int) -> bool:
    """Whether a child of ours can become ``uid`` (a uid this user namespace does not map cannot)."""
    return not any(line.startswith("error\t") for line in _access_as(uid, [], ()))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _hidden_paths(hide: list[str], allowed: list[str]) -> list[str]:
    """Every path under the hidden trees, listed as root; the sandbox's own read-only trees (a
    virtualenv kept inside the project) are left out: it must read those."""
    allowed_real = [os.path.realpath(a) for a in allowed]
    found: list[str] = []
    for top in hide:
        if not os.path.lexists(top):
            continue
        found.append(top)
        for folder, subfolders, files in os.walk(top):
            subfolders[:] = [s for s in subfolders if not any(_inside(os.path.realpath(os.path.join(folder, s)), a) for a in allowed_real)]
            found += [os.path.join(folder, name) for name in subfolders + files]
            if len(found) > MAX_PATHS_CHECKED:
                return found
    return found


def _fix(path: str, holds_allowed: bool) -> str:
    if holds_allowed:  # the sandbox must still pass through it to its own read-only trees
        return f"chmod o-rw,g-rw {path}"
    return f"chmod -R o-rwx,g-rwx {path}"


def _access_as(uid: int, paths: list[str], checks: tuple[tuple[str, int], ...], root: str | None = None) -> list[str]:
    """In a child that becomes ``uid`` (as a sandbox would, with no groups; chrooted into ``root``
    first if given, as a sandbox is): "<rights>\t<path>" for each path it has any of ``checks`` on
    ("error\t<why>" if it could not chroot or become ``uid``)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        lines = []
        try:
            if root is not None:
                os.chroot(root)
                os.chdir("/")
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for path in paths:
                rights = [word for word, bit in checks if os.access(path, bit, follow_symlinks=False)]
                if rights:
                    lines.append(f"{','.join(rights)}\t{path}")
        except OSError as error:
            lines = [f"error\t{error}"]
        finally:
            os.write(write_end, "\n".join(lines).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        lines = pipe.read().decode().splitlines()
    os.waitpid(child, 0)
    return lines


def unreadable_trees(uid: int, folders: list[str], root: str | None = None) -> list[str]:
    """The sandbox's read-only trees that ``uid`` cannot enter and read (chrooted into ``root``,
    if given)."""
    lines = _access_as(uid, folders, (("rx", os.R_OK | os.X_OK),), root)
    readable = {line.split("\t", 1)[1] for line in lines if line.startswith("rx\t")}
    return [folder for folder in folders if folder not in readable]


def probe(uid: int, hide: list[str], allowed: list[str], root: str | None = None) -> list[Exposure]:
    """Which hidden paths ``uid`` could read or write (chrooted into ``root``, if given). Only the
    outermost of each exposed tree is named: one chmod -R fixes it."""
    lines = _access_as(uid, _hidden_paths(hide, allowed), (("read", os.R_OK), ("write", os.W_OK)), root)
    allowed_real = [os.path.realpath(a) for a in allowed]
    exposed: list[Exposure] = []
    for line in lines:
        access, path = line.split("\t", 1)
        if access == "error":
            return [Exposure(path="?", access="", fix=path)]
        holds_allowed = any(_inside(a, os.path.realpath(path)) for a in allowed_real)
        if any(_inside(path, e.path) and e.fix.startswith("chmod -R") for e in exposed):
            continue  # an exposed folder above it is named already
        exposed.append(Exposure(path, access.replace(",", ", "), _fix(path, holds_allowed)))
    return exposed


def _drop_bounding_set() -> None:
    for capability in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows


def enter(mode: Mode, workdir: str, uid: int | None) -> list[str]:
    """In a fresh sandbox of this layer, or of kind "none" (``--no-isolation``), forked and
    single-threaded: become ``uid`` (as root: the pool's, or nobody), then Landlock where the mode
    has it. The seccomp filter comes last, from ``finish``."""
    obtained: list[str] = []
    if leave_session_keyring():
        obtained.append("own-keyring")
    if uid is not None:
        os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        _drop_bounding_set()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # all ids non-zero: the kernel clears every capability
        obtained += [f"uid-{mode.sandbox_host_uid}", "no-capabilities"]
    elif os.geteuid() == 0:  # root of a user namespace the zygote could not finish: no uid to become
        drop_capabilities()
        obtained.append("no-capabilities")
    else:
        obtained.append("no-capabilities")  # the grader's own uid, which holds none
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if mode.kind == "pool":
        obtained.append("probe-passed")  # by the zygote, before it answered ready (choose)
    allow = landlock.Allowlist(read_only=tuple(mode.visible), read_write=(workdir,))
    if mode.kind == "landlock":
        obtained += landlock.restrict_self(allow, mode.landlock_abi)
    elif not mode.isolated and mode.landlock_abi >= 1:
        try:  # trusted notebooks: as much as the kernel gives, and never a sandbox that fails to start
            obtained += landlock.restrict_self(allow, mode.landlock_abi)
        except OSError:
            pass
    return obtained


def finish(mode: Mode, obtained: list[str]) -> list[str]:
    """The sandbox's last lock-down step, whatever its layer: the seccomp filters. Required in
    this layer (a sandbox that cannot load them does not start); with namespaces (defence in
    depth: the namespaces already keep the host's files and processes out of reach) and for
    trusted notebooks (kind "none"), where the kernel takes them. Its signals may reach its own
    children by pid only where something else keeps them among its own processes (``obtained``:
    a PID namespace, Landlock's signal scope, a pool uid of its own); else only itself and its
    process group (``seccomp.build_reach``)."""
    scoped = mode.namespaced or "landlock-scoped" in obtained or mode.sandbox_host_uid == "pool"
    if mode.isolated and not mode.namespaced:
        return seccomp_filter.install(scoped)
    try:
        return seccomp_filter.install(scoped)
    except OSError:
        return []
