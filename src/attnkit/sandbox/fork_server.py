"""The zygote's fork server: one locked-down sandbox per request, forked from a warm process.

:func:`serve_forever` warms the shell (``attnkit.sandbox.warm_shell``) and the assignment's code once, builds
the sandboxes' allowlisted root (``attnkit.sandbox.lockdown.zygote_namespace``), then answers each request (one end of a
fresh socketpair and the sandbox settings) with the pid of a sandbox forked for it
(:func:`_spawn`): in its control group, its user mapped, locked down (``attnkit.sandbox.lockdown.sequence``), then
serving (``attnkit.sandbox.server``). It also keeps the plan a worker hands it (``hold_plan``)
and removes what an unisolated sandbox left in its folder.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import socket
import tempfile
from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from attnkit import cpu_account, i18n
from attnkit.sandbox.lockdown import seccomp as seccomp_filter
from attnkit.sandbox.lockdown import without_namespaces
from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.sandbox.warm_shell import warm_shell, warm_up
from attnkit.sandbox.lockdown.cgroup import Cgroup, sweep_stale
from attnkit.i18n import _
from attnkit.sandbox.lockdown.zygote_namespace import SANDBOX_HOME, STAGE, IsolationError, Mode, build_root, detach_stage, enter_own_network
from attnkit.sandbox.lockdown.namespace_steps import clone_sandbox, die_with_parent, map_sandbox_user
from attnkit.sandbox.lockdown.sequence import SandboxContext, home_environment, lock_down, our_modules
from attnkit.boundary.policy import DEFAULT_MAX_PROCESSES, cgroup_memory_bytes
from attnkit.sandbox.server import Sandbox, hold_plan

_libc = ctypes.CDLL(None, use_errno=True)  # madvise
# This zygote's layer without namespaces, once chosen (_isolate): its read-only trees, its uid block.
# Per zygote process (its sandboxes inherit it): state, chosen once, not a cache of anything.
_LAYER: list[without_namespaces.Layer | None] = [None]


def start_sandbox(channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell, mode: Mode, placed: int) -> None:
    """In the zygote's fresh child: wait until the zygote has mapped our user and placed us in our
    control group (one byte on ``placed``: "1" if capped), lock down, serve, and never return."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    byte = os.read(placed, 1)
    os.close(placed)
    sandbox = Sandbox(channel, settings, shell)
    try:
        if byte not in (b"0", b"1"):
            raise IsolationError(0, "the zygote could not set up this sandbox")
        sandbox.isolation = lock_down(SandboxContext(mode, byte == b"1", channel.fileno(), settings, sandbox.output))
        sandbox.serve()
    except BaseException as error:  # report set-up failures, then die quietly
        try:
            wire.send(channel, {"ready": False, "error": f"{type(error).__name__}: {error}"})
        except BaseException:
            pass
    finally:
        os._exit(0)


class Sandboxes:
    """The zygote's live sandboxes and their control groups, removed once each is reaped."""

    def __init__(self, can_make_cgroups: bool) -> None:
        self.groups: dict[int, Cgroup | None] = {}
        self.workdirs: dict[int, str] = {}  # unisolated sandboxes' folders (isolated: a tmpfs)
        self.spawned = 0  # sandboxes forked so far (each takes the next uid of a pool block)
        self.count = 0
        self.spawned = 0  # sandboxes forked so far (each takes the next uid of a pool block)
        self.can_make_cgroups = can_make_cgroups

    def new_group(self, settings: dict[str, Any]) -> Cgroup | None:
        """A control group for the next sandbox: the whole submission's memory and processes."""
        if not self.can_make_cgroups:
            return None
        self.count += 1
        try:
            # What the submission allocates, all its processes together. Pages it shares with the
            # zygote are charged to the zygote; the few it copies on write (~40 MB for the whole
            # chapter notebook) count here.
            return Cgroup(f"attnkit-{os.getpid()}-{self.count}", cgroup_memory_bytes(settings), DEFAULT_MAX_PROCESSES)
        except OSError:
            return None

    def started(self, pid: int, group: Cgroup | None) -> bool:
        """Put the new sandbox in its group; whether it is capped."""
        if group is not None:
            try:
                group.add(pid)
            except OSError:  # the sandbox runs on its rlimits alone; its group is removed
                group.remove()
                group = None
        self.groups[pid] = group
        return group is not None

    def reap(self, block: bool = False) -> None:
        while self.groups:
            try:
                pid, _status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            group = self.groups.pop(pid, None)
            if group is not None:
                group.remove()
            if pid in self.workdirs:
                remove_folder(self.workdirs.pop(pid))

    def end_all(self) -> None:
        for pid in list(self.groups):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap(block=True)


