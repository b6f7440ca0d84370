"""The zygote's preparations that make each sandbox cheaper, checked on a real zygote."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import time
from pathlib import Path

import pytest
import torch

from attnkit.boundary import wire
from attnkit.notebook import CodeCell
from attnkit.boundary.policy import Limits
from attnkit.driver.submission import Submission, batch_frame
from attnkit.driver.zygote_handle import Zygote, held_batch_frame
from attnkit.driver.seed import Seed


def kernel_collapses() -> bool:
    """Whether this kernel does MADV_COLLAPSE (Linux 6.1+, THP not disabled)."""
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not enabled.is_file() or "[never]" in enabled.read_text():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    size = 8 << 20
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private, like a heap
    region.write(b"x" * size)
    view = ctypes.c_char.from_buffer(region)
    start = -(-ctypes.addressof(view) // (2 << 20)) * (2 << 20)
    done = libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(2 << 20), 25) == 0
    del view
    region.close()
    return done


def anon_huge_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not kernel_collapses(), reason="this kernel cannot collapse memory into huge pages")
@pytest.mark.e2e
def test_the_zygotes_heap_is_in_huge_pages() -> None:
    """Is most of the zygote's private memory (torch's import leaves ~140 MB) backed by 2 MiB
    pages, so that each fork copies one page-table entry per 2 MiB instead of 512?"""
    zygote = Zygote()
    try:
        assert anon_huge_kb(zygote.process.pid) > 50_000
    finally:
        zygote.close()


@pytest.mark.e2e
def test_only_a_plan_that_matches_its_digest_is_held() -> None:
    """A plan whose bytes do not match the digest it came with, or that is not a batch: do the
    sandboxes forked afterwards not claim it (and so get the whole batch)? A sound one: do they
    claim it, and answer its requests from memory, in order, for a few bytes?"""
    zygote = Zygote()
    try:
        frame = batch_frame([{"op": "get", "name": "answer"}, {"op": "call", "name": "double", "args": [torch.ones(2)], "kwargs": {}}])
        lying = os.memfd_create("plan")
        os.write(lying, frame)
        os.lseek(lying, 0, os.SEEK_SET)
        socket.send_fds(zygote.control, [json.dumps({"plan": "0" * 64}).encode()], [lying])
        os.close(lying)
        zygote.hold_plan(wire.encode({"op": "batch", "requests": "not a list"}))
        cells = [CodeCell(0, "answer = 42\ndef double(x):\n    return x * 2\n")]
        first, ahead = Submission(zygote, cells), Submission(zygote, cells)  # forked before the plan
        first.start()
        digest = zygote.hold_plan(frame)
        ahead.start()
        later = Submission(zygote, cells)
        later.start()
        assert first.plan == "" and later.plan == digest
        outcomes = later.prefetch([{}, {}], held_batch_frame(digest))
        assert outcomes[0].value == 42 and torch.equal(outcomes[1].value, torch.full((2,), 2.0))
        for session in (first, ahead, later):
            session.close()
    finally:
        zygote.close()


def test_a_sandboxs_folder_is_removed_without_following_links(tmp_path: Path) -> None:
    """Is an unisolated sandbox's folder removed with what its code left (folders set to mode 0,
    the folder itself too), while a link (in it, in its place, or put where a folder was listed,
    for which Python's chmod raises rather than following) is removed or left, never followed?"""
    from attnkit.sandbox.fork_server import _remove_tree, remove_folder

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    folder = tmp_path / "sandbox"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "f").write_text("x")
    (folder / "a" / "out").symlink_to(victim)
    (folder / "a" / "b").chmod(0)
    (folder / "a").chmod(0)
    folder.chmod(0)
    remove_folder(str(folder))
    assert not folder.exists() and (victim / "keep").exists()
    (tmp_path / "in-its-place").symlink_to(victim)
    remove_folder(str(tmp_path / "in-its-place"))
    assert (victim / "keep").exists()
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "was-a-folder").symlink_to(victim)
    parent = os.open(listed, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _remove_tree("was-a-folder", parent, 3)  # as when a folder is swapped for a link mid-removal
    finally:
        os.close(parent)
    assert (victim / "keep").exists() and (listed / "was-a-folder").is_symlink()


def mount_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat after "pid (name) ": state, parent, ...; None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()


def parent_of(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"process {pid} is gone"
    return int(fields[1])


def ended(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet."""
    fields = stat_fields(pid)
    return fields is None or fields[0] == b"Z"


def answers(zygote: Zygote) -> object:
    """A sandbox of ``zygote`` runs a cell and is asked for what it defined."""
    session = Submission(zygote, [CodeCell(0, "answer = 6 * 7\n")])
    session.start()
    try:
        return session.variable("answer").value
    finally:
        session.close()


@pytest.mark.e2e
def test_the_seed_forks_each_worker_a_zygote_of_its_own() -> None:
    """Two workers asking one seed at once: does each get a zygote that is the seed's child, in a
    mount namespace of its own (two sharing one would stack their sandboxes' roots), isolated,
    with its heap in huge pages where the kernel can, whose sandboxes run cells? When the grader
    is done, do they and the seed end?"""
    seed = Seed()
    zygotes = [Zygote(seed=seed.requests), Zygote(seed=seed.requests)]
    try:
        pids = [zygote.pid for zygote in zygotes]
        assert all(zygote.process is None for zygote in zygotes), "a worker started its own zygote"
        assert [parent_of(pid) for pid in pids] == [seed.pid, seed.pid]
        namespaces = {mount_namespace(pid) for pid in [*pids, seed.pid]}
        assert len(namespaces) == 3, namespaces
        assert all(zygote.isolated for zygote in zygotes)
        if kernel_collapses():
            assert all(anon_huge_kb(pid) > 50_000 for pid in pids)
        assert [answers(zygote) for zygote in zygotes] == [42, 42]
    finally:
        for zygote in zygotes:
            zygote.close()
        seed.close()
    assert seed.process.returncode == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def small_anon_kb(pid: int) -> int:
    """The process's private anonymous memory in 4 KiB pages: what a fork copies entry by entry."""
    fields = {line.split(":")[0]: int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]}
    return fields["Anonymous"] - fields["AnonHugePages"]


@pytest.mark.skipif(not kernel_collapses(), reason="this kernel cannot collapse memory into huge pages")
@pytest.mark.e2e
def test_a_zygote_of_the_seed_collapses_its_heap_only_once_idle() -> None:
    """A zygote forked from the seed splits most of the seed's huge pages by running at all. Does
    it put them back together only once no request has come for a while (a class being graded
    never pays for it; a service between submissions does, for nothing), and do its sandboxes
    still run cells after?"""
    seed = Seed()
    zygote = Zygote(seed=seed.requests, collapse_idle_seconds=1.0)
    try:
        split = small_anon_kb(zygote.pid)
        assert split > 40_000, "the zygote collapsed at start, before it was idle"
        deadline = time.monotonic() + 30
        while small_anon_kb(zygote.pid) > split / 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert small_anon_kb(zygote.pid) <= split / 2, (split, small_anon_kb(zygote.pid))
        assert anon_huge_kb(zygote.pid) > 50_000
        assert answers(zygote) == 42
    finally:
        zygote.close()
        seed.close()


def test_an_idle_collapse_stops_for_a_request_and_goes_on_later() -> None:
    """Does collapsing step by step stop before its next step once a request has come (False: not
    done, so the zygote serves it first), and go through every region when none comes (True)?
    (This process's own heap, torch's among it, is what gets collapsed here.)"""
    from attnkit.sandbox.fork_server import collapse_into_huge_pages

    asked: list[int] = []

    def second_look_finds_a_request() -> bool:
        asked.append(1)
        return len(asked) > 1

    assert collapse_into_huge_pages(second_look_finds_a_request) is False
    assert len(asked) == 2, "it went on after a request had come"
    assert collapse_into_huge_pages(lambda: False) is True


@pytest.mark.e2e
def test_the_warm_up_leaves_no_trace_in_a_sandbox() -> None:
    """A zygote that ran the chapter's warm-up and its release's examples with the stand-ins (as a
    worker's does, some of them drawing from torch's global generator): does a sandbox find none
    of their names, no figure left open, and torch's generator as it was seeded, so that an
    unseeded draw in a notebook gives what it would have given without the warm-up?"""
    from attnkit.assignment.folder import discover

    chapter = discover()["ch19-attention"]
    assert chapter.warm_up_cells(), "the release has examples to warm up with"
    probe = (
        "import torch\n"
        "import matplotlib.pyplot as plt\n"
        "figures = plt.get_fignums()\n"
        "unmoved = torch.equal(torch.randn(5), torch.randn(5, generator=torch.Generator().manual_seed(torch.initial_seed())))\n"
        "leftover = sorted(n for n in ('scaled_attention', 'multi_head_attention', 'trace_output', 'query', 'x_demo', 'heads') if n in globals())\n"
    )
    zygote = Zygote(warm_up=chapter.warm_up_source(), cells=chapter.release_cells(), warm_up_cells=chapter.warm_up_cells())
    try:
        session = Submission(zygote, [CodeCell(0, probe)])
        session.start()
        try:
            assert session.variable("leftover").value == []
            assert session.variable("figures").value == []
            assert session.variable("unmoved").value is True
        finally:
            session.close()
    finally:
        zygote.close()


def network_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.e2e
def test_each_zygote_keeps_its_sandboxes_in_an_empty_network_namespace_of_its_own() -> None:
    """Two zygotes of one seed: is each in a network namespace that is neither the grader's nor
    the other's, with no interface but loopback (down), and are its sandboxes, one after another,
    cloned into it (a namespace per sandbox cost as much as 2 % of a class's CPU to make and tear
    down)? And does a sandbox still get no socket at all?"""
    seed = Seed()
    zygotes = [Zygote(seed=seed.requests), Zygote(seed=seed.requests)]
    probe = (
        "import socket\n"
        "interfaces = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:])\n"
        "try:\n"
        "    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    opened = 'opened'\n"
        "except OSError as error:\n"
        "    opened = type(error).__name__\n"
    )
    try:
        if not all(zygote.isolation.get("kind") in ("root", "userns") for zygote in zygotes):
            pytest.skip("this machine gives sandboxes no namespaces")
        ours = network_namespace(os.getpid())
        zygote_networks = [network_namespace(zygote.pid) for zygote in zygotes]
        assert len({ours, *zygote_networks}) == 3, zygote_networks
        for zygote, network in zip(zygotes, zygote_networks, strict=True):
            for _ in range(2):
                session = Submission(zygote, [CodeCell(0, probe)])
                session.start()
                try:
                    assert session._pid is not None and network_namespace(session._pid) == network
                    assert session.variable("interfaces").value == ["lo"]
                    assert session.variable("opened").value == "PermissionError"
                finally:
                    session.close()
    finally:
        for zygote in zygotes:
            zygote.close()
        seed.close()


@pytest.mark.e2e
def test_a_zygote_ends_with_its_worker_and_the_seed_goes_on() -> None:
    """A worker gone (its end of the zygote closed, as when it is killed): does its zygote end, its
    sandboxes with it, while the seed still forks a zygote for the worker that replaces it?"""
    seed = Seed()
    try:
        first = Zygote(seed=seed.requests)
        channel, sandbox = first.spawn(Limits())
        first.control.close()  # the worker's end, as the kernel closes it when the worker dies
        deadline = time.monotonic() + 10
        while not all(ended(pid) for pid in (first.pid, sandbox)) and time.monotonic() < deadline:
            time.sleep(0.05)
        channel.close()
        assert ended(first.pid) and ended(sandbox)
        second = Zygote(seed=seed.requests)
        try:
            assert second.process is None and answers(second) == 42
        finally:
            second.close()
    finally:
        seed.close()


@pytest.mark.e2e
def test_without_an_answering_seed_a_worker_starts_its_own_zygote() -> None:
    """The seed gone (killed, or never started): does the worker's zygote still start, its own?"""
    seed = Seed()
    seed.process.kill()
    seed.process.wait()
    zygote = Zygote(seed=seed.requests)
    try:
        assert zygote.process is not None and zygote.pid == zygote.process.pid
        assert answers(zygote) == 42
    finally:
        zygote.close()
        seed.requests.close()


@pytest.mark.e2e
def test_a_seed_that_dies_before_its_zygote_is_ready_is_replaced() -> None:
    """The seed killed right after a worker asked it (before or after it forked the zygote): does
    the worker, waiting only when it needs its zygote, start one of its own that works?"""
    seed = Seed()
    zygote = Zygote(seed=seed.requests, later=True)
    seed.process.kill()
    seed.process.wait()
    try:
        assert answers(zygote) == 42
        assert zygote.process is not None and zygote.isolated
    finally:
        zygote.close()
        seed.requests.close()


# What a cell can read of its own process without any privilege: the command line (sys.argv, and
# the kernel's copy in /proc/self/cmdline), the environment, and every object reachable from the
# frames it runs under (the zygote's and the sandbox server's locals and globals), three levels deep.
FIND_IN_MEMORY = r"""
import os, sys
_marker, _found, _seen = "".join(reversed(REVERSED)), [], set()  # never spelled out in the cell's own text
def _look(where, value, depth):
    if value is _marker or id(value) in _seen or depth > 3:
        return
    _seen.add(id(value))
    if isinstance(value, (str, bytes)):
        if (_marker if isinstance(value, str) else _marker.encode()) in value:
            _found.append(where)
    elif isinstance(value, dict):
        for _key, _item in list(value.items())[:2000]:
            _look(f"{where}[{_key!r}]"[:200], _item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for _index, _item in enumerate(list(value)[:2000]):
            _look(f"{where}[{_index}]"[:200], _item, depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type(sys)):
        _look(f"{where}.__dict__", vars(value), depth + 1)
_look("sys.argv", sys.argv, 0)
for _name in ("cmdline", "environ"):
    try:
        _look(f"/proc/self/{_name}", open(f"/proc/self/{_name}", "rb").read(), 0)
    except OSError:
        pass
_frame = sys._getframe()
while _frame is not None:
    _look(f"{_frame.f_code.co_name} locals", dict(_frame.f_locals), 0)
    _look(f"{_frame.f_code.co_name} globals", {k: v for k, v in _frame.f_globals.items() if k.isupper() or k in ("config", "_LAYER")}, 0)
    _frame = _frame.f_back
found = sorted(set(_found))
"""


@pytest.mark.e2e
@pytest.mark.parametrize("with_seed", [False, True], ids=["own-zygote", "seed"])
def test_a_sandbox_finds_no_hidden_folder_in_its_own_memory(tmp_path: Path, with_seed: bool) -> None:
    """Issue 37: the folders the zygote hides (the course, the class, OUT) are in its
    configuration; once its sandboxes' view is built, does a sandbox still find them on its
    command line, in its environment or in the objects its frames reach?"""
    marker = f"attnkit-hidden-{os.getpid()}-{int(with_seed)}"
    hidden = [tmp_path / marker / name for name in ("course", "submitted", "out")]
    for folder in hidden:
        folder.mkdir(parents=True)
    seed = Seed() if with_seed else None
    zygote = Zygote(hide=[str(folder) for folder in hidden], seed=seed.requests if seed else None, trusted=True)
    try:
        assert (zygote.process is None) == with_seed
        session = Submission(zygote, [CodeCell(0, FIND_IN_MEMORY.replace("REVERSED", repr(marker[::-1])))])
        session.start()
        try:
            found = session.variable("found").value
        finally:
            session.close()
    finally:
        zygote.close()
        if seed is not None:
            seed.close()
    assert found == [], found
