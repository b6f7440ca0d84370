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

import contextlib
import glob
import json
import os
import subprocess
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


def _read_capped(path: str, cap: int) -> bytes | None:
    """The file's bytes (no link followed), or None when it is missing, not ours to read, or too large."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(cap + 1)
    return None if len(data) > cap else data


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
                    page = os.path.join(feedback, f"{key}.html")
                    found.append(
                        {
                            "key": f"{course}/{key}",
                            "timestamp": (timestamp or b"").decode(errors="replace").strip(),
                            "notebook": Path(notebook).name,
                            "ready": os.path.exists(page),
                        }
                    )
        return sorted(found, key=lambda s: s["timestamp"])

    def _path(self, key: str, suffix: str) -> str:
        course, _, name = key.partition("/")
        if course not in self.courses() or not name.isalnum():
            raise web.HTTPError(404)
        return os.path.join(self.root, course, "feedback", name + suffix)

    def page(self, key: str) -> bytes:
        data = _read_capped(self._path(key, ".html"), MAX_PAGE_BYTES)
        if data is None:
            raise web.HTTPError(404)
        return data

    def marks(self, key: str) -> dict[str, Any] | None:
        data = _read_capped(self._path(key, ".json"), MAX_JSON_BYTES)
        return json.loads(data) if data else None

    def policies(self) -> dict[str, Any]:
        for course in self.courses():
            data = _read_capped(os.path.join(self.root, course, "feedback", POLICIES_FILE), MAX_JSON_BYTES)
            if data:
                return dict(json.loads(data).get("assignments", {}))
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
        mine = json.loads(self.get("api/attempts"))
        return next((entry for entry in mine.get("assignments", []) if entry.get("name") == assignment), None)


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
        hub = Hub.from_environment()
        state: dict[str, Any] = {"channel": "none", "submissions": [], "limit": None, "labels": labels()}
        if hub is not None:
            try:
                status = hub.status(assignment)
            except (OSError, ValueError, urllib.error.URLError) as error:
                self.log.info("attnkit-lab: the service at %s does not answer (%s): the exchange is asked instead", hub.service, error)
            else:
                state["channel"] = "hub"
                if status is not None:
                    state["submissions"] = [
                        {"key": str(s["id"]), "timestamp": s["timestamp"], "ready": bool(s.get("page")), "notebook": ""}
                        for s in sorted(status.get("submissions", []), key=lambda s: s["id"])
                    ]
                    state["limit"] = {
                        "attempts": status.get("attempts", 0),
                        "window_seconds": float(status.get("window_hours", 1.0)) * 3600,
                        "counted": status.get("counted", []),
                    }
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
            if not key.isdigit():
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
            if not key.isdigit():
                raise web.HTTPError(404)
            try:
                marks = json.loads(where.get(f"api/attempts/{key}/marks"))
            except urllib.error.HTTPError as error:
                raise web.HTTPError(error.code if error.code in (403, 404) else 502) from None
        else:
            marks = where.marks(key)
        if marks is None:
            raise web.HTTPError(404)
        self.finish(json.dumps(marks))


class SubmitHandler(APIHandler):
    """POST {"path": the open notebook}: ``nbgrader submit`` of its assignment folder (the
    folder's name is the assignment, as nbgrader's fetch lays it out), as the Assignment List does."""

    @web.authenticated
    def post(self) -> None:
        body = self.get_json_body() or {}
        root = Path(self.settings["server_root_dir"]).resolve()
        notebook = (root / str(body.get("path", ""))).resolve()
        if not notebook.is_relative_to(root) or not notebook.is_file():
            raise web.HTTPError(400)
        folder = notebook.parent
        command = [sys.executable, "-m", "nbgrader", "submit", folder.name]
        done = subprocess.run(command, cwd=folder.parent, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.finish(json.dumps({"success": done.returncode == 0, "assignment": folder.name, "output": (done.stdout + done.stderr)[-4000:]}))
