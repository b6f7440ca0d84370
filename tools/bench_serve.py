"""``python tools/bench_serve.py`` (``make bench-serve``, as root): ``attnkit serve`` under a deadline.

In a temporary course and exchange (this repository's solutions/ and assignments/, a gradebook with
the assignment registered by ``nbgrader db assignment add``), with ``--students`` unix users made
for the run (``useradd``, no home; removed at the end), it starts ``attnkit serve`` and measures,
for each submission, the time from its inbound folder being complete (the moment the folder's
mode becomes 0777, nbgrader submit's last step) to its page being fetchable (``<hash>.html`` in the
exchange's feedback/, the file ``nbgrader fetch_feedback`` copies; seen through inotify).

The submissions are what ``nbgrader submit`` leaves in ``inbound/`` (the notebook, timestamp.txt,
submission_secret.txt, owned by the student's uid, the folder made 0777 last), written by this
process as root and given to the student's uid: the same bytes and owners without a Python start
per submission, which on two cores would itself be the load. Notebooks: the demo class's six
(correct, mistaken, one not even JSON), in turn.

1. Idle: ``--idle`` single submissions, one at a time, on a warm and otherwise idle service.
2. Burst: ``--burst`` submissions from ``--students`` students at random moments over
   ``--seconds`` (seeded), then waits for every page; lost = no page ``--patience`` s after the last.

Prints p50/p99/max and lost for each, and where the time goes from the service's own log
(noticed -> sent to a worker -> graded -> page placed), with the load average.

``--replicas N`` starts N ``attnkit serve`` processes on the course, as replicas on N machines
would run (``--jobs`` each), sharing the queue and the gradebook in PostgreSQL: ``--queue-url``,
or, without it, a throwaway server of the test suite's kind (``tests/support/postgres.py``,
Debian's postgresql: ``make postgresql``) with PostgreSQL's default settings (an fsync per commit). The burst's pages are then timed whichever replica
delivers them, and the log's figures are given per replica too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inotify_simple import INotify, flags

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ASSIGNMENT = "ch19-attention"
DEMO = ROOT / "examples" / "submitted"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * len(ordered) + 0.5)) - 1))] if ordered else float("nan")


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: none"
    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
    return f"{name}: n={len(values)} p50={p50:.3f}s p99={p99:.3f}s max={max(values):.3f}s mean={statistics.mean(values):.3f}s"


class Bench:
    def __init__(self, base: Path, students: int, queue_url: str | None = None, replicas: int = 1) -> None:
        self.queue_url = queue_url
        self.replicas = replicas
        self.services: list[subprocess.Popen] = []
        self.logs = [base / ("serve.log" if n == 0 else f"serve-{n}.log") for n in range(replicas)]
        self.base = base
        self.exchange = base / "exchange"
        self.course = base / "course"
        self.users = [f"ak39b{n:04d}" for n in range(students)]
        self.created: list[str] = []
        self.notebooks = [(DEMO / name / ASSIGNMENT / "attention.ipynb").read_bytes() for name in sorted(os.listdir(DEMO))]
        self.service: subprocess.Popen | None = None
        self.log = base / "serve.log"
        self.counter = 0
        self.inotify = INotify()
        self.uids: dict[str, int] = {}

    def setup(self) -> None:
        self.exchange.mkdir(mode=0o777)
        self.exchange.chmod(0o777)
        self.course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", self.course / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", self.course / "solutions")
        shutil.copytree(ROOT / "assignments", self.course / "assignments")
        with open(self.course / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(self.exchange)!r}\nc.AttnkitServe.policies = {{{ASSIGNMENT!r}: {{'attempts': 0}}}}\n")
            if self.queue_url:  # the queue and nbgrader's gradebook in the same PostgreSQL database
                from attnkit.service.queue.postgres import engine_url

                config.write(f"c.AttnkitServe.queue_url = {self.queue_url!r}\nc.CourseDirectory.db_url = {engine_url(self.queue_url)!r}\n")
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        for command in (["db", "assignment", "add", ASSIGNMENT], ["release_assignment", ASSIGNMENT]):
            subprocess.run([str(BIN / "nbgrader"), *command], cwd=self.course, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        # As an instructor does (README): the hidden parts the grader's alone, or attnkit serve refuses to start.
        subprocess.run([str(BIN / "attnkit"), "course", "secure"], cwd=self.course, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        started = time.perf_counter()
        for user in self.users:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True, capture_output=True)
            self.created.append(user)
        print(f"made {len(self.users)} unix users in {time.perf_counter() - started:.1f} s", flush=True)
        (self.exchange / "ch19" / "feedback").mkdir(mode=0o711, exist_ok=True)
        (self.exchange / "ch19" / "feedback").chmod(0o711)
        self.inotify.add_watch(str(self.exchange / "ch19" / "feedback"), flags.MOVED_TO | flags.CREATE)

    def start(self, jobs: int | None) -> None:
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
        for n, log in enumerate(self.logs):
            command = [str(BIN / "attnkit"), "serve"] + (["--jobs", str(jobs)] if jobs else []) + (["--replica-id", f"bench-{n}"] if self.queue_url else [])
            self.services.append(subprocess.Popen(command, cwd=self.course, env=env, stdin=subprocess.DEVNULL, stdout=open(log, "a"), stderr=subprocess.STDOUT))
        self.service = self.services[0]

    def submit(self, user: str) -> str:
        """What nbgrader submit leaves in inbound/, as ``user``; the page's file name."""
        from nbgrader.utils import notebook_hash

        self.counter += 1
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + f".{self.counter:06d} UTC"
        secret = os.urandom(64).hex()
        folder = self.exchange / "ch19" / "inbound" / f"{user}+{ASSIGNMENT}+{stamp}+b{self.counter}"
        folder.mkdir()
        (folder / "attention.ipynb").write_bytes(self.notebooks[self.counter % len(self.notebooks)])
        (folder / "timestamp.txt").write_text(stamp)
        (folder / "submission_secret.txt").write_text(secret)
        if user not in self.uids:
            import pwd

            self.uids[user] = pwd.getpwnam(user).pw_uid
        uid = self.uids[user]
        for path in (folder / "attention.ipynb", folder / "timestamp.txt", folder / "submission_secret.txt", folder):
            os.chown(path, uid, uid)
        folder.chmod(0o777)  # complete: the clock starts
        return f"{notebook_hash(secret=secret, notebook_id='attention')}.html"

    def wait_pages(self, expected: dict[str, float], until: float, arrived: dict[str, float], all_of_it: bool = False) -> None:
        """Read feedback/'s events until every expected page arrived (or, ``all_of_it``, never
        sooner than) ``until`` (monotonic)."""
        while (all_of_it or set(expected) - set(arrived)) and time.monotonic() < until:
            for event in self.inotify.read(timeout=max(1, min(50, int((until - time.monotonic()) * 1000)))):
                if event.name in expected and event.name not in arrived:
                    arrived[event.name] = time.monotonic()

    def stop(self) -> None:
        for service in self.services:
            service.send_signal(signal.SIGTERM)
        for service in self.services:
            try:
                service.wait(timeout=300)
            except subprocess.TimeoutExpired:
                service.kill()
        self.services = []
        self.service = None

    def clean(self) -> None:
        self.stop()
        for user in self.created:
            subprocess.run(["userdel", user], capture_output=True)

    def events(self, replica: int | None = None) -> list[dict]:
        """The delivered lines of every replica's log (or of one), in time order."""
        found = []
        for n, log in enumerate(self.logs):
            if replica is not None and n != replica:
                continue
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith('{"time"'):
                    event = json.loads(line)
                    if event["event"] == "delivered":
                        found.append(event)
        return sorted(found, key=lambda event: event["time"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=400)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=None, help="the service's workers (default: its own, the number of cores)")
    parser.add_argument("--patience", type=float, default=120.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its serve.log)")
    parser.add_argument("--replicas", type=int, default=1, help="attnkit serve processes sharing a PostgreSQL queue (default 1: SQLite)")
    parser.add_argument(
        "--queue-url", default=None, help="the PostgreSQL database of the queue and the gradebook (with --replicas > 1, default: a throwaway server)"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench-serve makes unix users (useradd): run it as root", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="attnkit-bench-serve-"))
    base.chmod(0o755)
    server = None
    if args.replicas > 1 and not args.queue_url:
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        from postgres import PostgresServer

        server = PostgresServer(durable=True).start()  # PostgreSQL's defaults: an fsync per commit
        args.queue_url = server.create_database("bench")
        print(f"a throwaway PostgreSQL {server.bin.parent.name} on 127.0.0.1:{server.port}", flush=True)
    bench = Bench(base, args.students, args.queue_url, args.replicas)
    try:
        bench.setup()
        bench.start(args.jobs)
        # Warm: the first submission waits for the workers' zygotes and sessions; not measured.
        first = {bench.submit(bench.users[0]): time.monotonic()}
        bench.wait_pages(first, time.monotonic() + 300, {})
        time.sleep(2)
        idle: list[float] = []
        lost_idle = 0
        for n in range(args.idle):
            arrived: dict[str, float] = {}
            name = bench.submit(bench.users[(n + 1) % len(bench.users)])
            sent = {name: time.monotonic()}
            bench.wait_pages(sent, time.monotonic() + args.patience, arrived)
            if name in arrived:
                idle.append(arrived[name] - sent[name])
            else:
                lost_idle += 1
            time.sleep(0.5)
        print(summary("idle (one submission on a warm, idle service)", idle) + f" lost={lost_idle}", flush=True)
        skip = len(bench.events())

        chooser = random.Random(39)
        moments = sorted(chooser.uniform(0, args.seconds) for _ in range(args.burst))
        senders = [bench.users[chooser.randrange(len(bench.users))] for _ in range(args.burst)]
        expected: dict[str, float] = {}
        arrived = {}
        start = time.monotonic()
        for moment, user in zip(moments, senders, strict=True):
            delay = start + moment - time.monotonic()
            if delay > 0:
                bench.wait_pages(expected, time.monotonic() + delay, arrived, all_of_it=True)  # pages that come meanwhile are timed too
            expected[bench.submit(user)] = time.monotonic()
        bench.wait_pages(expected, time.monotonic() + args.patience, arrived)
        burst = [arrived[name] - sent for name, sent in expected.items() if name in arrived]
        lost = len(expected) - len(burst)
        load = os.getloadavg()
        print(
            summary(f"burst ({args.burst} submissions from {len(set(senders))} students over {args.seconds:g} s)", burst) + f" lost={lost}",
            flush=True,
        )
        print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores shared with other work)", flush=True)
        delivered = bench.events()[skip:]
        for part in ("waited", "grading", "delivering", "latency"):
            print("  " + summary(f"service's {part}", [e[part] for e in delivered if part in e]))
        if args.replicas > 1:
            ids = [e["id"] for e in delivered]
            print(f"  delivered twice: {len(ids) - len(set(ids))}")
            for n in range(args.replicas):
                print("  " + summary(f"replica {n}'s latency", [e["latency"] for e in bench.events(n) if e["id"] in set(ids)]))
        print("  (latency = noticed -> page placed; the rest of the measured time is the notice: inotify event + ownership check + copy)")
        goals = [("idle p50 <= 0.15 s", idle and percentile(idle, 0.5) <= 0.15), ("burst p50 <= 0.3 s", burst and percentile(burst, 0.5) <= 0.3)]
        goals += [("burst p99 <= 2 s", burst and percentile(burst, 0.99) <= 2.0), ("0 lost", lost == 0 and lost_idle == 0)]
        for goal, met in goals:
            print(f"{'PASS' if met else 'MISS'} {goal}")
        bench.stop()
        status = subprocess.run([str(BIN / "attnkit"), "serve", "--status"], cwd=bench.course, capture_output=True, text=True)
        print(status.stdout.splitlines()[0] if status.stdout else status.stderr)
        return 0
    finally:
        bench.clean()
        if server is not None:
            server.stop()
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
