"""Can one hostile student's notebook hurt the class, the grader or the machine, or buy points?

One class of students is graded in one real `attnkit grade` run: two bystanders (copies of the
solution) and attackers (the release notebook with its stubs, or the solution, or an honest
"garbage" answer, each with attack cells added; see tests/support/attacks/). A second run grades the
bystanders and the attackers' base notebooks alone: the clean scores everything is compared with.
Probe cells report what they managed to do (see attacks.probes); the host is checked from outside
(processes, files, sockets, shared memory).

Weaknesses this suite found (a per-process memory limit, host scratch folders, a reply dripped
one byte a second, a huge forged header, a function that always raises ValueError) were fixed;
their tests stay as regressions. A new weakness goes in as a strict xfail naming it and a fix.
"""

from __future__ import annotations

import csv
import ctypes
import hashlib
import html
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, RELEASE, ROOT, SOLUTION, Student, cell_source, load, probes, replace_cell, with_cells, write_class
from attacks import cells as C
from attnkit.boundary.policy import DEFAULT_MAX_PROCESSES

pytestmark = pytest.mark.e2e

if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox's isolation (namespaces, /proc, rlimits) is Linux-only", allow_module_level=True)

BIN = Path(sys.executable).parent
MEMORY_MB = 1024
LIMITS = ["--cell-timeout", "3", "--call-timeout", "3", "--memory-mb", str(MEMORY_MB)]
NOBODY = 65534
SECRET_NAME = "ATTNKIT_ADV_SECRET"
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000


def namespaces_available() -> bool:
    """Can this machine give a sandbox its own PID, mount and network namespaces (root, allowed)?"""
    if os.geteuid() != 0:
        return False
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        os._exit(0 if libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET) == 0 else 1)
    return os.waitpid(pid, 0)[1] == 0


ISOLATED = namespaces_available()
NEEDS_ISOLATION = pytest.mark.skipif(
    not ISOLATED,
    reason="needs root and unshare(): without namespaces the sandbox runs as the grader's own user and sees its files, so these attacks are not even attempted",
)


# -- the class --------------------------------------------------------------------------------------
@dataclass
class Setting:
    """Everything the attack notebooks are written against."""

    tag: str
    submitted: Path
    out: Path
    host_port: int
    bind_port: int
    udp_port: int
    shm_key: int

    @property
    def marker(self) -> str:
        return f"advstray{self.tag}"  # <= 15 characters: it is also a process name (comm)


def garbage(prelude: str):
    """The solution notebook with every answer replaced by a well-shaped wrong one."""
    notebook = load(SOLUTION)
    for grade_id, source in C.GARBAGE.items():
        notebook = replace_cell(notebook, grade_id, source)
    return with_cells(notebook, [prelude])


