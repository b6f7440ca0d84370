"""attnkit inside nbgrader's own commands: the course's ``nbgrader_config.py`` calls ``configure``.

Three things make nbgrader's commands keep working on a course that attnkit grades:

- ``nbgrader autograde`` grades with attnkit: the ``Execute`` and ``SaveAutoGrades`` steps of
  nbgrader's autograde pipeline are replaced by ``KitAutoGrades``, which runs ``attnkit grade``
  on the student's submitted notebook (the hidden suite, in the sandbox) and saves the scores
  the way ``SaveAutoGrades`` does. So ``nbgrader autograde`` and ``make grade`` give the same
  scores, and formgrader sees autograded cells as graded.
- ``nbgrader generate_assignment`` never loses the release: before nbgrader starts, the cells of
  ``source/`` are compared with the gradebook; if nbgrader would refuse the change (there are
  submissions and grade/solution cells were added or removed) we stop first, with how to go on.
  nbgrader itself deletes the release folder when it fails (``--force`` removes it up front), so
  the release is also backed up and put back if the command leaves it missing.
- ``nbgrader generate_feedback`` writes the kit's page: ``KitFeedbackExporter`` renders the
  feedback.html of ``make grade``/``make check`` (scores per part, diagnosis, explanations,
  heatmaps) from the results the autograded notebook carries, with the gradebook's current late
  penalty and total; ``release_feedback``/``fetch_feedback`` then deliver it unchanged.
- Student markup never reaches the TA's browser: ``SafeMarkup`` (nbconvert's ``SanitizeHTML``
  plus links and attachments) cleans every autograded notebook, which formgrader renders.
- ``nbgrader release_feedback`` gives each page to its student (issue 49): ``KitReleaseFeedback``
  writes it as nbgrader does (``<hash>-tmp.html`` moved over ``<hash>.html``), then owned by the
  student's uid, 0600 (``course.secure.give_to``), so a classmate who computes the name reads
  nothing; the student's own ``nbgrader fetch_feedback`` copies it as before.
- ``KitAutoGrades`` is also what ``attnkit grade --gradebook`` uses (see ``gradebook.py``), so a
  score enters the gradebook by one path only.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

from nbconvert.exporters import HTMLExporter
from nbconvert.exporters.exporter import ResourcesDict
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.preprocessors import SaveAutoGrades

from attnkit.commands import attnkit_command
from attnkit.report.store import results_path
from attnkit.submitted_files import Unsafe, read_submitted
from attnkit import i18n
from attnkit.i18n import _
from attnkit.records import ResultsJson
from attnkit.course.settings import KitSettings

# nbgrader's autograde pipeline with Execute and SaveAutoGrades replaced by attnkit's step.
AUTOGRADE_PREPROCESSORS = [
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "attnkit.course.nbgrader_commands.KitAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
    "attnkit.course.nbgrader_commands.SafeMarkup",
]
# Where attnkit's results ride in an autograded notebook (replaced on every save: never a student's).
RESULTS_KEY = "attnkit"


class KitGradingFailed(RuntimeError):
    """``attnkit grade`` could not grade a submission inside ``nbgrader autograde``."""


def grade_with_kit(notebooks: list[Path], student: str, assignment: str) -> ResultsJson:
    """Grade one student's notebooks with ``attnkit grade`` and return its results.json.

    A subprocess, not a call: the grader forks sandboxes and must own its process (nbgrader's
    process runs threads and has its own logging set up)."""
    with tempfile.TemporaryDirectory(prefix="attnkit-autograde-") as scratch:
        folder = Path(scratch) / "submitted" / student / assignment
        folder.mkdir(parents=True)
        for notebook in notebooks:
            try:  # as attnkit's intake reads it: no link followed, no FIFO waited on, capped
                data = read_submitted(notebook.parent, notebook)
            except Unsafe:
                continue  # graded as missing, with attnkit's reason
            (folder / notebook.name).write_bytes(data)
        out = Path(scratch) / "out"
        run = subprocess.run(
            [
                *attnkit_command(),
                "grade",
                "--submitted",
                str(folder.parents[1]),
                "--out",
                str(out),
                "--jobs",
                "1",
                "--quiet",
                "--force",
                "--lang",
                i18n.language(),
            ],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            # The course's settings (nbgrader runs in the course's folder), its limits among them:
            # the same a course sets for `attnkit grade` and `attnkit serve` (course.settings).
            env={**os.environ, **KitSettings.load(Path.cwd() if Path("nbgrader_config.py").is_file() else None).environment()},
        )
        results_file = results_path(out, {"student_id": student, "assignment": assignment})
        if run.returncode != 0 or not results_file.is_file():
            raise KitGradingFailed(
                _("attnkit grade 无法评分 {student}/{assignment}（退出码 {code}）：{output}").format(
                    student=student, assignment=assignment, code=run.returncode, output=run.stderr[-2000:]
                )
            )
        return json.loads(results_file.read_text(encoding="utf-8"))


def kit_scores(results: ResultsJson) -> dict[str, float]:
    """attnkit's score per autograded grade cell."""
    return {name: float(part["score"]) for name, part in results["parts"].items() if part.get("max_score")}


