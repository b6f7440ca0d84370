"""``python tools/bench.py`` (``make bench``): attnkit against ``nbgrader autograde``, in one run.

What it does, all in a temporary folder:

1. Builds a synthetic class in nbgrader's layout (``submitted/<student>/ch19-attention/
   attention.ipynb``) from the release notebook, in a TA's proportions: 25 % correct (the model
   answers of ``solutions/``), 60 % with one mistake (every catalogue mistake and a few it does not
   list, each pasted into an otherwise correct notebook, in turn), 15 % broken or unfinished
   (untouched releases, half-finished notebooks, a syntax error). Every notebook differs in its
   bytes (its metadata names the student), so nothing can be skipped as a duplicate.
2. Grades the class with ``attnkit grade --jobs J --force`` at each size of ``--sizes`` (whole
   command, start-up included), sampling the memory of its process tree.
3. Grades a subset (``--nbgrader``) with the real ``nbgrader autograde ch19-attention --force`` in
   a temporary nbgrader course (this repository's ``nbgrader_config.py`` copied in without the
   hook that makes ``nbgrader autograde`` grade with attnkit, the solution
   as nbgrader's source step, ``nbgrader generate_assignment`` first), timing each submission
   from nbgrader's own log.
4. Regrades a sample of the largest class one submission per ``attnkit grade`` process and checks
   the scores equal those of the big run.

Every attnkit run uses one copy of the hidden suite taken at the start (``--autograder``), so an
edit to ``autograder/`` during the bench cannot make runs disagree; an edit to attnkit's own source
shows as a changed result fingerprint and those samples are reported as not comparable.

It prints per-submission means and medians, the speed ratio, attnkit's CPU per submission by process
kind (``measure``), peak memory, the fixed and marginal
cost, and PASS/MISS for each speed goal (GOAL_* below). It never fails on a missed goal: the numbers are the
point (the exit status is non-zero only when something could not run at all).

Times are wall-clock on whatever else the machine is doing: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from attnkit import cpu_account
from attnkit.commands import nbgrader_command, tool_environment

ROOT = Path(__file__).resolve().parents[1]
# The synthetic class and its samples, shared with the tests (tests/support/synthetic_class.py).
sys.path.insert(0, str(ROOT / "tests" / "support"))
from synthetic_class import (
    ASSIGNMENT,
    NOTEBOOK,
    make_class,
    nbgrader_durations,
    sample_by_kind,
    spread_across_mix,
)

# The speed goals a class of GOAL_CLASS_SIZE must meet.
GOAL_CLASS_SIZE = 1000
GOAL_CLASS_SECONDS = 30.0
GOAL_SPEEDUP = 100.0
LINEAR_SLACK = 1.10
# Where nbgrader_config.py starts hooking attnkit into nbgrader's own commands.
KIT_HOOK = "# `nbgrader autograde` grades with attnkit"  # per-submission cost at the largest size may exceed the smallest's by 10 %


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak memory of a process and all its descendants, sampled.

    ``peak_rss``: the largest sum of RSS over the tree (psutil, every ``interval`` s). Forked
    sandboxes share the zygote's pages and each RSS counts them again, so this over-states.
    ``peak_pss``: the largest sum of PSS (``/proc/PID/smaps_rollup``; shared pages split between
    the processes sharing them), every ``pss_every``-th sample: the honest footprint.
    """

    def __init__(self, pid: int, interval: float = 0.1, pss_every: int = 5) -> None:
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.pss_every = pss_every
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_processes = 0
        self._stop_event = threading.Event()

    def sample(self, with_pss: bool) -> None:
        psutil = self.psutil
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        rss = pss = 0
        for process in processes:
            try:
                rss += process.memory_info().rss
            except psutil.Error:
                continue
            if with_pss:
                pss += _pss_bytes(process.pid)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_processes = max(self.peak_processes, len(processes))

    def run(self) -> None:
        count = 0
        while not self._stop_event.is_set():
            self.sample(with_pss=count % self.pss_every == 0)
            count += 1
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


