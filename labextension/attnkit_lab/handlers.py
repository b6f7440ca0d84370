"""The lab extension's server side: it runs in the student's own Jupyter server, as the student.

Two channels, one answer (``/attnkit-lab/state``):

- the exchange: the student's own submissions are nbgrader's cache copies
  (``<cache>/<course>/<student>+<assignment>+<timestamp>``, each with its ``submission_secret.txt``);
  a submission's page is ``<exchange>/<course>/feedback/<notebook_hash>.html``, as
  ``nbgrader fetch_feedback`` finds it, readable by this student alone, and its marks the
  ``.json`` beside it (``attnkit.report.cell_marks``). Nobody else can name or read them.
- ``--hub``: the service answers with the user's own token (``JUPYTERHUB_API_TOKEN``) at
  ``ATTNKIT_SERVICE_URL`` (the hub's ``Spawner.environment`` gives it, as for ``attnkit submit``).

Neither (no service placed anything, no service answers): ``channel`` is "none" and the frontend
stays quiet; nbgrader's Assignment List works as it always does.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import math
import os
import re
import stat
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web

MAX_PAGE_BYTES = 8 * 1024 * 1024  # a feedback page (the kit caps its own at 4 MB)
MAX_JSON_BYTES = 2 * 1024 * 1024
MAX_TEXT = 20000  # characters of one text of the marks shown on a cell (a check's output, a diagnosis)
MAX_ITEMS = 200  # functions, diagnoses, labels, counted times: the kit writes a few of each
MAX_NAME = 200  # characters of an assignment's name (a folder's, as nbgrader's fetch lays it out)
HASH = re.compile(r"[0-9a-f]{32}")  # nbgrader's notebook_hash: an md5 in hex
ATTEMPT_ID = re.compile(r"[0-9]{1,18}")  # the service's attempt ids (its routes take these alone)
POLICIES_FILE = "attnkit-policies.json"
# The page is shown in an iframe of JupyterLab: scripts off, no same origin, nothing fetched but inline styles and data images.
PAGE_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
SERVICE_TIMEOUT = 10.0


@contextlib.contextmanager
def _chdir(folder: str) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def nbgrader_places(root_dir: str) -> tuple[str, str, str]:
    """(exchange root, cache, course id or "") from the student's nbgrader configuration, loaded
    as nbgrader's own Assignment List loads it (the Jupyter config path, then the server's root)."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.apps import NbGrader
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.exchange import Exchange

    with _chdir(root_dir):
        app = NbGrader()
        app.config_file_paths.append([os.getcwd(), *jupyter_config_path()])
        app.load_config_file()
        config = app.config
    exchange = Exchange(config=config)
    return str(exchange.root), str(exchange.cache), str(CourseDirectory(config=config).course_id)


def notebook_hash(secret: str, notebook_id: str) -> str:
    from nbgrader.utils import notebook_hash as nbgrader_hash

    return str(nbgrader_hash(secret=secret, notebook_id=notebook_id))


