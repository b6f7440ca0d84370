"""Run a command the way a restricted platform would: ``python tests/confine.py SETTING UID GID -- COMMAND...``.

Settings (each a seccomp filter installed here, as root, then the command exec'd):
- ``docker``: Docker's default profile as it bears on the sandbox: unshare, setns, mount, umount2,
  pivot_root and clone with any CLONE_NEW* flag -> EPERM, clone3 -> ENOSYS; and Docker's default
  capability set (the bounding set, so the exec'd command as root holds only those). UID 0.
- ``docker-20.10``: the same, and landlock_* -> ENOSYS (Docker 20.10's profile predates them).
- ``ubuntu``: a user namespace may be made, but nothing mounted in it (mount, umount2, pivot_root
  -> EPERM, as Ubuntu 24.04's AppArmor restriction of unconfined programs does); run as UID/GID.
The filter is inherited by every process the command starts and cannot be removed.
"""

from __future__ import annotations

import errno
import os
import sys

import pyseccomp

CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
DOCKER_CAPABILITIES = ("chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw", "setgid", "setuid", "setfcap",
                       "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write")
SETTINGS = ("docker", "docker-20.10", "ubuntu")


def install(setting: str) -> None:
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    rules.set_attr(pyseccomp.Attr.CTL_NNP, 0)  # Docker does not set no_new_privs; we are root here
    deny = ["mount", "umount2", "pivot_root"]
    if setting.startswith("docker"):
        deny += ["unshare", "setns"]
        for flag in CLONE_NEW_FLAGS:
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
        rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    if setting == "docker-20.10":
        for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
            rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
    for name in deny:
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    rules.load()


def main(argv: list[str]) -> None:
    setting, uid, gid = argv[1], int(argv[2]), int(argv[3])
    command = argv[argv.index("--") + 1:]
    if setting not in SETTINGS:
        raise SystemExit(f"unknown setting {setting}")
    install(setting)
    if setting.startswith("docker"):
        bounding = "-all," + ",".join(f"+{cap}" for cap in DOCKER_CAPABILITIES)
        os.execvp("setpriv", ["setpriv", f"--bounding-set={bounding}", "--", *command])
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
