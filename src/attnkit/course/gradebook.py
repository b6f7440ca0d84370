"""Record scores in the course's nbgrader gradebook through nbgrader's own machinery.

So that every nbgrader command of the course keeps working after ``attnkit grade --gradebook``:

1. The assignment is registered by the real ``nbgrader generate_assignment`` (into a throwaway
   release folder, with ``--db`` the gradebook): its ``SaveCells`` step records the notebooks and
   every grade, solution, task and source cell with the checksums nbgrader computes. A later
   ``nbgrader generate_assignment``/``autograde`` then finds exactly the cells it expects.
2. Each submission goes in as ``nbgrader autograde`` puts it: the submission with its timestamp
   (``timestamp.txt`` in the student's folder, else the notebook's modification time), the
   notebook sanitised by nbgrader's own preprocessors into ``autograded/`` (where formgrader and
   ``generate_feedback`` read it), and the scores saved by ``KitAutoGrades``, nbgrader's
   ``SaveAutoGrades`` with attnkit's hidden-suite score per autograded cell. The free-text
   cells are left for formgrader (or get 0 and "No response." if unchanged, as in nbgrader).
   Beside the notebook, autograded/ gets what nbgrader autograde copies there: the submission's
   other files (timestamp.txt, submission_secret.txt, ...) and the source folder's own files, so
   ``nbgrader generate_feedback`` and ``release_feedback`` find what they read. The notebook's
   markdown is sanitised (``SafeMarkup``): formgrader renders it in the TA's Jupyter page.
   The notebook carries attnkit's results (``metadata.attnkit.results``, always ours: a
   student's value is replaced), from which ``nbgrader generate_feedback`` renders the kit's
   page (``nbgrader_commands.KitFeedbackExporter``).
3. ``totals_of(class_lateness(...))`` reads back what ``nbgrader export`` will report (manual points and late
   penalties included), so ``grades.csv`` can carry the same total; ``lateness`` is the same
   reading for one submission, shown on the student's page, report.html and the console. Both
   live in ``gradebook_totals``, which ``nbgrader_commands`` reads too: it
   imports nothing of this module, which imports ``nbgrader_commands``.
"""

from __future__ import annotations

import datetime
import fcntl
import fnmatch
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any
from collections.abc import Iterator
from contextlib import contextmanager

from attnkit.constants import PROJECT_ROOT, GraderError
from attnkit.course.settings import course_config  # (the course's file has one reader; its callers here and elsewhere)
from attnkit.commands import tool_environment
from attnkit.files import atomic_write
from attnkit.i18n import _
from attnkit.records import ResultsJson
from attnkit.submitted_files import Unsafe, digest_of, read_submitted

# nbgrader autograde's sanitising steps, in its order.
SANITIZE = ("ClearOutput", "DeduplicateIds", "OverwriteKernelspec", "OverwriteCells", "CheckCellMetadata")
# nbgrader's CourseDirectory.ignore default: files autograde does not copy.
IGNORED = (".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback")
# nbgrader's timestamp.txt format (CourseDirectory.get_existing_timestamp reads it back).
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"


def course_root(database: Path) -> Path:
    """The nbgrader course a gradebook belongs to: its folder if that holds nbgrader_config.py
    and a source folder, else this project (whose solutions/ attnkit grades against)."""
    folder = database.resolve().parent
    if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
        return folder
    return PROJECT_ROOT