def carry_results(nb: NotebookNode, results: ResultsJson | None) -> None:
    """Put attnkit's results into the notebook's metadata, replacing whatever the student put there."""
    nb.metadata.pop(RESULTS_KEY, None)
    if results is not None:
        nb.metadata[RESULTS_KEY] = {"results": results}


class KitAutoGrades(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades`` with attnkit's hidden-suite score for each autograded cell.

    Cells attnkit does not score (the free-text answers) are saved exactly as nbgrader does: an
    unchanged answer gets 0 and "No response.", anything else waits for a TA. ``kit_scores`` is
    set by ``attnkit grade``; inside ``nbgrader autograde`` it is None and the submission is
    graded here."""

    kit_scores: dict[str, float] | None = None

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        info = resources["nbgrader"]
        scores = self.kit_scores
        if scores is None:
            results = grade_with_kit(self._submitted_notebooks(info["student"], info["assignment"]), info["student"], info["assignment"])
            scores = kit_scores(results)
            carry_results(nb, results)
        self._scores = scores
        self._seen: set[str] = set()
        nb, resources = super().preprocess(nb, resources)
        # A student's editor may have dropped a cell's nbgrader metadata: attnkit still scored the
        # code (it finds functions by name), so its grade is saved even though no cell carries it.
        with Gradebook(info["db_url"]) as gradebook:
            for name, score in scores.items():
                if name in self._seen:
                    continue
                try:
                    grade = gradebook.find_grade(name, info["notebook"], info["assignment"], info["student"])
                except MissingEntry:
                    continue
                set_auto_score(grade, score)
            gradebook.db.commit()
        return nb, resources

    def _submitted_notebooks(self, student: str, assignment: str) -> list[Path]:
        # The bytes the student submitted, as `make grade` sees them, not nbgrader's sanitised copy:
        # the same input gives the same score.
        from nbgrader.coursedir import CourseDirectory

        coursedir = CourseDirectory(config=self.config)
        folder = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
        return sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.is_symlink())

    def _add_score(self, cell: NotebookNode, resources: ResourcesDict) -> None:
        name = cell.metadata["nbgrader"]["grade_id"]
        if name not in self._scores:
            super()._add_score(cell, resources)
            return
        self._seen.add(name)
        grade = self.gradebook.find_grade(name, self.notebook_id, self.assignment_id, self.student_id)
        set_auto_score(grade, self._scores[name])
        self.gradebook.db.commit()


def set_auto_score(grade: Any, score: float) -> None:
    """As SaveAutoGrades: a TA's earlier manual score keeps the cell under review."""
    grade.auto_score = score
    grade.needs_manual_grade = grade.manual_score is not None


# -- safe pages and the kit's feedback ----------------------------------------------------------------
# Raster images only: an SVG (or HTML) attachment can carry script.
SAFE_ATTACHMENTS = {"image/png", "image/jpeg", "image/gif"}
BLANK_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="  # 1×1
# A markdown link or image whose target is a script URL: ``[x](javascript:...)``, ``](data:text/html...)``.
_SCRIPT_URL = re.compile(r"\]\(\s*<?\s*(?:javascript|vbscript|data)\s*:", re.IGNORECASE)


class SafeMarkup(SanitizeHTML):
    """nbconvert's ``SanitizeHTML`` (bleach: raw HTML in markdown and raw cells is escaped, so
    ``<script>`` and ``onerror=`` are text), plus what it leaves: markdown links to script URLs
    are defused and attachments other than raster images dropped."""

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict, index: int) -> tuple[NotebookNode, ResourcesDict]:
        cell, resources = super().preprocess_cell(cell, resources, index)
        if cell.cell_type in ("markdown", "raw"):
            cell.source = _SCRIPT_URL.sub("](#", cell.source)
            attachments = cell.get("attachments") or {}
            for name in list(attachments):
                kept = {kind: data for kind, data in attachments[name].items() if kind in SAFE_ATTACHMENTS}
                # A blank pixel, not nothing: nbconvert refuses a notebook whose markdown names a missing attachment.
                attachments[name] = kept or {"image/png": BLANK_PNG}
        return cell, resources


