"""Run a command in the settings where courses grade, faithfully enough to test the sandbox there.

- `docker_default(command)`: root inside a container under Docker's default seccomp profile and
  capability set. The profile's rules that matter to a sandbox are applied with libseccomp
  (pyseccomp over the machine's libseccomp2): unshare, setns, mount, umount2 and pivot_root fail
  with EPERM, clone fails with EPERM when its flags hold any CLONE_NEW* bit, clone3 fails with
  ENOSYS (so libc falls back to clone, whose flags a filter can see). Docker grants these only with
  CAP_SYS_ADMIN, which its default set lacks. `landlock=False` also denies Landlock's three
  syscalls, as Docker 20.10's profile does (it predates them; Docker >= 23 allows them).
  The capability set is Docker's default, in the bounding, permitted, effective and inheritable
  sets alike; no_new_privs is left unset, as Docker leaves it.
- `userns_without_mount(command, user)`: an unprivileged user on a host that lets a user namespace
  be created but denies mount and pivot_root inside it, as Ubuntu 24.04's
  `kernel.apparmor_restrict_unprivileged_userns=1` does to unconfined programs. A seccomp filter
  denying mount, umount2 and pivot_root with EPERM stands in for AppArmor: the namespace is made,
  the mounts fail with the same errno.

Both return an argv: this file run as a script (as root, with the test's interpreter, which has
pyseccomp) that installs the filter and then execs `setpriv` to set the capabilities or drop to the
user, which execs the command. A seccomp filter survives exec and setuid, so the command and all it
starts stay under it. Only root may install a filter without no_new_privs, hence the order.
"""

from __future__ import annotations

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
    "chown": 0, "dac_override": 1, "fowner": 3, "fsetid": 4, "kill": 5, "setgid": 6, "setuid": 7,
    "setpcap": 8, "net_bind_service": 10, "net_raw": 13, "sys_chroot": 18, "mknod": 27,
    "audit_write": 29, "setfcap": 31,
}
DOCKER_CAPABILITY_MASK = sum(1 << bit for bit in DOCKER_CAPABILITIES.values())

# Every CLONE_NEW* flag (sched.h): NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. Docker's
# profile allows clone only when (flags & 0x7E020000) == 0, i.e. none of these.
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
assert sum(CLONE_NEW_FLAGS) == 0x7E020000

NAMESPACE_SYSCALLS = ("unshare", "setns", "mount", "umount2", "pivot_root")
MOUNT_SYSCALLS = ("mount", "umount2", "pivot_root")
LANDLOCK_SYSCALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")


def docker_default(command: Sequence[str], *, landlock: bool = True) -> list[str]:
    """`command` as root in a container under Docker's default seccomp profile and capabilities;
    `landlock=False`: under Docker 20.10's profile, which also denies Landlock (ENOSYS)."""
    return [sys.executable, str(LAUNCHER), "docker", "landlock" if landlock else "no-landlock", "--", *command]


def userns_without_mount(command: Sequence[str], user: pwd.struct_passwd) -> list[str]:
    """`command` as `user`, whose user namespaces are made but cannot mount (Ubuntu 24.04-style)."""
    return [sys.executable, str(LAUNCHER), "userns-without-mount", user.pw_name, "--", *command]


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


def launch(argv: list[str]) -> None:
    """`docker landlock|no-landlock -- CMD...` or `userns-without-mount USER -- CMD...`."""
    setting, option, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit(f"usage: {LAUNCHER.name} docker landlock|no-landlock -- CMD... | userns-without-mount USER -- CMD...")
    if setting == "docker":
        rules = docker_filter(landlock=option == "landlock")
        caps = ",".join(f"+{name}" for name in DOCKER_CAPABILITIES)
        # Root: after exec, permitted = effective = bounding (capabilities(7)), so the bounding
        # and inheritable sets carry Docker's set into the command.
        prefix = ["setpriv", f"--inh-caps=-all,{caps}", f"--bounding-set=-all,{caps}"]
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
