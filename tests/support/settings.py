"""Run a command in the settings where courses grade, faithfully enough to test the sandbox there.

The one launcher for every setting the tests grade in; each function takes the command (an argv)
and returns the argv that runs it in that setting:
- `as_root(command)`: root as this machine's CI is (the command as it is).
- `root_without_sys_admin(command)`: root with CAP_SYS_ADMIN dropped from the bounding set (the
  first, partial imitation of Docker's default; `docker_default` is the faithful one).
- `unprivileged(command, user)`: a TA without root or sudo on a host that lets users make
  namespaces.
- `docker_default(command)`: root inside a container under Docker's default seccomp profile and
  capability set. The profile's rules that matter to a sandbox are applied with libseccomp
  (pyseccomp over the machine's libseccomp2): unshare, setns, mount, umount2 and pivot_root fail
  with EPERM, clone fails with EPERM when its flags hold any CLONE_NEW* bit, clone3 fails with
  ENOSYS (so libc falls back to clone, whose flags a filter can see). Docker grants these only with
  CAP_SYS_ADMIN, which its default set lacks. `landlock=False` also denies Landlock's three
  syscalls (ENOSYS), as a profile written before Landlock does.
  `landlock=True` is what Debian's docker.io 20.10.24 gives (measured in tests/sandbox/test_docker.py's
  daemon: landlock_create_ruleset returns the ABI there).
  The capability set is Docker's default, in the bounding, permitted and effective sets, with an
  empty inheritable set (Docker >= 20.10.14 leaves it empty, CVE-2022-24769; measured in the same
  daemon); no_new_privs is left unset, as Docker leaves it.
- `userns_without_mount(command, user)`: an unprivileged user on a host that lets a user namespace
  be created but denies mount and pivot_root inside it, as Ubuntu 24.04's
  `kernel.apparmor_restrict_unprivileged_userns=1` does to unconfined programs. A seccomp filter
  denying mount, umount2 and pivot_root with EPERM stands in for AppArmor: the namespace is made,
  the mounts fail with the same errno. `landlock_abi=N` caps the Landlock ABI the kit uses at N
  (1, 4 for Ubuntu 24.04's 6.8, 0 for none; `with_landlock_abi`), as on an older kernel.
- `without_user_namespaces(command, user)`: an unprivileged user on a kernel that gives no user
  namespace at all: the command runs as `user` inside a user namespace of its own (mapping root
  and `user`) whose `user.max_user_namespaces` is 0, so the host's limit is untouched and no
  further user namespace can be made. `landlock=False`: and an older kernel without Landlock (its
  syscalls answer ENOSYS, a filter loaded as `user`, with no_new_privs).

The last three return an argv of this file run as a script (as root, with the test's interpreter,
which has pyseccomp) that installs the filter (or builds the namespace) and then execs `setpriv` to
set the capabilities or drop to the user, which execs the command. A seccomp filter survives exec
and setuid, so the command and all it starts stay under it. Only root may install a filter without
no_new_privs, hence the order.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import sys
from collections.abc import Sequence
from pathlib import Path

LAUNCHER = Path(__file__).resolve()

# Docker's default capability set (moby's oci/caps/defaults.go), by the names setpriv and
# capabilities(7) use, with their bit numbers for reading /proc/PID/status.
DOCKER_CAPABILITIES = {
    "chown": 0,
    "dac_override": 1,
    "fowner": 3,
    "fsetid": 4,
    "kill": 5,
    "setgid": 6,
    "setuid": 7,
    "setpcap": 8,
    "net_bind_service": 10,
    "net_raw": 13,
    "sys_chroot": 18,
    "mknod": 27,
    "audit_write": 29,
    "setfcap": 31,
}
DOCKER_CAPABILITY_MASK = sum(1 << bit for bit in DOCKER_CAPABILITIES.values())

# Every CLONE_NEW* flag (sched.h): NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. Docker's
# profile allows clone only when (flags & 0x7E020000) == 0, i.e. none of these.
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
assert sum(CLONE_NEW_FLAGS) == 0x7E020000

NAMESPACE_SYSCALLS = ("unshare", "setns", "mount", "umount2", "pivot_root")
MOUNT_SYSCALLS = ("mount", "umount2", "pivot_root")
LANDLOCK_SYSCALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")


def as_root(command: Sequence[str]) -> list[str]:
    """`command` as root, as the tests run (this machine's CI)."""
    return list(command)


def root_without_sys_admin(command: Sequence[str]) -> list[str]:
    """`command` as root without CAP_SYS_ADMIN (bounding set), namespaces otherwise allowed."""
    return ["setpriv", "--bounding-set", "-sys_admin", *command]


def unprivileged(command: Sequence[str], user: pwd.struct_passwd) -> list[str]:
    """`command` as `user`: a TA without root, whose user namespaces may mount."""
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *command]


def docker_default(command: Sequence[str], *, landlock: bool = True) -> list[str]:
    """`command` as root in a container under Docker's default seccomp profile and capabilities;
    `landlock=False`: under a profile older than Landlock, which also denies its syscalls (ENOSYS)."""
    return [sys.executable, str(LAUNCHER), "docker", "landlock" if landlock else "no-landlock", "--", *command]


def userns_without_mount(command: Sequence[str], user: pwd.struct_passwd, *, landlock_abi: int | None = None) -> list[str]:
    """`command` as `user`, whose user namespaces are made but cannot mount (Ubuntu 24.04-style);
    `landlock_abi`: the kit uses Landlock's ABI no higher than this (`with_landlock_abi`)."""
    return [sys.executable, str(LAUNCHER), "userns-without-mount", user.pw_name, "--", *with_landlock_abi(command, landlock_abi)]