def kit_page(results: ResultsJson, db_url: str | None) -> str:
    """The kit's feedback page for these results, with the gradebook's lateness (if any)."""
    from attnkit.assignment.folder import discover
    from attnkit.report.store import bounded_feedback
    from attnkit.course.gradebook_totals import lateness

    suites = discover()
    results = results.copy()  # shallow, as dict(results)
    if db_url:
        late = lateness(db_url, results["student_id"], results["assignment"])
        if late is not None:
            results["late"] = late
    return bounded_feedback(results, suites[results["assignment"]])


class KitFeedbackExporter(HTMLExporter):
    """``nbgrader generate_feedback``'s exporter: the kit's page for a notebook attnkit graded
    (it carries the results), nbgrader's own feedback page for any other."""

    # The page is a str, as HTMLExporter's own override says (ignoring its base's NotebookNode the same way).
    def from_notebook_node(  # type: ignore[override]
        self,
        nb: NotebookNode,
        resources: dict[str, Any] | None = None,
        **kw: Any,
    ) -> tuple[str, dict[str, Any]]:
        carried = nb.metadata.get(RESULTS_KEY, {}).get("results")
        if not isinstance(carried, dict) or carried.get("assignment") not in _assignment_names():
            return super().from_notebook_node(nb, resources, **kw)
        resources = self._init_resources(resources)
        info = resources.get("nbgrader", {})
        # The page is about the student nbgrader is writing feedback for, whatever the notebook says.
        carried = {**carried, "student_id": info.get("student", carried.get("student_id", ""))}
        # Ours: carry_results replaced whatever the student put there.
        return kit_page(cast(ResultsJson, carried), info.get("db_url")), resources


def _assignment_names() -> set[str]:
    from attnkit.assignment.folder import discover

    return set(discover())


class KitReleaseFeedback(ExchangeReleaseFeedback):
    """``nbgrader release_feedback`` with each page its student's alone: named, placed and moved
    as nbgrader 0.9's own (``notebook_hash`` of the submission's secret and the notebook), written
    by ``course.secure.write_page`` (owned by the student's uid, 0600; an ACL or nbgrader's 0644
    with a warning where that cannot be)."""

    def copy_files(self) -> None:
        from attnkit.course.secure import write_page

        coursedir = self.coursedir
        excluded = set(coursedir.student_id_exclude.split(",")) if coursedir.student_id_exclude else set()
        pattern = re.escape(os.path.sep).join(
            [coursedir.format_path(coursedir.feedback_directory, "(?P<student_id>.*)", coursedir.assignment_id, escape=True), "(?P<notebook_id>.*).html"]
        )
        for html_file in glob.glob(os.path.join(self.src_path, "*.html")):
            found = re.match(pattern, html_file)
            if found is None:
                self.log.error("Could not match '%s' with regexp '%s'", html_file, pattern)
                continue
            student, notebook_id = found["student_id"], found["notebook_id"]
            if student in excluded:
                continue
            folder = Path(html_file).parent
            secret = (folder / "submission_secret.txt").read_text()
            checksum = utils.notebook_hash(secret=secret, notebook_id=notebook_id)
            temporary = Path(self.dest_path) / f"{checksum}-tmp.html"
            write_page(temporary, Path(html_file).read_bytes(), student)
            os.replace(temporary, Path(self.dest_path) / f"{checksum}.html")
            self.log.info("Feedback released for student '%s' on '%s/%s' (its student's only)", student, coursedir.assignment_id, notebook_id)


