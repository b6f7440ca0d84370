"""Where ``attnkit serve``'s course, queue and gradebook are, as the command line, the environment
and the course's ``nbgrader_config.py`` say: read by the loop, ``--status`` and the command line
without importing the grading engine (torch), so that ``--status`` answers at once."""

from __future__ import annotations

import os
from pathlib import Path

from attnkit.constants import GraderError
from attnkit.course.gradebook import course_config
from attnkit.course.settings import KitSettings
from attnkit.i18n import _
from attnkit.service import exchange

STATE_FOLDER = ".attnkit-serve"  # the service's own folder in the course (0700)
PAUSED_FILE = "paused.txt"  # in the service's folder while it is paused by a transient fault: when and why
MIN_FREE_BYTES = 16 << 20  # free space the course's and the exchange's file systems need for intake to resume


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s file system (None: cannot tell)."""
    try:
        found = os.statvfs(folder)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def state_folder(root: Path) -> Path:
    """The service's own folder in the course at ``root``, made (0700: the copies hold students' secrets)."""
    state = root / STATE_FOLDER
    state.mkdir(mode=0o700, exist_ok=True)
    state.chmod(0o700)
    return state


def load_course(root: Path) -> exchange.Course:
    """The course at ``root``: its nbgrader_config.py must name the exchange's course id, and
    the exchange's inbound/ must exist (``nbgrader release_assignment`` makes it)."""
    config = course_config(root)
    exchange_root = Path(str(config.get("Exchange", {}).get("root", "/srv/nbgrader/exchange")))
    course_id = str(config.get("CourseDirectory", {}).get("course_id", ""))
    if not (root / "nbgrader_config.py").is_file():
        raise GraderError(_("{root} 里没有 nbgrader_config.py：请在课程根目录启动 attnkit serve").format(root=root))
    if not course_id:
        raise GraderError(_("nbgrader_config.py 没有设置 CourseDirectory.course_id：无法找到交换目录里的课程"))
    course = exchange.Course(root, exchange_root, course_id)
    if not course.inbound.is_dir():
        raise GraderError(_("交换目录里没有 {inbound}（先运行 nbgrader release_assignment）").format(inbound=course.inbound))
    return course


def queue_url_of(root: Path, given: str | None = None) -> str | None:
    """The shared queue's URL (``AttnkitServe.queue_url``: ``--queue-url``, else $ATTNKIT_QUEUE_URL,
    where a Kubernetes Secret puts it, else the course's ``nbgrader_config.py``); None: the SQLite
    file in the course (one service)."""
    return KitSettings.load(root, {"AttnkitServe.queue_url": given or None}).serve.queue_url or None


def gradebook_of(root: Path, given: Path | None = None) -> Path | str:
    """nbgrader's gradebook: ``--gradebook``, else the course's ``c.CourseDirectory.db_url`` when
    it names another database than a SQLite file (PostgreSQL: a URL string), else the SQLite file
    it names, else ``gradebook.db`` in the course (nbgrader's default)."""
    if given is not None:
        return given
    section = course_config(root).get("CourseDirectory", {})
    url = str(section.get("db_url", "") if hasattr(section, "get") else "")
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        return path if path.is_absolute() else root / path  # nbgrader runs from the course root
    return url or root / "gradebook.db"
