"""The seccomp filter a sandbox installs on itself, last of its lock-down steps.

Whatever layer the sandbox got (namespaces, Landlock, a pool uid), the kernel interfaces a
notebook never needs and an attack reaches for are closed: no new socket of any family (the
sandbox's channel to the grader is open already), no tracing or reading another process's
memory, no keyrings, BPF, perf, module loading, io_uring, userfaultfd, no mounting and no new
namespaces. ``clone3`` answers ENOSYS, so glibc falls back to ``clone``, whose flags a classic
filter can see (CLONE_NEW* -> EPERM); a filter cannot read clone3's flags, which sit in memory.

libseccomp builds the BPF program (through ``pyseccomp``, ctypes over the system's libseccomp2):
it checks the architecture (a syscall through another ABI, such as i386's ``int 0x80`` or x32,
kills the process) and orders the comparisons; a hand-written program would have to do both.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile

import pyseccomp

# Every syscall that answers EPERM. Names libseccomp does not know on this architecture are skipped.
DENIED = (
    "socket",
    "socketpair",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "open_by_handle_at",
    "name_to_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "lookup_dcookie",
    "vhangup",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "iopl",
    "ioperm",
    "uselib",
)
# clone(2) with any of these flags starts a namespace (CLONE_NEWTIME exists for unshare/clone3 only).
CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_libc = ctypes.CDLL(None, use_errno=True)
TIOCSTI = 0x5412  # push characters into a terminal's input: the grader's, if one is inherited


def build() -> pyseccomp.SyscallFilter:
    """The filter, not yet loaded (tests export it; ``install`` loads it)."""
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED:
        number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
        if number == -1:  # __NR_SCMP_ERROR: this libseccomp does not know the name
            continue
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), number)
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in CLONE_NEW_FLAGS.values():
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    return rules


def compiled() -> bytes:
    """The filter as the kernel takes it (an array of ``struct sock_filter``), built once: in the
    zygote, so that each sandbox only loads it (libseccomp's build takes ~10 ms, a load ~0.1 ms)."""
    if not _COMPILED:
        with tempfile.TemporaryFile() as program:
            build().export_bpf(program)
            program.seek(0)
            _COMPILED.append(program.read())
    return _COMPILED[0]


_COMPILED: list[bytes] = []  # per process, never invalidated: the filter is fixed by this code


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> list[str]:
    """Load the filter into this process (single-threaded: it binds the calling thread and its
    children). Sets no_new_privs first, as an unprivileged process must. What it obtained."""
    program = compiled()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))  # sizeof(struct sock_filter) == 8
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")
    return ["seccomp-filter"]
