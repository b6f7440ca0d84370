"""The gradebook records of the on-submit service: a process of its own, in batches.

Recording one submission the way ``attnkit grade --gradebook`` does costs most of a second
(nbgrader's registration of the assignment, the sanitised copy in autograded/, the ORM); a
student's feedback never waits for it. This process (``python -m attnkit.service.recorder``,
started and stopped by the service) reads the delivered submissions not yet recorded from the
service's database, up to BATCH students at a time, keeps for each student and assignment the
one submission that counts (``latest``, nbgrader's rule, or ``best``: a burst of resubmissions is
one record), places it in the course's ``submitted/<student>/<assignment>/``
(as ``nbgrader collect`` would: so ``make grade`` on that folder gives the same gradebook) and
records the whole batch with ``course.gradebook.record_grades`` (one registration per start),
then marks the batch recorded in one transaction. Killed half-way, the batch is recorded again
at the next start: nbgrader's ``update_or_create`` makes that the same single record.

With replicas sharing a PostgreSQL queue (``queue.postgres``), each replica runs a recorder, and
one at a time records (``Queue.recording``: a lock held by the transaction that marks the batch
recorded); the gradebook is then nbgrader's ``CourseDirectory.db_url`` (PostgreSQL too).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from attnkit.lms import passback as lms_passback
from attnkit.service.queue import Queue, is_url, open_queue
from attnkit.service.policies import DEFAULT, Policy
from attnkit.service.queue.postgres import gradebook_url
from attnkit.service.settings import STATE_FOLDER


GRADEBOOK_TIMEOUT = 5.0  # seconds the recorder waits for a lock on the gradebook (SQLite; PostgreSQL: lock_timeout) (``c.AttnkitServe.gradebook_timeout``)
STOPPED_FILE = "recorder-stopped.txt"  # in the service's folder: why the recorder stopped for a person to fix (exit 2)
PERSON_MUST_FIX = 2  # the recorder's exit code when retrying cannot help (the service then stops, exit 2)

# Submissions per batch: one transaction of marks and one pass of record_grades each. Small enough
# that a stop (which waits for the batch under way) is prompt: most of a second per student.
BATCH = 50
PR_SET_PDEATHSIG = 1
IDLE_SECONDS = 0.5


def place_submitted(course_root: Path, staged: Path, student: str, assignment: str, noticed: float) -> None:
    """The counted attempt's files (``staged``) as ``submitted/<student>/<assignment>/`` (replaced
    whole), with the service's time as its ``timestamp.txt`` (``noticed``: when the service saw it
    complete): the gradebook's lateness is the page's, never the time the student wrote. Unlike
    ``nbgrader collect``, which copies the student's own timestamp.txt (docs/service.md)."""
    import datetime

    from attnkit.course.gradebook import TIMESTAMP_FORMAT

    target = course_root / "submitted" / student / assignment
    fresh = target.with_name(f".{assignment}.{os.getpid()}.new")
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(staged, fresh)
    when = datetime.datetime.fromtimestamp(noticed, tz=datetime.UTC).replace(tzinfo=None)
    (fresh / "timestamp.txt").unlink(missing_ok=True)  # the student's, kept with the service's copy only
    (fresh / "timestamp.txt").write_text(when.strftime(TIMESTAMP_FORMAT))
    old = target.with_name(f".{assignment}.{os.getpid()}.old")
    if target.exists():
        os.replace(target, old)
    os.replace(fresh, target)
    shutil.rmtree(old, ignore_errors=True)


