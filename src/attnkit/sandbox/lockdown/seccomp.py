"""The seccomp filters a sandbox installs on itself, last of its lock-down steps, in every layer.

Whatever layer the sandbox got (namespaces, Landlock, a pool uid, or none for trusted notebooks),
the kernel interfaces a notebook never needs and an attack reaches for are closed. Two filters,
both built by libseccomp, both loaded into every sandbox (the kernel runs each on every syscall
and the strictest answer wins):

- **the denials** (:func:`build`, default allow): no new socket of any family (the sandbox's
  channel to the grader is open already), no tracing or reading another process's memory, no
  pidfds, keyrings, BPF, perf, module loading, io_uring, userfaultfd, no mounting and no new
  namespaces; and no change to any file's metadata: the chmod, chown, utime and xattr families
  and truncate(2) by path. Landlock mediates none of chmod, chown, utime or xattr (nor truncate
  before its ABI 3), and a sandbox that runs under its grader's own uid (a TA without root) owns
  every file the TA owns: a classmate's notebook, OUT, the gradebook. ``clone3`` answers ENOSYS,
  so glibc falls back to ``clone``, whose flags a classic filter can see (CLONE_NEW* -> EPERM); a
  filter cannot read clone3's flags, which sit in memory. No ioctl or fcntl that names a process
  to send SIGIO/SIGURG to (F_SETOWN, F_SETOWN_EX, FIOSETOWN, SIOCSPGRP) nor TIOCSTI.
- **the sandbox's reach** (:func:`build_reach`, default EPERM): only the syscalls of
  :data:`ALLOWED` (what a notebook's Python, torch and IPython use; anything else, a syscall a
  newer kernel adds included, is refused), and those that act on another process by its pid,
  which are allowed only on the sandbox itself:
  ``kill`` on pid 0 (its own process group), its own pid or its own group (-pid: it started a
  session of its own, so that group is its own processes); ``tkill``, ``tgkill``,
  ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo`` on its own pid; ``prlimit64``, ``sched_setaffinity``,
  ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``, ``get_robust_list`` on 0 or its
  own pid; ``setpriority`` and ``ioprio_set`` for a process or group that is 0 or its own (never
  for a user: that is every process of the grader's uid). Where Landlock has no signal scope
  (ABI < 6: Ubuntu 24.04's 6.8, Debian 12's 6.1), these checks are what keeps a sandbox under the
  grader's uid from ``kill(-1)`` or from ``prlimit(RLIMIT_CPU)`` on the grader, which no
  Landlock ABI scopes. A pid is compared on its low 32 bits (the kernel reads an ``int``), so
  bits set above them change nothing. Where something else already keeps the sandbox's signals
  among its own processes (a PID namespace, Landlock's signal scope, a pool uid of its own), the
  *scoped* variant also lets the signal calls name any positive pid, so that a notebook can end
  its own children; never -1 nor another process group.

A denied call fails with EPERM, which the student's code sees as ``PermissionError``; nothing is
killed. The sandbox's pid is known only once it is forked: the reach filter is built once with
placeholders (:data:`SELF`, :data:`OWN_GROUP`), and each sandbox writes its pid into its own copy
of the program (:func:`for_process`) before loading it. A forked child of a sandbox keeps its
parent's filter: it may signal the sandbox and their process group, not itself by pid.

libseccomp builds the BPF programs (through ``pyseccomp``, ctypes over the system's libseccomp2):
it checks the architecture (a syscall through another ABI, such as i386's ``int 0x80`` or x32,
kills the process) and orders the comparisons; a hand-written program would have to do both.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import tempfile

import pyseccomp

# Every syscall that answers EPERM. Names libseccomp does not know on this architecture are skipped.
DENIED = (
    "socket",
    "socketpair",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "process_mrelease",
    "kcmp",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "move_pages",
    "migrate_pages",
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
# A file's metadata: modes, owners, times, extended attributes, and its length by path (Landlock
# mediates truncate only from its ABI 3). A notebook writes its own files through open(2).
METADATA = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "futimesat",
    "utimensat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
    "file_setattr",
    "truncate",
)
# Syscalls newer than some libseccomp's table. Every syscall added since Linux 5.1 has one number
# on every architecture (alpha aside), so the number serves where the name is unknown.
NUMBERS = {"fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469, "process_mrelease": 448, "mseal": 462}
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
TIOCSTI = 0x5412  # push characters into a terminal's input: the grader's, if one is inherited
# Name a process that will get SIGIO/SIGURG (any signal, with F_SETSIG) when a descriptor is ready.
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902
F_SETOWN, F_SETOWN_EX = 8, 15
LOW_32 = 0xFFFFFFFF  # an int argument: the kernel reads the register's low 32 bits only

# -- the reach filter's checks --------------------------------------------------------------------
# Placeholders for the sandbox's pid and its negation (its process group, as kill(2) takes it),
# written into each sandbox's copy of the program (for_process). Neither is a pid (pid_max is at
# most 2^22) nor any other constant of the program.
SELF, OWN_GROUP = 0x7A7A7A7A, 0x5B5B5B5B
# syscall -> the argument that names a process, and the values it may take.
ON_SELF = {
    "kill": (0, (0, SELF, OWN_GROUP)),
    "tkill": (0, (SELF,)),
    "tgkill": (0, (SELF,)),
    "rt_sigqueueinfo": (0, (SELF,)),
    "rt_tgsigqueueinfo": (0, (SELF,)),
    "prlimit64": (0, (0, SELF)),
    "sched_setaffinity": (0, (0, SELF)),
    "sched_setscheduler": (0, (0, SELF)),
    "sched_setparam": (0, (0, SELF)),
    "sched_setattr": (0, (0, SELF)),
    "get_robust_list": (0, (0, SELF)),
}
SIGNALS = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
SIGN_BIT = 0x80000000
# syscall -> (the values of "which" that name a process or a group, then "who": 0 or ourselves).
PRIO_PROCESS, PRIO_PGRP = 0, 1  # PRIO_USER (2) would reach every process of the uid
IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP = 1, 2  # IOPRIO_WHO_USER (3) likewise
WHICH_AND_WHO = {"setpriority": (PRIO_PROCESS, PRIO_PGRP), "ioprio_set": (IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP)}
# What the reach filter allows without a check: the kernel interfaces a notebook's Python, torch,
# numpy, matplotlib and IPython use, and nothing else (default deny, EPERM). A syscall that is not
# named here (one a newer kernel adds, say) is refused until it is; names unknown on this
# architecture are skipped. Those the denials filter refuses (DENIED, METADATA) are listed only
# where an argument check there decides (clone, ioctl, fcntl) or where its answer must reach the
# caller unchanged: clone3's ENOSYS makes glibc fall back to clone, and the later filter's EPERM
# would win over it (of two ERRNO answers the kernel takes the last-installed filter's).
ALLOWED = (
    # memory
    "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mincore", "mlock", "mlock2", "munlock",
    "mlockall", "munlockall", "membarrier", "get_mempolicy", "set_mempolicy", "mbind", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "memfd_create", "map_shadow_stack", "mseal",
    # files and descriptors (its own: Landlock, the mount namespace or the pool uid say which)
    "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
    "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "stat", "fstat", "lstat",
    "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
    "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat",
    "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "dup", "dup2", "dup3",
    "fcntl", "ioctl", "flock", "fsync", "fdatasync", "sync_file_range", "fallocate", "ftruncate", "sendfile",
    "copy_file_range", "splice", "tee", "vmsplice", "umask", "readahead", "fadvise64", "getxattr", "lgetxattr",
    "fgetxattr", "listxattr", "llistxattr", "flistxattr", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch",
    # waiting on descriptors
    "pipe", "pipe2", "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
    "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # the sockets it holds (it can open none: socket and socketpair are denied)
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "getsockname",
    "getpeername", "getsockopt", "setsockopt",
    # time
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time", "times",
    "getitimer", "setitimer", "alarm", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
    "timer_delete",
    # its own signals (kill and the like are checked below)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend",
    "sigaltstack", "pause",
    # threads and its own children
    "clone", "clone3", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
    "set_tid_address", "set_robust_list", "futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
    "rseq", "arch_prctl", "prctl", "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr", "getcpu",
    "getpriority", "ioprio_get", "getrlimit", "setrlimit", "getrusage", "sysinfo", "uname", "capget", "capset",
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # who it is
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setsid", "setpgid", "getuid", "geteuid",
    "getgid", "getegid", "getgroups", "getresuid", "getresgid", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid", "getrandom", "restart_syscall",
)  # fmt: skip

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_libc = ctypes.CDLL(None, use_errno=True)
_INSTRUCTION = struct.Struct("=HBBI")  # struct sock_filter: code, jt, jf, k
_K = struct.Struct("=I")
BPF_JMP_JEQ_K = 0x15


def _number(name: str) -> int | None:
    """The syscall's number here, or None where this architecture has no such call."""
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    if number == -1:  # __NR_SCMP_ERROR: this libseccomp does not know the name
        return NUMBERS.get(name)
    return int(number)