# -- generate_assignment guard ---------------------------------------------------------------------
def source_cells(notebook: Path) -> dict[str, set[str]]:
    """The cell ids nbgrader's SaveCells records for a source notebook (after LockCells)."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    found: dict[str, set[str]] = {"grade": set(), "solution": set(), "task": set(), "source": set()}
    for cell in nb.cells:
        if not utils.is_grade(cell) and not utils.is_solution(cell) and not utils.is_locked(cell) and not utils.is_task(cell):
            continue
        name = cell.metadata["nbgrader"]["grade_id"]
        if utils.is_grade(cell):
            found["grade"].add(name)
        if utils.is_solution(cell):
            found["solution"].add(name)
        if utils.is_task(cell):
            found["task"].add(name)
        # LockCells locks grade, solution and read-only cells; SaveCells keeps all locked ones.
        if utils.is_grade(cell) or utils.is_solution(cell) or utils.is_locked(cell) or utils.is_task(cell):
            found["source"].add(name)
    return found


def blocked_changes(db_path: Path, source: Path, db_url: str | None = None) -> list[str]:
    """Why nbgrader would refuse to regenerate: notebooks with submissions whose cells changed
    (the gradebook at ``db_url`` when given, else the SQLite file ``db_path``)."""
    if db_url is None and not db_path.is_file():
        return []
    problems = []
    with Gradebook(db_url or f"sqlite:///{db_path}") as gradebook:
        for folder in sorted(p for p in source.iterdir() if p.is_dir()):
            try:
                assignment = gradebook.find_assignment(folder.name)
            except MissingEntry:
                continue
            if not assignment.submissions:
                continue
            for notebook in sorted(folder.glob("*.ipynb")):
                try:
                    recorded = gradebook.find_notebook(notebook.stem, folder.name)
                except MissingEntry:
                    problems.append(
                        _("{notebook}：新增的笔记本（已有 {count} 份提交）").format(
                            notebook=f"{folder.name}/{notebook.name}", count=len(assignment.submissions)
                        )
                    )
                    continue
                old = {
                    "grade": {c.name for c in recorded.grade_cells},
                    "solution": {c.name for c in recorded.solution_cells},
                    "task": {c.name for c in recorded.task_cells},
                    "source": {c.name for c in recorded.source_cells},
                }
                new = source_cells(notebook)
                added = sorted(set().union(*new.values()) - set().union(*old.values()))
                removed = sorted(set().union(*old.values()) - set().union(*new.values()))
                if old != new:
                    problems.append(
                        _("{notebook}：新增单元格 {added}，删除单元格 {removed}（已有 {count} 份提交）").format(
                            notebook=f"{folder.name}/{notebook.name}", added=added or _("无"), removed=removed or _("无"), count=len(assignment.submissions)
                        )
                    )
    return problems


def _argv_option(argv: list[str], *names: str) -> str | None:
    for index, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and index + 1 < len(argv):
                return argv[index + 1]
    return None


def guard_generate_assignment(root: Path, source: str, release: str, db_url: str, argv: list[str]) -> None:
    """Stop ``nbgrader generate_assignment`` before it can delete the release, or put it back."""
    if _argv_option(argv, "--CourseDirectory.release_directory") is not None:
        return  # a release into another folder (attnkit's own registration, `make release`): not ours to guard
    db_url = _argv_option(argv, "--db", "--CourseDirectory.db_url") or db_url
    if db_url.startswith("sqlite:///"):
        problems = blocked_changes(Path(db_url[len("sqlite:///") :]), root / source)
        if problems:
            print(
                _(
                    "nbgrader generate_assignment 已停止，发布目录 {release} 未改动。\n"
                    "gradebook 中已有提交，而源笔记本的单元格有增删，nbgrader 不允许这样修改：\n  {problems}\n"
                    "继续的办法（任选其一）：\n"
                    "  1. 撤销 solutions/ 中单元格的增删（改单元格内容、分值可以，增删单元格不行）；\n"
                    "  2. 作为新作业发布：复制到 solutions/<新名字>/，再 nbgrader generate_assignment <新名字>；\n"
                    "  3. 先备份 gradebook.db，再 nbgrader db assignment remove <作业> --force 删除旧记录，\n"
                    "     然后 nbgrader generate_assignment <作业> --force，最后 make grade 重新登记成绩。"
                ).format(release=root / release, problems="\n  ".join(problems)),
                file=sys.stderr,
            )
            sys.exit(1)
    backup_release(root / release, root / source)


def backup_release(release: Path, source: Path) -> None:
    """Copy the release aside; at exit, put back every file nbgrader removed and did not rewrite.

    Only files whose source still exists: a notebook the instructor deleted from ``source/`` is
    meant to leave the release, one nbgrader lost by failing is not."""
    if not release.is_dir():
        return
    backup = Path(tempfile.mkdtemp(prefix="attnkit-release-backup-"))
    shutil.copytree(release, backup / "release", symlinks=True)

    def restore() -> None:
        restored = []
        for path in sorted((backup / "release").rglob("*")):
            relative = path.relative_to(backup / "release")
            target = release / relative
            if path.is_file() and not target.exists() and (source / relative).exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
                restored.append(str(target))
        if restored:
            print(_("nbgrader 删除了发布文件，已恢复原样：") + "\n  " + "\n  ".join(restored), file=sys.stderr)
        shutil.rmtree(backup, ignore_errors=True)

    atexit.register(restore)


def configure(c: Any, root: str) -> None:
    """Called from the course's nbgrader_config.py with its config object ``c``."""
    c.Autograde.autograde_preprocessors = list(AUTOGRADE_PREPROCESSORS)
    c.GenerateFeedback.exporter_class = "attnkit.course.nbgrader_commands.KitFeedbackExporter"
    c.ExchangeFactory.release_feedback = "attnkit.course.nbgrader_commands.KitReleaseFeedback"
    argv = list(sys.argv[1:])
    command = next((arg for arg in argv if not arg.startswith("-")), "")
    if command in ("generate_assignment", "assign"):
        guard_generate_assignment(Path(root), c.CourseDirectory.source_directory, c.CourseDirectory.release_directory, c.CourseDirectory.db_url, argv)
