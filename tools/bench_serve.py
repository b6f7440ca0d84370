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

3. Flood (``--flood``, issue 48: fair under a flood): one student makes ``--flood-finished``
   finished submissions and ``--flood-unfinished`` unfinished names shaped like submissions (nine
   in ten folders never made 0777, one in ten hard links to a file of theirs, all owned by their
   uid), in ten chunks, while ``--flood-classmates`` classmates submit once each (two per chunk).
   Prints the classmates' latency and lost, the flooder's submissions refused (beyond MAX_WAITING)
   and the unfinished names the service ignored over their owner's cap
   (``attnkit_serve_unfinished_ignored_total``, from its /metrics).

Prints p50/p99/max and lost for each, and where the time goes from the service's own log
(noticed -> sent to a worker -> graded -> page placed), with the load average; the burst's
capacity: pages per second from its first submission to its last page, and beside it the
capacity and expected wait ``attnkit serve --status`` computes from the queue (docs/service.md).

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
        self.metrics_port: int | None = None  # the first replica's /metrics

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
            if n == 0 and self.metrics_port is not None:
                command += ["--metrics-port", str(self.metrics_port)]
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

    def events(self, replica: int | None = None, kind: str = "delivered") -> list[dict]:
        """The ``kind`` lines (delivered) of every replica's log (or of one), in time order."""
        found = []
        for n, log in enumerate(self.logs):
            if replica is not None and n != replica:
                continue
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith('{"time"'):
                    event = json.loads(line)
                    if event["event"] == kind:
                        found.append(event)
        return sorted(found, key=lambda event: event["time"])

    def unfinished(self, user: str, numbers: range) -> None:
        """Names shaped like ``user``'s submissions that never finish, owned by their uid: folders
        (mode 0755) and, one in ten, hard links to a file of theirs."""
        import pwd

        uid = self.uids.setdefault(user, pwd.getpwnam(user).pw_uid)
        inbound = self.exchange / "ch19" / "inbound"
        source = self.base / f"{user}-file"
        if not source.exists():
            source.write_text("not a submission")
            os.chown(source, uid, uid)
        for n in numbers:
            path = inbound / f"{user}+{ASSIGNMENT}+2026-12-07 08:00:00.{n:06d} UTC+unfinished{n}"
            if n % 10 == 9:
                os.link(source, path)
            else:
                os.mkdir(path, 0o755)
                os.chown(path, uid, uid)

    def metric(self, name: str) -> str:
        import re
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as answer:
                found = re.search(rf"^{name} (\S+)$", answer.read().decode(), re.M)
        except OSError as error:
            return f"? ({error})"
        return found.group(1) if found else "?"


def flood(bench: Bench, args: argparse.Namespace) -> None:
    """One student's flood (finished submissions and unfinished names) while classmates submit once each."""
    attacker, classmates = bench.users[-1], bench.users[-1 - args.flood_classmates : -1]
    skip = {kind: len(bench.events(kind=kind)) for kind in ("delivered", "refused")}
    expected: dict[str, float] = {}
    arrived: dict[str, float] = {}
    chunks = 10
    start = time.monotonic()
    for chunk in range(chunks):
        bench.unfinished(attacker, range(chunk * args.flood_unfinished // chunks, (chunk + 1) * args.flood_unfinished // chunks))
        for _n in range(chunk * args.flood_finished // chunks, (chunk + 1) * args.flood_finished // chunks):
            bench.submit(attacker)
        for n in range(chunk * len(classmates) // chunks, (chunk + 1) * len(classmates) // chunks):
            expected[bench.submit(classmates[n])] = time.monotonic()
    made = time.monotonic() - start
    bench.wait_pages(expected, time.monotonic() + args.patience, arrived)
    latencies = [arrived[name] - sent for name, sent in expected.items() if name in arrived]
    refused = [e for e in bench.events(kind="refused")[skip["refused"] :] if e.get("student") == attacker]
    delivered = bench.events()[skip["delivered"] :]
    print(
        summary(
            f"flood (one student: {args.flood_finished} submissions and {args.flood_unfinished} unfinished names, made in {made:.1f} s; "
            f"{len(classmates)} classmates once each): classmates",
            latencies,
        )
        + f" lost={len(expected) - len(latencies)}",
        flush=True,
    )
    print(f"  the flooder's submissions refused: {len(refused)} of {args.flood_finished} (beyond MAX_WAITING)")
    print(f"  unfinished names ignored over the owner's cap (attnkit_serve_unfinished_ignored_total): {bench.metric('attnkit_serve_unfinished_ignored_total')}")
    mine = [e for e in delivered if e["student"] in set(classmates)]
    for part in ("waited", "grading", "latency"):
        print("  " + summary(f"classmates' {part} (service's log)", [e[part] for e in mine if part in e]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=400)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=None, help="the service's workers (default: its own, the number of cores)")
    parser.add_argument("--patience", type=float, default=120.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its serve.log)")
    parser.add_argument("--flood", action="store_true", help="after the burst, one student's flood while classmates submit (issue 48)")
    parser.add_argument("--flood-finished", type=int, default=200, help="the flooder's finished submissions")
    parser.add_argument("--flood-unfinished", type=int, default=10000, help="the flooder's unfinished names")
    parser.add_argument("--flood-classmates", type=int, default=20, help="classmates who submit once each during the flood")
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
    if args.flood and args.students < args.flood_classmates + 1:
        parser.error("--flood needs --students >= --flood-classmates + 1")
    bench = Bench(base, args.students, args.queue_url, args.replicas)
    if args.flood:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            bench.metrics_port = int(probe.getsockname()[1])
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
        if burst:
            span = max(arrived[name] for name in expected if name in arrived) - start
            print(f"capacity: {len(burst) / span:.1f} pages/s sustained in the burst ({len(burst)} pages in {span:.1f} s)", flush=True)
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
        if args.flood:
            flood(bench, args)
        bench.stop()
        status = subprocess.run([str(BIN / "attnkit"), "serve", "--status", "--lang", "en"], cwd=bench.course, capture_output=True, text=True)
        print(status.stdout.splitlines()[0] if status.stdout else status.stderr)
        # The service's own estimate (--status: the most graded at once / the mean claim-to-page seconds, last hour).
        print("\n".join(line for line in status.stdout.splitlines() if line.startswith("capacity:")) + " (the service's --status)")
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
