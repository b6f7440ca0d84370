"""``attnkit course student-config``: the lines of a student's ``nbgrader_config.py``, made from the course's own.

A student's nbgrader (the Assignment List in JupyterLab, ``nbgrader fetch_assignment``, ``submit``,
``fetch_feedback``) needs two things of the course: its id and where the exchange is. They are
read here from the course's ``nbgrader_config.py`` (never typed twice), with the exchange's
``path_includes_course`` and the timezone nbgrader stamps submissions with where the course sets them.

Written once for every student (docs/student-environment.md): into the students' environment
(``--into VENV``: ``VENV/etc/jupyter/nbgrader_config.py``, which nbgrader reads from
``jupyter --paths``' config folders), root-owned, outside any student's home. Nothing is written
into a home a student controls (a link planted there would steer a write as root).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from attnkit.constants import GraderError
from attnkit.course.settings import course_config
from attnkit.i18n import _

# The sections of the course's configuration a student's nbgrader needs, and nothing else: the
# course's gradebook URL, its source folder and the service's settings stay the course's.
COPIED = (("Exchange", "path_includes_course"), ("Exchange", "timezone"))
DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's own default
# nbgrader's parts for instructors, which a student's Jupyter does not show.
STUDENT_HIDDEN_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list")
STUDENT_HIDDEN_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")


def student_config(root: Path, course_id: str | None = None, exchange: str | None = None) -> str:
    """The text of a student's ``nbgrader_config.py`` for the course at ``root``; with ``course_id``
    (and ``exchange``) given, without reading any course (an image built away from the course)."""
    if course_id:
        source = "--course-id"
        config: Any = {}
    else:
        if not (root / "nbgrader_config.py").is_file():
            raise GraderError(_("{root} 里没有 nbgrader_config.py：请在课程根目录运行，或用 --course 指定（或用 --course-id 直接给出）").format(root=root))
        source = str(root / "nbgrader_config.py")
        config = course_config(root)
        course_id = str(config.get("CourseDirectory", {}).get("course_id", ""))
        if not course_id:
            raise GraderError(_("nbgrader_config.py 没有设置 CourseDirectory.course_id：无法找到交换目录里的课程"))
    exchange = exchange or str(config.get("Exchange", {}).get("root", DEFAULT_EXCHANGE))
    lines = [
        f"# nbgrader for the students of course {course_id}: made by `attnkit course student-config` from {source}",
        "c = get_config()  # noqa: F821",
        f"c.CourseDirectory.course_id = {course_id!r}",
        f"c.Exchange.root = {exchange!r}",
    ]
    for section, name in COPIED:
        value = config.get(section, {}).get(name, None)
        if isinstance(value, str | bool | int):  # set plainly by the course (not a lazy append of traitlets')
            lines.append(f"c.{section}.{name} = {value!r}")
    return "\n".join(lines) + "\n"


def instructor_parts_off(venv: Path) -> None:
    """nbgrader's instructor parts off in ``venv``, by JupyterLab's and Jupyter Server's own commands
    (their files, their format); the Assignment List and Validate stay."""
    jupyter = str(venv / "bin" / "jupyter")
    _run([jupyter, "labextension", "disable", "--level=sys_prefix", *STUDENT_HIDDEN_PLUGINS])
    # Since JupyterLab 4.1 a user may turn a disabled plugin on again in the lab's own settings, unless it is locked.
    _run([jupyter, "labextension", "lock", "--level=sys_prefix", *STUDENT_HIDDEN_PLUGINS])
    # Jupyter Server logs a refused toggle and still exits 0: its words are the only sign.
    _run([jupyter, "server", "extension", "disable", "--sys-prefix", *STUDENT_HIDDEN_SERVER_EXTENSIONS], failed_if="Validation failed")


def _run(command: list[str], failed_if: str = "") -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or (failed_if and failed_if in done.stdout + done.stderr):
        raise GraderError(_("{command} 失败：{output}").format(command=" ".join(command), output=(done.stderr or done.stdout).strip()[-2000:]))


def write_into(venv: Path, text: str) -> Path:
    """``text`` as ``venv/etc/jupyter/nbgrader_config.py`` (0644), replaced whole: written beside it
    and renamed into place, so a reader never sees half of it and a link there is replaced, not followed."""
    if not (venv / "bin" / "python").exists():
        raise GraderError(_("{venv} 不是 Python 虚拟环境（没有 bin/python）").format(venv=venv))
    folder = venv / "etc" / "jupyter"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "nbgrader_config.py"
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".nbgrader_config.", suffix=".py")
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def command_student_config(root: Path, into: Path | None, course_id: str | None = None, exchange: str | None = None) -> int:
    """Print the lines, or write them into the students' environment ``into`` (and turn nbgrader's
    instructor parts off there), saying what it did."""
    text = student_config(root, course_id, exchange)
    if into is None:
        print(text, end="")
        return 0
    target = write_into(into, text)
    print(_("已写入 {path}：这个环境里的每位学生的 nbgrader 都会读它").format(path=target))
    instructor_parts_off(into)
    print(_("已在 {venv} 里关闭 nbgrader 的教师功能（{parts}）；作业列表（Assignment List）和 Validate 保留").format(
        venv=into, parts=", ".join(STUDENT_HIDDEN_PLUGINS + STUDENT_HIDDEN_SERVER_EXTENSIONS)
    ))
    return 0