@contextmanager
def locked(database: Path) -> Iterator[None]:
    """One writer per gradebook: two `attnkit grade` runs into different outputs may share it."""
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".attnkit.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def register_assignment(database: Path, assignment: str, root: Path, db_url: str | None = None) -> None:
    """Register ``assignment``'s notebooks and cells as ``nbgrader generate_assignment`` does:
    by running it, with the gradebook as its database and a throwaway release folder.
    ``db_url``: the gradebook at another SQLAlchemy URL than ``database``'s SQLite file (a
    course's ``CourseDirectory.db_url`` in PostgreSQL)."""
    if not (root / "solutions" / assignment).is_dir():
        raise GraderError(_("源作业不存在：{path}").format(path=root / "solutions" / assignment))
    from attnkit.course.nbgrader_commands import blocked_changes

    problems = blocked_changes(database.resolve(), root / "solutions", db_url)
    problems = [p for p in problems if p.startswith(assignment + "/")]
    if problems:
        raise GraderError(
            _(
                "gradebook 中的单元格与 solutions/ 不一致，且已有提交，nbgrader 不允许改动：{problems}。"
                "请撤销单元格的增删，或备份 gradebook 后用 nbgrader db assignment remove 删除旧记录再评分。"
            ).format(problems=_("；").join(problems))
        )
    with tempfile.TemporaryDirectory(prefix="attnkit-register-") as scratch:
        command = [
            sys.executable,
            "-m",
            "nbgrader",
            "generate_assignment",
            assignment,
            "--force",
            f"--CourseDirectory.root={root}",
            f"--CourseDirectory.release_directory={scratch}",
            f"--db={db_url or f'sqlite:///{database.resolve()}'}",
            "--log-level=WARN",
        ]
        run = subprocess.run(command, cwd=root, env=tool_environment(), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if run.returncode != 0:
        raise GraderError(
            _("nbgrader generate_assignment 无法登记作业 {assignment}：{output}").format(assignment=assignment, output=(run.stdout + run.stderr)[-3000:])
        )


def submission_timestamp(submitted: Path, folder: Path) -> datetime.datetime | None:
    """nbgrader's ``timestamp.txt`` in the student's folder, else the newest notebook's mtime (UTC).
    Read the way intake reads notebooks: a link or a FIFO named timestamp.txt is not followed."""
    from nbgrader.utils import parse_utc

    try:
        text = read_submitted(submitted, folder / "timestamp.txt", limit=1024).decode("utf-8", "replace").strip()
    except Unsafe:
        text = ""
    if text:
        try:
            return parse_utc(text)
        except ValueError:
            pass
    times = [p.lstat().st_mtime for p in folder.glob("*.ipynb") if not p.is_symlink()]
    if not times:
        return None
    return datetime.datetime.fromtimestamp(max(times), tz=datetime.UTC).replace(tzinfo=None)


def graded_bytes(submitted: Path, folder: Path, results: ResultsJson, name: str) -> tuple[bytes | None, str]:
    """The bytes graded as the assignment's notebook ``name`` (results.json ``notebooks``: the
    one ``stored_as`` that name, else the one called so; its sha256), read without following
    links; or None and why not (for the TA). A renamed upload (``attention (1).ipynb``) is read
    under the student's own name and stored in autograded/ under ``name``, where nbgrader looks."""
    entries = results.get("notebooks", [])
    entry = next((nb for nb in entries if nb.get("stored_as") == name), None) or next(
        (nb for nb in entries if nb.get("name") == name and not nb.get("stored_as")), None
    )
    if entry is None:
        return None, ""
    own = entry["name"]
    try:
        data = read_submitted(submitted, folder / own)
    except Unsafe as error:
        return None, _("未复制到 autograded/：{student}/{name}：{problem}").format(student=results["student_id"], name=own, problem=error)
    if digest_of(data) != entry.get("sha256"):
        return None, _("未复制到 autograded/：{student}/{name}：文件在评分之后被改动过").format(student=results["student_id"], name=own)
    return data, ""


def copy_other_files(submitted: Path, folder: Path | None, target: Path, source: Path, timestamp: datetime.datetime | None) -> None:
    """What nbgrader autograde puts beside the notebook in autograded/: the submission's other
    files (read as intake reads, no link followed), then the source folder's files over them.
    A submission without timestamp.txt gets the time that was recorded, in nbgrader's format
    (``release_feedback`` reads the file and fails without it)."""
    target.mkdir(parents=True, exist_ok=True)

    def ignored(relative: Path) -> bool:
        return any(fnmatch.fnmatch(part, pattern) for part in relative.parts for pattern in IGNORED)

    if folder is not None:
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if path.suffix == ".ipynb" or ignored(relative) or path.is_symlink() or not path.is_file():
                continue
            try:
                data = read_submitted(submitted, path)
            except Unsafe:
                continue
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target / relative, data)
    for path in sorted(source.rglob("*")) if source.is_dir() else []:
        relative = path.relative_to(source)
        if path.suffix != ".ipynb" and path.is_file() and not ignored(relative):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target / relative, path.read_bytes())
    if not (target / "timestamp.txt").is_file() and timestamp is not None:
        atomic_write(target / "timestamp.txt", timestamp.strftime(TIMESTAMP_FORMAT))


