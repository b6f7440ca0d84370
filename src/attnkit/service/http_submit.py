"""Submissions over HTTP: a hub-authenticated notebook spooled for the service's loop to queue.

The service's HTTP side (``service.hub``, a process of its own) never writes the queue's database:
the loop stays its one writer. A notebook a hub user posted is written as the service's own copy
(``.attnkit-serve/attempts/<name>/<student>/<assignment>/<notebook>``, the copy an exchange
submission gets, so grading and the page's name go the same way), then a notice
``.attnkit-serve/http/<name>.json`` is moved into place; the loop (``take_spooled``) turns each
notice into a queued row, the same as a folder seen in ``inbound/``.

Identity is the hub's: the student id is the authenticated hub user's name (or what the course's
``c.AttnkitServe.hub_students`` maps it to), never anything in the request. A name that cannot be
a student id (empty, a ``+`` or ``/``, a leading dot, control characters) is refused.

The name ``http+<student>+<assignment>+<time>+<random>`` has five ``+``-parts, so the exchange's
``parse_name`` never takes it for an inbound folder (and a student's folder in ``inbound/`` can
never take its name): the two channels cannot collide.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.i18n import _
from attnkit.notebook import MAX_SUBMITTED_BYTES

SPOOL = "http"  # under the service's state folder
PREFIX = "http"
MAX_BODY_BYTES = MAX_SUBMITTED_BYTES + 1024 * 1024  # one notebook at intake's cap, plus a form's framing
_BAD_ID = re.compile(r"[+/\\\x00-\x1f\x7f]")


class Refused(ValueError):
    """A submission the service does not take (the student's message)."""


@dataclass(frozen=True)
class Spooled:
    name: str  # the submission's key: the queue's ``inbound`` column
    student: str
    assignment: str
    timestamp: str  # nbgrader's format: "YYYY-MM-DD HH:MM:SS.ffffff UTC"


def student_id(hub_name: str, mapping: Mapping[str, str] | None = None) -> str:
    """The student id of a hub user (the name itself unless the course maps it); Refused when it
    cannot be one (it names the queue's folders and the gradebook's student)."""
    chosen = str((mapping or {}).get(hub_name, hub_name))
    if not chosen or chosen.startswith(".") or _BAD_ID.search(chosen) or len(chosen) > 100:
        raise Refused(_("JupyterHub 用户名 {name} 不能用作学号").format(name=hub_name))
    return chosen


def nbgrader_timestamp(moment: float) -> str:
    """``moment`` as nbgrader writes timestamp.txt (UTC), which its late rule and hashes read."""
    return datetime.datetime.fromtimestamp(moment, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def spool(state: Path, student: str, assignment: str, notebook: str, data: bytes, now: float | None = None) -> Spooled:
    """Keep ``data`` as ``student``'s submission of ``assignment`` (as ``notebook``, the
    assignment's own file name: the client's file name is never used) and leave its notice for the
    loop. Refused when it is empty or over intake's cap."""
    if not data:
        raise Refused(_("上传的笔记本是空的"))
    if len(data) > MAX_SUBMITTED_BYTES:
        raise Refused(_("上传的笔记本超过 {limit} MB").format(limit=MAX_SUBMITTED_BYTES // 1024 // 1024))
    moment = time.time() if now is None else now
    stamp = datetime.datetime.fromtimestamp(moment, tz=datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    name = f"{PREFIX}+{student}+{assignment}+{stamp}+{secrets.token_hex(8)}"
    timestamp = nbgrader_timestamp(moment)
    copy = state / "attempts" / name / student / assignment
    copy.mkdir(parents=True)
    (copy / notebook).write_bytes(data)
    (copy / "timestamp.txt").write_text(timestamp)
    notices = state / SPOOL
    notices.mkdir(mode=0o700, exist_ok=True)
    record = Spooled(name, student, assignment, timestamp)
    temporary = notices / f".{name}.tmp"
    temporary.write_text(json.dumps(record.__dict__))
    os.replace(temporary, notices / f"{name}.json")  # the copy first, then the notice
    return record


def take_spooled(state: Path, notice: Callable[[str, str, str, str, float], Any]) -> list[Spooled]:
    """Each waiting notice given to ``notice(name, student, assignment, timestamp, noticed)`` (the
    queue's own ``notice``: a row already recorded is ignored there), then removed: a crash between
    the two takes it again, once. The notices taken."""
    folder = state / SPOOL
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return []
    taken: list[Spooled] = []
    for file_name in names:
        path = folder / file_name
        try:
            record = Spooled(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if (state / "attempts" / record.name).is_dir():
            notice(record.name, record.student, record.assignment, record.timestamp, time.time())
            taken.append(record)
        path.unlink(missing_ok=True)
    return taken


def hub_missing() -> str:
    """Why --hub cannot serve here ("" when it can): the hub gives a managed service where to listen."""
    import importlib.util
    from urllib.parse import urlparse

    if importlib.util.find_spec("jupyterhub") is None:
        return _("没有安装 jupyterhub：attnkit serve --hub 需要它（pip install -e '.[hub]'，见 docs/hub.md）")
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
    if url.port is None or not os.environ.get("JUPYTERHUB_SERVICE_PREFIX"):
        return _("没有 JUPYTERHUB_SERVICE_URL 和 JUPYTERHUB_SERVICE_PREFIX：attnkit serve --hub 要由 JupyterHub 作为托管服务启动（见 docs/hub.md）")
    return ""


def post_notebook(url: str, token: str, assignment: str, data: bytes, timeout: float = 120.0) -> dict[str, Any]:
    """The client (``attnkit submit``, run in the student's own server): POST ``data`` to the
    service's ``api/submit/<assignment>`` with the user's own hub token; the service's answer
    (``id``, ``student``, ``assignment``, ``timestamp``). HTTPError says why it was refused."""
    import urllib.parse
    import urllib.request

    target = url.rstrip("/") + "/api/submit/" + urllib.parse.quote(assignment, safe="")
    request = urllib.request.Request(target, data=data, method="POST", headers={"Authorization": f"token {token}", "Content-Type": "application/x-ipynb+json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    answer["page"] = url.rstrip("/") + f"/attempt/{answer['id']}" if answer.get("id") is not None else url
    return answer
