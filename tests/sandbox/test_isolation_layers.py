"""The sandbox layer that needs no namespaces: Landlock and the seccomp filter, each tried for
real in a forked child (the restriction is for life, so never in the test process itself)."""

from __future__ import annotations

import errno
import functools
import io
import json
import os
import pwd
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnkit.sandbox.lockdown import landlock
from attnkit.boundary import policy
from attnkit.sandbox.lockdown import seccomp as seccomp_filter
from settings import docker_default, userns_without_mount
from test_isolation import assert_lazy_imports


LANDLOCK = landlock.abi_version()
needs_landlock = pytest.mark.skipif(LANDLOCK < 1, reason="this kernel has no Landlock")


def in_child(body: Callable[[], dict]) -> dict:
    """Run ``body`` in a forked child and return the dict it returned (or its exception's text)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            answer = body()
        except BaseException as error:  # the child reports whatever happened
            answer = {"raised": f"{type(error).__name__}: {error}"}
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def attempt(action: Callable[[], object]) -> str:
    """ "ok", or the errno name the action failed with."""
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return "ok"


def fork_and_reap() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def read(path: Path) -> Callable[[], bytes]:
    return lambda: path.read_bytes()


@pytest.fixture()
def course(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("mine")
    secret = tmp_path / "solutions.py"
    secret.write_text("def scaled_attention(): ...")
    return {"work": work, "secret": secret}


def allow_python(work: Path) -> landlock.Allowlist:
    from attnkit.sandbox.lockdown.zygote_namespace import allowlist

    return landlock.Allowlist(read_only=tuple(allowlist([str(work.parent)])), read_write=(str(work),))


@needs_landlock
def test_landlock_keeps_a_child_to_its_allowlist(course: dict[str, Path]) -> None:
    work, secret = course["work"], course["secret"]

    def body() -> dict:
        obtained = landlock.restrict_self(allow_python(work))
        return {
            "obtained": obtained,
            "secret": attempt(read(secret)),
            "overwrite secret": attempt(lambda: secret.write_text("x")),
            "mine": attempt(read(work / "mine.txt")),
            "new file": attempt(lambda: (work / "new.txt").write_text("new")),
            "etc": attempt(read(Path("/etc/passwd"))),
            "devnull": attempt(lambda: open("/dev/null", "w").write("x")),
            "import": attempt(lambda: __import__("json.tool")),
        }

    result = in_child(body)
    assert f"landlock-abi-{LANDLOCK}" in result["obtained"], result
    assert result["secret"] == "EACCES" and result["overwrite secret"] == "EACCES"
    assert result["etc"] == "EACCES"
    assert result["mine"] == "ok" and result["new file"] == "ok" and result["devnull"] == "ok"
    assert result["import"] == "ok"  # the Python trees stay readable
    assert secret.read_text().startswith("def"), "the restricted child changed a file outside"


@pytest.mark.skipif(LANDLOCK < 4, reason="TCP rules need Landlock ABI 4")
def test_landlock_denies_tcp_connect_and_bind(course: dict[str, Path]) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def body() -> dict:
        landlock.restrict_self(allow_python(course["work"]))
        return {
            "connect": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2)),
            "bind": attempt(lambda: socket.create_server(("127.0.0.1", 0))),
        }

    try:
        result = in_child(body)
    finally:
        listener.close()
    assert result == {"connect": "EACCES", "bind": "EACCES"}


@pytest.mark.skipif(LANDLOCK < 6, reason="signal scoping needs Landlock ABI 6")
def test_landlock_scopes_signals_to_the_sandbox(course: dict[str, Path]) -> None:
    bystander = os.fork()
    if bystander == 0:
        time.sleep(30)
        os._exit(0)
    try:

        def body() -> dict:
            before = attempt(lambda: os.kill(bystander, 0))
            landlock.restrict_self(allow_python(course["work"]))
            return {"before": before, "after": attempt(lambda: os.kill(bystander, signal.SIGKILL))}

        result = in_child(body)
        assert result == {"before": "ok", "after": "EPERM"}
        assert os.waitpid(bystander, os.WNOHANG) == (0, 0), "the restricted child killed a process outside"
    finally:
        os.kill(bystander, signal.SIGKILL)
        os.waitpid(bystander, 0)


def test_landlock_absent_is_an_error_not_a_silent_pass(course: dict[str, Path]) -> None:
    with pytest.raises(landlock.LandlockError):
        landlock.restrict_self(allow_python(course["work"]), abi=0)


def test_seccomp_filter_closes_sockets_namespaces_and_clone3() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sys_clone3 = 435  # the same number on every architecture

    def body() -> dict:
        obtained = seccomp_filter.install()
        clone3 = libc.syscall(ctypes.c_long(sys_clone3), None, ctypes.c_size_t(0))
        clone3_errno = ctypes.get_errno()
        unshare = libc.unshare(0x10000000)  # CLONE_NEWUSER
        unshare_errno = ctypes.get_errno()
        child = attempt(fork_and_reap)
        return {
            "obtained": obtained,
            "socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
            "unix": attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
            "socketpair": attempt(socket.socketpair),
            "unshare": (unshare, errno.errorcode[unshare_errno]),
            "clone3": (clone3, errno.errorcode[clone3_errno]),
            "fork still works": child,
        }

    result = in_child(body)
    assert result["obtained"] == ["seccomp-filter"]
    assert result["socket"] == result["unix"] == result["socketpair"] == "EPERM"
    assert result["unshare"] == [-1, "EPERM"]
    assert result["clone3"] == [-1, "ENOSYS"]
    assert result["fork still works"] == "ok"


# A uid no account and no process has: the filtered child and its bystander run under it, so that on
# code whose filter fails, what it does reaches only the two of them (never root's processes: a
# kill(-1) or a setpriority(PRIO_USER) as root would reach every process of the machine).
LONE_UID = 3_737_373


@pytest.mark.root
def test_seccomp_filter_denies_metadata_changes_and_reaching_other_processes() -> None:
    """Issue 37: after the filters, a file this uid owns keeps its mode, owner, times, attributes
    and length (EPERM for each); another process of the same uid can be neither prlimited,
    reniced, pinned, signalled (by pid, by kill(-1), by pid with the high bits of the register
    set, by pidfd, or by a descriptor's owner) nor rescheduled; the sandbox itself still can (pid
    0, its own pid, its own process group), and still forks. Signals are probed with signal 0
    (permission checked, nothing sent), all under a uid of their own."""
    import ctypes
    import resource

    if os.geteuid() != 0:
        pytest.skip("runs the filtered child under a uid of its own: needs root")
    libc = ctypes.CDLL(None, use_errno=True)
    folder = Path(tempfile.mkdtemp(prefix="attnkit-filter-", dir="/var/tmp"))
    folder.chmod(0o755)
    victim_file = folder / "classmate.ipynb"
    victim_file.write_text("{}")
    os.chown(victim_file, LONE_UID, LONE_UID)
    before = victim_file.stat()

    def become_lone_uid() -> None:
        os.setgroups([])
        os.setresgid(LONE_UID, LONE_UID, LONE_UID)
        os.setresuid(LONE_UID, LONE_UID, LONE_UID)

    bystander = os.fork()
    if bystander == 0:
        become_lone_uid()
        time.sleep(60)
        os._exit(0)

    def raw(number: int, *args: int) -> str:
        if libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args]) == 0:
            return "ok"
        return errno.errorcode[ctypes.get_errno()]

    def body() -> dict:
        os.setsid()  # as start_sandbox does: its own session and process group
        become_lone_uid()
        if os.geteuid() == 0:
            return {"raised": "still root"}
        obtained = seccomp_filter.install()
        me, path = os.getpid(), str(victim_file)
        read_end, write_end = os.pipe()
        return {
            "obtained": obtained,
            "chmod": attempt(lambda: os.chmod(path, 0)),
            "fchmod": attempt(lambda: os.chmod(write_end, 0o600)),
            "chown": attempt(lambda: os.chown(path, LONE_UID, LONE_UID)),
            "utime": attempt(lambda: os.utime(path, (4102444800, 4102444800))),
            "setxattr": attempt(lambda: os.setxattr(path, "user.attnkit", b"x")),
            "truncate": attempt(lambda: os.truncate(path, 0)),
            "prlimit other": attempt(lambda: resource.prlimit(bystander, resource.RLIMIT_CPU, (1, 1))),
            "setpriority other": attempt(lambda: os.setpriority(os.PRIO_PROCESS, bystander, 19)),
            "setpriority user": attempt(lambda: os.setpriority(os.PRIO_USER, 0, 19)),
            "affinity other": attempt(lambda: os.sched_setaffinity(bystander, {0})),
            "scheduler other": attempt(lambda: os.sched_setscheduler(bystander, os.SCHED_BATCH, os.sched_param(0))),
            "kill other": attempt(lambda: os.kill(bystander, 0)),
            "kill other, high bits set": raw(62, (1 << 32) | bystander, 0) if os.uname().machine == "x86_64" else "EPERM",
            "kill -1": attempt(lambda: os.kill(-1, 0)),
            "pidfd_open": attempt(lambda: os.pidfd_open(bystander)),
            "F_SETOWN": attempt(lambda: __import__("fcntl").fcntl(read_end, 8, bystander)),
            "prlimit self": attempt(lambda: resource.prlimit(me, resource.RLIMIT_CORE, (0, 0))),
            "setrlimit": attempt(lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0))),
            # Only a lower priority: a runner that is itself niced (CI) may not go back up without
            # CAP_SYS_NICE, which the filter has nothing to do with.
            "setpriority self": attempt(lambda: os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 1))),
            "affinity self": attempt(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
            "kill self": attempt(lambda: os.kill(me, 0)),
            "kill own group": attempt(lambda: os.killpg(me, 0)),
            "kill 0": attempt(lambda: os.kill(0, 0)),
            "fork": attempt(fork_and_reap),
        }

    try:
        result = in_child(body)
        after = victim_file.stat()
        assert os.waitpid(bystander, os.WNOHANG) == (0, 0), "the filtered child ended a process outside"
    finally:
        os.kill(bystander, signal.SIGKILL)
        os.waitpid(bystander, 0)
        shutil.rmtree(folder, ignore_errors=True)
    assert result.pop("obtained", None) == ["seccomp-filter"], result
    allowed = ("prlimit self", "setrlimit", "setpriority self", "affinity self", "kill self", "kill own group", "kill 0", "fork")
    assert {name: result[name] for name in allowed} == dict.fromkeys(allowed, "ok"), result
    assert {name: value for name, value in result.items() if name not in allowed} == {name: "EPERM" for name in result if name not in allowed}
    assert (after.st_mode, after.st_uid, after.st_mtime_ns, after.st_size) == (before.st_mode, before.st_uid, before.st_mtime_ns, before.st_size)


@pytest.mark.root
def test_seccomp_allows_only_what_a_notebook_uses() -> None:
    """Issue 37, default deny: after the filters, what a notebook's Python does still works
    (threads, sleeping, its own files, a pipe, a fork, its own memory and signals), and a syscall
    outside the allowlist fails with EPERM the student's code can see, nothing killed: System V
    IPC, POSIX message queues, personality, and statmount/listmount (Linux 6.8: a syscall the
    kernel added after the list was written is refused until it is named)."""
    import ctypes
    import threading

    if os.geteuid() != 0:
        pytest.skip("runs the filtered child under a uid of its own: needs root")
    if os.uname().machine != "x86_64":
        pytest.skip("the raw syscall numbers below are x86_64's")
    libc = ctypes.CDLL(None, use_errno=True)
    folder = Path(tempfile.mkdtemp(prefix="attnkit-allow-", dir="/var/tmp"))
    os.chown(folder, LONE_UID, LONE_UID)

    def raw(number: int, *args: int) -> str:
        if libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args]) >= 0:
            return "ok"
        return errno.errorcode[ctypes.get_errno()]

    def body() -> dict:
        os.setsid()
        os.setgroups([])
        os.setresgid(LONE_UID, LONE_UID, LONE_UID)
        os.setresuid(LONE_UID, LONE_UID, LONE_UID)
        obtained = seccomp_filter.install()
        results: list[int] = []
        thread = threading.Thread(target=lambda: results.append(sum(range(10))))
        thread.start()
        thread.join()
        time.sleep(0.01)
        own = folder / "own.txt"
        own.write_text("x")
        read_end, write_end = os.pipe()
        os.write(write_end, b"y")
        return {
            "obtained": obtained,
            "thread": results == [45],
            "own file": own.read_text() == "x" and attempt(own.unlink) == "ok",
            "pipe": os.read(read_end, 1) == b"y",
            "fork": attempt(fork_and_reap),
            "kill self": attempt(lambda: os.kill(os.getpid(), 0)),
            "shmget": raw(29, 0, 4096, 0o1600),  # IPC_PRIVATE, IPC_CREAT | 0600
            "msgget": raw(68, 0, 0o1600),
            "mq_open": raw(240, 0, 0),
            "personality": raw(135, 0xFFFFFFFF),  # a query: changes nothing, yet refused
            "statmount": raw(457, 0, 0, 0, 0),
            "listmount": raw(458, 0, 0, 0, 0),
        }

    try:
        result = in_child(body)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.pop("obtained", None) == ["seccomp-filter"], result
    assert {name: result[name] for name in ("thread", "own file", "pipe")} == dict.fromkeys(("thread", "own file", "pipe"), True), result
    assert result["fork"] == result["kill self"] == "ok", result
    refused = ("shmget", "msgget", "mq_open", "personality", "statmount", "listmount")
    assert {name: result[name] for name in refused} == dict.fromkeys(refused, "EPERM"), result


@pytest.mark.root
def test_seccomp_scoped_reach_lets_a_sandbox_signal_its_children_but_not_everyone() -> None:
    """The scoped variant (where a PID namespace, Landlock's signal scope or a uid of its own
    already confines signals): a notebook may end its own child by pid; kill(-1) and another
    process group are still refused, and prlimit on another process too."""
    import resource

    if os.geteuid() != 0:
        pytest.skip("runs the filtered child under a uid of its own: needs root")

    def body() -> dict:
        os.setsid()
        os.setgroups([])
        os.setresgid(LONE_UID, LONE_UID, LONE_UID)
        os.setresuid(LONE_UID, LONE_UID, LONE_UID)
        seccomp_filter.install(scoped=True)
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        try:
            return {
                "kill own child": attempt(lambda: os.kill(child, 0)),
                "prlimit own child": attempt(lambda: resource.prlimit(child, resource.RLIMIT_CORE, (0, 0))),
                "kill -1": attempt(lambda: os.kill(-1, 0)),
                "kill another group": attempt(lambda: os.kill(-(os.getpid() + 1), 0)),
            }
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)

    assert in_child(body) == {"kill own child": "ok", "prlimit own child": "EPERM", "kill -1": "EPERM", "kill another group": "EPERM"}


def test_seccomp_reach_filter_is_written_for_each_pid() -> None:
    """The reach filter is built once with placeholders; each sandbox's copy holds its own pid and
    its group (the negation) in every comparison that held them, and nothing else changes."""
    _denials, reach = seccomp_filter.compiled()
    mine = seccomp_filter.for_process(reach, 4242)
    assert len(mine) == len(reach)
    changed = [offset for offset in range(0, len(reach), 8) if reach[offset : offset + 8] != mine[offset : offset + 8]]
    slots = seccomp_filter._placeholder_slots(reach, seccomp_filter.SELF) + seccomp_filter._placeholder_slots(reach, seccomp_filter.OWN_GROUP)
    assert sorted(changed) == sorted(slots) and slots
    values = {int.from_bytes(mine[offset + 4 : offset + 8], sys.byteorder) for offset in changed}
    assert values == {4242, (-4242) & 0xFFFFFFFF}


def test_landlock_abi_cap_only_lowers(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATTNKIT_LANDLOCK_ABI_MAX, the tests' and operators' knob: the kit uses Landlock's ABI no
    higher than it, and never higher than the kernel's; a value that is not a number is ignored."""
    monkeypatch.delenv(landlock.ABI_CAP_VARIABLE, raising=False)
    kernel = landlock.abi_version()
    for cap, expected in (("1", min(1, kernel)), ("4", min(4, kernel)), ("0", 0), (str(kernel + 5), kernel), ("seven", kernel), ("-1", kernel)):
        monkeypatch.setenv(landlock.ABI_CAP_VARIABLE, cap)
        assert landlock.abi_version() == expected, cap