@dataclass
class Measured:
    label: str
    count: int
    seconds: float  # wall clock of the whole command(s)
    per_submission: list[float] = field(default_factory=list)  # each submission's own time
    peak_rss: int = 0
    peak_pss: int = 0
    load_before: float = 0.0
    load_after: float = 0.0
    returncode: int = 0
    log: str = ""
    # CPU seconds (user + system) by process kind (``attnkit.cpu_account``), and the whole tree's
    # (this process's children's rusage across the command): "other" is what no kind reported.
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_total: float = 0.0

    @property
    def mean(self) -> float:
        return self.seconds / self.count if self.count else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.per_submission) if self.per_submission else float("nan")


# The process kinds whose CPU ``make bench`` prints, in this order (``attnkit.cpu_account``).
CPU_KINDS = ("parent", "worker", "seed", "zygote", "sandbox")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(label: str, count: int, command: list[str], cwd: Path | None = None) -> Measured:
    """Run ``command`` to completion; its wall time, output, the peak memory of its tree and the
    CPU time of its processes by kind.

    CPU: every attnkit process appends its own ``getrusage`` as it ends to the file that
    ``ATTNKIT_CPU_ACCOUNT`` names, a zygote its reaped sandboxes' too (``attnkit.cpu_account``);
    the whole tree's is this process's children's rusage across the wait (every process of the
    tree is reaped by its parent, and the parent by us). Both are exact; a kind missing from the
    file (a process killed) shows in "other"."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log, tempfile.TemporaryDirectory(prefix="attnkit-cpu-") as accounts:
        account = os.path.join(accounts, "cpu.jsonl")
        environment = {**tool_environment(), cpu_account.ENVIRONMENT: account}
        cpu_before = _children_cpu()
        process = subprocess.Popen(command, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(process.pid)
        sampler.start()
        try:
            returncode = process.wait()
        finally:
            sampler.stop()
        seconds = time.perf_counter() - started
        cpu_total = _children_cpu() - cpu_before
        cpu = {kind: total["user"] + total["system"] for kind, total in cpu_account.read(account).items()}
        log.seek(0)
        text = log.read()
    return Measured(
        label,
        count,
        seconds,
        peak_rss=sampler.peak_rss,
        peak_pss=sampler.peak_pss,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        returncode=returncode,
        log=text,
        cpu=cpu,
        cpu_total=cpu_total,
    )


# ``python -m attnkit.cli`` by default; ``--entry FILE`` swaps in a script that wraps it (to measure
# a proposed engine change by monkeypatching, without editing the engine).
ENTRY: list[str] = ["-m", "attnkit.cli"]


def attnkit_command(submitted: Path, out: Path, jobs: int, autograder: Path | None = None) -> list[str]:
    command = [sys.executable, *ENTRY, "grade", "--submitted", str(submitted), "--out", str(out), "--jobs", str(jobs), "--force", "--quiet"]
    return command + (["--autograder", str(autograder)] if autograder is not None else [])


def read_results(out: Path) -> dict[str, dict]:
    results = {}
    for path in sorted(out.glob(f"students/*/{ASSIGNMENT}/results.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        results[data["student_id"]] = data
    return results


def run_attnkit(submitted: Path, out: Path, jobs: int, count: int, autograder: Path | None = None) -> tuple[Measured, dict[str, dict]]:
    label = f"attnkit --jobs {jobs}" + (f" ({Path(ENTRY[0]).name})" if ENTRY[0] != "-m" else "")
    measured = measure(label, count, attnkit_command(submitted, out, jobs, autograder))
    results = read_results(out)
    measured.per_submission = [float(r.get("seconds", 0.0)) for r in results.values()]
    return measured, results


# -- nbgrader --------------------------------------------------------------------------------------
def run_nbgrader(notebooks: dict[str, Path], course: Path, root: Path = ROOT) -> tuple[Measured, float]:
    """``nbgrader autograde`` on ``notebooks`` (student id -> file) in a fresh course at ``course``.

    Returns the measured autograde run and the seconds ``generate_assignment`` took (not counted).
    """
    course.mkdir(parents=True)
    config = (root / "nbgrader_config.py").read_text(encoding="utf-8")
    # The course's config makes `nbgrader autograde` grade with attnkit: the competitor must be
    # nbgrader's own autograde (execute the notebook, run its test cells), so the hook goes.
    config = config.split(KIT_HOOK, 1)[0]
    if "attnkit.course.nbgrader_commands" in config:
        raise RuntimeError("nbgrader_config.py still hooks attnkit into autograde: the bench would time attnkit twice")
    (course / "nbgrader_config.py").write_text(config, encoding="utf-8")
    # The repository's config maps nbgrader's steps onto solutions/ and assignments/ under the
    # folder holding the config file; give the temporary course the same shape.
    shutil.copytree(root / "solutions" / ASSIGNMENT, course / "solutions" / ASSIGNMENT)
    started = time.perf_counter()
    generate = subprocess.run(
        [*nbgrader_command(), "generate_assignment", ASSIGNMENT, "--force", "--log-level=WARN"],
        cwd=course,
        env=tool_environment(),
        capture_output=True,
        text=True,
    )
    generate_seconds = time.perf_counter() - started
    if generate.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment failed:\n{generate.stdout}\n{generate.stderr}")
    for student_id, notebook in notebooks.items():
        folder = course / "submitted" / student_id / ASSIGNMENT
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / NOTEBOOK)
    command = [
        *nbgrader_command(),
        "autograde",
        ASSIGNMENT,
        "--force",
        "--Application.log_format=%(asctime)s.%(msecs)03d [%(name)s | %(levelname)s] %(message)s",
        "--Application.log_datefmt=%H:%M:%S",
    ]
    measured = measure("nbgrader autograde", len(notebooks), command, cwd=course)
    measured.per_submission = nbgrader_durations(measured.log)
    return measured, generate_seconds


# -- one submission at a time ----------------------------------------------------------------------
def comparable(result: dict) -> dict:
    """What must not depend on how a class was split up: scores, statuses, diagnoses."""
    return {
        "score": result.get("score"),
        "max_score": result.get("max_score"),
        "parts": result.get("parts"),
        "diagnoses": result.get("diagnoses"),
        "tests": [(t.get("name"), t.get("score"), t.get("status"), t.get("diagnoses")) for t in result.get("tests", [])],
    }


def grade_one_by_one(submitted: Path, student_ids: list[str], scratch: Path, parallel: int = 2, autograder: Path | None = None) -> dict[str, dict]:
    """Grade each student in a class of one (its own ``attnkit grade --jobs 1`` process)."""

    def one(student_id: str) -> tuple[str, dict]:
        alone = scratch / student_id / "submitted"
        alone.mkdir(parents=True)
        shutil.copytree(submitted / student_id, alone / student_id)
        out = scratch / student_id / "out"
        subprocess.run(attnkit_command(alone, out, 1, autograder), env=tool_environment(), stdin=subprocess.DEVNULL, capture_output=True, check=True)
        return student_id, read_results(out).get(student_id, {})

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return dict(pool.map(one, student_ids))


# -- report ----------------------------------------------------------------------------------------
def mb(value: int) -> str:
    return f"{value / 2**20:,.0f} MB" if value else "-"


def seconds(value: float) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def linear_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``seconds = fixed + marginal * n``."""
    if len(points) < 2:
        return float("nan"), float("nan")
    mean_n = statistics.fmean(n for n, _ in points)
    mean_t = statistics.fmean(t for _, t in points)
    spread_n = sum((n - mean_n) ** 2 for n, _ in points)
    if spread_n == 0:
        return float("nan"), float("nan")
    marginal = sum((n - mean_n) * (t - mean_t) for n, t in points) / spread_n
    return mean_t - marginal * mean_n, marginal


