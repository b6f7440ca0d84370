"""What isolation a sandbox got, and a class, in words: :func:`level` from a sandbox's list of
what it obtained ("isolated", "unisolated"), :func:`describe` one line for the run summary and
report.html.
"""

from __future__ import annotations

from attnkit.i18n import _, ngettext
from attnkit.records import ResultsJson


def level(items: list[str]) -> str:
    """ "isolated", "unisolated", or "" (nothing ran): from a sandbox's list of what it obtained.
    Isolated means a layer held: namespaces with the allowlisted root, or Landlock's allowlist,
    or (root, no Landlock) a pool uid whose probe found nothing hidden in its reach; each of the
    last two with the seccomp filter installed and no capability left. A sandbox of kind "none"
    (``--no-isolation``) is unisolated whatever it still obtained: no layer was to be had."""
    if "unisolated" in items:
        return "unisolated"
    held = "no-capabilities" in items and (
        "allowlisted-root" in items or ("seccomp-filter" in items and ("landlock-files" in items or ("uid-pool" in items and "probe-passed" in items)))
    )
    if held:
        return "isolated"
    return "unisolated" if items else ""


def describe(all_items: list[list[str]]) -> str:
    """One line for the run summary and report.html: the isolation the class actually got."""
    levels = {level(items) for items in all_items} - {""}
    if not levels:
        return _("没有运行任何学生代码")
    if levels != {"isolated"}:
        unisolated = [items for items in all_items if level(items) == "unisolated"]
        return _describe_unisolated(len(unisolated), {item for items in unisolated for item in items})
    union = {item for items in all_items for item in items}
    if "allowlisted-root" not in union:
        return _describe_without_namespaces(union)
    user = _("映射为主机上的 nobody") if "uid-nobody" in union else _("映射为评分者自己的 uid（无 root 时内核只允许这一种映射）")
    memory = _("cgroup 限制整份提交的内存与进程数") if "cgroup-memory-and-pids" in union else _("单进程、按进程限制地址空间（无法使用 cgroup）")
    text = _("已隔离：用户、挂载、PID、网络、IPC 命名空间；只读白名单根目录；沙箱用户 {user}，无任何特权；{memory}").format(user=user, memory=memory)
    return text if "no-proc" not in union else text + _("；没有 /proc（内核不允许在此挂载）")


def _describe_unisolated(count: int, union: set[str]) -> str:
    """--no-isolation where no layer was to be had: what the notebooks still could not reach."""
    user = _("主机上独占的沙箱 uid") if "uid-pool" in union else _("主机上的 nobody") if "uid-nobody" in union else _("评分者自己的 uid")
    abi = next((item.rsplit("-", 1)[1] for item in union if item.startswith("landlock-abi-")), "")
    if abi and "landlock-files" in union:
        return ngettext(
            "未隔离（{count} 份提交，--no-isolation 或自查模式）：没有可用的隔离层，但仍有 Landlock（ABI {abi}）只允许读取白名单目录、"
            "只写私有工作目录，看不到课程、答案、其他提交与输出；seccomp 过滤器；沙箱用户为{user}",
            "未隔离（{count} 份提交，--no-isolation 或自查模式）：没有可用的隔离层，但仍有 Landlock（ABI {abi}）只允许读取白名单目录、"
            "只写私有工作目录，看不到课程、答案、其他提交与输出；seccomp 过滤器；沙箱用户为{user}",
            count,
        ).format(count=count, abi=abi, user=user)
    if "seccomp-filter" in union:
        return ngettext(
            "未隔离（{count} 份提交，--no-isolation 或自查模式）：没有 Landlock，学生代码以{user}的权限看到本机，"
            "能读写该用户能读写的一切；只有 seccomp 过滤器与资源限制",
            "未隔离（{count} 份提交，--no-isolation 或自查模式）：没有 Landlock，学生代码以{user}的权限看到本机，"
            "能读写该用户能读写的一切；只有 seccomp 过滤器与资源限制",
            count,
        ).format(count=count, user=user)
    return ngettext(
        "未隔离（{count} 份提交）：学生代码以评分者对本机的视图运行，只有资源限制（--no-isolation 或自查模式）",
        "未隔离（{count} 份提交）：学生代码以评分者对本机的视图运行，只有资源限制（--no-isolation 或自查模式）",
        count,
    ).format(count=count)


def _describe_without_namespaces(union: set[str]) -> str:
    abi = next((item.rsplit("-", 1)[1] for item in union if item.startswith("landlock-abi-")), "")
    user = _("主机上独占的沙箱 uid") if "uid-pool" in union else _("评分者自己的 uid")
    if abi:
        extras = "".join(
            text for item, text in (("landlock-no-tcp", _("，禁止 TCP")), ("landlock-scoped", _("，信号与抽象 unix 套接字限于沙箱内"))) if item in union
        )
        return _(
            "已隔离（无命名空间）：Landlock（ABI {abi}）只允许读取白名单目录、只写私有工作目录{extras}；"
            "seccomp 过滤器禁止新建套接字、ptrace、挂载与命名空间；沙箱用户为{user}，无任何特权"
        ).format(abi=abi, extras=extras, user=user)
    return _(
        "已隔离（无命名空间，无 Landlock）：沙箱用户为{user}，探测进程确认它读写不到课程、答案、提交与输出；"
        "seccomp 过滤器禁止新建套接字、ptrace、挂载与命名空间；无任何特权"
    ).format(user=user)


def class_line(all_results: list[ResultsJson]) -> str:
    """The class's sandboxes in one line (report.html's, and the console's after the table)."""
    return describe([r.get("sandbox", {}).get("isolation", []) for r in all_results])