def with_landlock_abi(command: Sequence[str], abi: int | None) -> list[str]:
    """`command` with the Landlock ABI the kit uses capped at `abi` (None: the kernel's own):
    1 is Linux 5.13's, 4 Ubuntu 24.04's (6.8), 0 a kernel without Landlock. The cap is the kit's
    own `ATTNKIT_LANDLOCK_ABI_MAX` (sandbox/lockdown/landlock.py), which can only lower what the
    kernel gives: a seccomp filter cannot make landlock_create_ruleset report a lower version."""
    if abi is None:
        return list(command)
    return ["env", f"ATTNKIT_LANDLOCK_ABI_MAX={abi}", *command]


def without_user_namespaces(command: Sequence[str], user: pwd.struct_passwd, *, landlock: bool = True) -> list[str]:
    """`command` as `user` where the kernel gives no user namespace; `landlock=False`: nor Landlock."""
    return [sys.executable, str(LAUNCHER), "no-user-namespaces", user.pw_name, "landlock" if landlock else "no-landlock", "--", *command]


# -- the launcher (runs as root, in the process that becomes the command) ------------------------------
def docker_filter(landlock: bool):  # -> pyseccomp.SyscallFilter
    import pyseccomp as seccomp

    denied = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in NAMESPACE_SYSCALLS:
        rules.add_rule(denied, name)
    for flag in CLONE_NEW_FLAGS:  # one rule per bit: "any bit set" is what a masked compare can say
        rules.add_rule(denied, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    if not landlock:
        for name in LANDLOCK_SYSCALLS:
            rules.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    return rules


def mount_denying_filter():  # -> pyseccomp.SyscallFilter
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in MOUNT_SYSCALLS:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    return rules


def seccomp_attr(name: str):
    import pyseccomp as seccomp

    return getattr(seccomp.Attr, name)


def landlock_denying_filter():  # -> pyseccomp.SyscallFilter
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in LANDLOCK_SYSCALLS:
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
    return rules


def become_user_without_user_namespaces(user: pwd.struct_passwd) -> None:
    """As root: enter a new user namespace (root and `user` mapped to themselves), set its
    `user.max_user_namespaces` to 0 (a limit of this namespace only), and become `user`."""
    clone_newuser = 0x10000000
    libc = ctypes.CDLL(None, use_errno=True)
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    child = os.fork()
    if child == 0:  # writes the parent's maps once it is in its namespace (a process may not map itself)
        os.close(go_write)
        os.read(go_read, 1)
        parent = os.getppid()
        for name, ids in (("uid_map", user.pw_uid), ("gid_map", user.pw_gid)):
            with open(f"/proc/{parent}/{name}", "w") as handle:
                handle.write(f"0 0 1\n{ids} {ids} 1\n")
        os.write(done_write, b"1")
        os._exit(0)
    if libc.unshare(clone_newuser) != 0:
        raise SystemExit(f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}")
    os.write(go_write, b"1")
    os.read(done_read, 1)
    os.waitpid(child, 0)
    with open("/proc/sys/user/max_user_namespaces", "w") as handle:
        handle.write("0")
    os.setgroups([])
    os.setresgid(user.pw_gid, user.pw_gid, user.pw_gid)
    os.setresuid(user.pw_uid, user.pw_uid, user.pw_uid)


def launch(argv: list[str]) -> None:
    """`docker landlock|no-landlock -- CMD...`, `userns-without-mount USER -- CMD...` or
    `no-user-namespaces USER landlock|no-landlock -- CMD...`."""
    if "--" not in argv or argv.index("--") < 2 or argv[-1] == "--":
        raise SystemExit(
            f"usage: {LAUNCHER.name} docker landlock|no-landlock -- CMD... | userns-without-mount USER -- CMD... "
            "| no-user-namespaces USER landlock|no-landlock -- CMD..."
        )
    setting, option, *more = argv[: argv.index("--")]
    command = argv[argv.index("--") + 1 :]
    if setting == "no-user-namespaces":
        rules = landlock_denying_filter() if more == ["no-landlock"] else None  # built as root: its library is root's
        become_user_without_user_namespaces(pwd.getpwnam(option))
        if rules is not None:
            rules.load()  # as the user: with no_new_privs, as an unprivileged process must
        os.execvp(command[0], command)
    if setting == "docker":
        rules = docker_filter(landlock=option == "landlock")
        caps = ",".join(f"+{name}" for name in DOCKER_CAPABILITIES)
        # Root: after exec, permitted = effective = bounding (capabilities(7)), so the bounding
        # set carries Docker's set into the command; inheritable stays empty, as in Docker.
        prefix = ["setpriv", "--inh-caps=-all", f"--bounding-set=-all,{caps}"]
    elif setting == "userns-without-mount":
        rules = mount_denying_filter()
        user = pwd.getpwnam(option)
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--inh-caps=-all", "--bounding-set=-all"]
    else:
        raise SystemExit(f"unknown setting {setting!r}")
    # libseccomp sets no_new_privs before loading unless told not to; Docker leaves it unset, and
    # root may load a filter without it.
    rules.set_attr(seccomp_attr("CTL_NNP"), 0)
    rules.load()
    os.execvp(prefix[0], [*prefix, "--", *command])


if __name__ == "__main__":
    launch(sys.argv[1:])
