"""Landlock: a sandbox's file and network access cut to an allowlist, without any namespace.

Landlock (Linux >= 5.13) lets an unprivileged process restrict itself, and it needs only
``no_new_privs``; Docker >= 23 and podman allow its three syscalls by default. Where namespaces
are refused (a container's seccomp profile, Ubuntu's AppArmor user-namespace restriction) it
is what keeps a notebook away from the course, the outputs and the other submissions.

The binding is three syscalls through ctypes: the PyPI ``landlock`` package is a development
release (1.0.0.dev5), and the kernel's interface is small and stable. Each right is used where
the kernel's ABI has it (``abi_version``): the ABI only grows, and a ruleset that names a right
the kernel does not know is refused with EINVAL.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

# One number on every architecture (syscalls added after 5.1 share the table).
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# File-system rights (include/uapi/linux/landlock.h), with the ABI that brought each.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights a rule on a file (not a folder) may carry; the others mean nothing there (EINVAL).
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# Network (ABI 4): TCP bind and connect, handled with no rule, so both are denied.
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
# Scopes (ABI 6): no connecting to abstract unix sockets, no signals, outside our own domain.
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ_ONLY = READ_FILE | READ_DIR | EXECUTE  # the Python trees: modules, .so files, the interpreter
DEVICE = READ_FILE | WRITE_FILE  # /dev/null, zero, random, urandom

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class LandlockError(OSError):
    """The kernel refused a step of the Landlock restriction."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args: object) -> int:
    return _libc.syscall(ctypes.c_long(number), *args)


# A test and operations knob: the highest Landlock ABI the kit uses, to grade as on an older kernel
# (1: Linux 5.13; 4: Ubuntu 24.04's 6.8; 0: as if there were no Landlock). It can only lower what
# the kernel gives, never raise it; a value that is not a whole number >= 0 is ignored.
ABI_CAP_VARIABLE = "ATTNKIT_LANDLOCK_ABI_MAX"


def abi_cap() -> int | None:
    """The cap ``ATTNKIT_LANDLOCK_ABI_MAX`` sets, or None."""
    value = os.environ.get(ABI_CAP_VARIABLE, "").strip()
    return int(value) if value.isdigit() else None


def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 where it has none (old kernel, LSM not enabled, or a
    seccomp profile that denies the syscall, as Docker 20.10's returns ENOSYS); no higher than
    :func:`abi_cap`."""
    version = max(int(_syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))), 0)
    cap = abi_cap()
    return version if cap is None else min(version, cap)


def handled_fs(abi: int) -> int:
    """Every file-system right the ABI knows (ABI 5 added the last so far)."""
    return _FS_BY_ABI[min(abi, 5)] if abi >= 1 else 0


@dataclass(frozen=True)
class Allowlist:
    """What a restricted sandbox may still reach: folders (or files) read-only, folders read-write,
    device files read-write."""

    read_only: tuple[str, ...]
    read_write: tuple[str, ...]
    devices: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


def _add_path_rule(ruleset: int, path: str, access: int) -> None:
    try:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # a folder the allowlist names that this machine lacks: nothing to allow
    except PermissionError:
        return  # one our uid cannot even reach (a Python under /root, --no-isolation): a rule would allow nothing
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneathAttr(access, descriptor)
        if _syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            errno = ctypes.get_errno()
            raise LandlockError(errno, f"landlock_add_rule {path}: {os.strerror(errno)}")
    finally:
        os.close(descriptor)


def restrict_self(allow: Allowlist, abi: int | None = None) -> list[str]:
    """Restrict this process (and every child it will have) to ``allow``: returns what it obtained,
    as items for ``isolation_level.level``. Call it in a single-threaded process: Landlock binds the
    calling thread only (threads already running keep their access)."""
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise LandlockError(38, "landlock: not available (ENOSYS or disabled)")
    fs = handled_fs(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct as the ABI knows it
    ruleset = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"landlock_create_ruleset: {os.strerror(errno)}")
    try:
        for path in allow.read_only:
            _add_path_rule(ruleset, path, READ_ONLY & fs)
        for path in allow.devices:
            _add_path_rule(ruleset, path, DEVICE & fs)
        for path in allow.read_write:
            _add_path_rule(ruleset, path, fs)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise LandlockError(errno, f"no_new_privs: {os.strerror(errno)}")
        if _syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            errno = ctypes.get_errno()
            raise LandlockError(errno, f"landlock_restrict_self: {os.strerror(errno)}")
    finally:
        os.close(ruleset)
    obtained = [f"landlock-abi-{abi}", "landlock-files"]
    if net:
        obtained.append("landlock-no-tcp")
    if scoped:
        obtained.append("landlock-scoped")
    return obtained
