"""Submissions over HTTP: a hub-authenticated notebook spooled for the service's loop to queue.

The service's HTTP side (``service.hub``, a process of its own) never writes the queue's database:
the loop stays its one writer. A notebook a hub user posted is written as the service's own copy
(``.attnkit-serve/attempts/<name>/<student>/<assignment>/<notebook>``, the copy an exchange
submission gets, so grading and the page's name go the same way), then a notice
``.attnkit-serve/http/<name>.json`` is moved into place; the loop (``take_spooled``) turns each
notice into a queued row, the same as a folder seen in ``inbound/``.

Identity is the hub's: the student id is the authenticated hub user's name, never anything in the
request. Where the course sets ``c.AttnkitServe.hub_students`` (hub name -> student id), only the
names it maps are students: any other hub name is refused (a TA, unmapped, keeps the name), and so
is a name that equals one of the mapping's student ids, whoever holds it (docs/hub.md says why).
The mapping's ids must be distinct (``hub_students`` refuses the start otherwise). A name that
cannot be a student id (empty, a ``+`` or ``/``, a leading dot, control or format characters, over
``MAX_ID_BYTES`` in UTF-8: it names the spool's folders) is refused.

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
import shutil
import stat
import tempfile
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from attnkit.i18n import _
from attnkit.submitted_files import MAX_SUBMITTED_BYTES

SPOOL = "http"  # under the service's state folder
INCOMING = ".incoming"  # under it too: the bodies being received (SubmitHandler), each one file
PREFIX = "http"
MAX_BODY_BYTES = MAX_SUBMITTED_BYTES + 1024 * 1024  # one notebook at intake's cap, plus a form's framing
MAX_ID_BYTES = 100  # a student id in UTF-8: a part of the spool's file names (255 bytes each)
MAX_ANSWER_BYTES = 1024 * 1024  # what the client reads of the service's answer
_BAD_ID = re.compile(r"[+/\\\x00-\x1f\x7f\s]")


class Refused(ValueError):
    """A submission the service does not take (the student's message)."""


@dataclass(frozen=True)
class Spooled:
    name: str  # the submission's key: the queue's ``inbound`` column
    student: str
    assignment: str
    timestamp: str  # nbgrader's format: "YYYY-MM-DD HH:MM:SS.ffffff UTC"


def usable_id(name: str) -> bool:
    """Whether ``name`` can be a student id: it names the spool's folders, the queue's and the
    gradebook's student, and shows on pages. Checked as the bytes it becomes, not as characters."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return (
        0 < size <= MAX_ID_BYTES
        and not name.startswith(".")
        and not _BAD_ID.search(name)
        # no control, format (a right-to-left override, a zero-width joiner), private or unassigned character
        and not any(unicodedata.category(c)[0] in "CZ" for c in name)
    )


def student_id(hub_name: str, mapping: Mapping[str, str] | None = None, ta: bool = False) -> str:
    """The student id of a hub user; Refused (the reason is the student's) when there is none.

    Without a mapping it is the hub name itself. With one (``c.AttnkitServe.hub_students``, its ids
    distinct: ``hub_students``), a mapped name gets its id; a name that is one of the mapping's ids
    is refused (it would be that student); any other name is refused unless ``ta`` (a TA who is not
    mapped keeps their name), since an authenticator that lets users choose their names would let
    anyone be whichever roster id they chose."""
    if mapping and hub_name in mapping:
        chosen = str(mapping[hub_name])
    elif mapping and hub_name in set(mapping.values()):
        raise Refused(
            _("JupyterHub 用户名 {name} 是课程给另一位学生的学号（c.AttnkitServe.hub_students），不能用它提交或查看：请联系助教").format(name=hub_name)
        )
    elif mapping and not ta:
        raise Refused(_("JupyterHub 用户 {name} 不在课程的学号对照表中（c.AttnkitServe.hub_students）：请助教把你加进去").format(name=hub_name))
    else:
        chosen = hub_name
    if not usable_id(chosen):
        raise Refused(_("JupyterHub 用户名 {name} 不能用作学号").format(name=hub_name[:MAX_ID_BYTES]))
    return chosen


def hub_students(configured: object) -> dict[str, str]:
    """``c.AttnkitServe.hub_students`` checked when the service starts: hub names to student ids,
    each id usable and given to one hub name only. Refused (naming the hub names) otherwise."""
    if not configured:
        return {}
    if not isinstance(configured, Mapping):
        raise Refused(_("c.AttnkitServe.hub_students 应是从 JupyterHub 用户名到学号的字典"))
    mapping: dict[str, str] = {}
    holder: dict[str, str] = {}
    for name, id in configured.items():
        if not isinstance(name, str) or not isinstance(id, str) or not name or not usable_id(id):
            raise Refused(_("c.AttnkitServe.hub_students 中 {name} -> {id} 不能用作学号").format(name=repr(name), id=repr(id)))
        if id in holder:
            raise Refused(
                _("c.AttnkitServe.hub_students 把 {first} 和 {second} 映射到同一个学号 {id}：每个学号只能属于一个 JupyterHub 用户").format(
                    first=holder[id], second=name, id=id
                )
            )
        holder[id] = name
        mapping[name] = id
    return mapping


def nbgrader_timestamp(moment: float) -> str:
    """``moment`` as nbgrader writes timestamp.txt (UTC), which its late rule and hashes read."""
    return datetime.datetime.fromtimestamp(moment, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def spool(state: Path, student: str, assignment: str, notebook: str, data: bytes | Path, now: float | None = None) -> Spooled:
    """Keep ``data`` (the bytes, or a file of the service's own under ``state``: moved, never read
    into memory) as ``student``'s submission of ``assignment`` (as ``notebook``, the assignment's
    own file name: the client's file name is never used) and leave its notice for the loop.
    Refused when it is empty or over intake's cap."""
    size = data.stat().st_size if isinstance(data, Path) else len(data)
    if not size:
        raise Refused(_("上传的笔记本是空的"))
    if size > MAX_SUBMITTED_BYTES:
        raise Refused(_("上传的笔记本超过 {limit} MB").format(limit=MAX_SUBMITTED_BYTES // 1024 // 1024))
    moment = time.time() if now is None else now
    stamp = datetime.datetime.fromtimestamp(moment, tz=datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    name = f"{PREFIX}+{student}+{assignment}+{stamp}+{secrets.token_hex(8)}"
    timestamp = nbgrader_timestamp(moment)
    copy = state / "attempts" / name / student / assignment
    copy.mkdir(parents=True)
    if isinstance(data, Path):
        data.chmod(0o644)  # as write_bytes would have made it
        os.replace(data, copy / notebook)
    else:
        (copy / notebook).write_bytes(data)
    (copy / "timestamp.txt").write_text(timestamp)
    notices = state / SPOOL
    notices.mkdir(mode=0o700, exist_ok=True)
    record = Spooled(name, student, assignment, timestamp)
    temporary = notices / f".{name}.tmp"
    temporary.write_text(json.dumps(record.__dict__))
    os.replace(temporary, notices / f"{name}.json")  # the copy first, then the notice
    return record


def incoming(state: Path) -> tuple[int, Path]:
    """A new file (descriptor, path) for one request's body under ``state/.incoming`` (0700, the
    spool's file system: ``spool`` moves it into place), so that a body is never held in memory."""
    folder = state / INCOMING
    folder.mkdir(mode=0o700, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix="body-", dir=folder)
    return descriptor, Path(name)


def clear_incoming(state: Path) -> None:
    """The bodies a stopped hub side left (read when it starts: no request is under way)."""
    shutil.rmtree(state / INCOMING, ignore_errors=True)


class _Prefixed:
    """A file read as if ``prefix`` came before it."""

    def __init__(self, prefix: bytes, handle: BinaryIO) -> None:
        self.prefix, self.handle = prefix, handle

    def read(self, size: int) -> bytes:
        prefix, self.prefix = self.prefix, b""
        return prefix + self.handle.read(size - len(prefix))


def _boundaries(handle: BinaryIO | _Prefixed, delimiter: bytes, most: int) -> list[int]:
    """Where ``delimiter`` starts in what ``handle`` reads, a window at a time; at most ``most`` + 1 found."""
    found: list[int] = []
    base = 0  # where data[0] is in the stream
    data = b""
    while len(found) <= most:
        window = handle.read(1024 * 1024)
        if not window:
            break
        data += window
        start = 0
        while len(found) <= most:
            at = data.find(delimiter, start)
            if at < 0:
                break
            found.append(base + at)
            start = at + len(delimiter)
        cut = max(start, len(data) - len(delimiter) + 1)
        base += cut
        data = data[cut:]
    return found


def read_form(body: Path, content_type: str, most: int) -> tuple[dict[str, bytes], tuple[int, int] | None]:
    """The upload form from its body's file, not read into memory: its small fields (at most 1 kB
    each) and where the ``notebook`` part's content lies (start, end). Refused with more than
    ``most`` parts (counted before any is parsed) or a field over 1 kB."""
    boundary = next((part.split("=", 1)[1].strip().strip('"') for part in content_type.split(";") if part.strip().startswith("boundary=")), "")
    fields: dict[str, bytes] = {}
    notebook: tuple[int, int] | None = None
    if not content_type.startswith("multipart/form-data") or not 0 < len(boundary) <= 70:
        return fields, notebook
    delimiter = b"\r\n--" + boundary.encode("latin-1", "replace")
    with open(body, "rb") as handle:
        # The body starts with the first delimiter (without the CR LF the others follow).
        found = _boundaries(_Prefixed(b"\r\n", handle), delimiter, most + 1)
        if len(found) > most + 1:
            raise Refused(_("表单的字段太多（最多 {limit} 个）").format(limit=most))
        for start, end in zip(found, found[1:], strict=False):
            start = start - 2 + len(delimiter)  # in the file (without the CR LF put before it)
            end -= 2
            handle.seek(start)
            head = handle.read(min(8192, end - start))
            split = head.find(b"\r\n\r\n")
            if split < 0:
                continue
            named = re.search(rb'[Cc]ontent-[Dd]isposition:[^\r\n]*?[; ]name="([^"]*)"', head[:split])
            if named is None:
                continue
            value = (start + split + 4, end)
            if named.group(1) == b"notebook":
                notebook = value if notebook is None else notebook
            elif value[1] - value[0] > 1024:
                raise Refused(_("表单的字段太长"))
            else:
                handle.seek(value[0])
                fields.setdefault(named.group(1).decode("utf-8", "replace"), handle.read(value[1] - value[0]))
    return fields, notebook


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


def read_notebook(path: Path) -> bytes:
    """The client's notebook: a regular file at most intake's cap, read once through one opening
    (a FIFO, a device or a file over the cap is refused before anything is read or sent)."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused(_("{path} 不是普通文件").format(path=path))
        if info.st_size > MAX_SUBMITTED_BYTES:
            raise Refused(_("上传的笔记本超过 {limit} MB").format(limit=MAX_SUBMITTED_BYTES // 1024 // 1024))
        data = handle.read(MAX_SUBMITTED_BYTES + 1)  # a file that grew since: still capped
    if len(data) > MAX_SUBMITTED_BYTES:
        raise Refused(_("上传的笔记本超过 {limit} MB").format(limit=MAX_SUBMITTED_BYTES // 1024 // 1024))
    return data


def post_notebook(url: str, token: str, assignment: str, data: bytes, timeout: float = 120.0) -> dict[str, Any]:
    """The client (``attnkit submit``, run in the student's own server): POST ``data`` to the
    service's ``api/submit/<assignment>`` with the user's own hub token; the service's answer
    (``id``, ``student``, ``assignment``, ``timestamp``). HTTPError says why it was refused."""
    import urllib.parse
    import urllib.request

    target = url.rstrip("/") + "/api/submit/" + urllib.parse.quote(assignment, safe="")
    request = urllib.request.Request(target, data=data, method="POST", headers={"Authorization": f"token {token}", "Content-Type": "application/x-ipynb+json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read(MAX_ANSWER_BYTES))
    answer["page"] = url.rstrip("/") + f"/attempt/{answer['id']}" if answer.get("id") is not None else url
    return answer