def commit_without_fsync(gradebook: Path, timeout: float = GRADEBOOK_TIMEOUT) -> bool:
    """The gradebook in SQLite's WAL mode, and this process's connections to it (nbgrader's
    SQLAlchemy engines) at ``synchronous = NORMAL``: nbgrader's SaveAutoGrades commits once per
    graded cell, and each commit was an fsync of the rollback journal (a quarter of a second per
    student on the project's machine). In WAL mode a commit survives a crash of any process; a
    power cut can lose the last ones, which the next start records again (nothing is marked
    recorded before its batch is in). WAL is the file's own setting from then on: nbgrader,
    formgrader and ``attnkit grade`` read and write it as before (on a local file system, as
    SQLite's WAL needs). False while the gradebook does not exist yet."""
    import sqlite3

    if not gradebook.is_file():
        return False
    connection = sqlite3.connect(gradebook, timeout=timeout)
    try:
        if connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
            return False
    except sqlite3.OperationalError:
        return False  # locked by another process now: tried again before the next batch
    finally:
        connection.close()
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def no_fsync(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        dbapi_connection.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")

    event.listen(Engine, "connect", no_fsync)
    return True


def record_batch(
    course_root: Path,
    queue: Queue,
    gradebook: str | Path,
    policies: dict[str, Policy],
    registered: set[str],
    done: dict[tuple[str, str], int],
    lock_timeout: float = GRADEBOOK_TIMEOUT,
) -> int:
    """Record one batch: up to BATCH students (with an assignment) who have deliveries not yet
    recorded, each with the one submission that counts; how many deliveries it settled (0:
    nothing was waiting, or another replica's recorder holds the gradebook now). ``queue``:
    the service's (``queue.open_queue``); ``gradebook``: nbgrader's SQLite file or its ``db_url``.
    ``registered``: the assignments this process registered already (nbgrader
    generate_assignment, seconds each: once per assignment per start of the service).
    ``done``: the submission recorded last per student and assignment by this process (a newer
    delivery of another attempt that does not count is settled without writing again).
    ``lock_timeout``: how long a PostgreSQL gradebook's statement waits for another session's
    lock before it fails and the batch is retried (``gradebook_url``)."""
    from attnkit.course.gradebook import record_grades

    with queue.recording() as ours:
        if not ours:
            return 0
        pairs = queue.unrecorded_pairs(BATCH)
        if not pairs:
            return 0
        attempts = course_root / STATE_FOLDER / "attempts"
        results = []
        chosen: dict[tuple[str, str], int] = {}
        for pair in pairs:
            key = (pair["student"], pair["assignment"])
            attempt = queue.counted(key[0], key[1], best=policies.get(key[1], DEFAULT).counts == "best")
            if attempt is None or done.get(key) == int(attempt["id"]):
                continue  # nothing that counts (not graded), or what counts is in the gradebook already
            place_submitted(course_root, attempts / attempt["inbound"] / key[0] / key[1], key[0], key[1], float(attempt["noticed"]))
            results.append(json.loads(attempt["results"]))
            chosen[key] = int(attempt["id"])
        if results:
            url = gradebook_url(str(gradebook), lock_timeout) if is_url(str(gradebook)) else None
            target = course_root / "gradebook.db" if url else Path(gradebook)
            for notice in record_grades(target, results, course_root / "submitted", registered=registered, db_url=url):
                print(json.dumps({"event": "gradebook_notice", "notice": notice}, ensure_ascii=False), file=sys.stderr, flush=True)
            lms_passback.enqueue_recorded(course_root, url or target, list(chosen))  # posted by its own thread: never waited for here
        done.update(chosen)
        queue.mark_recorded([(pair["student"], pair["assignment"], int(pair["newest"])) for pair in pairs])
        return sum(int(pair["waiting"]) for pair in pairs)


def recorder_stopped_reason(state: Path) -> str:
    """Why the recorder last stopped for a person to fix (its STOPPED_FILE in the service's folder ``state``), or ""."""
    try:
        return (state / STOPPED_FILE).read_text()
    except OSError:
        return ""


def is_transient(error: BaseException) -> bool:
    """A failure that waiting cures, so the batch is tried again after a pause rather than the
    recorder stopping: the gradebook locked by another process past SQLite's timeout (a TA's
    nbgrader command, formgrader: ``database is locked``, from SQLite here or from the nbgrader
    generate_assignment the registration runs, which reports it in its output), the database
    unreachable for a while (PostgreSQL restarting, the network), a full disk. Anything else (the
    course's configuration broken, the gradebook's cells at odds with solutions/) needs a person."""
    import errno
    import sqlite3

    from sqlalchemy.exc import InterfaceError, OperationalError

    from attnkit.constants import GraderError

    seen: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in seen and len(seen) < 10:  # nbgrader wraps the database's error (InvalidEntry)
        error = cause
        seen.append(error)
        if isinstance(error, (sqlite3.OperationalError, OperationalError, InterfaceError)):
            return True
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            return True
        if isinstance(error, (GraderError, shutil.Error)):  # (shutil.Error: copytree's list of failed copies)
            text = str(error)
            # (SQLite's lock, PostgreSQL's lock_timeout, a full disk, in a subprocess's output)
            if "database is locked" in text or "lock timeout" in text or "disk is full" in text or "No space left" in text:
                return True
        cause = error.__cause__ or error.__context__
    return False


def retry_delay(failures: int, timeout: float) -> float:
    """The pause after ``failures`` transient failures in a row: doubling from half a second, at
    most four of SQLite's timeouts (20 s by default) so that records catch up soon after a lock
    is released."""
    return min(0.5 * 2 ** (failures - 1), max(1.0, 4 * timeout))


def gradebook_timeout(course_root: Path) -> float:
    """``c.AttnkitServe.gradebook_timeout`` (seconds), read again from the course's nbgrader_config.py
    before each batch: so a configuration broken under the running service is found here and
    named (GraderError: its file, line and error), and the service stops saying so."""
    from attnkit.course.settings import KitSettings

    found = float(KitSettings.load(course_root, environ={}).serve.gradebook_timeout)
    return found if found > 0 else GRADEBOOK_TIMEOUT


def main(argv: list[str]) -> int:
    """``python -m attnkit.service.recorder COURSE DATABASE GRADEBOOK POLICIES_JSON PARENT [REPLICA]``:
    record until SIGTERM (DATABASE, GRADEBOOK: a SQLite file or a database URL)."""
    course_root, parent = Path(argv[0]), int(argv[4])
    database: str | Path = argv[1] if is_url(argv[1]) else Path(argv[1])
    gradebook: str | Path = argv[2] if is_url(argv[2]) else Path(argv[2])
    replica = argv[5] if len(argv) > 5 else ""
    policies = {name: Policy(**entry) for name, entry in json.loads(argv[3]).items()}
    stopping = False

    def stop(_signal: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the service's: it stops us after
    # The service killed (-9): we stop too (SIGTERM when our parent dies), else its restart
    # would find a second recorder at work.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 0
    # Below grading in the CPU's queue: under a deadline's burst the feedback goes first and the
    # records catch up in the gaps (they are batched, so a longer wait makes bigger batches).
    os.nice(10)
    from attnkit.constants import GraderError

    stopped_file = course_root / STATE_FOLDER / STOPPED_FILE
    stopped_file.unlink(missing_ok=True)
    registered: set[str] = set()
    recorded: dict[tuple[str, str], int] = {}
    fast = False
    failures = 0
    timeout = GRADEBOOK_TIMEOUT
    queue: Queue | None = None
    lms_passback.start_drainer(course_root)  # what a previous run left queued for the LMS
    while not stopping:
        try:
            timeout = gradebook_timeout(course_root)
            if queue is None:
                queue = open_queue(database, replica or f"recorder-{os.getpid()}")
            fast = fast or (isinstance(gradebook, Path) and commit_without_fsync(gradebook, timeout))
            started = time.perf_counter()
            settled = record_batch(course_root, queue, gradebook, policies, registered, recorded, timeout)
        except Exception as error:
            reason = f"{type(error).__name__}: {str(error)[-500:]}" if not isinstance(error, GraderError) else str(error)
            if not is_transient(error):
                # For a person to fix: said where the service reads it, which then stops (exit 2) saying so.
                try:
                    stopped_file.write_text(reason)
                except OSError:
                    pass  # (then the service restarts it, bounded, and its log line says why)
                print(json.dumps({"event": "recorder-stopped", "reason": reason}, ensure_ascii=False), file=sys.stderr, flush=True)
                return PERSON_MUST_FIX
            failures += 1
            delay = retry_delay(failures, timeout)
            retry = {"event": "gradebook-retry", "failures": failures, "retry_in": delay, "error": reason}
            print(json.dumps(retry, ensure_ascii=False), file=sys.stderr, flush=True)
            time.sleep(delay)  # (a SIGTERM meanwhile: its handler runs, the loop ends after the pause)
            continue
        if failures:
            print(json.dumps({"event": "gradebook-back", "after": failures}), file=sys.stderr, flush=True)
            failures = 0
        if settled:
            print(json.dumps({"event": "recorded", "count": settled, "seconds": round(time.perf_counter() - started, 3)}), file=sys.stderr, flush=True)
        else:
            time.sleep(IDLE_SECONDS)
    if queue is not None:
        queue.close()
    return 0  # what is not recorded yet is recorded after the next start


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