@pytest.mark.root
@needs_landlock
def test_without_root_no_landlock_layer_where_the_filter_does_not_load() -> None:
    """A grader without root whose sandbox would share its uid: where the seccomp filters cannot
    be loaded (a platform filter refusing seccomp, here as EINVAL), the layer without namespaces is
    not offered (kind "none": untrusted notebooks are refused), and the reason says why."""
    import pyseccomp

    from attnkit.sandbox.lockdown import without_namespaces
    from attnkit.sandbox.lockdown.zygote_namespace import Mode

    if os.geteuid() != 0:
        pytest.skip("becomes another user: needs root")
    nobody = pwd.getpwnam("nobody")

    def body() -> dict:
        platform = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        platform.add_rule(pyseccomp.ERRNO(errno.EINVAL), "prctl", pyseccomp.Arg(0, pyseccomp.EQ, 22))  # PR_SET_SECCOMP
        platform.add_rule(pyseccomp.ERRNO(errno.EINVAL), "seccomp")
        os.setgroups([])
        os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
        os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
        platform.load()
        mode, _layer = without_namespaces.choose(Mode("none", "user namespaces refused for this test"), [])
        return {"kind": mode.kind, "why": mode.why}

    result = in_child(body)
    assert result.get("kind") == "none", result
    assert "seccomp filter does not load" in result["why"] and "grader's uid" in result["why"], result


