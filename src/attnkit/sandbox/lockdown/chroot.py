"""As root without Landlock: each sandbox is chrooted into a root that holds only the allowlist.

The pool uid alone (``uid_pool``) keeps out only what the file modes keep out: a copy of the
reference a TA left world-readable in /opt is in its reach. Without namespaces there is no mount
to build a private root with, but root may still ``chroot(2)``: this module builds, once per
content, a tree under :data:`ROOTS` that holds the sandbox's read-only trees (the allowlist
``isolation.allowlist`` gives Landlock: the Python trees on ``sys.path``, the folders of the
loaded shared libraries) as hard links where the filesystem allows (else copies), plus a minimal
/etc and /dev and a folder of per-sandbox work folders. Nothing else of the host is in it.

The tree is read-only by permissions: every folder and copy is root's and writable by no one
else, a hard-linked file that anyone else could write is copied instead, and the zygote's probe
(``without_namespaces.choose``) checks as the pool uid, chrooted, that it can write nothing but its
own work folder. A sandbox (``lockdown.lock_down``) closes every descriptor it does not need,
chroots and changes into its work folder as root, then drops to its pool uid; the seccomp filter
(which denies ``chroot``) comes last. Without capabilities a chrooted process has no way out.

Each root is named by a digest of what it holds (:func:`digest`), so a changed virtualenv gets
a new one; roots no running zygote holds that are not the current content, unfinished builds and
work folders older than a day are swept (:func:`sweep`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass

from attnkit.sandbox.lockdown.zygote_namespace import DEVICES, MINIMAL_ETC

ROOTS = "/var/tmp/attnkit-chroot"
FORMAT = "2"  # part of every digest: a change in how roots are built builds them anew
# Inside a root: the per-sandbox work folders (root's, 0711: none can list it). A name no host
# folder of the allowlist has (/work, /srv may well hold a virtualenv).
WORK = "/.attnkit-sandboxes"
MAX_AGE_SECONDS = 24 * 3600
# Large parts of the trees no notebook imports: torch's own test suite, C++ headers and CMake
# files, and of its programs all but one (~200 MB where the root must be copied).
SKIPPED = ("torch/test", "torch/include", "torch/share")
# Folders whose files are left out but the named ones: torch.multiprocessing, imported lazily by
# torch.utils.benchmark and others, refuses to import without torch_shm_manager.
ONLY = {"torch/bin": ("torch_shm_manager",)}
# (major, minor) of each device a notebook may open: what the namespaced root binds from /dev.
_DEVICE_NUMBERS = {"null": (1, 3), "zero": (1, 5), "random": (1, 8), "urandom": (1, 9)}


@dataclass
class Root:
    """A built root and the shared lock that keeps :func:`sweep` off it while the zygote lives."""

    path: str
    lock_fd: int

    @property
    def work(self) -> str:
        """The host path of the folder the zygote makes each sandbox's work folder in."""
        return self.path + WORK

    def inside(self, host_path: str) -> str:
        """``host_path`` (under this root) as the chrooted sandbox sees it."""
        return host_path[len(self.path) :] or "/"


def _skipped(path: str) -> bool:
    return any(path.endswith("/" + part) for part in SKIPPED) or any(path.endswith("/" + part) for part in ONLY)


def _kept_files(folder: str, files: list[str]) -> list[str]:
    kept = next((names for part, names in ONLY.items() if folder.endswith("/" + part)), None)
    return files if kept is None else [name for name in files if name in kept]


def trees(folders: list[str]) -> tuple[list[str], dict[str, str]]:
    """The real folders to copy (outermost only) and the symlinks to recreate (path -> target):
    a folder Python knows through a link (a virtualenv's lib64, merged /usr's /lib) is reached
    inside the root through the same link, to its real path, which is copied."""
    real = {os.path.realpath(folder) for folder in folders}
    links: dict[str, str] = {}
    for folder in folders:
        prefix = ""
        for part in folder.strip("/").split("/"):
            prefix += "/" + part
            if os.path.islink(prefix):  # the first link on the way: beyond it, the real path
                links[prefix] = os.readlink(prefix)
                break
    for link in ("/lib", "/lib64", "/lib32", "/libx32"):  # the loader's own search paths (merged /usr)
        if os.path.islink(link):
            links[link] = os.readlink(link)
    outermost = sorted(r for r in real if not any(r != other and (r + "/").startswith(other.rstrip("/") + "/") for other in real))
    return outermost, {link: target for link, target in links.items() if not any((link + "/").startswith(t.rstrip("/") + "/") for t in outermost)}