def _read_capped(path: str, cap: int, dir_fd: int | None = None) -> bytes | None:
    """The regular file's bytes (no link followed), or None when it is missing, not ours to read,
    not a regular file, or too large. Never raises on what the path holds (odd bytes, a NUL, too long)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        data = handle.read(cap + 1)
    return None if len(data) > cap else data


# The feedback folder is 0711 (release_feedback's): a student may pass it, not list it, so it is
# opened as a path (Linux's O_PATH), enough to fstat it and to open a file relative to it.
FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def _writable_by_me(info: os.stat_result) -> bool:
    """Whether this server's user could have put a file in the folder ``info`` describes (its owner,
    or a group or everyone with write permission)."""
    if os.geteuid() == 0 or info.st_uid == os.geteuid() or info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and info.st_gid in {os.getegid(), *os.getgroups()}


def _is_placed(folder: str, name: str) -> bool:
    """Whether the service placed a file ``name`` in ``folder`` for this student: as ``_read_placed``
    would read it, and readable by them (a classmate's page, named from an overheard secret, is not)."""
    try:
        folder_fd = os.open(folder, FOLDER_FLAGS)
    except (OSError, ValueError):
        return False
    try:
        if _writable_by_me(os.fstat(folder_fd)) or not stat.S_ISREG(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode):
            return False
        return os.access(name, os.R_OK, dir_fd=folder_fd, effective_ids=os.access in os.supports_effective_ids, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    finally:
        os.close(folder_fd)


def _read_placed(folder: str, name: str, cap: int) -> bytes | None:
    """``name`` in ``folder`` if the service placed it there: the folder (the exchange's
    ``<course>/feedback``, 0711 and the service's, as release_feedback makes it) is one the student
    cannot write, so nothing in it is the student's own forgery; the file is opened relative to the
    folder checked (no link followed, no folder swapped between the check and the read)."""
    try:
        folder_fd = os.open(folder, FOLDER_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        if _writable_by_me(os.fstat(folder_fd)):
            return None
        return _read_capped(name, cap, dir_fd=folder_fd)
    finally:
        os.close(folder_fd)


def _text(value: Any, cap: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value[:cap]


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("not a number")
    return float(value)


def _diagnosis(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("not a diagnosis")
    return {"id": _text(value.get("id"), 256), "text": _text(value.get("text")), "section": _text(value.get("section"))}


def _limit(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("not a limit")
    attempts, window = _number(value.get("attempts")), _number(value.get("window_seconds"))
    counted = value.get("counted", [])
    if attempts < 0 or attempts != int(attempts) or window <= 0 or not isinstance(counted, list):
        raise ValueError("not a limit")
    return {"attempts": int(attempts), "window_seconds": window, "counted": [_number(t) for t in counted[:MAX_ITEMS]]}


def checked_marks(data: bytes) -> dict[str, Any] | None:
    """The marks (``attnkit.report.cell_marks``, format 1) as the frontend reads them: only the
    fields it knows, each of its type, texts capped; None for anything else (not JSON, nested too
    deep, a field of another type), so that no file makes the frontend mark cells it should not
    or stop watching."""
    try:
        found = json.loads(data)
        if not isinstance(found, dict) or found.get("format") != 1:
            return None
        functions = found.get("functions", [])
        labels = found.get("labels", {})
        if not isinstance(functions, list) or not isinstance(labels, dict) or len(functions) > MAX_ITEMS:
            return None
        marks: dict[str, Any] = {
            "format": 1,
            "shown": _text(found.get("shown", "")),
            "labels": {_text(key, 64): _text(value) for key, value in list(labels.items())[:MAX_ITEMS]},
            "functions": [],
        }
        for entry in functions:
            if not isinstance(entry, dict) or not isinstance(entry.get("diagnoses", []), list) or not isinstance(entry.get("full"), bool):
                return None
            failure = entry.get("first_failure")
            if failure is not None and not isinstance(failure, dict):
                return None
            marks["functions"].append(
                {
                    "function": _text(entry.get("function"), 256),
                    "score": _number(entry.get("score")),
                    "max_score": _number(entry.get("max_score")),
                    "full": entry["full"],
                    "diagnoses": [_diagnosis(d) for d in entry.get("diagnoses", [])[:MAX_ITEMS]],
                    "first_failure": None if failure is None else {"check": _text(failure.get("check")), "said": _text(failure.get("said"))},
                }
            )
        for key in ("score", "max_score"):
            if key in found:
                marks[key] = _number(found[key])
        if found.get("limit") is not None:
            marks["limit"] = _limit(found["limit"])
        return marks
    except (ValueError, RecursionError, TypeError, AttributeError):
        return None


class Exchange:
    """The exchange channel: this student's submissions and pages, found as fetch_feedback finds them."""

    def __init__(self, root_dir: str) -> None:
        self.root, self.cache, self.course_id = nbgrader_places(root_dir)

    def courses(self) -> list[str]:
        if self.course_id:
            return [self.course_id]
        return sorted(entry.name for entry in Path(self.cache).glob("*") if entry.is_dir())

    def submissions(self, assignment: str) -> list[dict[str, Any]]:
        """This student's submissions of ``assignment``, oldest first: {key, timestamp, ready}."""
        found = []
        for course in self.courses():
            feedback = os.path.join(self.root, course, "feedback")
            for folder in glob.glob(os.path.join(glob.escape(os.path.join(self.cache, course)), f"*+{glob.escape(assignment)}+*")):
                secret = _read_capped(os.path.join(folder, "submission_secret.txt"), 512)
                timestamp = _read_capped(os.path.join(folder, "timestamp.txt"), 64)
                if not secret:
                    continue
                for notebook in sorted(glob.glob(os.path.join(glob.escape(folder), "*.ipynb"))):
                    key = notebook_hash(secret.decode(errors="replace"), Path(notebook).stem)
                    found.append(
                        {
                            "key": f"{course}/{key}",
                            "timestamp": (timestamp or b"").decode(errors="replace").strip(),
                            "notebook": Path(notebook).name,
                            "ready": _is_placed(feedback, f"{key}.html"),
                        }
                    )
        return sorted(found, key=lambda s: s["timestamp"])

    def _place(self, key: str) -> tuple[str, str]:
        """The feedback folder and the file name (without suffix) of ``key`` ("<course>/<hash>"): a
        course of this student's, a name nbgrader's hash could be; anything else is not found."""
        course, _, name = key.partition("/")
        if course not in self.courses() or not HASH.fullmatch(name):
            raise web.HTTPError(404)
        return os.path.join(self.root, course, "feedback"), name

    def page(self, key: str) -> bytes:
        folder, name = self._place(key)
        data = _read_placed(folder, name + ".html", MAX_PAGE_BYTES)
        if data is None:
            raise web.HTTPError(404)
        return data

    def marks(self, key: str) -> dict[str, Any] | None:
        folder, name = self._place(key)
        data = _read_placed(folder, name + ".json", MAX_JSON_BYTES)
        return checked_marks(data) if data else None

    def policies(self) -> dict[str, Any]:
        """The public policies the service placed (``attnkit-policies.json``): each assignment's limit, checked."""
        for course in self.courses():
            data = _read_placed(os.path.join(self.root, course, "feedback"), POLICIES_FILE, MAX_JSON_BYTES)
            if not data:
                continue
            try:
                assignments = json.loads(data).get("assignments", {})
                return {str(name): _limit(limit) for name, limit in list(assignments.items())[:MAX_ITEMS]}
            except (ValueError, RecursionError, TypeError, AttributeError):
                return {}
        return {}


class Hub:
    """The ``--hub`` channel: the service, asked with the user's own token."""

    def __init__(self, service: str, token: str) -> None:
        self.service = service if service.endswith("/") else service + "/"
        self.token = token

    @staticmethod
    def from_environment() -> Hub | None:
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        service = os.environ.get("ATTNKIT_SERVICE_URL", "")  # docs/hub.md: the hub's Spawner.environment says it, as for `attnkit submit`
        return Hub(service, token) if token and service else None

    def get(self, path: str, cap: int = MAX_JSON_BYTES) -> bytes:
        request = urllib.request.Request(self.service + path, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=SERVICE_TIMEOUT) as answer:
            data = answer.read(cap + 1)
        if len(data) > cap:
            raise web.HTTPError(502)
        return bytes(data)

    def status(self, assignment: str) -> dict[str, Any] | None:
        """The user's submissions of ``assignment`` (oldest first) and its limit, as the state says them;
        an answer of another shape raises (ValueError, KeyError, TypeError, AttributeError)."""
        mine = json.loads(self.get("api/attempts"))
        entry = next((entry for entry in mine.get("assignments", []) if entry.get("name") == assignment), None)
        if entry is None:
            return None
        return {
            "submissions": [
                {"key": str(int(s["id"])), "timestamp": str(s["timestamp"]), "ready": bool(s.get("page")), "notebook": ""}
                for s in sorted(entry.get("submissions", []), key=lambda s: int(s["id"]))
            ],
            "limit": _limit(
                {"attempts": entry.get("attempts", 0), "window_seconds": _number(entry.get("window_hours", 1.0)) * 3600, "counted": entry.get("counted", [])}
            ),
        }


def labels() -> dict[str, str]:
    """The words, in the kit's language (``ATTNKIT_LANG``): attnkit's own catalogue, installed in the student's environment."""
    try:
        from attnkit.report.cell_marks import labels as kit_labels
    except ImportError:
        return {}
    return kit_labels()


class StateHandler(APIHandler):
    """GET ?assignment=NAME: the channel, the student's submissions (each ready or not), the
    attempts the window allows and the times of the counted ones, the words to show."""

    @web.authenticated
    def get(self) -> None:
        assignment = self.get_argument("assignment")
        if not is_assignment_name(assignment):
            raise web.HTTPError(400)
        hub = Hub.from_environment()
        state: dict[str, Any] = {"channel": "none", "submissions": [], "limit": None, "labels": labels()}
        if hub is not None:
            try:
                status = hub.status(assignment)
            except (OSError, ValueError, KeyError, TypeError, AttributeError, urllib.error.URLError) as error:
                self.log.info("attnkit-lab: the service at %s does not answer (%s): the exchange is asked instead", hub.service, error)
            else:
                state["channel"] = "hub"
                if status is not None:
                    state["submissions"] = status["submissions"]
                    state["limit"] = status["limit"]
                self.finish(json.dumps(state))
                return
        exchange = Exchange(self.settings["server_root_dir"])
        submissions = exchange.submissions(assignment)
        state["submissions"] = submissions
        policy = exchange.policies().get(assignment)
        ready = [s for s in submissions if s["ready"]]
        latest = exchange.marks(ready[-1]["key"]) if ready else None
        if latest is not None and latest.get("limit"):
            state["limit"] = latest["limit"]
        elif policy is not None:
            state["limit"] = {**policy, "counted": []}
        if policy is not None or ready:
            state["channel"] = "exchange"
        self.finish(json.dumps(state))


def _channel(handler: JupyterHandler) -> Hub | Exchange:
    hub = Hub.from_environment()
    return hub if hub is not None and handler.get_argument("channel", "") == "hub" else Exchange(handler.settings["server_root_dir"])


class PageHandler(JupyterHandler):
    """GET ?key=…&channel=…: a submission's page, for the panel's iframe (sandboxed: no script runs).
    Not an APIHandler: that one answers every body as JSON."""

    @web.authenticated
    def get(self) -> None:
        key = self.get_argument("key")
        where = _channel(self)
        if isinstance(where, Hub):
            if not ATTEMPT_ID.fullmatch(key):
                raise web.HTTPError(404)
            try:
                page = where.get(f"attempt/{key}/feedback", MAX_PAGE_BYTES)
            except urllib.error.HTTPError as error:
                raise web.HTTPError(error.code if error.code in (403, 404) else 502) from None
        else:
            page = where.page(key)
        self.set_header("Content-Security-Policy", PAGE_CSP)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page)


class MarksHandler(APIHandler):
    """GET ?key=…&channel=…: a submission's marks (``attnkit.report.cell_marks``), or 404."""

    @web.authenticated
    def get(self) -> None:
        key = self.get_argument("key")
        where = _channel(self)
        if isinstance(where, Hub):
            if not ATTEMPT_ID.fullmatch(key):
                raise web.HTTPError(404)
            try:
                marks = checked_marks(where.get(f"api/attempts/{key}/marks"))
            except urllib.error.HTTPError as error:
                raise web.HTTPError(error.code if error.code in (403, 404) else 502) from None
        else:
            marks = where.marks(key)
        if marks is None:
            raise web.HTTPError(404)
        self.finish(json.dumps(marks))


def is_assignment_name(name: str) -> bool:
    """A name an assignment's folder may have: one path component, no NUL, not a dot folder, not an
    option of nbgrader's command line (``--student=…``), not endless."""
    return 0 < len(name) <= MAX_NAME and not name.startswith((".", "-")) and not any(c in name for c in "/\\\0")


def assignment_folder(root_dir: str, path: Any) -> Path:
    """The assignment folder of the notebook at ``path`` (relative to the server's root, as
    JupyterLab names it): a notebook file inside the root (links resolved first), in a folder whose
    name is an assignment's. Anything else (not a string, absolute, ``..``, a NUL, too long,
    undecodable): 400."""
    if not isinstance(path, str) or not path or len(path) > 4096 or "\0" in path or not path.endswith(".ipynb"):
        raise web.HTTPError(400)
    try:
        root = Path(root_dir).resolve()
        notebook = (root / path).resolve()
        inside = notebook.is_relative_to(root) and notebook.parent != root and notebook.is_file()
    except (OSError, ValueError):
        raise web.HTTPError(400) from None
    if not inside or not is_assignment_name(notebook.parent.name):
        raise web.HTTPError(400)
    return notebook.parent


SUBMIT_TIMEOUT = 120.0
# One ``nbgrader submit`` at a time per server: a flood of clicks (or of requests) starts no more
# processes than one; the others are told to wait (429). The service's own limits count the rest.
SUBMITTING = asyncio.Lock()


class SubmitHandler(APIHandler):
    """POST {"path": the open notebook}: ``nbgrader submit`` of its assignment folder (the
    folder's name is the assignment, as nbgrader's fetch lays it out), as the Assignment List does,
    always in the name of this server's own user (``--student``: no configuration file of the
    folder's names another), without holding up the server while it runs."""

    @web.authenticated
    async def post(self) -> None:
        body = self.get_json_body()
        folder = assignment_folder(self.settings["server_root_dir"], body.get("path") if isinstance(body, dict) else None)
        if SUBMITTING.locked():
            raise web.HTTPError(429)
        async with SUBMITTING:
            from nbgrader.utils import get_username

            command = [sys.executable, "-m", "nbgrader", "submit", f"--student={get_username()}", folder.name]
            process = await asyncio.create_subprocess_exec(
                *command, cwd=folder.parent, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
            try:
                output, _ = await asyncio.wait_for(process.communicate(), SUBMIT_TIMEOUT)
            except TimeoutError:
                process.kill()
                await process.wait()
                raise web.HTTPError(504) from None
        text = output.decode(errors="replace")
        self.finish(json.dumps({"success": process.returncode == 0, "assignment": folder.name, "output": text[-4000:]}))