# -- --no-isolation where no layer could be had ------------------------------------------------------
@pytest.fixture()
def open_course():
    """A course, a class and an OUT folder that the file modes leave open to everyone (under
    /var/tmp: pytest's own tmp_path is root's, mode 700), and a work folder as the zygote makes one."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="attnkit-noiso-", dir="/var/tmp"))
    paths = {
        "reference": top / "course" / "autograder" / "reference.py",
        "peer": top / "submitted" / "peer" / "attention.ipynb",
        "out": top / "out",
        "work": Path(tempfile.mkdtemp(prefix="sandbox-")),
    }
    for name in ("reference", "peer"):
        paths[name].parent.mkdir(parents=True)
        paths[name].write_text("def scaled_attention(): ...")
    paths["out"].mkdir()
    for path in [top, *top.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    paths["hide"] = top
    yield paths
    shutil.rmtree(top, ignore_errors=True)
    shutil.rmtree(paths["work"], ignore_errors=True)


def lazy_imports() -> dict:
    """In a locked-down sandbox: each of LAZY_MODULES (modules no zygote loads) imported ("ok",
    or the error), which had been loaded before, and a query through sqlite3's own library."""
    from test_isolation import LAZY_MODULES

    # A forked child inherits the test process's modules, and an earlier test may have imported
    # one of these (matplotlib imports colorsys): forget them, so that each import below reads
    # its files from disk inside the lock-down, as in a zygote's sandbox, where none is loaded.
    for name in [loaded for loaded in sys.modules if any(loaded == lazy or loaded.startswith(lazy + ".") for lazy in LAZY_MODULES)]:
        del sys.modules[name]
    report: dict = {"loaded_before": [name for name in LAZY_MODULES if name in sys.modules]}
    for name in LAZY_MODULES:
        try:
            __import__(name)
            report[name] = "ok"
        except BaseException as error:  # the report says what failed
            report[name] = f"{type(error).__name__}: {error}"
    try:
        import sqlite3

        report["sqlite3_query"] = sqlite3.connect(":memory:").execute("select 41 + 1").fetchone()[0]
    except BaseException as error:  # the report says what failed
        report["sqlite3_query"] = f"{type(error).__name__}: {error}"
    return report