def students(s: Setting) -> list[Student]:
    solution, release = load(SOLUTION), load(RELEASE)
    honest_attention = cell_source(solution, "scaled_attention")
    everyone = [
        Student("bystander_a", lambda: solution, "solution", "none: a copy of the solution"),
        Student("bystander_b", lambda: solution, "solution", "none: a copy of the solution"),
        Student(
            "hang_cell",
            lambda: with_cells(release, [C.markup_error(f"ADVXSS{s.tag}"), C.loop_forever()]),
            "release",
            "while True: pass at top level (after a cell whose error message is HTML)",
        ),
        Student(
            "hang_call",
            lambda: replace_cell(solution, "scaled_attention", C.hanging_scaled_attention(honest_attention)),
            "solution",
            "scaled_attention never returns on one hidden test's input",
        ),
        Student(
            "memory_hog",
            lambda: with_cells(solution, [C.memory_in_children(3, 500), C.huge_tensor(), C.list_growth(), C.fork_bomb(4 * DEFAULT_MAX_PROCESSES)]),
            "solution",
            "torch.empty(50 GiB), a list grown until MemoryError, children touching 3 x 500 MB, a fork bomb",
        ),
        Student(
            "exits",
            lambda: with_cells(solution, [C.hard_exit(), C.sys_exit(), C.keyboard_interrupt()]),
            "solution",
            "os._exit(0), sys.exit(1), raise KeyboardInterrupt at top level",
        ),
        Student(
            "exit_in_call",
            lambda: replace_cell(release, "scaled_attention", C.exit_in_every_call()),
            "release",
            "scaled_attention calls os._exit(0)",
        ),
        Student(
            "stray",
            lambda: with_cells(release, [C.forked_daemon(s.marker), C.spawned_daemons(s.marker, f"300.{s.tag[:4]}")]),
            "release",
            "double fork + setsid, Popen(sleep/sh) in new sessions, writing a marker file forever",
            {"isolation"},
        ),
        Student(
            "vandal",
            lambda: with_cells(
                release,
                [
                    C.fake_results(str(s.out), str(s.submitted), "vandal", "bystander_a", ASSIGNMENT),
                    C.delete_everything(str(s.out), str(s.submitted), str(ROOT), ROOT.stat().st_uid),
                    C.leave_traces(s.marker, s.shm_key),
                ],
            ),
            "release",
            "fake results.json/grades.csv everywhere, rmtree of OUT, submissions and the project, host traces",
            {"isolation"},
        ),
        Student(
            "snoop",
            lambda: with_cells(release, [C.snoop(str(ROOT), str(s.submitted), str(s.out), "bystander_a", ASSIGNMENT, SECRET_NAME)]),
            "release",
            "reads the hidden tests, imports them, searches memory and disk, reads the environment",
            {"isolation"},
        ),
        Student(
            "network",
            lambda: with_cells(release, [C.network(s.host_port, s.bind_port, s.udp_port)]),
            "release",
            "TCP to the host's loopback and 1.1.1.1, DNS, UDP, a listening socket",
            {"isolation"},
        ),
        Student(
            "flood",
            lambda: replace_cell(
                with_cells(
                    release,
                    [C.flood_print(), C.flood_dunder_stdout(), C.flood_fd(1), C.flood_fd(2), C.flood_stderr(), C.markup_error(f"ADVXSS{s.tag}")],
                ),
                "scaled_attention",
                C.flooding_scaled_attention(f"ADVXSS{s.tag}"),
            ),
            "release",
            "64 MB on print, sys.__stdout__, fds 1 and 2, stderr; HTML in error messages",
        ),
        Student(
            "value_error",
            lambda: replace_cell(release, "scaled_attention", C.always_value_error()),
            "release",
            "scaled_attention only ever raises ValueError",
        ),
        Student(
            "monkeypatch",
            # The work whose usage it then hides first: with isinstance patched, IPython cannot run
            # a later cell (the sandbox itself goes on answering: json's C encoder, which frames
            # its replies, never calls the patched builtin).
            lambda: with_cells(release, [C.forged_usage(), C.monkeypatch_checker()]),
            "release",
            "torch/numpy/math comparisons and isinstance patched, resource.getrusage made to report nothing",
        ),
        Student("liar", lambda: garbage(C.LIAR_PRELUDE), "garbage", "wrong answers wrapped in a Tensor subclass / objects that equal anything"),
        Student("syntax_error", lambda: with_cells(release, ["def broken(:\n    pass\n"]), "release", "a cell that is a syntax error"),
        Student("bad_json", lambda: RELEASE.read_text(encoding="utf-8")[:5000], "none", "a notebook whose JSON is cut off"),
        Student("empty", lambda: '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n', "none", "a notebook with no cells"),
    ]
    return [student for student in everyone if ISOLATED or "isolation" not in student.tags]


def clean_students() -> list[Student]:
    """The bystanders and the attackers' base notebooks, graded with no attacker around."""
    solution, release = load(SOLUTION), load(RELEASE)
    return [
        Student("bystander_a", lambda: solution, "solution", ""),
        Student("bystander_b", lambda: solution, "solution", ""),
        Student("base_release", lambda: release, "release", ""),
        Student("base_garbage", lambda: garbage(C.HONEST_GARBAGE_PRELUDE), "garbage", ""),
    ]


# -- running the grader -------------------------------------------------------------------------------
@dataclass
class Graded:
    out: Path
    returncode: int | None  # None: killed at its time limit
    seconds: float
    stderr: str
    started: float  # seconds since boot, to date processes
    results: dict[str, dict] = field(default_factory=dict)
    grades: dict[str, dict] = field(default_factory=dict)

    def score(self, student_id: str) -> float:
        return float(self.results[student_id]["score"])


def uptime() -> float:
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0])