def digest(folders: list[str]) -> str:
    """What a root built from ``folders`` holds, in 16 hex digits: each folder's path, inode and
    change time (a file added, removed or replaced changes its folder's). A file edited in place
    changes no folder: hard-linked, the root holds it as edited anyway."""
    real, links = trees(folders)
    hasher = hashlib.sha256(f"{FORMAT}\0{sorted(links.items())}\0".encode())
    for top in real:
        for folder, subfolders, _files in os.walk(top):
            subfolders[:] = sorted(s for s in subfolders if not _skipped(os.path.join(folder, s)))
            info = os.lstat(folder)
            hasher.update(f"{folder}\0{info.st_ino}\0{info.st_mtime_ns}\0{info.st_mode}\0{info.st_uid}\n".encode())
    return hasher.hexdigest()[:16]


def _needs_copy(info: os.stat_result, pool: range) -> bool:
    """A file a hard link must not share: one anyone but its owner's group may write, or one a
    pool uid owns (the sandbox could chmod it)."""
    return bool(info.st_mode & stat.S_IWOTH) or info.st_uid in pool or (info.st_gid in pool and bool(info.st_mode & stat.S_IWGRP))


def _place(source: str, target: str, info: os.stat_result, pool: range) -> None:
    if not _needs_copy(info, pool):
        try:
            os.link(source, target, follow_symlinks=False)
            return
        except OSError:  # another filesystem, or one that refuses hard links: a copy
            pass
    shutil.copyfile(source, target, follow_symlinks=False)
    os.chmod(target, stat.S_IMODE(info.st_mode) & 0o755)


def _folder(path: str, mode: int) -> None:
    os.mkdir(path, mode)
    os.chmod(path, mode)  # whatever the umask


def _ancestors(root: str, path: str) -> None:
    """The folders above an allowlisted tree: enter-only (0711), so a sandbox lists none of them."""
    prefix = root
    for part in os.path.dirname(path).strip("/").split("/"):
        if not part:
            continue
        prefix += "/" + part
        if os.path.islink(prefix):
            raise OSError(0, f"a link inside the root being built: {prefix}")
        if not os.path.isdir(prefix):
            _folder(prefix, 0o711)


def _copy_tree(root: str, top: str, pool: range) -> None:
    _ancestors(root, top)
    for folder, subfolders, files in os.walk(top):
        target = root + folder
        info = os.lstat(folder)
        if not os.path.isdir(target):
            _folder(target, stat.S_IMODE(info.st_mode) & 0o755)
        kept = []
        for name in subfolders:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                os.symlink(os.readlink(path), root + path)
            elif not _skipped(path):
                kept.append(name)
            elif any(path.endswith("/" + part) for part in ONLY):
                _folder(root + path, stat.S_IMODE(os.lstat(path).st_mode) & 0o755)
                _files(root, path, _kept_files(path, os.listdir(path)), pool)
        subfolders[:] = kept
        _files(root, folder, files, pool)


def _files(root: str, folder: str, files: list[str], pool: range) -> None:
    for name in files:
        path = os.path.join(folder, name)
        entry = os.lstat(path)
        if stat.S_ISLNK(entry.st_mode):
            os.symlink(os.readlink(path), root + path)
        elif stat.S_ISREG(entry.st_mode):
            _place(path, root + path, entry, pool)
        # sockets, fifos, devices: nothing a notebook imports