def locked_down_unisolated(open_course: dict[str, Path], abi: int) -> dict:
    """``sequence.lock_down`` of kind "none" (--no-isolation) in a forked child, as the zygote
    readies it (``without_namespaces.choose``'s fallback for trusted notebooks), then a notebook's
    attempts: the child's answer."""
    from attnkit.sandbox.lockdown import without_namespaces
    from attnkit.sandbox.lockdown.zygote_namespace import Mode, allowlist

    seccomp_filter.compiled()  # as choose does, in the zygote
    mode, layer = without_namespaces._for_trusted_notebooks(
        Mode("none", "refused for this test"), without_namespaces.Layer(read_only=allowlist([str(open_course["hide"])])), abi
    )
    return locked_down(open_course, mode, layer)


def locked_down(open_course: dict[str, Path], mode, layer) -> dict:
    """``sequence.lock_down`` in a forked child as the zygote forks a sandbox of ``mode`` and
    ``layer`` (``fork_server._spawn``: its uid, its work folder, inside the chroot if it has one),
    then a notebook's attempts: the child's answer."""
    from attnkit.sandbox.lockdown import sequence

    if layer.chroot is not None:  # as _spawn makes it: inside the root, the one the sandbox sees
        shutil.rmtree(open_course["work"], ignore_errors=True)
        open_course["work"] = Path(tempfile.mkdtemp(prefix="sandbox-", dir=layer.chroot.work))
    with open("/proc/self/status") as status:
        address_space = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    settings = {"workdir": str(open_course["work"]), "address_space_base": address_space, "memory_mb": 2048, "cpu_seconds": 60}
    if layer.uid(0) is not None:
        settings["sandbox_uid"] = layer.uid(0)
    if layer.chroot is not None:
        settings["chroot"] = layer.chroot.path
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            obtained = sequence.lock_down(sequence.SandboxContext(mode, False, write_end, settings, io.StringIO()))
            answer = {
                "obtained": obtained,
                "euid": os.geteuid(),
                "reference": attempt(read(open_course["reference"])),
                "peer": attempt(read(open_course["peer"])),
                "list_out": attempt(lambda: os.listdir(open_course["out"])),
                "write_out": attempt(lambda: (open_course["out"] / "grades.csv").write_text("me,100")),
                "own_work": attempt(lambda: Path("scratch.txt").write_text("mine")),
                "socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                "outside_copies": [attempt(read(Path(copy))) for copy in open_course.get("outside", [])],
                "write_root": attempt(lambda: Path("/attnkit-written").write_text("x")),
                "root_listing": attempt(lambda: os.listdir("/")),
                "root_entries": sorted(os.listdir("/")) if layer.chroot is not None else [],
                "lazy": lazy_imports(),
            }
        except BaseException as error:  # the child reports whatever happened
            answer = {"raised": f"{type(error).__name__}: {error}"}
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@needs_landlock
def test_no_isolation_still_applies_landlock_seccomp_and_an_unprivileged_uid(open_course: dict[str, Path]) -> None:
    """Kind "none" with Landlock in the kernel: a --no-isolation sandbox reads neither the course
    nor a peer, writes nothing into OUT (all of them open to everyone by their modes), opens no
    socket, is no longer root, and is recorded as unisolated with what it still obtained."""
    from attnkit.report.isolation_level import describe, level

    result = locked_down_unisolated(open_course, LANDLOCK)
    assert "raised" not in result, result
    assert result["reference"] == result["peer"] == result["list_out"] == result["write_out"] == "EACCES", result
    assert not (open_course["out"] / "grades.csv").exists()
    assert result["own_work"] == "ok", result
    assert result["socket"] == "EPERM", json.dumps(result)
    assert result["euid"] != 0
    items = result["obtained"]
    assert {"unisolated", "landlock-files", "seccomp-filter", "no-capabilities"} <= set(items), items
    if os.geteuid() == 0:
        assert "uid-pool" in items or "uid-nobody" in items, items
    assert level(items) == "unisolated"
    assert "Landlock" in describe([items]) and "未隔离" in describe([items])


@pytest.mark.e2e  # a real lock-down in a forked child, into a chroot root built from the Python trees
def test_no_isolation_without_landlock_still_drops_root_and_filters(open_course: dict[str, Path], outside_copies: list[Path]) -> None:
    """Kind "none", no Landlock: the seccomp filter and, as root, an unprivileged uid chrooted
    into the allowlist's root (--no-isolation still chroots: neither the course, open to all, nor
    a copy in /opt is there); without root, the uid's own view of the machine. The record says
    there is no Landlock; modules first imported after the fork still import."""
    from attnkit.report.isolation_level import describe, level

    open_course["outside"] = outside_copies  # type: ignore[assignment]
    result = locked_down_unisolated(open_course, 0)
    assert "raised" not in result, result
    items = result["obtained"]
    assert "landlock-files" not in items and {"unisolated", "seccomp-filter"} <= set(items), items
    assert result["socket"] == "EPERM" and result["euid"] != 0, result
    if os.geteuid() == 0:
        assert "chroot-root" in items, items
        assert result["reference"] == result["peer"] == "ENOENT", result
        assert result["outside_copies"] == ["ENOENT", "ENOENT"], result
        assert result["own_work"] == "ok" and result["write_root"] == "EACCES", result
    else:
        assert result["reference"] == "ok", "without Landlock the file modes are all that holds: this course is open to all"
    assert_lazy_imports(result["lazy"])
    assert level(items) == "unisolated" and "没有 Landlock" in describe([items])