def remove_folder(path: str) -> None:
    """Remove an unisolated sandbox's folder once the sandbox is gone, with whatever its code left
    there: folders it made unreadable included (itself too), never following a link out of it."""
    _remove_tree(path, None, MAX_FOLDER_DEPTH)


MAX_FOLDER_DEPTH = 64


def _remove_tree(name: str, parent: int | None, depth: int) -> None:
    """Folder ``name`` (a path, or a name in the folder open as ``parent``) and what it holds,
    ``depth`` levels down: each folder made accessible first; a link is removed, never followed."""
    try:
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
    except (OSError, ValueError, NotImplementedError):
        pass  # a link where a folder was (Python refuses to chmod one in place): the open refuses it
    try:
        folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return
    try:
        for entry in os.scandir(folder):
            try:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=folder)
                elif depth > 0:
                    _remove_tree(entry.name, folder, depth - 1)
            except OSError:
                continue
    finally:
        os.close(folder)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass


MADV_COLLAPSE = 25  # Linux 6.1+
HUGE_PAGE = 2 << 20
# How long a zygote forked from the seed waits without a request before it collapses its heap
# (``serve_forever``): longer than any pause between a worker's submissions in a graded class.
COLLAPSE_IDLE_SECONDS = 10.0
# How much one madvise collapses; an idle zygote looks at its control socket between two, so a
# request that comes meanwhile waits for one step at most (a few ms; ~0.2 s where fresh memory is
# slow to come).
COLLAPSE_STEP = 8 * HUGE_PAGE