def cpu_per_submission(m: Measured) -> dict[str, float]:
    """Milliseconds of CPU (user + system) per submission by process kind, start-up included;
    "other": the tree's total less what the kinds reported (0 when every process reported)."""
    per = 1000 / m.count if m.count else float("nan")
    kinds = {kind: m.cpu.get(kind, 0.0) * per for kind in CPU_KINDS}
    kinds.update({kind: seconds * per for kind, seconds in m.cpu.items() if kind not in CPU_KINDS})
    kinds["other"] = (m.cpu_total - sum(m.cpu.values())) * per
    kinds["total"] = m.cpu_total * per
    return kinds


def cpu_line(m: Measured) -> str:
    kinds = cpu_per_submission(m)
    return ", ".join(f"{kind} {value:.1f}" for kind, value in kinds.items() if kind != "total") + f"; total {kinds['total']:.1f} ms"


def summarise(
    attnkit_runs: list[Measured], nbgrader: Measured | None, generate_seconds: float, same_scores: tuple[int, int, list[str], int] | None, jobs: int
) -> dict[str, Any]:
    largest = max(attnkit_runs, key=lambda m: m.count)
    smallest = min(attnkit_runs, key=lambda m: m.count)
    fixed, marginal = linear_fit([(m.count, m.seconds) for m in attnkit_runs])
    summary: dict[str, Any] = {
        "jobs": jobs,
        "cores": os.cpu_count(),
        "attnkit": {
            str(m.count): {
                "seconds": m.seconds,
                "per_submission_mean": m.mean,
                "per_submission_median": m.median,
                "peak_rss_bytes": m.peak_rss,
                "peak_pss_bytes": m.peak_pss,
                "load_before": m.load_before,
                "load_after": m.load_after,
                "cpu_ms_per_submission": cpu_per_submission(m),
            }
            for m in attnkit_runs
        },
        "fixed_seconds": fixed,
        "marginal_seconds_per_submission": marginal,
    }
    if nbgrader is not None:
        summary["nbgrader"] = {
            "count": nbgrader.count,
            "seconds": nbgrader.seconds,
            "per_submission_mean": nbgrader.mean,
            "per_submission_median": nbgrader.median,
            "peak_rss_bytes": nbgrader.peak_rss,
            "peak_pss_bytes": nbgrader.peak_pss,
            "generate_assignment_seconds": generate_seconds,
        }
        summary["ratio_mean"] = nbgrader.mean / largest.mean
        summary["ratio_median"] = nbgrader.median / largest.median if largest.per_submission else float("nan")
    goals = []
    at_goal = next((m for m in attnkit_runs if m.count == GOAL_CLASS_SIZE), None)
    if at_goal is not None:
        goals.append(
            (
                "class",
                f"{GOAL_CLASS_SIZE} submissions in < {GOAL_CLASS_SECONDS:g} s with --jobs {jobs}",
                f"{at_goal.seconds:.1f} s",
                at_goal.seconds < GOAL_CLASS_SECONDS,
            )
        )
    else:
        # Not measured at that size: project from the largest run. The fitted line when it is
        # meaningful (more than one size, positive slope), else the largest run's mean per
        # submission times the goal's size (pessimistic: its start-up is counted n times).
        if marginal == marginal and marginal > 0 and fixed >= 0:
            projected, how = fixed + marginal * GOAL_CLASS_SIZE, "linear fit"
        else:
            projected, how = largest.mean * GOAL_CLASS_SIZE, f"{GOAL_CLASS_SIZE} × mean s/submission"
        goals.append(
            (
                "class",
                f"{GOAL_CLASS_SIZE} submissions in < {GOAL_CLASS_SECONDS:g} s with --jobs {jobs}",
                f"{projected:.1f} s projected ({how}, measured n ≤ {largest.count})",
                projected < GOAL_CLASS_SECONDS,
            )
        )
    if nbgrader is not None:
        goals.append(
            (
                "speedup",
                f"≥ {GOAL_SPEEDUP:g}× faster per submission than nbgrader autograde",
                f"{summary['ratio_mean']:.1f}× (mean s/submission, n={largest.count})",
                summary["ratio_mean"] >= GOAL_SPEEDUP,
            )
        )
    if largest.count > smallest.count:
        growth = largest.mean / smallest.mean
        goals.append(
            (
                "linear",
                "cost grows linearly (s/submission does not rise with class size)",
                f"{seconds(smallest.mean)} s at n={smallest.count} → {seconds(largest.mean)} s at n={largest.count}",
                growth <= LINEAR_SLACK,
            )
        )
    if same_scores is not None:
        equal, total, differ, changed = same_scores
        measured = f"{equal}/{total} identical" + (f"; differ: {', '.join(differ[:5])}" if differ else "")
        if changed:
            measured += f"; {changed} not compared (attnkit's files changed during the bench)"
        goals.append(("same_scores", f"same scores as one-by-one grading (sample of the n={largest.count} run)", measured, total > 0 and equal == total))
    summary["goals"] = {key: {"goal": text, "measured": value, "pass": ok} for key, text, value, ok in goals}
    return summary