@pytest.mark.e2e  # a real lock-down in a forked child, into a chroot root built from the Python trees
def test_pool_layer_chroots_each_sandbox_into_the_allowlist(open_course: dict[str, Path], outside_copies: list[Path]) -> None:
    """Root without Landlock (kind "pool"): the sandbox, locked down as the zygote forks it, is
    chrooted into a root that holds only the allowlist: neither the course (open to all) nor a
    peer nor a world-readable copy of the reference in /opt is there, it can write nothing but
    its own work folder, and modules first imported after the fork still import."""
    _root_only()
    from attnkit.sandbox.lockdown import chroot as chroot_root
    from attnkit.sandbox.lockdown import without_namespaces
    from attnkit.sandbox.lockdown.zygote_namespace import Mode, allowlist
    from attnkit.report.isolation_level import level

    seccomp_filter.compiled()
    open_course["outside"] = outside_copies  # type: ignore[assignment]
    layer = without_namespaces.Layer(read_only=allowlist([str(open_course["hide"])]), fixed_uid=policy.POOL_BASE + 4001)
    assert without_namespaces._chroot(layer, policy.POOL_BASE + 4001), layer.chroot_error
    mode = Mode("pool", "refused for this test", sandbox_host_uid="pool", visible=layer.read_only)
    result = locked_down(open_course, mode, layer)
    assert "raised" not in result, result
    items = result["obtained"]
    assert {"chroot-root", "uid-pool", "probe-passed", "seccomp-filter", "no-capabilities"} <= set(items), items
    assert items.index("chroot-root") < items.index("uid-pool") < items.index("seccomp-filter"), items
    assert level(items) == "isolated"
    assert result["reference"] == result["peer"] == result["list_out"] == result["write_out"] == "ENOENT", result
    assert result["outside_copies"] == ["ENOENT", "ENOENT"], result
    assert result["own_work"] == "ok" and result["write_root"] == "EACCES" and result["socket"] == "EPERM", result
    assert result["euid"] == policy.POOL_BASE + 4001
    tops = {folder.strip("/").split("/")[0] for folder in layer.read_only} | {"dev", "etc", "lib", "lib64", "lib32", "libx32"}
    assert set(result["root_entries"]) <= tops | {chroot_root.WORK.strip("/")}, result["root_entries"]
    assert_lazy_imports(result["lazy"])


@pytest.mark.e2e  # a real lock-down in a forked child, into a chroot root built from the Python trees
def test_chroot_root_holds_the_allowlist_only_and_nothing_the_pool_uid_may_write(open_course: dict[str, Path], outside_copies: list[Path]) -> None:
    """The root itself: every allowlisted folder, none of the hidden trees, no /opt copy, none of
    torch's programs and tests; every folder root's; nothing a pool uid may write (the probe, as
    it runs in the zygote, chrooted) but its devices and its own work folder."""
    _root_only()
    from attnkit.sandbox.lockdown import chroot as chroot_root
    from attnkit.sandbox.lockdown import without_namespaces
    from attnkit.sandbox.lockdown.zygote_namespace import allowlist

    hide = [str(open_course["hide"])]
    layer = without_namespaces.Layer(read_only=allowlist(hide))
    uid = policy.POOL_BASE + 4002
    assert without_namespaces._chroot(layer, uid), layer.chroot_error
    root = layer.chroot.path  # type: ignore[union-attr]
    assert os.stat(chroot_root.ROOTS).st_mode & 0o777 == 0o700
    for folder in layer.read_only:
        assert os.path.isdir(root + os.path.realpath(folder)), folder
        assert not os.path.lexists(root + os.path.realpath(folder) + "/torch/test")
        assert not os.path.lexists(root + os.path.realpath(folder) + "/torch/bin")
    for path in [open_course["reference"], open_course["peer"], open_course["out"], *outside_copies]:
        assert not os.path.lexists(root + str(path)), path
    assert not os.path.lexists(root + str(open_course["hide"]))
    for folder, _subfolders, _files in os.walk(root):
        info = os.lstat(folder)
        assert info.st_uid == 0 and not info.st_mode & 0o022, (folder, oct(info.st_mode))
    assert without_namespaces.writable_inside(uid, layer.chroot) == []  # type: ignore[arg-type]
    assert without_namespaces.probe(uid, hide, layer.read_only, root) == []
    # The same content is the same root: a second zygote finds it built.
    again = without_namespaces.Layer(read_only=layer.read_only)
    assert without_namespaces._chroot(again, uid) and again.chroot.path == root  # type: ignore[union-attr]