def collapse_into_huge_pages(interrupted: Callable[[], bool] | None = None) -> bool:
    """Back the zygote's large private heaps (torch's import alone leaves ~140 MB of them) with
    2 MiB pages, where the kernel can: a fork then copies one page-table entry per 2 MiB instead
    of 512, and a sandbox's exit tears down as few. Pages a sandbox writes are still copied 4 KiB
    at a time. Only what exists now is collapsed (no MADV_HUGEPAGE): a sandbox's own new memory
    stays in small pages. An older kernel (EINVAL) or a machine without huge pages just leaves
    everything as it was. It goes ``COLLAPSE_STEP`` at a time; ``interrupted`` is asked before each (a zygote
    collapsing while idle: has a request come?); when it says so, collapsing stops there and
    False is returned, and a later call goes on where this one stopped (what is whole already
    costs the kernel a glance). True once every region was gone through."""
    try:
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
    except OSError:
        return True
    for fields in regions:
        start, end = (int(value, 16) for value in fields[0].split("-"))
        anonymous = len(fields) < 6 or fields[5] == "[heap]"
        if fields[1] != "rw-p" or not anonymous:
            continue
        low, high = -(-start // HUGE_PAGE) * HUGE_PAGE, end // HUGE_PAGE * HUGE_PAGE
        if high - low < 2 * HUGE_PAGE:
            continue
        for at in range(low, high, COLLAPSE_STEP):
            if interrupted is not None and interrupted():
                return False
            _libc.madvise(ctypes.c_void_p(at), ctypes.c_size_t(min(COLLAPSE_STEP, high - at)), MADV_COLLAPSE)
    return True


def _address_space() -> int:
    """This process's virtual size: a sandbox's memory limit comes on top of what it inherits."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _isolate(mode: Mode, hide: list[str]) -> Mode:
    """Build the sandboxes' root once (its folders in ``visible``); a zygote that cannot is not
    isolated, and says why. Without namespaces: the layer that needs none, where the OS has it.
    In every layer the seccomp filters are built here once; each sandbox only loads them."""
    try:
        seccomp_filter.compiled()
    except OSError:
        pass  # no libseccomp here: a sandbox of a layer that needs the filters does not start, and says why
    if not mode.isolated:
        mode, _LAYER[0] = without_namespaces.choose(mode, hide)
        return mode
    if not mode.namespaced:
        return mode
    device = os.stat(STAGE).st_dev
    try:
        mode.visible = build_root(hide)
        return enter_own_network(mode)
    except OSError as error:
        # Half built: what was mounted on the stage goes (it covers this namespace's /tmp, where
        # the fallback's work folders are made), then the layer without namespaces, as above.
        detach_stage(device)
        mode, _LAYER[0] = without_namespaces.choose(Mode("none", f"could not build the sandbox's root: {error}"), hide)
        return mode


def _spawn(mode: Mode, sandboxes: Sandboxes, channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell, control: socket.socket) -> int:
    """Fork one sandbox; its pid once it is mapped and placed (nothing of the student's has run)."""
    group = sandboxes.new_group(settings)
    # Unisolated, a folder of the host's /tmp: made here, so that it is removed once reaped;
    # chrooted (root without Landlock), a folder of the root's own work folder, the one it sees.
    chroot = _LAYER[0].chroot if _LAYER[0] is not None else None
    workdir = settings["workdir"] = None if mode.namespaced else tempfile.mkdtemp(prefix="sandbox-", dir=chroot.work if chroot else None)
    if chroot is not None:
        settings["chroot"] = chroot.path
    uid = _LAYER[0].uid(sandboxes.spawned) if _LAYER[0] is not None else None
    if uid is not None:  # as root without namespaces: this sandbox's uid, of the zygote's own block (or nobody)
        settings["sandbox_uid"] = uid
    sandboxes.spawned += 1
    our_modules()  # listed here, before the fork (the sandbox only reads the list)
    placed_read, placed_write = os.pipe()
    try:
        pid = clone_sandbox(mode.own_network) if mode.namespaced else os.fork()
    except OSError:
        os.close(placed_read)
        os.close(placed_write)
        if group is not None:
            group.remove()
        if workdir is not None:
            remove_folder(workdir)
        raise
    if pid == 0:
        control.close()
        os.close(placed_write)
        start_sandbox(channel, settings, shell, mode, placed_read)
    os.close(placed_read)
    if workdir is not None:
        sandboxes.workdirs[pid] = workdir
    ready = b"0"
    try:
        if mode.namespaced:
            map_sandbox_user(pid, mode)
        # No code of the student's runs before this byte: the sandbox is inside its group first.
        ready = b"1" if sandboxes.started(pid, group) else b"0"
    except OSError:
        ready = b"x"  # the sandbox reports that it could not be set up, and exits
        sandboxes.started(pid, group)
    os.write(placed_write, ready)
    os.close(placed_write)
    return pid


def serve_forever(control: socket.socket, config: dict[str, Any], mode: Mode, shell: InteractiveShell | None = None) -> None:
    """The zygote loop: one request per sandbox, one reply with its pid. ``shell``: the seed's
    (``warm_shell``), else made here."""
    die_with_parent()
    cpu_account.hold()
    try:  # it and every sandbox keep to its worker's CPUs
        os.sched_setaffinity(0, [int(cpu) for cpu in config.get("cpus") or []] or os.sched_getaffinity(0))
    except (OSError, ValueError, TypeError):
        pass
    started_alone = shell is None
    if shell is None:
        shell = warm_shell()
    # Run the kind of code every submission runs once here (the assignments' warm_up hooks and,
    # with their stand-ins for the student's functions, the release notebooks' own examples), so
    # each sandbox inherits warm caches (torch's op dispatch, IPython's compiler) instead of
    # paying for them again; then every sandbox starts from an empty namespace.
    warm_up(shell, str(config.get("warm_up", "")), [str(cell) for cell in config.get("warm_up_cells") or []])
    # The release notebooks' cells (public: the students' own starting point), compiled once here.
    for source in config.get("cells", []):
        shell.prepare_cell(str(source))  # type: ignore[attr-defined]  # added by attnkit.sandbox.warm_shell (fast path)
    # The grader's language, its catalogue compiled now: the project's files are out of view after
    # _isolate, and every sandbox forked from here inherits it in memory.
    i18n.set_language(config.get("lang"), export=False)
    i18n.catalogue(i18n.LOCALE_DIR, i18n.DOMAIN)
    # Nothing allocated so far is garbage a sandbox must ever collect: out of the collector's view,
    # a sandbox's collections no longer walk (and so copy on write) the zygote's whole heap.
    gc.collect()
    gc.freeze()
    gc.enable()  # student code may rely on it
    # A zygote started on its own collapses its heap here. One forked from the seed has split
    # most of the seed's 2 MiB pages by running at all (its refcounts are everywhere); collapsing
    # them again costs ~0.9 s of CPU and saves ~0.5 ms per sandbox after (the page tables a fork
    # copies): it pays after ~1,800 sandboxes, and a class of 1,000 gives each of two zygotes 500.
    # So it waits until its zygote is idle (``collapse_idle_seconds`` without a request: a
    # service between submissions, never a class being graded), when it costs nobody anything.
    huge_pages = os.environ.get("ATTNKIT_HUGE_PAGES", "1") != "0"
    if started_alone and huge_pages:
        collapse_into_huge_pages()
    collapse_when_idle = huge_pages and not started_alone
    idle_seconds = float(config.get("collapse_idle_seconds", COLLAPSE_IDLE_SECONDS))
    # The hidden folders (the course, the class, OUT) are needed only to build the sandboxes' view:
    # out of the configuration once it is built, so that no sandbox finds them in this frame's
    # locals, which every sandbox inherits (the zygote's own code still names where attnkit lies).
    mode = _isolate(mode, [str(p) for p in config.pop("hide", None) or []])
    if mode.namespaced:
        # Every isolated sandbox's home is the same folder of its own root: set once here (a
        # sandbox setting them itself touches ~160 pages it would then have to copy).
        os.environ.update(home_environment(SANDBOX_HOME))
    sandboxes = Sandboxes(mode.can_make_cgroups)
    if mode.can_make_cgroups:
        sweep_stale()
    address_space = _address_space()
    start_up_children = cpu_account.children_before()  # its lock-down's probes: the zygote's, not a sandbox's
    wire.send(
        control,
        {
            "zygote": "ready",
            "pid": os.getpid(),
            "isolation": {"kind": mode.kind, "why": mode.why, "sandbox_user": mode.sandbox_host_uid, "visible": mode.visible, "exposed": mode.exposed},
        },
    )
    while True:
        if collapse_when_idle and not select.select([control], [], [], idle_seconds)[0]:
            # Step by step, stopping for a request (a submission in a service): it is served
            # first, and the collapse goes on at the next idle moment.
            collapse_when_idle = not collapse_into_huge_pages(lambda: bool(select.select([control], [], [], 0)[0]))
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            message, fds = b"", []
        if not message:
            # The grader is done. Nothing here needs flushing, and an orderly interpreter exit
            # (torch, IPython, matplotlib) costs about half a second per worker.
            sandboxes.end_all()
            cpu_account.own("zygote", "sandbox", start_up_children)
            os._exit(0)
        sandboxes.reap()
        settings = json.loads(message)
        settings["address_space_base"] = address_space
        if operations.holds_plan(settings):
            if fds:
                try:
                    hold_plan(str(settings[operations.PLAN]), fds[0])
                except (OSError, ValueError):
                    pass  # sandboxes then just get the whole batch
            continue
        if not fds:
            continue
        channel = socket.socket(fileno=fds[0])
        try:
            pid = _spawn(mode, sandboxes, channel, settings, shell, control)
        except OSError as error:  # never a weaker sandbox instead: the grader is told why
            wire.send(control, {"pid": None, "error": _("无法启动沙箱：{error}").format(error=error)})
            continue
        finally:
            channel.close()
        wire.send(control, {"pid": pid})