def print_report(summary: dict[str, Any], attnkit_runs: list[Measured], nbgrader: Measured | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title="Grading time per submission (wall clock)")
    for column in ("grader", "n", "total s", "mean s/sub", "median s/sub", "peak Σ RSS", "peak Σ PSS", "load 1-min"):
        table.add_column(column, justify="right" if column not in ("grader",) else "left")
    rows = ([nbgrader] if nbgrader else []) + attnkit_runs
    for m in rows:
        table.add_row(
            m.label,
            str(m.count),
            seconds(m.seconds),
            seconds(m.mean),
            seconds(m.median),
            mb(m.peak_rss),
            mb(m.peak_pss),
            f"{m.load_before:.1f}→{m.load_after:.1f}",
        )
    console.print(table)
    cpu_table = Table(title="CPU per submission by process kind (ms, user + system, start-up included)")
    cpu_columns = list(cpu_per_submission(attnkit_runs[0]))
    for column in ("grader", "n", *cpu_columns):
        cpu_table.add_column(column, justify="left" if column == "grader" else "right")
    for m in attnkit_runs:
        kinds = cpu_per_submission(m)
        cpu_table.add_row(m.label, str(m.count), *(f"{kinds.get(column, 0.0):.1f}" for column in cpu_columns))
    console.print(cpu_table)
    console.print(
        "CPU: each process's own getrusage as it ends (attnkit.cpu_account), the sandboxes' as their zygote's reaped "
        "children (exact, kernel accounting at wait); total: the whole command's tree (this bench's children's rusage); "
        "other: the total less every kind (processes that did not report: 0 normally)."
    )
    console.print(
        "mean s/sub = the whole command's wall time / n (start-up included). median s/sub = each submission's own time: "
        "nbgrader from its log (start of a student to its notebook written), attnkit from results.json `seconds` "
        "(sandbox open to record, inside a worker; workers run in parallel). Peak memory is sampled with psutil over the "
        "command's whole process tree: Σ RSS every 0.1 s (counts pages shared by forked sandboxes once per process, so "
        "an over-estimate), Σ PSS every 0.5 s from /proc/PID/smaps_rollup (shared pages split: the real footprint)."
    )
    largest = max(attnkit_runs, key=lambda m: m.count)
    if nbgrader is not None:
        console.print(
            f"ratio (nbgrader ÷ attnkit, mean s/submission, n={largest.count}): [bold]{summary['ratio_mean']:.1f}×[/bold]   "
            f"ratio of medians: {summary['ratio_median']:.1f}×   "
            f"(nbgrader {seconds(nbgrader.mean)} s/submission vs attnkit {seconds(largest.mean)} s/submission)"
        )
    console.print(f"attnkit's CPU per submission (n={largest.count}) by process kind: {cpu_line(largest)}")
    if summary["marginal_seconds_per_submission"] == summary["marginal_seconds_per_submission"]:
        console.print(
            f"linear fit over sizes {', '.join(str(m.count) for m in attnkit_runs)}: "
            f"{summary['fixed_seconds']:.2f} s fixed + {summary['marginal_seconds_per_submission']:.4f} s per submission"
        )
    goals = Table(title="Issue 12 goals")
    for column in ("goal", "measured", ""):
        goals.add_column(column)
    for goal in summary["goals"].values():
        goals.add_row(goal["goal"], goal["measured"], "[green]PASS[/green]" if goal["pass"] else "[red]MISS[/red]")
    console.print(goals)