def test_stale_chroot_roots_are_swept(tmp_path: Path) -> None:
    """Roots of other content no zygote holds go, and builds left unfinished and work folders
    left behind for over a day; the current root, a root a running zygote holds and fresh work
    folders stay."""
    import fcntl

    from attnkit.sandbox.lockdown import chroot as chroot_root

    roots = tmp_path / "roots"
    for name in ("current", "other", "held", ".building-x", ".building-y"):
        (roots / name / chroot_root.WORK.strip("/")).mkdir(parents=True)
    old, fresh = roots / "current" / chroot_root.WORK.strip("/") / "sandbox-old", roots / "current" / chroot_root.WORK.strip("/") / "sandbox-new"
    old.mkdir()
    fresh.mkdir()
    day_ago = time.time() - chroot_root.MAX_AGE_SECONDS - 60
    os.utime(old, (day_ago, day_ago))
    os.utime(roots / ".building-x", (day_ago, day_ago))
    held = os.open(roots / "held.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_SH)  # as a running zygote holds its root
    try:
        removed = chroot_root.sweep("current", str(roots))
    finally:
        os.close(held)
    assert sorted(removed) == sorted([str(roots / "other"), str(roots / ".building-x"), str(old)]), removed
    assert sorted(p.name for p in roots.iterdir() if not p.name.endswith(".lock")) == [".building-y", "current", "held"]
    assert fresh.exists() and not old.exists()
    assert chroot_root.sweep("current", str(roots)) == [str(roots / "held")]  # its zygote has ended


# -- a hostile class graded where namespaces are refused ----------------------------------------------
# Each setting runs the real `attnkit grade` under tests/support/settings.py (a seccomp filter as the
# platform's, inherited and irremovable): Docker's default profile as root, with Landlock and
# without it (Docker 20.10), and an unprivileged TA whose user namespace cannot mount (Ubuntu 24.04).
KILL_EVERYONE = (
    "import os, signal, time\n"
    "_results = []\n"
    "for _ in range(30):  # kill(-1): every process this one may signal, itself excepted\n"
    "    try:\n"
    "        os.kill(-1, signal.SIGKILL)\n"
    "        _results.append('ok')\n"
    "    except OSError as _error:\n"
    "        _results.append(type(_error).__name__)\n"
    "    time.sleep(0.1)\n"
)
# Sockets to the grader's loopback listener, over UDP, and to an abstract unix socket (each "ok" or
# the exception's name: attacks.cells' probe convention).
SOCKETS = """
import socket
def _tcp():
    with socket.create_connection(("127.0.0.1", $port), timeout=1) as connection:
        connection.sendall(b"ADVPROBE hello")
def _udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendto(b"ADVPROBE", ("127.0.0.1", $port))
def _abstract():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.connect("\\0attnkit-layers-test")
_try("tcp_loopback", _tcp)
_try("udp_loopback", _udp)
_try("abstract_unix", _abstract)
_try("socketpair", lambda: socket.socketpair() and None)
"""
LAYER_SETTINGS: dict[str, tuple[Callable[[list[str], pwd.struct_passwd], list[str]], bool, str]] = {
    # setting: (its launcher in tests/support/settings.py (command, the TA), as the TA?, the layer it must obtain)
    "docker": (lambda command, user: docker_default(command, landlock=True), False, "landlock"),
    "docker-20.10": (lambda command, user: docker_default(command, landlock=False), False, "pool"),
    "ubuntu": (userns_without_mount, True, "landlock"),
}


def layer_class(folder: Path, course: Path, out: Path, outside: list[Path], home: str, listener_port: int) -> None:
    from attacks import ASSIGNMENT, RELEASE, SOLUTION, load, with_cells, write
    from attacks.cells import _probe, fake_results, snoop
    from test_isolation import HUNT, LAZY_IMPORTS, exec_cell

    release, solution = load(RELEASE), load(SOLUTION)
    reference = next((course / "autograder").rglob("reference.py"))
    attacks = {
        "exec_course": exec_cell(str(reference)),
        "hunter": HUNT.replace("HOME_OF_TA", home).replace("KEY_OF_TA", "none"),
        "peers": snoop(str(course), str(folder), str(out), "bystander", ASSIGNMENT, "ATTNKIT_SECRET"),
        "sockets": _probe("sockets", SOCKETS, port=listener_port),
        "writer": fake_results(str(out / "students"), str(folder), "writer", "bystander", ASSIGNMENT),
        **{f"exec_outside_{n}": exec_cell(str(copy)) for n, copy in enumerate(outside)},
    }
    students = {
        "bystander": solution,
        "stub": release,
        "killer": with_cells(solution, [KILL_EVERYONE], after_code_cell=0),
        "lazy": with_cells(solution, [LAZY_IMPORTS], after_code_cell=-1),  # imports after the fork, in every layer
    }
    students.update({name: with_cells(release, [cell], after_code_cell=-1) for name, cell in attacks.items()})
    for student_id, notebook in students.items():
        write(notebook, folder / student_id / ASSIGNMENT)


def probe_report(results: dict, name: str) -> dict:
    for cell in results["cells"]:
        message = str(cell.get("message", ""))
        if message.startswith(f"ADVPROBE:{name}:"):
            return json.loads(message[len(f"ADVPROBE:{name}:") :])
    raise AssertionError(f"no {name} probe in {results['cells']}")


@pytest.fixture(scope="module")
def layer_runs(ta_user, user_python, outside_copies):
    """The class graded in each setting (as the test_isolation settings: the distribution's Python
    in a virtualenv under /var/tmp, a copy of the course), and the grader's refusals."""
    _root_only()
    from ta_machine import minimal_env, tempfile_folder
    from test_isolation import run_grader

    python, course = user_python
    work = Path(tempfile_folder("attnkit-layers-"))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0attnkit-layers-test")  # so that a connect there would succeed, were it allowed
    abstract.listen()
    runs = {}
    try:
        for name, (launch, as_ta, _layer) in LAYER_SETTINGS.items():
            uid, gid = (ta_user.pw_uid, ta_user.pw_gid) if as_ta else (0, 0)
            home = ta_user.pw_dir if as_ta else "/root"
            submitted, out = work / name / "submitted", work / name / "out"
            layer_class(submitted, course, out, outside_copies, home, listener.getsockname()[1])
            out.mkdir(parents=True)
            owner = [work / name, *(work / name).rglob("*")]
            for path in owner:
                os.chown(path, uid, gid)
            setting = functools.partial(launch, user=ta_user)
            if name == "docker-20.10":
                # First as a TA leaves things (course, class, outputs readable by all): refused, by name.
                runs["docker-20.10-exposed"] = run_grader(setting, python, submitted, out, minimal_env(home))
                for path in (course.parent, submitted, out):
                    path.chmod(0o700)
            runs[name] = run_grader(setting, python, submitted, out, minimal_env(home))
            if name == "docker-20.10":
                course.parent.chmod(0o755)
            print(
                f"\n[layers] {name}: exit {runs[name].returncode}, " + ", ".join(f"{sid} {r['score']:g}" for sid, r in sorted(runs[name].results.items())),
                file=sys.stderr,
            )
        try:
            listener.accept()
            runs["accepted"] = True  # a sandbox reached the grader's loopback listener
        except OSError:
            runs["accepted"] = False
        yield runs
    finally:
        listener.close()
        abstract.close()
        shutil.rmtree(work, ignore_errors=True)


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("creates users and confines the grader with seccomp: needs root (CI runs as root)")


@pytest.mark.parametrize("setting", list(LAYER_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_layer_obtained_is_the_one_recorded(layer_runs, setting: str) -> None:
    """Graded isolated, with the layer the setting gives, recorded in every results.json."""
    run = layer_runs[setting]
    assert run.returncode == 0, run.stderr[-3000:]
    layer = LAYER_SETTINGS[setting][2]
    for student_id, results in run.results.items():
        items = results["sandbox"]["isolation"]
        assert results["isolation"] == "isolated", (student_id, items)
        assert "seccomp-filter" in items and "no-capabilities" in items and "allowlisted-root" not in items, items
        assert ("landlock-files" in items) == (layer == "landlock"), items
        assert ("uid-pool" in items) == (not LAYER_SETTINGS[setting][1]), items
        assert ("chroot-root" in items) == (layer == "pool"), items


@pytest.mark.parametrize("setting", list(LAYER_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_layer_bystander_full_marks_and_no_theft_pays(layer_runs, setting: str) -> None:
    run = layer_runs[setting]
    assert run.score("bystander") == 100, run.results["bystander"]["tests"]
    assert run.score("killer") == 100, run.results["killer"]["cells"]
    assert run.score("lazy") == 100, run.results["lazy"]["tests"]
    assert_lazy_imports(run.probe("lazy"))
    baseline = run.score("stub")
    for student_id in ("exec_course", "peers", "sockets", "writer", "hunter", "exec_outside_0", "exec_outside_1"):
        assert run.score(student_id) <= baseline, (student_id, run.score(student_id))


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_pool_layer_keeps_world_readable_copies_out_of_reach(layer_runs) -> None:
    run = layer_runs["docker-20.10"]
    for student_id in ("hunter", "exec_outside_0", "exec_outside_1"):
        assert run.score(student_id) <= run.score("stub"), (student_id, run.score(student_id))


@pytest.mark.parametrize("setting", list(LAYER_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_layer_keeps_the_course_peers_outputs_and_network_out(layer_runs, setting: str) -> None:
    run = layer_runs[setting]
    peers = probe_report(run.results["peers"], "snoop")
    for name in ("open_reference", "open_catalogue", "open_solution", "read_victim", "list_submitted", "list_out", "list_autograder"):
        assert not peers[name].startswith("ok"), (name, peers[name])
    assert peers["euid"] != 0
    assert peers["readable_hidden_files"] == [], peers["readable_hidden_files"]
    sockets = probe_report(run.results["sockets"], "sockets")
    assert set(sockets) == {"tcp_loopback", "udp_loopback", "abstract_unix", "socketpair"}, sockets
    assert all(not value.startswith("ok") for value in sockets.values()), sockets
    assert layer_runs["accepted"] is False
    written = probe_report(run.results["writer"], "fake_results")
    assert all(not written[key].startswith("ok") for key in written if key.startswith(("out_", "submitted_"))), written


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_pool_layer_grades_a_course_open_to_all_out_of_its_chroots_reach(layer_runs) -> None:
    """Root without Landlock, the course and class readable by all: each sandbox's chroot holds
    none of them, so the run is graded (it was refused, naming each chmod, while the file modes
    were all that held: the words are tested in test_exposure_refusal_names_each_path_and_its_chmod
    and test_probe_finds_what_the_pool_uid_could_read_and_says_how_to_close_it), and no theft pays."""
    run = layer_runs["docker-20.10-exposed"]
    assert run.returncode == 0, run.stderr[-3000:]
    for student_id, results in run.results.items():
        assert results["isolation"] == "isolated" and "chroot-root" in results["sandbox"]["isolation"], (student_id, results["sandbox"])
    assert run.score("bystander") == 100, run.results["bystander"]["tests"]
    baseline = run.score("stub")
    for student_id in ("exec_course", "peers", "writer", "hunter", "exec_outside_0", "exec_outside_1"):
        assert run.score(student_id) <= baseline, (student_id, run.score(student_id))
    peers = probe_report(run.results["peers"], "snoop")
    assert peers["readable_hidden_files"] == [], peers
    for name in ("open_reference", "open_catalogue", "open_solution", "read_victim", "list_submitted", "list_out", "list_autograder"):
        assert not peers[name].startswith("ok"), (name, peers[name])


# -- --no-isolation graded for real, where no layer can be had ----------------------------------------
NO_ISOLATION_SETTINGS = {
    # name: (its launcher in tests/support/settings.py (command, the TA), as the TA?, a Python the pool uid
    # cannot read?, the layer it must record)
    # Root under Docker's default profile with its Python in a folder only root may enter (a pyenv
    # under /root, mode 700): no layer (the pool uid could not read Python), but Landlock exists.
    "docker-private-python": (lambda command, user: docker_default(command, landlock=True), False, True, "unisolated"),
    # The TA on Ubuntu 24.04: --no-isolation changes nothing where the layer can be had.
    "ubuntu": (userns_without_mount, True, False, "landlock"),
}


def private_python(user_python: tuple[str, Path], top: Path) -> str:
    """The test virtualenv's packages and course, through a virtualenv in ``top`` (root's, mode
    700): a Python the pool uid cannot read, as a pyenv under /root is."""
    from ta_machine import thin_venv

    python, _course = user_python
    paths = next((Path(python).parent.parent / "lib").glob("python3*/site-packages/attnkit-test.pth")).read_text().split()
    interpreter = thin_venv(top / "venv", [Path(path) for path in paths])
    top.chmod(0o700)
    return interpreter


@pytest.fixture(scope="module")
def no_isolation_runs(ta_user, user_python, outside_copies):
    """The hostile class of the layer tests graded with --no-isolation in each setting above (and,
    root's private Python only, once without it: refused, so no layer was to be had there)."""
    _root_only()
    from ta_machine import minimal_env, tempfile_folder
    from test_isolation import run_grader

    _python, course = user_python
    work = Path(tempfile_folder("attnkit-noiso-"))
    private = Path(tempfile.mkdtemp(prefix="attnkit-private-python-", dir="/var/tmp"))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    runs = {}
    try:
        for name, (launch, as_ta, private_interpreter, _layer) in NO_ISOLATION_SETTINGS.items():
            python = private_python(user_python, private) if private_interpreter else user_python[0]
            uid, gid = (ta_user.pw_uid, ta_user.pw_gid) if as_ta else (0, 0)
            home = ta_user.pw_dir if as_ta else "/root"
            submitted, out = work / name / "submitted", work / name / "out"
            layer_class(submitted, course, out, outside_copies, home, listener.getsockname()[1])
            out.mkdir(parents=True)
            for path in [work / name, *(work / name).rglob("*")]:
                os.chown(path, uid, gid)
            setting = functools.partial(launch, user=ta_user)
            if private_interpreter:
                runs[f"{name}-strict"] = run_grader(setting, python, submitted, out, minimal_env(home))
            runs[name] = run_grader(setting, python, submitted, out, minimal_env(home), "--no-isolation")
            runs[f"{name}-report"] = (out / "report.html").read_text(encoding="utf-8") if (out / "report.html").exists() else ""
            print(
                f"\n[no-isolation] {name}: exit {runs[name].returncode}, "
                + ", ".join(f"{sid} {r['score']:g}" for sid, r in sorted(runs[name].results.items())),
                file=sys.stderr,
            )
        try:
            listener.accept()
            runs["accepted"] = True
        except OSError:
            runs["accepted"] = False
        yield runs
    finally:
        listener.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_no_isolation_setting_has_no_layer_without_it(no_isolation_runs) -> None:
    """Root's Python out of the pool uid's reach: without --no-isolation the run is refused, so
    what --no-isolation records there is the fallback, not a layer."""
    run = no_isolation_runs["docker-private-python-strict"]
    assert run.refused, (run.returncode, run.stderr[-2000:])
    assert "cannot read the Python trees" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("setting", list(NO_ISOLATION_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_no_isolation_records_what_it_obtained(no_isolation_runs, setting: str) -> None:
    """Recorded truthfully: unisolated where no layer was to be had, with Landlock, the seccomp
    filter and the pool uid still applied (results.json and report.html); else the layer itself."""
    run = no_isolation_runs[setting]
    assert run.returncode == 0, run.stderr[-3000:]
    expected = NO_ISOLATION_SETTINGS[setting][3]
    as_root = not NO_ISOLATION_SETTINGS[setting][1]
    for student_id, results in run.results.items():
        items = results["sandbox"]["isolation"]
        assert results["isolation"] == ("unisolated" if expected == "unisolated" else "isolated"), (student_id, items)
        assert {"landlock-files", "seccomp-filter", "no-capabilities"} <= set(items), (student_id, items)
        assert ("unisolated" in items) == (expected == "unisolated"), items
        assert ("uid-pool" in items) == as_root, items
    report = no_isolation_runs[f"{setting}-report"]
    if expected == "unisolated":
        assert "未隔离" in report and "Landlock" in report and "seccomp" in report, report[:2000]


@pytest.mark.parametrize("setting", list(NO_ISOLATION_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_no_isolation_bystander_full_marks_and_no_theft_pays(no_isolation_runs, setting: str) -> None:
    run = no_isolation_runs[setting]
    assert run.score("bystander") == 100, run.results["bystander"]["tests"]
    assert run.score("killer") == 100, run.results["killer"]["cells"]
    assert run.score("lazy") == 100, run.results["lazy"]["tests"]
    assert_lazy_imports(run.probe("lazy"))
    baseline = run.score("stub")
    for student_id in ("exec_course", "hunter", "peers", "sockets", "writer", "exec_outside_0", "exec_outside_1"):
        assert run.score(student_id) <= baseline, (student_id, run.score(student_id))


@pytest.mark.parametrize("setting", list(NO_ISOLATION_SETTINGS))
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.e2e
def test_no_isolation_writes_nothing_into_out_and_reads_nothing_of_the_course(no_isolation_runs, setting: str) -> None:
    """A --no-isolation cell writes no file into OUT or the class, and reads neither a peer's
    notebook nor the hidden suite, the reference or the solutions (all readable by everyone)."""
    run = no_isolation_runs[setting]
    written = probe_report(run.results["writer"], "fake_results")
    assert all(not written[key].startswith("ok") for key in written if key.startswith(("out_", "submitted_"))), written
    peers = probe_report(run.results["peers"], "snoop")
    for name in ("open_reference", "open_catalogue", "open_solution", "read_victim", "list_submitted", "list_out", "list_autograder"):
        assert not peers[name].startswith("ok"), (name, peers[name])
    assert peers["readable_hidden_files"] == [] and peers["euid"] != 0, peers
    assert run.results["writer"]["score"] <= run.score("stub")
    sockets = probe_report(run.results["sockets"], "sockets")
    assert all(not value.startswith("ok") for value in sockets.values()), sockets
    assert no_isolation_runs["accepted"] is False


# -- the refusal's words ------------------------------------------------------------------------------
def no_markers(tmp_path: Path) -> dict:
    return {"root": str(tmp_path), "environ": {}, "cgroup": "0::/\n"}


def test_refusal_in_a_seccomp_confined_container_names_the_profile_never_a_sysctl(tmp_path: Path) -> None:
    from attnkit.driver import refusal

    (tmp_path / ".dockerenv").touch()
    found = refusal.detect(
        "unshare(CLONE_NEWUSER): Operation not permitted", status="Seccomp:\t2\n", apparmor_sysctl="", root=str(tmp_path), environ={}, cgroup="0::/\n"
    )
    assert found.container == "docker" and found.seccomp_filtered
    text = refusal.cause(found) + refusal.advice(found)
    assert "seccomp" in text and "attnkit-docker.json" in text and "seccompProfile" in text and "--no-isolation" in text
    assert "sysctl" not in text


def test_refusal_under_kubernetes_and_podman_markers(tmp_path: Path) -> None:
    from attnkit.driver import refusal

    assert refusal.container_kind(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "0::/\n") == "kubernetes"
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").touch()
    assert refusal.container_kind(str(tmp_path), {}, "0::/\n") == "podman"
    assert refusal.container_kind(str(tmp_path / "none"), {}, "0::/kubepods/burstable/pod1\n") == "kubernetes"
    assert refusal.container_kind(str(tmp_path / "none"), {}, "0::/user.slice\n") == ""


def test_refusal_under_ubuntu_apparmor_names_the_profile_and_sudo(tmp_path: Path) -> None:
    from attnkit.driver import refusal

    for why, sysctl in (("mount inside the user namespace: Operation not permitted", ""), ("unshare(CLONE_NEWUSER): Operation not permitted", "1")):
        found = refusal.detect(why, status="Seccomp:\t0\n", apparmor_sysctl=sysctl, **no_markers(tmp_path))
        assert found.userns_restricted and not found.container
        text = refusal.cause(found) + refusal.advice(found, python="/usr/bin/python3")
        assert "AppArmor" in text and "apparmor_parser" in text and "sudo" in text and os.path.realpath("/usr/bin/python3") in text


def test_refusal_on_a_plain_host_keeps_the_sysctl_advice(tmp_path: Path) -> None:
    from attnkit.driver import refusal

    found = refusal.detect("unshare(CLONE_NEWUSER): Operation not permitted", status="Seccomp:\t0\n", apparmor_sysctl="0", **no_markers(tmp_path))
    assert not found.container and not found.userns_restricted
    assert "user.max_user_namespaces" in refusal.advice(found)


def test_exposure_refusal_names_each_path_and_its_chmod() -> None:
    from attnkit.driver import refusal

    text = refusal.exposure_refusal([{"path": "/srv/course", "access": "read", "fix": "chmod -R o-rwx,g-rwx /srv/course"}] * 25)
    assert text.count("chmod -R o-rwx,g-rwx /srv/course") == 20 and "5" in text.splitlines()[-1]


# -- the uid pool and the probe -----------------------------------------------------------------------
def test_uid_blocks_are_never_shared_while_held(tmp_path: Path) -> None:
    from attnkit.sandbox.lockdown import uid_pool

    first, second = uid_pool.claim(str(tmp_path)), uid_pool.claim(str(tmp_path))
    assert second.first == first.first + policy.UIDS_PER_ZYGOTE
    assert first.uid(0) != first.uid(1)  # the sandbox being graded and the one forked ahead
    os.close(first.lock_fd)  # the zygote ended: its block is free again
    assert uid_pool.claim(str(tmp_path)).first == first.first


@pytest.fixture()
def open_folder():
    """A folder everyone may enter (pytest's own tmp_path is root's, mode 700)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="attnkit-probe-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_probe_finds_what_the_pool_uid_could_read_and_says_how_to_close_it(open_folder: Path) -> None:
    _root_only()
    from attnkit.sandbox.lockdown import without_namespaces

    tmp_path = open_folder
    course = tmp_path / "course"
    (course / "autograder").mkdir(parents=True)
    (course / "autograder" / "reference.py").write_text("def scaled_attention(): ...")
    venv = course / ".venv"
    venv.mkdir()
    tmp_path.chmod(0o755)
    course.chmod(0o755)
    (course / "autograder").chmod(0o755)
    (course / "autograder" / "reference.py").chmod(0o644)
    uid = policy.POOL_BASE + 4000
    exposed = without_namespaces.probe(uid, [str(course)], [str(venv)])
    fixes = {e.path: e.fix for e in exposed}
    # The project holds the virtualenv the sandbox reads: closed for listing only, its contents by -R.
    assert fixes == {str(course): f"chmod o-rw,g-rw {course}", str(course / "autograder"): f"chmod -R o-rwx,g-rwx {course / 'autograder'}"}, fixes
    (course / "autograder").chmod(0o700)
    course.chmod(0o711)
    assert without_namespaces.probe(uid, [str(course)], [str(venv)]) == []