def grade(submitted: Path, out: Path, jobs: int = 2, extra_env: dict | None = None, timeout: float = 300) -> Graded:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(extra_env or {}))
    command = [str(BIN / "attnkit"), "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", str(jobs), "--quiet", "--force", *LIMITS]
    started, clock = uptime(), time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the grader, its workers and zygotes: one group we started
        _, stderr = process.communicate()
        returncode = None
    graded = Graded(out, returncode, time.monotonic() - clock, stderr, started)
    for path in sorted(out.glob(f"students/*/{ASSIGNMENT}/results.json")):
        graded.results[path.parent.parent.name] = json.loads(path.read_text(encoding="utf-8"))
    if (out / "grades.csv").is_file():
        with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
            graded.grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    return graded


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- watching the host from outside --------------------------------------------------------------------
class HostWatch:
    """Listeners and a prober on the host's loopback while the attack run is going on."""

    def __init__(self, bind_port: int) -> None:
        self.stop = threading.Event()
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen()
        self.tcp.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.bind_port = bind_port
        self.accepted: list[str] = []
        self.datagrams: list[bytes] = []
        self.reached_sandbox_listener = 0
        self.threads = [threading.Thread(target=target, daemon=True) for target in (self._accept, self._receive, self._probe)]

    @property
    def host_port(self) -> int:
        return self.tcp.getsockname()[1]

    @property
    def udp_port(self) -> int:
        return self.udp.getsockname()[1]

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, peer = self.tcp.accept()
                self.accepted.append(str(peer))
                connection.close()
            except OSError:
                pass

    def _receive(self) -> None:
        while not self.stop.is_set():
            try:
                self.datagrams.append(self.udp.recv(100))
            except OSError:
                pass

    def _probe(self) -> None:
        """Is a socket that a sandbox listens on reachable from the host?"""
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.bind_port), timeout=0.2):
                    self.reached_sandbox_listener += 1
            except OSError:
                pass
            time.sleep(0.05)

    def __enter__(self) -> HostWatch:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=2)
        self.tcp.close()
        self.udp.close()


@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    started: float  # seconds since boot
    comm: str
    cmdline: str


def processes() -> dict[int, Proc]:
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/status") as handle:
                uid = next(int(line.split()[1]) for line in handle if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry)] = Proc(int(entry), int(fields[1]), uid, int(fields[19]) / ticks, comm, cmdline)
    return found


def strays(marker: str, since: float) -> list[Proc]:
    """Processes the attack run left behind: anything carrying the marker, and any process of
    user nobody started since ``since`` that no live zygote owns (somebody else's grading run
    may be going on: its sandboxes hang below a root-owned ``attnkit.sandbox.zygote``)."""
    table = processes()

    def owned_by_live_zygote(proc: Proc) -> bool:
        seen = set()
        while proc.ppid in table and proc.pid not in seen:
            seen.add(proc.pid)
            proc = table[proc.ppid]
            if proc.uid == 0 and "attnkit.sandbox.zygote" in proc.cmdline:
                return True
        return False

    return [
        proc
        for proc in table.values()
        if proc.pid != os.getpid()
        and (marker in proc.comm or marker in proc.cmdline or (proc.uid == NOBODY and proc.started >= since and not owned_by_live_zygote(proc)))
    ]