def _devices(root: str) -> None:
    """/dev/null, zero, random, urandom as devices where root may make them here (not on a nodev
    filesystem, or without CAP_MKNOD); else /dev/null as an empty file: stdin reads nothing."""
    _folder(root + "/dev", 0o755)
    for name in DEVICES:
        major, minor = _DEVICE_NUMBERS[name]
        try:
            os.mknod(f"{root}/dev/{name}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(f"{root}/dev/{name}", 0o666)
        except OSError:
            if name == "null":
                os.close(os.open(f"{root}/dev/null", os.O_CREAT | os.O_WRONLY, 0o444))


def _populate(root: str, folders: list[str], pool: range) -> None:
    real, links = trees(folders)
    for top in real:
        _copy_tree(root, top, pool)
    for link, target in sorted(links.items()):
        _ancestors(root, link)
        if not os.path.lexists(root + link):
            os.symlink(target, root + link)
    _devices(root)
    _folder(root + "/etc", 0o755)
    for name, text in MINIMAL_ETC.items():
        with open(f"{root}/etc/{name}", "w") as handle:
            handle.write(text)
        os.chmod(f"{root}/etc/{name}", 0o644)
    if os.path.isfile("/etc/ld.so.cache"):  # a library first loaded after the fork is found by soname
        shutil.copyfile("/etc/ld.so.cache", f"{root}/etc/ld.so.cache")
        os.chmod(f"{root}/etc/ld.so.cache", 0o644)
    _folder(root + WORK, 0o711)
    os.chmod(root, 0o755)


def _hold(path: str) -> int:
    """A shared lock on ``path``.lock, on the lock file that is still there once held (a sweep
    may have removed the one we opened)."""
    while True:
        descriptor = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        try:
            if os.stat(path + ".lock").st_ino == os.fstat(descriptor).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)


def prepare(folders: list[str], pool: range, roots: str = ROOTS) -> Root:
    """The root for ``folders``, built now if no zygote built it before, held for this process's
    life; then the stale ones swept. ``pool``: the uids sandboxes run as (none may own a file of
    it). Raises OSError where it cannot be built (a read-only /var/tmp, say)."""
    os.makedirs(roots, mode=0o700, exist_ok=True)
    os.chmod(roots, 0o700)  # no one but root reaches a root from outside it
    name = digest(folders)
    path = os.path.join(roots, name)
    held = _hold(path)
    try:
        building = os.open(os.path.join(roots, ".build.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(building, fcntl.LOCK_EX)  # two zygotes starting together build it once
            if not os.path.isdir(path):
                staging = tempfile.mkdtemp(prefix=".building-", dir=roots)
                try:
                    _populate(staging, folders, pool)
                    os.rename(staging, path)
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
        finally:
            os.close(building)
    except BaseException:
        os.close(held)
        raise
    sweep(name, roots)
    return Root(path, held)


def sweep(current: str, roots: str = ROOTS, now: float | None = None) -> list[str]:
    """Remove every root but ``current`` that no zygote holds, builds left unfinished and work
    folders older than a day; what was removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        names = os.listdir(roots)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(roots, name)
        if name.endswith(".lock") or not os.path.isdir(path) or os.path.islink(path):
            continue
        if name == current:
            for work in _old(path + WORK, now):
                shutil.rmtree(work, ignore_errors=True)
                removed.append(work)
            continue
        if name.startswith(".building-"):
            if now - os.lstat(path).st_mtime > MAX_AGE_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            continue
        descriptor = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a running zygote's sandboxes are in it
            os.close(descriptor)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            os.unlink(path + ".lock")
            removed.append(path)
        finally:
            os.close(descriptor)
    return removed


def _old(folder: str, now: float) -> list[str]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [entry.path for entry in entries if now - entry.stat(follow_symlinks=False).st_mtime > MAX_AGE_SECONDS]


def entries(root: str) -> list[str]:
    """Every path in ``root`` as the sandbox sees it, but the devices and the work folders (the
    probe checks that a pool uid can write none of them)."""
    found = [WORK]
    for folder, subfolders, files in os.walk(root):
        inside = folder[len(root) :] or "/"
        if inside == "/":
            subfolders[:] = [s for s in subfolders if "/" + s != WORK]
        found.append(inside)
        if inside != "/dev":  # a link's own mode means nothing (its target is listed where it lies)
            found += [os.path.join(inside, name) for name in files if not os.path.islink(os.path.join(folder, name))]
    return found


def enter(root: Root, workdir: str) -> str:
    """In a fresh sandbox, as root, every descriptor but its channel closed: change root to
    ``root`` and into the work folder ``workdir`` (a host path under it); that folder's path
    inside."""
    inside = root.inside(workdir)
    os.chroot(root.path)
    os.chdir(inside)  # no working folder is left outside the new root
    return inside