def build() -> pyseccomp.SyscallFilter:
    """The denials, not yet loaded (tests export it; ``install`` loads it)."""
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    denied = pyseccomp.ERRNO(errno.EPERM)
    for name in DENIED + METADATA:
        number = _number(name)
        if number is not None:
            rules.add_rule(denied, number)
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in CLONE_NEW_FLAGS.values():
        rules.add_rule(denied, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    for request in (TIOCSTI, FIOSETOWN, SIOCSPGRP):
        rules.add_rule(denied, "ioctl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, LOW_32, request))
    for command in (F_SETOWN, F_SETOWN_EX):
        rules.add_rule(denied, "fcntl", pyseccomp.Arg(1, pyseccomp.MASKED_EQ, LOW_32, command))
    return rules


def build_reach(scoped: bool = False) -> pyseccomp.SyscallFilter:
    """The sandbox's reach, with the placeholders :data:`SELF` and :data:`OWN_GROUP` for its pid.
    ``scoped``: where something else already keeps its signals among its own processes (a PID
    namespace, Landlock's signal scope, a uid no other process has), the signal calls may also
    name any positive pid: its own children (a notebook's subprocess, a fork it ends); never -1
    nor another group."""
    rules = pyseccomp.SyscallFilter(pyseccomp.ERRNO(errno.EPERM))
    rules.set_attr(pyseccomp.Attr.CTL_OPTIMIZE, 2)  # a binary tree of numbers: ~8 comparisons a call, not ~200
    checked = {number for number in map(_number, [*ON_SELF, *WHICH_AND_WHO]) if number is not None}
    for number in dict.fromkeys(map(_number, ALLOWED)):
        if number is not None and number not in checked:
            rules.add_rule(pyseccomp.ALLOW, number)
    for name, (argument, values) in ON_SELF.items():
        if _number(name) is None:
            continue
        for value in values:
            rules.add_rule(pyseccomp.ALLOW, name, pyseccomp.Arg(argument, pyseccomp.MASKED_EQ, LOW_32, value))
        if scoped and name in SIGNALS:  # 0 <= pid < 2^31 as the kernel reads it: no sign bit, so never -1 nor a group
            rules.add_rule(pyseccomp.ALLOW, name, pyseccomp.Arg(argument, pyseccomp.MASKED_EQ, SIGN_BIT, 0))
    for name, whiches in WHICH_AND_WHO.items():
        if _number(name) is None:
            continue
        for which in whiches:
            for who in (0, SELF):
                rules.add_rule(
                    pyseccomp.ALLOW,
                    name,
                    pyseccomp.Arg(0, pyseccomp.MASKED_EQ, LOW_32, which),
                    pyseccomp.Arg(1, pyseccomp.MASKED_EQ, LOW_32, who),
                )
    return rules


def _export(rules: pyseccomp.SyscallFilter) -> bytes:
    with tempfile.TemporaryFile() as program:
        rules.export_bpf(program)
        program.seek(0)
        return program.read()


def compiled(scoped: bool = False) -> tuple[bytes, bytes]:
    """The two filters as the kernel takes them (arrays of ``struct sock_filter``): the denials,
    and the reach (``scoped`` or not: :func:`build_reach`) with its placeholders. Built once: in
    the zygote, so that each sandbox only writes its pid into a copy and loads them (libseccomp's
    build takes ~10 ms; a sandbox's load ~0.6 ms, mostly the kernel's)."""
    if not _COMPILED:
        denials = _export(build())
        for variant in (False, True):
            reach = _export(build_reach(variant))
            found = {placeholder: _placeholder_slots(reach, placeholder) for placeholder in (SELF, OWN_GROUP)}
            if not all(found.values()):  # the program libseccomp made is not the one for_process expects
                raise OSError(errno.EINVAL, f"seccomp: the reach filter lacks its placeholders ({found})")
            _SLOTS[reach] = found
            _COMPILED[variant] = (denials, reach)
    return _COMPILED[scoped]


_COMPILED: dict[bool, tuple[bytes, bytes]] = {}  # per process, never invalidated: the filters are fixed by this code
# The reach program -> where each placeholder sits in it: found once (a sandbox only writes its pid there).
_SLOTS: dict[bytes, dict[int, list[int]]] = {}


def _placeholder_slots(program: bytes, placeholder: int) -> list[int]:
    """The byte offsets of the comparisons (``jeq #k``) against ``placeholder`` in ``program``."""
    slots = []
    for offset in range(0, len(program), _INSTRUCTION.size):
        code, _jt, _jf, k = _INSTRUCTION.unpack_from(program, offset)
        if k == placeholder:
            if code != BPF_JMP_JEQ_K:
                raise OSError(errno.EINVAL, f"seccomp: placeholder {placeholder:#x} outside a comparison (code {code:#x})")
            slots.append(offset)
    return slots


def for_process(reach: bytes, pid: int) -> bytes:
    """The reach filter with ``pid`` (as the sandbox sees it: 1 in its own PID namespace) in
    place of :data:`SELF` and its negation in place of :data:`OWN_GROUP`."""
    slots = _SLOTS.get(reach) or {placeholder: _placeholder_slots(reach, placeholder) for placeholder in (SELF, OWN_GROUP)}
    program = bytearray(reach)
    for placeholder, value in ((SELF, pid & LOW_32), (OWN_GROUP, -pid & LOW_32)):
        for offset in slots[placeholder]:
            _K.pack_into(program, offset + 4, value)  # k: the last 4 bytes of the instruction
    return bytes(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load(program: bytes) -> None:
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // _INSTRUCTION.size, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")


def install(scoped: bool = False) -> list[str]:
    """Load both filters into this process (single-threaded: they bind the calling thread and its
    children), the reach for this process's own pid (``scoped``: :func:`build_reach`). Sets
    no_new_privs first, as an unprivileged process must. What it obtained."""
    denials, reach = compiled(scoped)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")
    _load(denials)
    _load(for_process(reach, os.getpid()))
    return ["seccomp-filter"]


def loads() -> str:
    """Whether a child of this process can load both filters: "" if so, else why not (the zygote
    asks before it offers a layer whose guarantee rests on them)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            install()
            os.write(write_end, b"")
        except BaseException as error:  # any failure is the answer
            os.write(write_end, str(error).encode()[:500] or b"?")
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode(errors="replace")
    os.waitpid(child, 0)
    return answer