def save_submission(db_url: str, results: ResultsJson, name: str, data: bytes | None, target: Path, config: Any = None) -> None:
    """Save one graded notebook (``name``, its graded bytes) as nbgrader autograde would:
    sanitised copy + SaveAutoGrades, with attnkit's results in its metadata."""
    import nbformat
    from nbgrader import preprocessors
    from nbgrader.api import Gradebook

    from attnkit.course.nbgrader_commands import KitAutoGrades, SafeMarkup, carry_results, kit_scores, set_auto_score

    assignment, student, scores = results["assignment"], results["student_id"], kit_scores(results)
    resources = {"nbgrader": {"student": student, "assignment": assignment, "notebook": Path(name).stem, "db_url": db_url}}
    try:
        if data is None:
            raise ValueError("no notebook")
        nb = nbformat.reads(data.decode("utf-8-sig"), as_version=4)
        for step in SANITIZE:
            nb, resources = getattr(preprocessors, step)(config=config).preprocess(nb, resources)
        saver = KitAutoGrades(config=config)
        saver.kit_scores = scores
        nb, resources = saver.preprocess(nb, resources)  # type: ignore[arg-type]  # nbconvert says its ResourcesDict; nbgrader passes dicts
        # The course's late-submission policy, as nbgrader autograde applies it after grading.
        nb, resources = preprocessors.AssignLatePenalties(config=config).preprocess(nb, resources)
        nb, resources = SafeMarkup(config=config).preprocess(nb, resources)
        carry_results(nb, results)
        target.mkdir(parents=True, exist_ok=True)
        atomic_write(target / name, nbformat.writes(nb))
        return
    except Exception:  # unreadable or broken notebooks are saved as nbgrader does below
        pass
    # Not a notebook nbgrader can read (invalid JSON, missing, broken metadata): like nbgrader's
    # "No submitted file", every cell is settled automatically; attnkit's scores still count.
    with Gradebook(db_url) as gradebook:
        submission = gradebook.find_submission(assignment, student)
        for submitted in submission.notebooks:
            for grade in submitted.grades:
                set_auto_score(grade, scores.get(grade.name, 0.0))
        gradebook.db.commit()


def register_assignments(database: Path, assignments: list[str]) -> None:
    """Register each assignment in the gradebook (``register_assignment``), one writer at a time:
    before grading, so that its due date and cells are known when each record is written."""
    os.environ["PATH"] = tool_environment()["PATH"]
    root = course_root(database)
    with locked(database):
        for assignment in sorted(set(assignments)):
            register_assignment(database, assignment, root)


def record_grades(
    database: Path,
    all_results: list[ResultsJson],
    submitted: Path | None = None,
    source: Path | None = None,
    registered: bool | set[str] = False,
    db_url: str | None = None,
) -> list[str]:
    """Register the assignments, then save every student's submission, timestamp and scores.

    With ``submitted``, each notebook is also sanitised into ``autograded/`` beside the database,
    where formgrader and ``nbgrader generate_feedback`` read it. ``source`` is accepted for
    compatibility; the course root (``course_root``) decides which ``solutions/`` is registered
    (unless ``registered``: True when ``register_assignments`` did it already; a set, the
    assignments registered so far, which this call adds to).
    ``db_url``: the gradebook lives there (nbgrader's ``CourseDirectory.db_url``, PostgreSQL for
    ``attnkit serve`` replicas) rather than in ``database``'s SQLite file; ``database`` still
    places the course (its folder) and autograded/.
    What autograded/ receives is exactly the bytes that were graded, or nothing (with a warning
    returned for the TA). ``registered``: assignments a long-running caller (``attnkit serve``'s
    recorder) registered already and need not register again; those registered here are added.
    """
    notices: list[str] = []
    os.environ["PATH"] = tool_environment()["PATH"]
    from nbgrader.api import Gradebook

    # nbgrader's own ORM code trips SQLAlchemy's autoflush warnings; they are not ours to fix.
    warnings.filterwarnings("ignore", module="sqlalchemy")
    warnings.filterwarnings("ignore", message=".*not in session.*")
    root = course_root(database)
    db_url = db_url or f"sqlite:///{database.resolve()}"
    config = course_config(root)
    with locked(database):
        if registered is not True:  # (True: ``register_assignments`` did it before grading)
            done = registered if isinstance(registered, set) else set()
            for assignment in sorted({r["assignment"] for r in all_results} - done):
                register_assignment(database, assignment, root, db_url)
                if isinstance(registered, set):  # the service's: registered once per start
                    registered.add(assignment)
        for results in all_results:
            student, assignment = results["student_id"], results["assignment"]
            folder = submitted / student / assignment if submitted is not None else None
            # The student's folder if it is a real one (not a link): only then is anything read from it.
            real_folder = folder if folder is not None and folder.is_dir() and not folder.is_symlink() else None
            timestamp = submission_timestamp(submitted, real_folder) if submitted is not None and real_folder is not None else None
            with Gradebook(db_url) as gradebook:
                gradebook.update_or_create_student(student)
                extra = {"timestamp": timestamp} if timestamp is not None else {}
                gradebook.update_or_create_submission(assignment, student, **extra)
                notebook_names = [nb.name for nb in gradebook.find_assignment(assignment).notebooks]
            target = database.parent / "autograded" / student / assignment
            if submitted is not None:
                copy_other_files(submitted, real_folder, target, root / "solutions" / assignment, timestamp)
            for name in notebook_names:
                data, why = graded_bytes(submitted, real_folder, results, f"{name}.ipynb") if submitted is not None and real_folder is not None else (None, "")
                if why:
                    notices.append(why)
                save_submission(db_url, results, f"{name}.ipynb", data, target, config)
    return notices