def wait_for_no_strays(marker: str, since: float, seconds: float = 5.0) -> list[Proc]:
    deadline = time.monotonic() + seconds
    while (left := strays(marker, since)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def shared_memory(key: int) -> list[dict[str, int]]:
    """SysV shared-memory segments with ``key`` (the host's IPC namespace)."""
    try:
        lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return []
    header = lines[0].split()
    rows = [dict(zip(header, map(int, line.split()[: len(header)]), strict=False)) for line in lines[1:] if line.split()]
    return [row for row in rows if row["key"] == key]


TRACE_FOLDERS = ("/var/tmp", "/dev/shm", "/run/lock")


def traces(marker: str) -> list[str]:
    return [f"{folder}/{marker}" for folder in (*TRACE_FOLDERS, "/tmp") if os.path.lexists(f"{folder}/{marker}")]


def remove_traces(setting: Setting) -> None:
    for path in traces(setting.marker):
        try:
            os.unlink(path)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    for segment in shared_memory(setting.shm_key):
        libc.shmctl(segment["shmid"], 0, None)  # IPC_RMID: the segment our attack created


# -- the module's two runs -----------------------------------------------------------------------------
@dataclass
class World:
    setting: Setting
    roster: list[Student]
    clean: Graded
    attack: Graded
    before: dict[str, str]
    after: dict[str, str]
    watch: HostWatch
    left_processes: list[Proc]
    left_traces: list[str]
    left_shared_memory: list[dict[str, int]]

    def base_score(self, student: Student) -> float:
        return {
            "solution": self.clean.score("bystander_a"),
            "release": self.clean.score("base_release"),
            "garbage": self.clean.score("base_garbage"),
            "none": 0.0,
        }[student.base]

    def results(self, student_id: str) -> dict:
        return self.attack.results[student_id]

    def probe(self, student_id: str, name: str) -> dict:
        found = probes(self.results(student_id))
        assert name in found, f"{student_id}'s probe {name!r} did not report (cells: {self.results(student_id)['cells']})"
        return found[name]


def workspace_root() -> Path:
    """A world-readable folder outside /tmp, like a TA's course folder: the sandbox has its own
    /tmp, so only a folder elsewhere tests that OUT and the submissions are hidden from it."""
    for parent in ("/var/tmp", None):
        try:
            folder = Path(tempfile.mkdtemp(prefix="attnkit-adv-", dir=parent))
            folder.chmod(0o755)
            return folder
        except OSError:
            continue
    raise RuntimeError("no temporary folder")


@pytest.fixture(scope="module")
def world() -> World:
    root = workspace_root()
    tag = secrets.token_hex(3)
    bind_port = free_port()
    watch = HostWatch(bind_port)
    setting = Setting(
        tag=tag,
        submitted=root / "submitted",
        out=root / "out",
        host_port=watch.host_port,
        bind_port=bind_port,
        udp_port=watch.udp_port,
        shm_key=0x41440000 + secrets.randbelow(0xFFFF),
    )
    left: list[Proc] = []
    try:
        roster = students(setting)
        write_class(setting.submitted, roster)
        write_class(root / "clean-submitted", clean_students())
        before = hashes(setting.submitted)
        clean = grade(root / "clean-submitted", root / "clean-out")
        with watch:
            attack = grade(setting.submitted, setting.out, extra_env={SECRET_NAME: f"s3cr3t-{tag}"})
        left = wait_for_no_strays(setting.marker, attack.started)
        for name, run in (("clean", clean), ("attack", attack)):
            if run.returncode != 0:
                print(f"\n[adversarial] the {name} run exited {run.returncode}: {run.stderr[-3000:]}", file=sys.stderr)
        print(
            f"\n[adversarial] clean run {clean.seconds:.1f} s ({len(clean.results)} students), "
            f"attack run {attack.seconds:.1f} s ({len(attack.results)} students): "
            + ", ".join(f"{sid} {r['score']:g} ({r['seconds']:.1f} s)" for sid, r in sorted(attack.results.items())),
            file=sys.stderr,
        )
        for student_id, results in sorted(attack.results.items()):
            for name, report in probes(results).items():
                print(f"[adversarial] {student_id} probe {name}: {json.dumps(report, ensure_ascii=False)}", file=sys.stderr)
        yield World(setting, roster, clean, attack, before, hashes(setting.submitted), watch, left, traces(setting.marker), shared_memory(setting.shm_key))
    finally:
        for proc in left:  # processes our own attack started; by pid, never by name
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        remove_traces(setting)
        shutil.rmtree(root, ignore_errors=True)


def attack_cells(count: int) -> list[int]:
    """Notebook positions of ``count`` cells added by ``with_cells`` (after the imports cell)."""
    first = next(i for i, cell in enumerate(load(RELEASE).cells) if cell.cell_type == "code") + 1
    return list(range(first, first + count))


def roster_ids(kind: str | None = None) -> list[str]:
    dummy = Setting("000000", Path("/x"), Path("/y"), 1, 2, 3, 4)
    return [s.student_id for s in students(dummy) if not s.student_id.startswith("bystander") and (kind is None or s.base == kind)]


# -- the batch as a whole ---------------------------------------------------------------------------------
def test_the_batch_completes(world: World) -> None:
    """Does the class grade to the end (exit 0), with a grades.csv row, a results.json and a
    feedback page for every student, attackers included?"""
    attack = world.attack
    assert attack.returncode == 0, f"attnkit grade exited {attack.returncode}: {attack.stderr[-2000:]}"
    expected = {s.student_id for s in world.roster}
    assert set(attack.grades) == expected
    assert set(attack.results) == expected
    for student_id in expected:
        assert (attack.out / "students" / student_id / ASSIGNMENT / "feedback.html").is_file()
        assert float(attack.grades[student_id]["score"]) == attack.score(student_id)
    assert (attack.out / "report.html").is_file()
    assert attack.seconds < 240, f"the attack run took {attack.seconds:.0f} s"
    assert world.clean.returncode == 0, world.clean.stderr[-2000:]
    assert set(world.clean.results) == {s.student_id for s in clean_students()}


def test_bystanders_keep_their_scores(world: World) -> None:
    """Do the bystanders get exactly the score, and the same passed and failed tests, as when
    they are graded with no attacker in the class?"""
    for student_id in ("bystander_a", "bystander_b"):
        clean, attacked = world.clean.results[student_id], world.results(student_id)
        assert attacked["score"] == clean["score"] == clean["max_score"]
        assert [(t["name"], t["status"]) for t in attacked["tests"]] == [(t["name"], t["status"]) for t in clean["tests"]]
        assert attacked["problems"] == [] and attacked["cells"] == []


@pytest.mark.parametrize("student_id", roster_ids())
def test_attackers_gain_nothing(world: World, student_id: str) -> None:
    """Does no attacker score above the same notebook without its attack (and does every attack
    on the stubs score exactly 0)?"""
    student = next(s for s in world.roster if s.student_id == student_id)
    score, base = world.attack.score(student_id), world.base_score(student)
    assert score <= base, f"{student_id} ({student.attack}) scored {score} > {base}"
    if student.base in ("release", "none"):
        assert score == 0, f"{student_id} ({student.attack}) scored {score} on stubs"


def test_submissions_are_byte_identical(world: World) -> None:
    """Is every submitted file, attackers' own included, byte-identical after grading, with no
    file added or removed?"""
    assert world.after == world.before


def test_out_holds_only_the_graders_files(world: World) -> None:
    """Does OUT contain only what the grader wrote (no fake results.json or grades.csv), and do
    grades.csv and each results.json agree?"""
    out = world.attack.out
    expected = {"grades.csv", "report.html", "skipped.json", ".attnkit.lock"} | {  # the lock: one run per OUT
        f"students/{s.student_id}/{ASSIGNMENT}/{name}" for s in world.roster for name in ("results.json", "feedback.html")
    }
    found = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert found == expected
    for student_id, row in world.attack.grades.items():
        assert float(row["score"]) == world.attack.score(student_id)
        assert world.results(student_id)["student_id"] == student_id


# -- hangs, exits, memory --------------------------------------------------------------------------------
def test_top_level_infinite_loop(world: World) -> None:
    """Is a cell that loops forever stopped at the cell time limit and reported, and the
    student still graded (0 on stubs)?"""
    results = world.results("hang_cell")
    timeouts = [c for c in results["cells"] if c["error_type"] == "__timeout__"]
    assert timeouts, results["cells"]
    assert results["score"] == 0


def test_hanging_call_is_named_and_the_rest_grades(world: World) -> None:
    """When scaled_attention hangs on one hidden test's input, does only that test lose its
    points, with a time-out message that feedback.html shows next to the test's name?"""
    clean = {t["name"]: t for t in world.clean.results["bystander_a"]["tests"]}
    results = world.results("hang_call")
    lost = [t for t in results["tests"] if t["status"] != clean[t["name"]]["status"]]
    assert lost, "the hanging input was never used: the attack did not run"
    assert all("超时" in t["output"] for t in lost), [(t["name"], t["output"]) for t in lost]
    assert results["score"] == world.clean.score("bystander_a") - sum(t["max_score"] for t in lost)
    feedback = (world.attack.out / "students" / "hang_call" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    for test in lost:
        assert html.escape(test["name"], quote=False) in feedback
    assert results["sandbox"]["restarts"] >= 1


def test_memory_hogs_fail_alone(world: World) -> None:
    """Do a 50 GiB tensor and a list grown without end fail inside the student's sandbox
    (MemoryError / RuntimeError or a restarted sandbox) without stopping the batch?"""
    failed = {c["index"]: c for c in world.results("memory_hog")["cells"]}
    huge, growth = attack_cells(3)[1:]
    for index in (huge, growth):
        assert index in failed, (index, failed)
        assert failed[index]["error_type"] in ("RuntimeError", "MemoryError", "__crashed__", "__timeout__"), failed[index]
    assert world.attack.returncode == 0


def test_exits_are_recorded_and_survived(world: World) -> None:
    """Are os._exit(0), sys.exit(1) and KeyboardInterrupt in top-level cells recorded as failed
    cells while the rest of the notebook still runs and grades?"""
    results = world.results("exits")
    kinds = [c["error_type"] for c in results["cells"]]
    assert kinds == ["__crashed__", "SystemExit", "KeyboardInterrupt"], results["cells"]
    assert results["sandbox"]["restarts"] == 1
    assert results["score"] == world.clean.score("bystander_a")


def test_exit_in_every_call_gives_up(world: World) -> None:
    """Does a function that kills its process on every call cost a bounded number of restarts,
    then fail fast, and score 0?"""
    results = world.results("exit_in_call")
    assert results["score"] == 0
    assert results["sandbox"]["restarts"] <= 3


# -- isolation ----------------------------------------------------------------------------------------
@NEEDS_ISOLATION
def test_every_sandbox_is_isolated(world: World) -> None:
    """Did every sandbox get its own user, PID, network and IPC namespaces, a private /proc, an
    allowlisted read-only root, uid nobody with no capabilities, and resource limits?"""
    for student_id, results in world.attack.results.items():
        isolation = results["sandbox"].get("isolation")
        if isolation is None:  # bad_json, empty: nothing ran
            continue
        needed_items = (
            "user-namespace",
            "pid-namespace",
            "no-network",
            "no-ipc",
            "private-proc",
            "allowlisted-root",
            "uid-nobody",
            "no-capabilities",
            "resource-limits",
            "cgroup-memory-and-pids",
        )
        for needed in needed_items:
            assert needed in isolation, (student_id, isolation)


@NEEDS_ISOLATION
def test_no_process_outlives_grading(world: World) -> None:
    """Does every process a student forks or spawns (double fork, setsid, new sessions) die with
    the sandbox: no process of user nobody and none carrying the marker survives the run?"""
    forked, spawned = attack_cells(2)
    failed = {c["index"]: c for c in world.results("stray")["cells"] if c["index"] in (forked, spawned)}
    assert forked not in failed, f"the fork attack could not even start: {failed[forked]}"
    # Programs to spawn (sleep, /bin/sh) do not exist in the sandbox's allowlisted root at all.
    assert spawned not in failed or failed[spawned]["error_type"] == "FileNotFoundError", failed[spawned]
    assert world.left_processes == []
    assert not os.path.exists(f"/tmp/{world.setting.marker}"), "the sandbox's /tmp is the host's"


@NEEDS_ISOLATION
def test_fake_results_land_nowhere(world: World) -> None:
    """Can a student write results.json or grades.csv into OUT or into the submissions (its
    own or another student's)? Writing into its own working directory and /tmp is allowed
    (they are private to the sandbox) and must not reach the host."""
    world.probe("vandal", "fake_results")
    # Where OUT and the submissions lie in a world-writable folder (here /var/tmp), the sandbox
    # sees an empty private copy of that folder and its writes "succeed" there: what matters is
    # the host's side, checked below and in test_submissions_are_byte_identical.
    grades = (world.attack.out / "grades.csv").read_text(encoding="utf-8")
    assert "vandal,ch19-attention,0," in grades and ",100,100\n" not in grades.replace("bystander", "")
    assert "<html" in (world.attack.out / "report.html").read_text(encoding="utf-8").lower()
    for student_id in ("vandal", "bystander_a"):
        results = json.loads((world.attack.out / "students" / student_id / ASSIGNMENT / "results.json").read_text(encoding="utf-8"))
        assert results["tests"], f"{student_id}'s results.json is the grader's, not a forgery"
    assert not (world.setting.submitted / "vandal" / ASSIGNMENT / "results.json").exists()
    assert world.after == world.before
    for path in ("/tmp/results.json", "/tmp/grades.csv"):
        assert not (os.path.exists(path) and os.stat(path).st_uid == NOBODY), f"{path} written on the host by the sandbox"
    assert world.attack.score("vandal") == 0
    assert world.results("bystander_a")["score"] == world.clean.score("bystander_a")


@NEEDS_ISOLATION
def test_nothing_can_be_deleted(world: World) -> None:
    """Does rmtree on OUT, the submissions, autograder/, src/ and the whole project fail, with
    every one of them still there afterwards?"""
    report = world.probe("vandal", "delete")
    assert report["euid"] == NOBODY
    for target in ("autograder", "src", "project"):
        assert not report[target].startswith("ok"), (target, report[target])
    # OUT and the submissions: the sandbox only reaches its private copy of /var/tmp, if that is
    # where they lie; on the host they must be whole.
    assert (world.attack.out / "grades.csv").is_file()
    for path in (
        "autograder/ch19_attention/catalogue.py",
        "autograder/ch19_attention/reference.py",
        "src/attnkit/engine/fan_out.py",
        "solutions",
        "assignments",
        "pyproject.toml",
    ):
        assert (ROOT / path).exists(), path
    assert world.after == world.before


@NEEDS_ISOLATION
def test_hidden_tests_stay_hidden(world: World) -> None:
    """Can a student open, list, import, find on disk or find in memory the hidden tests, the
    reference, the solutions, the grader's code, another student's notebook or OUT?"""
    report = world.probe("snoop", "snoop")
    for action in (
        "open_reference",
        "open_catalogue",
        "open_solution",
        "open_engine",
        "read_victim",
        "import_reference",
        "import_catalogue",
        "import_checks",
        "import_ch19_attention",
        "import_ch19_attention.reference",
        "import_ch19_attention.catalogue",
        "import_attnkit",
        "import_attnkit.assignment.checks",
        "import_attnkit.engine.fan_out",
        "import_attnkit.grading.plugin",
    ):
        assert not report[action].startswith("ok"), (action, report[action])
    for folder in ("list_autograder", "list_submitted", "list_out"):  # refused, or an empty mount over it
        assert report[folder] == "ok:[]" or not report[folder].startswith("ok"), (folder, report[folder])
    assert report["gc_hidden"] == [] and report["sys_modules_hidden"] == []
    assert report["readable_hidden_files"] == [] and report["glob_catalogue"] == []
    assert report["walked_dirs"] > 0, "the disk search did not run"
    assert report["euid"] == NOBODY
    assert world.attack.score("snoop") == 0


@NEEDS_ISOLATION
def test_no_network(world: World) -> None:
    """Can a sandbox reach the host's loopback, a public address or DNS, or offer a socket the
    host can connect to?"""
    report = world.probe("network", "network")
    for action in ("connect_host_loopback", "connect_public_ip", "dns"):
        assert not report[action].startswith("ok"), (action, report[action])
    assert not report["listen"].startswith("ok:accepted"), report["listen"]
    assert world.watch.accepted == [] and world.watch.datagrams == []
    assert world.watch.reached_sandbox_listener == 0
    assert world.attack.score("network") == 0


# -- output, markup, fooling the checker -------------------------------------------------------------------
def test_output_floods_are_bounded(world: World) -> None:
    """Does 64 MB written to print, sys.__stdout__, fds 1 and 2 and stderr (and printed on every
    call) leave results.json, feedback.html and report.html small and the grading quick?"""
    folder = world.attack.out / "students" / "flood" / ASSIGNMENT
    assert (folder / "results.json").stat().st_size < 1_000_000
    assert (folder / "feedback.html").stat().st_size < 1_000_000
    assert [c["index"] for c in world.results("flood")["cells"] if c["index"] in attack_cells(6)], "no flood cell ran"
    assert (world.attack.out / "report.html").stat().st_size < 2_000_000
    results = world.results("flood")
    assert all(len(c["output"]) <= 21_000 and len(c["message"]) <= 2_000 for c in results["cells"])
    assert all(len(t["output"]) <= 5_000 for t in results["tests"])


def test_student_markup_is_escaped(world: World) -> None:
    """Is HTML in a student's error messages shown as text, never as markup, in the student's
    feedback page and the TA's class report?"""
    marker = f"ADVXSS{world.setting.tag}"
    pages = [world.attack.out / "students" / student / ASSIGNMENT / "feedback.html" for student in ("flood", "hang_cell")]
    for page in (*pages, world.attack.out / "report.html"):  # hang_cell is listed among the broken
        text = page.read_text(encoding="utf-8")
        assert f"&lt;script&gt;{marker}" in text, f"{page.name}: the message never arrived"
        assert f"<script>{marker}" not in text and "<img src=x" not in text, page.name


def test_lies_buy_nothing(world: World) -> None:
    """Do a Tensor subclass whose __eq__/__bool__/allclose lie, and answers that equal anything,
    score exactly what the same wrong answers score as plain values, test by test?"""
    honest = [(t["name"], t["status"]) for t in world.clean.results["base_garbage"]["tests"]]
    lying = [(t["name"], t["status"]) for t in world.results("liar")["tests"]]
    assert lying == honest
    assert world.attack.score("liar") == world.clean.score("base_garbage") < world.clean.score("bystander_a")


def test_monkeypatching_the_checker_buys_nothing(world: World) -> None:
    """Does patching torch.allclose/equal/isclose, Tensor.__eq__, torch.testing.assert_close,
    numpy and math comparisons and builtins.isinstance in the notebook leave the stubs at 0?"""
    results = world.results("monkeypatch")
    assert results["score"] == 0
    assert all(t["status"] == "failed" for t in results["tests"])


def test_the_sandbox_cannot_forge_its_usage(world: World) -> None:
    """After ~0.3 s of CPU and 200 MB touched, and resource.getrusage patched to report nothing,
    does results.json still show the CPU time and peak memory the kernel counted?"""
    usage = world.results("monkeypatch")["sandbox"]
    assert usage.get("cpu_seconds", 0) >= 0.3, usage
    assert usage.get("max_rss_kb", 0) >= 200 * 1024, usage


def test_broken_notebooks_score_zero_with_a_reason(world: World) -> None:
    """Do a syntax-error cell, a notebook whose JSON is invalid and a notebook with no cells
    each score 0 with the reason recorded (in cells or problems)?"""
    syntax = world.results("syntax_error")
    assert syntax["score"] == 0 and any(c["error_type"] == "SyntaxError" for c in syntax["cells"])
    for student_id in ("bad_json", "empty"):
        results = world.results(student_id)
        assert results["score"] == 0 and results["problems"], results["problems"]
    assert "JSON" in " ".join(world.results("bad_json")["problems"])


# -- weaknesses found by this suite, fixed in the engine: kept as regressions --------------------------------
@NEEDS_ISOLATION
def test_memory_limit_covers_forked_children(world: World) -> None:
    """Does --memory-mb bound the whole submission, children included?"""
    report = world.probe("memory_hog", "fork_memory")
    assert report["total_private_mb"] <= MEMORY_MB, report


@NEEDS_ISOLATION
def test_a_fork_bomb_gets_no_more_than_its_process_cap(world: World) -> None:
    """Does a submission forking four times its process cap stop below the cap (the kernel's
    "try again"), while the bystanders graded beside it, whose swapped re-runs need forks of their
    own, still score full marks?"""
    report = world.probe("memory_hog", "fork_bomb")
    assert 0 < report["children"] < DEFAULT_MAX_PROCESSES and report["error"] == "BlockingIOError", report
    assert world.results("bystander_a")["score"] == world.results("bystander_b")["score"] == 100


@NEEDS_ISOLATION
def test_no_traces_left_on_the_host(world: World) -> None:
    """Does a sandbox leave no files in the host's world-writable folders and no shared memory?"""
    report = world.probe("vandal", "traces")
    assert world.left_traces == [] and world.left_shared_memory == [], (report, world.left_traces, world.left_shared_memory)


@NEEDS_ISOLATION
def test_grader_environment_is_not_visible(world: World) -> None:
    """Is the grader's environment (a secret the TA exported) invisible to student code, and so
    absent from the student's feedback?"""
    report = world.probe("snoop", "snoop")
    assert report["secret"] == ""
    feedback = (world.attack.out / "students" / "snoop" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert f"s3cr3t-{world.setting.tag}" not in feedback


# -- the protocol socket: attacks that, unfixed, break or hang the whole batch ------------------------------
DRIP_LIMIT = 30  # seconds: a one-student class with one hanging cell takes ~10 s once the drip is cut off


@pytest.fixture(scope="module")
def protocol_runs():
    """Two small classes graded side by side, apart from the main run because each attack, when
    the engine gets it wrong, takes the whole batch down (an abort; a run that never ends): a
    bystander with a student who writes a malformed frame on the protocol socket, and a student
    who drips a frame one byte a second."""
    root = workspace_root()
    try:
        solution, release = load(SOLUTION), load(RELEASE)
        write_class(
            root / "forged",
            [
                Student("bystander", lambda: solution, "solution", ""),
                Student("forger", lambda: with_cells(release, [C.forged_frame()]), "release", ""),
            ],
        )
        write_class(root / "drip", [Student("dripper", lambda: with_cells(release, [C.slow_drip()]), "release", "")])
        results: dict[str, Graded] = {}
        threads = [
            threading.Thread(target=lambda: results.__setitem__("forged", grade(root / "forged", root / "forged-out", jobs=1, timeout=120))),
            threading.Thread(target=lambda: results.__setitem__("drip", grade(root / "drip", root / "drip-out", jobs=1, timeout=DRIP_LIMIT))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        yield results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_malformed_frame_costs_only_the_forger(protocol_runs) -> None:
    """Does a student who writes a malformed frame on the protocol socket get graded (0), with
    the batch completing and the bystander in grades.csv?"""
    run = protocol_runs["forged"]
    assert run.returncode == 0, run.stderr[-1000:]
    assert set(run.grades) == {"bystander", "forger"}
    assert run.score("forger") == 0 and run.score("bystander") == run.results["bystander"]["max_score"]
    assert any(c["error_type"] == "__crashed__" for c in run.results["forger"]["cells"]), run.results["forger"]["cells"]


def test_slow_drip_is_cut_off(protocol_runs) -> None:
    """Is a student who sends its reply one byte a second stopped at the cell time limit, and
    the batch finished?"""
    run = protocol_runs["drip"]
    assert run.returncode == 0, f"killed after {run.seconds:.0f} s" if run.returncode is None else run.stderr[-1000:]
    assert run.score("dripper") == 0


def test_decoding_a_hostile_frame_is_cheap() -> None:
    """Does decoding a frame the sandbox wrote cost the trusted side at most a few times its size?"""
    from attnkit.boundary import wire

    count = (2 * 2**20) // 3  # a 2 MB header: [[],[],...]
    header = b"[" + b"[]," * (count - 1) + b"[]]"
    body = struct.pack("!I", 2) + b"[]" + header
    frame = struct.pack("!II", len(body), 0) + body
    tracemalloc.start()
    try:
        wire.decode(frame)
    except wire.ProtocolError:
        return  # refused outright: cheap
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak <= 8 * len(frame), f"decoding {len(frame) / 2**20:.0f} MB took {peak / 2**20:.0f} MB"