# -- main ------------------------------------------------------------------------------------------
def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError("--sizes takes a comma-separated list, e.g. 100,1000") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("--sizes needs positive numbers")
    return sizes


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python tools/bench.py", description="Benchmark attnkit grade against nbgrader autograde.")
    parser.add_argument("--sizes", type=parse_sizes, default=None, help="class sizes graded by attnkit (default 100,1000)")
    parser.add_argument("--nbgrader", type=int, default=None, help="submissions graded by nbgrader autograde (default 10; 0 skips)")
    parser.add_argument("--sample", type=int, default=None, help="submissions regraded one per process for the score check (default 12; 0 skips)")
    parser.add_argument("--jobs", type=int, default=2, help="attnkit workers (default 2)")
    parser.add_argument("--quick", action="store_true", help="small sizes for tests: --sizes 10,20 --nbgrader 2 --sample 2")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    parser.add_argument(
        "--entry",
        type=Path,
        default=None,
        help="run attnkit as `python FILE grade ...` instead of `python -m attnkit.cli grade ...` (a wrapper that monkeypatches a proposed engine change)",
    )
    args = parser.parse_args(argv)
    quick = {"sizes": [10, 20], "nbgrader": 2, "sample": 2}
    full = {"sizes": [100, 1000], "nbgrader": 10, "sample": 12}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    say = lambda text: print(f"[bench] {text}", file=sys.stderr, flush=True)
    largest = max(args.sizes)
    # One copy of the hidden suite for the whole run, so an edit to autograder/ while the bench
    # runs cannot make two runs disagree.
    suite = work / "autograder"
    shutil.copytree(ROOT / "autograder", suite, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    submitted = work / "submitted"
    say(f"building {largest} synthetic submissions in {submitted}")
    roster = make_class(submitted, largest, autograder=suite)
    say("kinds: " + ", ".join(f"{kind} ×{n}" for kind, n in _counts(roster.values())))

    attnkit_runs: list[Measured] = []
    results: dict[str, dict] = {}
    for size in args.sizes:
        if size == largest:
            folder = submitted
        else:
            folder = work / f"submitted-{size}"
            folder.mkdir()
            for student_id in list(roster)[:size]:
                shutil.copytree(submitted / student_id, folder / student_id)
        say(f"attnkit grade: {size} submissions, --jobs {args.jobs}")
        measured, graded = run_attnkit(folder, work / f"out-{size}", args.jobs, size, suite)
        if measured.returncode != 0 or len(graded) != size:
            raise RuntimeError(f"attnkit grade failed (exit {measured.returncode}, {len(graded)}/{size} results):\n{measured.log[-3000:]}")
        say(f"  {measured.seconds:.1f} s")
        attnkit_runs.append(measured)
        if size == largest:
            results = graded

    nbgrader = None
    generate_seconds = 0.0
    if args.nbgrader > 0:
        chosen = spread_across_mix(list(roster), args.nbgrader)
        say(f"nbgrader autograde: {len(chosen)} submissions ({', '.join(sorted({roster[s] for s in chosen}))})")
        nbgrader, generate_seconds = run_nbgrader({s: submitted / s / ASSIGNMENT / NOTEBOOK for s in chosen}, work / "nbgrader-course")
        if nbgrader.returncode != 0:
            raise RuntimeError(f"nbgrader autograde failed (exit {nbgrader.returncode}):\n{nbgrader.log[-3000:]}")
        say(f"  {nbgrader.seconds:.1f} s")

    same_scores = None
    if args.sample > 0:
        chosen = sample_by_kind(roster, args.sample)
        say(f"one-by-one check: {len(chosen)} submissions, each in its own attnkit grade process")
        alone = grade_one_by_one(submitted, chosen, work / "one-by-one", parallel=args.jobs, autograder=suite)
        # A result's fingerprint covers the submission and the grader's own files (attnkit's
        # source included): if they differ, attnkit itself was edited while the bench ran.
        changed = [s for s in chosen if alone.get(s, {}).get("fingerprint") != results.get(s, {}).get("fingerprint")]
        if changed:
            say(f"attnkit's own files changed during the bench: {len(changed)} sampled result(s) not comparable")
        compared = [s for s in chosen if s not in changed]
        differ = [s for s in compared if comparable(alone.get(s, {})) != comparable(results.get(s, {}))]
        same_scores = (len(compared) - len(differ), len(compared), differ, len(changed))

    summary = summarise(attnkit_runs, nbgrader, generate_seconds, same_scores, args.jobs)
    summary["kinds"] = dict(_counts(roster.values()))
    print_report(summary, attnkit_runs, nbgrader)
    return summary


def _counts(values: Any) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return list(counts.items())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.entry is not None:
        ENTRY[:] = [str(args.entry.resolve())]
    try:
        if args.keep is not None:
            if args.keep.exists():
                shutil.rmtree(args.keep)
            args.keep.mkdir(parents=True)
            summary = run(args, args.keep.resolve())
        else:
            with tempfile.TemporaryDirectory(prefix="attnkit-bench-") as scratch:
                summary = run(args, Path(scratch))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
        print(f"bench could not run: {error}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(summary, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
