"""Why the OS refused the sandbox's namespaces, and what works there: the text of a refusal.

A refusal that says "run as root, or set a sysctl" is wrong in the places graders run: a
container is often root already, and a sysctl does not apply inside it; what refuses there is
the container's seccomp profile. On Ubuntu 24.04 an AppArmor rule lets an unconfined program
create a user namespace but not mount in it. :func:`detect` tells these apart from what the
process can see of itself; :func:`advice` names what works in each.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from attnkit.i18n import _

APPARMOR_USERNS_SYSCTL = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECCOMP_PROFILE = EXAMPLES / "seccomp" / "attnkit-docker.json"
APPARMOR_PROFILE = EXAMPLES / "apparmor" / "attnkit-python"
# /proc/1/cgroup lines that only a container's processes have.
_CONTAINER_CGROUPS = (("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker"), ("containerd", "containerd"), ("lxc", "lxc"))


@dataclass(frozen=True)
class Confinement:
    """What confines this process, as far as it can see."""

    container: str  # "" (none seen), "docker", "podman", "kubernetes", ...
    seccomp_filtered: bool  # "Seccomp: 2" in /proc/self/status: a filter is installed
    userns_restricted: bool  # AppArmor-style: a user namespace, but no mount inside it
    root: bool


def _seccomp_mode(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("Seccomp:"):
            return int(line.split()[1])
    return 0


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def container_kind(root: str = "/", environ: dict[str, str] | None = None, cgroup: str | None = None) -> str:
    """The container this process runs in, from the markers runtimes leave ("" if none)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if os.path.exists(os.path.join(root, "run/.containerenv")):
        return "podman"
    if os.path.exists(os.path.join(root, ".dockerenv")):
        return "docker"
    if environ.get("container"):  # systemd's convention, set by podman, lxc, systemd-nspawn
        return environ["container"]
    text = _read("/proc/1/cgroup") if cgroup is None else cgroup
    for marker, kind in _CONTAINER_CGROUPS:
        if marker in text:
            return kind
    return ""


def detect(
    why: str, status: str | None = None, apparmor_sysctl: str | None = None, root: str = "/", environ: dict[str, str] | None = None, cgroup: str | None = None
) -> Confinement:
    """From ``why`` (the refusal ``isolation.enter_private_namespace`` recorded) and what the
    process sees; the other arguments stand in for the files, for tests of each setting."""
    status = _read("/proc/self/status") if status is None else status
    apparmor = _read(APPARMOR_USERNS_SYSCTL).strip() if apparmor_sysctl is None else apparmor_sysctl
    restricted = apparmor == "1" or "mount inside the user namespace" in why
    return Confinement(
        container=container_kind(root, environ, cgroup),
        seccomp_filtered=_seccomp_mode(status) == 2,
        userns_restricted=restricted,
        root=os.geteuid() == 0,
    )


def cause(found: Confinement) -> str:
    """One phrase: what refused the namespaces."""
    if found.userns_restricted and not found.container:
        return _("本机的 AppArmor 限制了非特权用户命名空间（kernel.apparmor_restrict_unprivileged_userns=1）：可以创建用户命名空间，但不能在其中挂载")
    if found.container and found.seccomp_filtered:
        return _("评分程序运行在 {container} 容器中，容器的 seccomp 配置拒绝了创建命名空间所需的系统调用（unshare、mount、pivot_root）").format(
            container=found.container
        )
    if found.container:
        return _("评分程序运行在 {container} 容器中，容器没有给它创建命名空间的权限").format(container=found.container)
    return _("本机不允许非特权用户命名空间")


def advice(found: Confinement, python: str | None = None) -> str:
    """What works in this setting. Never a sysctl inside a container: it is not the container's to set."""
    python = os.path.realpath(python or sys.executable)
    trusted = _("或者，仅对你信任的笔记本，加上 --no-isolation")
    if found.container:
        return _(
            "用随附的 seccomp 配置启动容器（docker run --security-opt seccomp={profile} …）；"
            "在 Kubernetes 中把它放到节点的 kubelet seccomp 目录，并设置 securityContext.seccompProfile: "
            "{{type: Localhost, localhostProfile: attnkit-docker.json}}；或使用允许 Landlock 的容器运行时"
            "（Docker ≥ 23、podman），沙箱便改用 Landlock；{trusted}"
        ).format(profile=SECCOMP_PROFILE, trusted=trusted)
    if found.userns_restricted and not found.container:
        return _(
            "为本虚拟环境的解释器 {python} 安装随附的 AppArmor 配置"
            "（sudo sed 's#@PYTHON@#{python}#' {profile} > /etc/apparmor.d/attnkit-python && "
            "sudo apparmor_parser -r /etc/apparmor.d/attnkit-python）；或者用 sudo 运行评分；{trusted}"
        ).format(python=python, profile=APPARMOR_PROFILE, trusted=trusted)
    return _(
        "请以 root 运行评分，或允许非特权用户命名空间（Debian：sysctl kernel.unprivileged_userns_clone=1；各处：user.max_user_namespaces > 0）；{trusted}"
    ).format(trusted=trusted)


def refusal(why: str) -> str:
    """The whole refusal: the kernel's words, the cause in ours, what works."""
    found = detect(why)
    return _("本机无法建立隔离的沙箱：{cause}（{why}）；{advice}").format(cause=cause(found), why=why or _("原因不明"), advice=advice(found))


def exposure_refusal(exposed: list[dict], shown: int = 20) -> str:
    """As root without Landlock: the probe under the sandbox's uid reached hidden paths. Each one
    named, with the command that closes it (the first ``shown``; the count of the rest)."""
    lines = [
        _("{path}（可{access}）：{fix}").format(path=item.get("path", "?"), access=item.get("access", ""), fix=item.get("fix", "")) for item in exposed[:shown]
    ]
    more = len(exposed) - shown
    if more > 0:
        lines.append(_("……还有 {count} 处").format(count=more))
    return _(
        "本机无法建立隔离的沙箱：内核不提供 Landlock，沙箱只能以独占的 uid 运行，而该 uid 能读写以下隐藏的路径"
        "（课程、答案、提交、输出或成绩册）。请先执行这些命令，再重新评分：\n{lines}"
    ).format(lines="\n".join(lines))
