"""Can what a zip, a tar or an LMS download puts in the submissions folder stop the class, reach the
host, or forge a page, a spreadsheet or a gradebook entry?

One real `attnkit grade` run (with --gradebook) of one class: correct bystanders (copies of the
solution, some under hostile ids) next to every hostile case of issue 8: symlinks (to the
solutions, to another student's notebook, to a root-only file, to /dev/zero), a FIFO, a socket, a
device node, a 4 GiB sparse file, names that are not UTF-8, 100,000-level nesting, ids that
collide with class-level outputs or carry markup, `javascript:` or spreadsheet formulas, another
assignment's folder, stray and extra notebooks, symlinked student and assignment folders, and a
submission whose grading kills its worker. A second run grades the bystanders alone: what they
must score. No mocks: real files, real processes, the real command.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from commands import BIN, attnkit, run_command

from attacks import ASSIGNMENT, RELEASE, SOLUTION, load, with_cells, write

if not sys.platform.startswith("linux"):
    pytest.skip("FIFOs, sockets, device nodes and /proc are Linux-specific here", allow_module_level=True)

LIMITS = ["--cell-timeout", "5", "--call-timeout", "5", "--memory-mb", "1024"]
# Largest resident set of any one process of the run (the grader, its workers, their sandboxes).
# Without the size cap, the sparse file or /dev/zero is read whole into the grader: 4 GiB or more.
PEAK_RSS_BYTES = 2 * 1024**3

# Bystanders: the solution, under ordinary and hostile ids. Each must score what it scores alone.
BYSTANDERS = [
    "bystander_a",
    "bystander_b",
    "grades.csv",  # ids equal to class-level outputs
    "report.html",
    "students",
    "skipped.json",
    "<img src=x onerror=alert(1)>",  # markup
    "javascript:alert(1)",  # a URL scheme
    "=1+2",  # spreadsheet formulas
    "@SUM(1)",
    "+1",
    "-2+3",
]
# Hostile submissions of the known assignment: 0, with this (Chinese) reason on their page.
HOSTILE = {
    "link_solution": "符号链接",
    "link_peer": "符号链接",
    "link_secret": "符号链接",
    "link_devzero": "符号链接",
    "fifo": "命名管道",
    "socket_file": "套接字",
    "device_node": "设备文件",
    "sparse_4gib": "文件过大",
    "deep_json": "嵌套层数过深",
    "non_utf8_name": "UTF-8",
    "linked_student": "学生文件夹是符号链接",
    "linked_assignment": "作业文件夹",
    "stray_only": "直接放在了学生文件夹里",
    "ambiguous": "多个笔记本",
}


@dataclass
class Run:
    out: Path
    returncode: int | None
    stderr: str
    peak_rss: int  # bytes, ru_maxrss of the run's processes
    results: dict[str, dict] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)
    kills: int = 0


def socket_inodes(pid: int) -> set[str]:
    found = set()
    for descriptor in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:[") : -1])
    return found


def worker_serving(sandbox: int, workers: list[int]) -> int | None:
    """The worker at the other end of a sandbox's channel. Not an ancestor: the sandbox's zygote is
    a child of the zygotes' seed, beside the workers. Unix sockets' peers as ``ss`` lists them."""
    listing = run_command(["ss", "-xH"], env=os.environ, check=True).stdout
    peers = {fields[5]: fields[7] for fields in map(str.split, listing.splitlines()) if len(fields) >= 8}
    theirs = {peers[inode] for inode in socket_inodes(sandbox) if inode in peers}
    return next((worker for worker in workers if socket_inodes(worker) & theirs), None)


def grade(submitted: Path, out: Path, gradebook: Path | None = None, kill_comm: str = "", timeout: float = 600) -> Run:
    """One real `attnkit grade` run, under a wrapper that reports the peak RSS of its processes.
    With ``kill_comm``, every worker whose sandbox names itself so is killed (SIGKILL), as the
    kernel's OOM killer or a crashing library would."""
    command = [str(BIN / "attnkit"), "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--quiet", "--force", *LIMITS]
    if gradebook is not None:
        command += ["--gradebook", str(gradebook)]
    wrapper = (
        "import resource, subprocess, sys\n"
        "code = subprocess.run(sys.argv[1:]).returncode\n"
        "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    process = subprocess.Popen(
        [sys.executable, "-c", wrapper, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    kills = 0
    stop = threading.Event()

    def killer() -> None:
        nonlocal kills
        try:
            wrapper_process = psutil.Process(process.pid)
        except psutil.Error:
            return
        while not stop.is_set():
            try:
                ours = wrapper_process.children(recursive=True)
                graders = {p.pid for p in ours if p.ppid() == process.pid}
                workers = [p.pid for p in ours if p.ppid() in graders]
                for candidate in ours:
                    if candidate.name() != kill_comm:
                        continue
                    worker = worker_serving(candidate.pid, workers)
                    if worker is not None:
                        os.kill(worker, signal.SIGKILL)  # a worker of our own run, by pid
                        kills += 1
            except (psutil.Error, OSError):
                pass
            stop.wait(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    if kill_comm:
        thread.start()
    try:
        _, stderr = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group we started: wrapper, grader, workers
        _, stderr = process.communicate()
        returncode = None
    finally:
        stop.set()
        if kill_comm:
            thread.join(timeout=5)
    peak = int(re.findall(r"^PEAK (\d+)$", stderr, re.M)[-1]) if "PEAK" in stderr else 0
    run = Run(out, returncode, stderr, peak, kills=kills)
    for path in sorted(out.glob(f"students/*/{ASSIGNMENT}/results.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        run.results[data["student_id"]] = data
    if (out / "grades.csv").is_file():
        with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
            run.rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    return run


def solution_bytes() -> bytes:
    return SOLUTION.read_bytes()


def folder(submitted: Path, student: str | bytes) -> Path:
    path = Path(os.fsdecode(student)) if isinstance(student, bytes) else Path(student)
    target = submitted / path / ASSIGNMENT
    target.mkdir(parents=True, exist_ok=True)
    return target


def make_socket(path: Path) -> socket.socket:
    # A UNIX socket's address is limited to ~107 bytes: bind by a relative name from its folder.
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path.name)
    finally:
        os.chdir(here)
    return server


@dataclass
class World:
    base: Path
    submitted: Path
    marker: Path
    token: str
    kill_comm: str
    attack: Run
    clean: Run
    gradebook: Path
    device_node: bool
    sockets: list[socket.socket]


def build_class(base: Path, token: str, kill_comm: str) -> tuple[Path, Path, bool, list[socket.socket]]:
    submitted = base / "submitted"
    submitted.mkdir()
    solution = solution_bytes()
    for student in BYSTANDERS:
        write(solution, folder(submitted, student))
    # A root-only file outside the submissions: a valid notebook whose code holds the token, so
    # any copy, grade or echo of it would show.
    marker = base / "secret.ipynb"
    notebook = load(RELEASE)
    notebook.cells[0].source = f"SECRET = {token!r}\n"
    write(notebook, base, "secret.ipynb")
    marker.chmod(0o600)

    os.symlink(SOLUTION, folder(submitted, "link_solution") / "attention.ipynb")
    os.symlink(Path("..") / ".." / "bystander_a" / ASSIGNMENT / "attention.ipynb", folder(submitted, "link_peer") / "attention.ipynb")
    os.symlink(marker, folder(submitted, "link_secret") / "attention.ipynb")
    os.symlink("/dev/zero", folder(submitted, "link_devzero") / "attention.ipynb")
    os.mkfifo(folder(submitted, "fifo") / "attention.ipynb")
    sockets = [make_socket(folder(submitted, "socket_file") / "attention.ipynb")]
    device_node = True
    try:
        os.mknod(folder(submitted, "device_node") / "attention.ipynb", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except (PermissionError, OSError):
        device_node = False  # needs CAP_MKNOD
        (folder(submitted, "device_node") / "attention.ipynb").unlink(missing_ok=True)
        os.rmdir(folder(submitted, "device_node"))
        os.rmdir(submitted / "device_node")
    with open(folder(submitted, "sparse_4gib") / "attention.ipynb", "wb") as handle:
        handle.truncate(4 * 1024**3)
    (folder(submitted, "deep_json") / "attention.ipynb").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    bad_name = os.fsencode(folder(submitted, "non_utf8_name")) + b"/\xff\xfe.ipynb"
    with open(bad_name, "wb") as handle:
        handle.write(solution)
    # A student folder whose name is not UTF-8 (a zip from another locale): listed, not graded.
    write(solution, Path(os.fsdecode(os.fsencode(submitted) + b"/\xe9l\xe8ve")) / ASSIGNMENT)
    os.symlink(submitted / "bystander_a", submitted / "linked_student")
    (submitted / "linked_assignment").mkdir()
    os.symlink(submitted / "bystander_b" / ASSIGNMENT, submitted / "linked_assignment" / ASSIGNMENT)
    (submitted / "stray_only").mkdir()
    (submitted / "stray_only" / "attention.ipynb").write_bytes(solution)
    ambiguous = folder(submitted, "ambiguous")
    write(solution, ambiguous, "a.ipynb")
    write(solution, ambiguous, "b.ipynb")
    # The expected name plus an extra notebook: attention.ipynb is graded, the extra reported.
    extra = folder(submitted, "extra_notebook")
    write(solution, extra)
    write(RELEASE.read_bytes(), extra, "old_copy.ipynb")
    # Another assignment's folder, alone and next to this one's.
    write(solution, submitted / "other_only" / "ch20-transformer")
    write(solution, folder(submitted, "both_assignments"))
    write(solution, submitted / "both_assignments" / "ch20-transformer")
    # A notebook directly in the submissions folder, and a FIFO there too.
    (submitted / "loose.ipynb").write_bytes(solution)
    os.mkfifo(submitted / "pipe")
    # A submission whose grading kills its worker (the test kills the worker, as the OOM killer would).
    # prctl(PR_SET_NAME): the sandbox names itself (its /proc/self/comm is not writable as nobody).
    killer = with_cells(load(SOLUTION), [f"import ctypes, time\nctypes.CDLL(None).prctl(15, {kill_comm.encode()!r}, 0, 0, 0)\ntime.sleep(30)\n"])
    write(killer, folder(submitted, "worker_killer"))
    return submitted, marker, device_node, sockets


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("intake")
    base.chmod(0o755)
    token = f"ATTNKITSECRET{secrets.token_hex(16)}"
    kill_comm = f"akill{secrets.token_hex(3)}"
    submitted, marker, device_node, sockets = build_class(base, token, kill_comm)
    clean_submitted = base / "clean"
    for student in BYSTANDERS:
        write(solution_bytes(), folder(clean_submitted, student))
    try:
        clean = grade(clean_submitted, base / "clean-out")
        attack = grade(submitted, base / "out", gradebook=base / "course" / "gradebook.db", kill_comm=kill_comm)
        print(
            f"\n[intake] attack run exit {attack.returncode}, peak RSS {attack.peak_rss / 2**20:.0f} MiB, "
            f"{attack.kills} worker kill(s); stderr tail:\n{attack.stderr[-3000:]}",
            file=sys.stderr,
        )
        yield World(base, submitted, marker, token, kill_comm, attack, clean, base / "course" / "gradebook.db", device_node, sockets)
    finally:
        for server in sockets:
            server.close()
        # A sandbox whose worker was killed must not outlive the run; if one did, end it (ours, by pid).
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == kill_comm:
                try:
                    proc.kill()
                except psutil.Error:
                    pass


@pytest.mark.e2e
def test_the_class_grades_to_the_end(world: World) -> None:
    """Does the run finish, write every class-level output, and exit 1 (something skipped or not
    graded) rather than 0 or a crash?"""
    run = world.attack
    assert run.returncode == 1, run.stderr[-3000:]
    for name in ("grades.csv", "report.html", "skipped.json"):
        assert (run.out / name).is_file(), name
    graded = set(BYSTANDERS) | set(HOSTILE) | {"extra_notebook", "both_assignments", "worker_killer"}
    if not world.device_node:
        graded.discard("device_node")
    assert set(run.results) == graded
    assert set(run.rows) == {row_id(student) for student in graded}


def row_id(student: str) -> str:
    return "'" + student if student.startswith(("=", "+", "-", "@")) else student


@pytest.mark.e2e
def test_bystanders_score_what_they_score_alone(world: World) -> None:
    """Does every correct bystander, under whatever id, score exactly what it scores alone, test by test?"""
    for student in BYSTANDERS + ["extra_notebook", "both_assignments"]:
        alone = world.clean.results["bystander_a"]
        got = world.attack.results[student]
        assert got["score"] == alone["score"] == 100, (student, got["problems"], got["cells"])
        assert [(t["name"], t["score"]) for t in got["tests"]] == [(t["name"], t["score"]) for t in alone["tests"]], student
    for student in BYSTANDERS:
        assert world.attack.results[student]["score"] == world.clean.results[student]["score"]


@pytest.mark.parametrize("student", sorted(HOSTILE))
@pytest.mark.e2e
def test_each_hostile_folder_gets_zero_and_its_reason(world: World, student: str) -> None:
    """Does each hostile submission get 0, with its reason (in Chinese) in results.json, on its
    feedback page and in report.html?"""
    if student == "device_node" and not world.device_node:
        pytest.skip("creating a device node needs CAP_MKNOD")
    results = world.attack.results[student]
    assert results["score"] == 0 and not results["not_graded"], results
    assert any(HOSTILE[student] in problem for problem in results["problems"]), results["problems"]
    page = (world.attack.out / "students" / student / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert html.escape(HOSTILE[student], quote=False) in page
    report = (world.attack.out / "report.html").read_text(encoding="utf-8")
    assert html.escape(student) in report and html.escape(HOSTILE[student], quote=False) in report


@pytest.mark.e2e
def test_a_worker_killed_costs_only_its_submission(world: World) -> None:
    """A submission whose grading kills its worker each time (in its chunk, then alone, graded again
    twice: a worker killed by a signal is the host's doing until ``Limits.host_retries`` says it is
    not, issue 50): is it the only one recorded "not graded" with the reason, in results.json, its
    page, report.html and the summary?"""
    from attnkit.boundary.policy import Limits

    run = world.attack
    assert run.kills == 1 + Limits().host_retries, f"{run.kills} kills: graded again after each kill, twice at most"
    not_graded = {student for student, results in run.results.items() if results["not_graded"]}
    assert not_graded == {"worker_killer"}
    reason = run.results["worker_killer"]["not_graded"]
    assert "强制终止" in reason, reason
    page = (run.out / "students" / "worker_killer" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert "未能评分" in page
    report = (run.out / "report.html").read_text(encoding="utf-8")
    assert "未能评分的提交" in report and "worker_killer" in report
    assert "未评分：worker_killer" in run.stderr
    assert not survivors(world.kill_comm, wait=10), "a sandbox outlived its killed worker"


def survivors(comm: str, wait: float) -> list[int]:
    """Live (not zombie) processes named ``comm``, after waiting up to ``wait`` seconds for them to go."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for proc in psutil.process_iter(["name", "status"]):
            if proc.info["name"] == comm and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.e2e
def test_skipped_folders_are_listed_not_graded(world: World) -> None:
    """Are another assignment's folders, stray notebooks, extra notebooks and unusable ids listed as
    skipped (summary, report, skipped.json) and never graded nor written into the gradebook?"""
    skipped = json.loads((world.attack.out / "skipped.json").read_text(encoding="utf-8"))
    where = {item["where"]: item["reason"] for item in skipped}
    assert "没有作业“ch20-transformer”的隐藏测试" in where["other_only/ch20-transformer"]
    assert "ch20-transformer" in where["both_assignments/ch20-transformer"]
    assert "直接放在了提交文件夹下" in where["loose.ipynb"]
    assert "不是学生文件夹" in where["pipe"]
    assert "多出来的笔记本" in where[f"extra_notebook/{ASSIGNMENT}/old_copy.ipynb"]
    assert any("UTF-8" in reason for reason in where.values())
    assert "other_only" not in world.attack.results and "other_only" not in world.attack.rows
    report = (world.attack.out / "report.html").read_text(encoding="utf-8")
    assert "已跳过" in report and "ch20-transformer" in report
    assert "已跳过：other_only/ch20-transformer" in world.attack.stderr
    assert "ch20-transformer" not in {r["assignment"] for r in world.attack.results.values()}
    assert not (world.gradebook.parent / "autograded" / "other_only").exists()
    export = world.base / "export.csv"
    run_command([BIN / "nbgrader", "export", "--db", f"sqlite:///{world.gradebook}", "--to", str(export)], check=True, cwd=world.base)
    with open(export, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["assignment"] for row in rows} == {ASSIGNMENT}
    assert "other_only" not in {row["student_id"] for row in rows}
    assert "worker_killer" not in {row["student_id"] for row in rows}, "a student not graded gets no score"


def student_answers(data: bytes) -> dict[str, str]:
    """grade_id -> source of the cells a student writes (nbgrader solution cells)."""
    answers = {}
    for cell in json.loads(data.decode("utf-8"))["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            source = cell.get("source", "")
            answers[meta["grade_id"]] = "".join(source) if isinstance(source, list) else source
    return answers


@pytest.mark.e2e
def test_no_byte_of_the_secret_leaves_its_file(world: World) -> None:
    """A symlink to a root-only file (mode 0600): do its bytes appear nowhere under OUT, in the
    gradebook or in autograded/? And is autograded/ exactly the bytes that were graded?"""
    secret = world.marker.read_bytes()
    assert world.token.encode() in secret
    places = [world.attack.out, world.gradebook.parent]
    for place in places:
        for path in place.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert world.token.encode() not in data and secret not in data, path
    autograded = world.gradebook.parent / "autograded"
    copies = {str(p.relative_to(autograded)) for p in autograded.rglob("*") if p.is_file()}
    assert f"link_secret/{ASSIGNMENT}/attention.ipynb" not in copies
    assert f"link_solution/{ASSIGNMENT}/attention.ipynb" not in copies
    for path in autograded.rglob("*"):
        assert not path.is_symlink(), path
        original = world.submitted / path.relative_to(autograded)
        if path.is_file() and path.name == "timestamp.txt" and not original.exists():
            # Written as nbgrader autograde would (issue 25: release_feedback needs it) from the
            # time intake recorded; not a student's file.
            continue
        if path.is_file() and path.suffix != ".ipynb":
            # A submission's other file, copied as nbgrader autograde copies it: the very bytes.
            assert stat.S_ISREG(original.lstat().st_mode) and all(not parent.is_symlink() for parent in original.parents), path
            assert path.read_bytes() == original.read_bytes(), path
        elif path.is_file():
            # The regular file that was graded, at the same place in the submissions, as nbgrader
            # autograde leaves it (outputs cleared, locked cells restored): every answer the
            # student wrote is that file's.
            assert stat.S_ISREG(original.lstat().st_mode) and all(not parent.is_symlink() for parent in original.parents), path
            assert student_answers(path.read_bytes()) == student_answers(original.read_bytes()), path
    bystander = (autograded / "bystander_a" / ASSIGNMENT / "attention.ipynb").read_bytes()
    assert student_answers(bystander) == student_answers(solution_bytes()) and student_answers(bystander)
    assert f"extra_notebook/{ASSIGNMENT}/old_copy.ipynb" not in copies


@pytest.mark.e2e
def test_peak_memory_stays_bounded(world: World) -> None:
    """With a 4 GiB sparse file and a /dev/zero symlink in the class, does every process of the
    run stay under the bound (nothing is read past the size cap)?"""
    assert 0 < world.attack.peak_rss < PEAK_RSS_BYTES, world.attack.peak_rss


@pytest.mark.e2e
def test_report_links_are_relative_and_encoded(world: World) -> None:
    """Does report.html link each student with a percent-encoded relative path (no `javascript:`
    link, no raw markup) and carry a strict Content-Security-Policy, as every page does?"""
    report = (world.attack.out / "report.html").read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]*)"', report)
    assert links and all(link.startswith("students/") for link in links), links
    assert not any(link.lower().lstrip().startswith("javascript:") for link in links)
    assert "students/javascript%3Aalert%281%29/ch19-attention/feedback.html" in links
    assert "<img src=x" not in report and "&lt;img src=x onerror=alert(1)&gt;" in report
    pages = [world.attack.out / "report.html", *world.attack.out.glob(f"students/*/{ASSIGNMENT}/feedback.html")]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        head = text[: text.index("</head>")]
        assert "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:" in head, page
        assert "<script" not in text.lower(), page


@pytest.mark.e2e
def test_grades_csv_has_no_executable_cell(world: World) -> None:
    """Does no cell of grades.csv start with = + - @ (or a tab or CR), while scores stay plain numbers?"""
    with open(world.attack.out / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), row
    header = rows[0]
    for row in rows[1:]:
        for name in ("score", "max_score"):
            float(row[header.index(name)])
    assert {row[0] for row in rows[1:]} >= {"'=1+2", "'@SUM(1)", "'+1", "'-2+3", "javascript:alert(1)", "grades.csv"}


@pytest.mark.e2e
def test_outputs_stay_small(world: World) -> None:
    """Is every results.json under 1 MB and every feedback page under 4 MB?"""
    for path in world.attack.out.glob(f"students/*/{ASSIGNMENT}/*"):
        limit = 1_000_000 if path.name == "results.json" else 4_000_000
        assert path.stat().st_size <= limit, path


def test_output_caps_hold_whatever_the_record_says() -> None:
    """A record as a hostile notebook could make it (every message, output, problem and note huge and
    full of characters that escaping multiplies): is results.json under 1 MB and feedback.html under
    4 MB, with a note that something was cut, and the scores untouched?"""
    from attnkit.report.store import bounded_feedback
    from contract import CH19
    from attnkit.report.results_json import MAX_FEEDBACK_BYTES, MAX_RESULTS_BYTES, TRUNCATED_NOTE, results_json

    flood = '<"&>' * 50_000
    record = {
        "student_id": "flood",
        "assignment": ASSIGNMENT,
        "fingerprint": "x",
        "tests": [
            {
                "name": f"t{i}",
                "nodeid": f"t{i}",
                "grade_id": "check_masking",
                "max_score": 1.0,
                "score": float(i % 2),
                "status": "failed",
                "output": flood,
                "diagnoses": [],
            }
            for i in range(300)
        ],
        "problems": [flood] * 500,
        "notes": [flood] * 500,
        "cells": [{"index": i, "grade_id": "", "ok": False, "error_type": flood, "message": flood, "output": flood, "seconds": 0.0} for i in range(500)],
    }
    results = results_json(record, CH19)
    from attnkit.files import readable_json

    assert len(readable_json(results).encode()) <= MAX_RESULTS_BYTES  # results.json as written
    assert results["score"] == 150 and results["max_score"] == 300
    assert TRUNCATED_NOTE in results["notes"]
    page = bounded_feedback(results, CH19)
    assert len(page.encode()) <= MAX_FEEDBACK_BYTES
    assert 'id="score">150 / 300<' in page


def test_fit_cuts_as_halving_the_longest_text_one_re_encoding_at_a_time() -> None:
    """``scoring.fit`` counts the size down instead of re-encoding the record per cut: does it cut
    exactly the texts, to exactly the lengths, that halving the longest (the first of equal ones)
    and re-encoding after every cut would, and end within the cap?"""
    import copy
    import random

    from attnkit.files import readable_json
    from attnkit.i18n import _
    from attnkit.report.results_json import TRUNCATED_NOTE, _student_texts, fit

    def re_encoding_fit(results: dict, max_bytes: int) -> dict:
        cut = False
        while len(readable_json(results).encode()) > max_bytes:
            places = [(container, key) for container, key in _student_texts(results) if isinstance(container[key], str)]
            container, key = max(places, key=lambda place: len(place[0][place[1]]))
            if len(container[key]) <= 16:
                break
            container[key] = container[key][: len(container[key]) // 2] + _("……（已截断）")
            cut = True
        if cut:
            results["notes"].append(_(TRUNCATED_NOTE))
        return results

    chance = random.Random(19)
    pieces = ['<"&>', "\\", "\n", "注意力", "\u2028", "x", "\U0001f600", "\x00"]

    def text() -> str:
        return "".join(chance.choice(pieces) for _ in range(chance.choice([0, 3, 40, 700, 5_000])))

    # 1,000 bytes cannot be reached (110 texts of at least their cut mark): both stop at the floor.
    for max_bytes in (1_000, 20_000, 200_000):
        record = {
            "score": 1.0,
            "tests": [{"name": f"t{i}", "output": text(), "status": "failed"} for i in range(40)],
            "cells": [{"index": i, "message": text(), "output": text()} for i in range(30)],
            "problems": [text() for _ in range(20)],
            "notes": [text() for _ in range(20)],
        }
        expected = re_encoding_fit(copy.deepcopy(record), max_bytes)
        fitted = fit(copy.deepcopy(record), max_bytes)
        assert fitted == expected
        if max_bytes > 1_000:
            assert len(readable_json(fitted).encode()) <= max_bytes + len(_(TRUNCATED_NOTE).encode()) + 8


@pytest.mark.e2e
def test_an_empty_class_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    """An empty submissions folder (a wrong path, an unzip that failed): does the grader say so and
    exit non-zero, rather than write an empty report and exit 0?"""
    (tmp_path / "submitted").mkdir()
    run = attnkit("grade", "--submitted", str(tmp_path / "submitted"), "--out", str(tmp_path / "out"), "--quiet", script=True, timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "没有任何学生文件夹" in run.stderr
