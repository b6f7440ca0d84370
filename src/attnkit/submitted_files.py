"""Reading what students submit as it really arrives: symlinks to anything, FIFOs, sockets,
device nodes, sparse files of any size, names that are not UTF-8.

A submitted file is read only through :func:`read_submitted` (or :func:`read_opened` under a folder
already opened): every path component below the submissions folder is opened without following
links, the file itself with O_NOFOLLOW | O_NONBLOCK (a FIFO cannot block us), and it must be a
regular file no larger than the cap, checked on the open descriptor.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from attnkit.i18n import _

# The cap on reading a student's file (one embedded image makes a notebook 20 MB; what is graded,
# the notebook without its outputs, is capped by ``notebook.MAX_NOTEBOOK_BYTES``).
MAX_SUBMITTED_BYTES = 64 * 1024 * 1024

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a terminal device never
# becomes our controlling terminal. Neither matters for a regular file, the only kind we read.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unsafe(Exception):
    """A submitted path that is not a regular file inside the student's own folder (message: Chinese)."""


def display_name(name: str) -> str:
    """A file or folder name as it can be shown and stored: bytes that are not UTF-8 become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def kind_of(mode: int) -> str:
    """What a non-regular file is, in the student's language."""
    if stat.S_ISLNK(mode):
        return _("符号链接")
    if stat.S_ISDIR(mode):
        return _("文件夹")
    if stat.S_ISFIFO(mode):
        return _("命名管道（FIFO）")
    if stat.S_ISSOCK(mode):
        return _("套接字")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return _("设备文件")
    return _("特殊文件")


def _open_below(root: Path, path: Path) -> int:
    """A descriptor of ``path``'s parent folder, every component below ``root`` opened without
    following links. The caller closes it."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise Unsafe(_("文件不在提交文件夹内，未读取")) from None
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise Unsafe(_("文件路径不合法，未读取"))
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the TA's own folder: trusted
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=folder)
            except OSError as error:
                raise Unsafe(_("路径中的“{name}”不是普通文件夹（可能是符号链接），未读取").format(name=display_name(part))) from error
            os.close(folder)
            folder = inner
        return folder
    except BaseException:
        os.close(folder)
        raise


def read_submitted(root: Path, path: Path, limit: int = MAX_SUBMITTED_BYTES) -> bytes:
    """The bytes of ``path`` (below the submissions folder ``root``) if it is a regular file of at
    most ``limit`` bytes reached through real folders only; otherwise :class:`Unsafe` saying why."""
    folder = _open_below(root, path)
    try:
        return read_opened(folder, path.name, limit)
    finally:
        os.close(folder)


def read_opened(folder: int, name: str, limit: int = MAX_SUBMITTED_BYTES) -> bytes:
    """The bytes of the entry ``name`` of the folder open at ``folder`` (a descriptor the caller
    opened without following links), read as :func:`read_submitted` reads: the name is one
    component, not followed if a link (O_NOFOLLOW), opened without blocking (a FIFO), and the
    descriptor opened must be a regular file of at most ``limit`` bytes (``fstat``, checked before
    anything is read; never more than ``limit + 1`` bytes read, whatever it grows to), else
    :class:`Unsafe` saying why. Every check is on what is read: nothing is reopened by path."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Unsafe(_("文件路径不合法，未读取"))
    try:
        before = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    # Checked before open: opening a device node can itself have effects (a tape rewinds).
    if not stat.S_ISREG(before.st_mode):
        raise Unsafe(_("这是{kind}而不是普通文件，未读取").format(kind=kind_of(before.st_mode)))
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=folder)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    try:
        info = os.fstat(handle)
        # Checked again on the descriptor: the name may have been swapped since the lstat.
        if not stat.S_ISREG(info.st_mode):
            raise Unsafe(_("这是{kind}而不是普通文件，未读取").format(kind=kind_of(info.st_mode)))
        if info.st_size > limit:
            raise Unsafe(_("文件过大（{size} MB，上限 {limit} MB），无法评分").format(size=info.st_size // 1024 // 1024, limit=limit // 1024 // 1024))
        chunks = bytearray()
        while len(chunks) <= limit:  # never more than limit + 1 bytes, whatever st_size said
            chunk = os.read(handle, min(1 << 20, limit + 1 - len(chunks)))
            if not chunk:
                break
            chunks += chunk
        if len(chunks) > limit:
            raise Unsafe(_("文件过大（超过 {limit} MB），无法评分").format(limit=limit // 1024 // 1024))
        return bytes(chunks)
    except OSError as error:
        raise Unsafe(_("无法读取文件：{reason}").format(reason=error.strerror)) from None
    finally:
        os.close(handle)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(paths: list[Path], salt: str = "") -> str:
    """A digest of the (trusted) files' names and bytes (plus ``salt``): what a regrade depends on."""
    digest = hashlib.sha256(salt.encode())
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()
