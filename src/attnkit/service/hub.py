"""The on-submit service inside JupyterHub: students' pages, submit over HTTP, /health (docs/hub.md).

``attnkit serve --hub`` runs this as a process of its own (``python -m attnkit.service.hub COURSE
AUTOGRADER STATE FEEDBACK PARENT``), a JupyterHub-managed service: it listens where the hub's
``JUPYTERHUB_SERVICE_URL`` says, behind the hub's proxy under ``JUPYTERHUB_SERVICE_PREFIX``, and
knows users only through the hub (``jupyterhub.services.auth.HubOAuth``): a browser by the OAuth
cookie the hub's login gives (XSRF checked by HubOAuth on every cookie request that is not a page
view), a program by the user's own token (``Authorization: token …``). The hub checks the scope
``access:services!service=<name>``; nothing a client sends besides its cookie or token (a header, a
form field, the path) names a user.

It reads the service's database and the placed pages and never writes the database: a posted
notebook is spooled (``service.http_submit``) for the loop to queue, the same queue and policies
as an exchange submission. A student sees their own submissions only (403 otherwise); a TA (a hub
admin, or a member of ``c.AttnkitServe.hub_ta_groups``) sees the class's.

``/health`` needs no login and tells nothing but whether the service is up: this process serving,
the loop that started it alive, its database readable.

No request makes it hold more than it must: a body is taken only by the submit routes, only from a
user the hub knows (asked in ``prepare``, before the body is read) and only up to the cap
(``MAX_BODY_BYTES``: a longer ``Content-Length`` is refused at once, a chunked body once it is over);
every other route takes at most ``MAX_OTHER_BODY_BYTES`` (the server's own limit). The upload form's
fields are counted before they are parsed. With ``c.AttnkitServe.hub_students`` a hub name becomes a
student id as ``http_submit.student_id`` says (only mapped names are students), checked in
``prepare`` too.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jinja2
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.httpserver import HTTPServer

from attnkit import i18n
from attnkit.assignment.folder import Assignment, discover
from attnkit.constants import GraderError
from attnkit.course.settings import AttnkitServe
from attnkit.course.gradebook import course_config
from attnkit.i18n import _
from attnkit.service.http_submit import (
    MAX_BODY_BYTES,
    Refused,
    clear_incoming,
    hub_missing,
    hub_students,
    incoming,
    read_form,
    spool,
    student_id,
    usable_id,
)
from attnkit.service.policies import DEFAULT, Policy, next_feedback_at, policies_from, show_times_in, when
from attnkit.service.hub_process import READY, STARTING, read_phase
from attnkit.service.queue import DELIVERED, GRADING, QUEUE_AT_VARIABLE, QUEUED, REFUSED, Queue, is_url, open_queue

PR_SET_PDEATHSIG = 1
NOTICED_WAIT = 10.0  # seconds a posted notebook's page waits for the loop to queue it (then: the home page)
STARTING_WAIT = 120.0  # and, besides, for the loop to start (issue 49: we answer before it)
LOADING_WAIT = 60.0  # seconds a request waits for the course to be loaded here (then 503)
SHOWN = ("full", "scores", "released")  # pages that show a score
HINTED = ("full", "released")  # pages that show the diagnoses (and so the hint ladder's levels)
MAX_OTHER_BODY_BYTES = 64 * 1024  # the body any route but submit may send (none needs one): the server's limit
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers (query parameters, cookies): tornado's default, stated
MAX_FORM_PARTS = 8  # the upload form sends three (_xsrf, assignment, notebook)
UPLOADING: set[str] = set()  # the students whose body is coming in now (SubmitHandler)
# Our own pages: no script, nothing fetched, forms only to ourselves, never framed.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
# The kit's feedback page, as placed: served in a sandbox of its own origin, so that nothing in it
# could reach the hub's cookies even if escaping ever failed (the page has no script anyway).
FEEDBACK_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("attnkit.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],
)
_ENV.install_gettext_callables(  # type: ignore[attr-defined]  # a method the i18n extension adds
    gettext=lambda message: _(message), ngettext=lambda s, p, n: i18n.ngettext(s, p, n), newstyle=True
)
_ENV.globals["when"] = when


@dataclass
class Kit:
    """What every handler reads: the course's suites and policies, the database, the pages."""

    state: Path  # the service's folder (.attnkit-serve)
    feedback: Path  # the exchange's feedback/ where the loop places each page
    suites: dict[str, Assignment]
    policies: dict[str, Policy]
    ta_groups: frozenset[str]
    students: Mapping[str, str]  # hub name -> student id (c.AttnkitServe.hub_students); else the name
    parent: int

    # Where the service's queue is: its SQLite file, or the PostgreSQL URL replicas share (from the
    # loop, in the environment: never on a command line, where a password would show).
    queue_at: str = ""

    def queue(self) -> Queue:
        """The queue the loop writes (read here only: ``rows``, the SQL both databases speak). We
        start before the loop (issue 49): until it has made its SQLite file, 503 "starting"."""
        where = self.queue_at or str(self.state / "service.db")
        if not is_url(where) and not Path(where).is_file():
            raise Told(503, _("评分服务正在启动，请稍后再试"))
        return open_queue(where, f"hub-{os.getpid()}", make_schema=False)

    def phase(self) -> str:
        """The loop's phase (``hub_process``): starting, warming (it takes submissions), ready."""
        return read_phase(self.state, self.parent)


def row_view(row: Mapping[str, Any], position: int | None = None) -> dict[str, Any]:
    """What a page shows of one submission: its score only when its page showed one."""
    shown = row["shown"] in SHOWN
    return {
        "id": row["id"],
        "student": row["student"],
        "assignment": row["assignment"],
        "timestamp": row["timestamp"],
        "state": row["state"],
        "attempt": row["attempt"],
        "shown": row["shown"],
        "score": row["score"] if shown else None,
        "max_score": row["max_score"] if shown else None,
        "cause": row["cause"] if row["state"] != DELIVERED else "",
        "position": position,
        "page": row["state"] == DELIVERED and bool(row["feedback"]),
        # the hint ladder (hints = "ladder"): the level of each diagnosis's hints its page showed
        # (none when the page showed no diagnosis: withheld, scores only, until the due date)
        "hints": sorted(json.loads(row["hints"]).items()) if row["shown"] in HINTED and "hints" in row.keys() and row["hints"] else [],
    }


def student_status(kit: Kit, student: str, now: float) -> dict[str, Any]:
    """A student's own submissions per assignment, what is queued, and when the next feedback comes."""
    queue = kit.queue()
    try:
        places = queue.positions()
        rows = queue.of_student(student)
        assignments = []
        for name in sorted(set(kit.suites) | {row["assignment"] for row in rows}):
            policy = kit.policies.get(name, DEFAULT)
            shown = queue.shown_times(student, name, now - policy.window_seconds) if policy.attempts else []
            next_at = next_feedback_at(policy, shown) if policy.attempts else None
            assignments.append(
                {
                    "name": name,
                    "submissions": [row_view(row, places.get(row["id"])) for row in rows if row["assignment"] == name],
                    "attempts": policy.attempts,
                    "window_hours": policy.window_hours,
                    "visibility": policy.visibility,
                    "next_feedback": next_at,
                    # points graded by hand (formgrader), never in the scores shown here
                    "manual_points": kit.suites[name].manual_points if name in kit.suites else 0.0,
                    "counted": shown,  # when the window's counted feedbacks came (the lab extension counts down from them)
                }
            )
        return {"student": student, "assignments": assignments}
    finally:
        queue.close()


def class_status(kit: Kit) -> dict[str, Any]:
    """The class: counts by state, the queue and what is being graded, the latest submissions."""
    queue = kit.queue()
    try:
        places = queue.positions()
        waiting = queue.in_state(GRADING, QUEUED)
        latest = queue.latest(500)
        return {
            "counts": queue.counts(),
            "queue": [row_view(row, places.get(row["id"])) for row in waiting],
            # The TA sees every score, whatever the student's page showed.
            "latest": [row_view(row) | {"cause": row["cause"], "score": row["score"], "max_score": row["max_score"]} for row in latest],
        }
    finally:
        queue.close()


class Told(web.HTTPError):
    """A refusal whose reason is ours, for the user (the cause, in their language): shown with the
    status. The text goes to tornado's log as an argument, never as a format (a name may hold a %)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(status, "%s", text)
        self.text = text


def error_title(status: int) -> str:
    """What an HTTP status means to the student, in their language (HTTP's own reason is English)."""
    titles = {
        400: _("请求有误"),
        403: _("无权访问"),
        404: _("找不到这个页面"),
        405: _("不支持这种请求"),
        413: _("请求体太大"),
        429: _("请稍后再试"),
        503: _("评分服务暂时不可用"),
    }
    return titles.get(status, _("出错了"))


class Handler(HubOAuthenticated, web.RequestHandler):
    """A request from a hub user: who they are comes from the hub alone (the cookie HubOAuth set
    after the hub's login, or the user's own token), asked once in ``prepare``."""

    api = False  # an API answers 403 instead of sending the client to the hub's login

    @property
    def kit(self) -> Kit:
        kit: Kit | None = self.settings["kit"]
        if kit is None:  # the course still loading (``main``: we answer first)
            raise Told(503, _("评分服务正在启动，请稍后再试"))
        return kit

    def get_login_url(self) -> str:
        if self.api:
            raise web.HTTPError(403)
        return str(super().get_login_url())

    async def prepare(self) -> None:
        # The hub asked asynchronously (HubAuth.get_user's blocking form runs a thread per call);
        # get_current_user then answers from this cache.
        model = await self.hub_auth.get_user(self, sync=False)
        if model:
            try:
                model = self.check_hub_user(model)  # the hub's scopes: access to this service
            except UserNotAllowed:
                raise web.HTTPError(403) from None
            if model.get("kind", "user") != "user":
                raise web.HTTPError(403)  # a service's token is nobody's submission
        self._hub_auth_user_cache = model
        if model and self.settings["kit"] is None:
            # We answer before the course is loaded (``main``, issue 49): a user's request waits for
            # it. Without a user (JupyterHub's probe of our prefix too) the answer needs no course:
            # the login's redirect, or 403.
            try:
                await asyncio.wait_for(self.settings["loaded"].wait(), LOADING_WAIT)
            except TimeoutError:
                pass  # then 503 (``kit``)
        if model and not self.is_ta():
            self.student()  # a hub name that is no student here is refused before anything is read

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")

    def user(self) -> dict[str, Any]:
        model: dict[str, Any] = self.current_user
        return model

    def student(self) -> str:
        try:
            return student_id(str(self.user()["name"]), self.kit.students, ta=self.is_ta())
        except Refused as refused:
            raise Told(403, str(refused)) from None

    def is_ta(self) -> bool:
        model = self.user()
        return bool(model.get("admin")) or bool(self.kit.ta_groups & set(model.get("groups") or ()))

    def page(self, template: str, **values: Any) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        prefix = self.hub_auth.base_url if hasattr(self.hub_auth, "base_url") else "/"
        self.finish(_ENV.get_template(template).render(html_lang=i18n.html_lang(), prefix=prefix, user=self.user(), ta=self.is_ta(), **values))

    def own_row(self, id: int) -> Mapping[str, Any]:
        """Submission ``id`` if it is the user's own (or the user is a TA): 404 when there is none, 403 when it is another's."""
        queue = self.kit.queue()
        try:
            row = queue.find(id)
        finally:
            queue.close()
        if row is None:
            raise web.HTTPError(404)
        if not self.is_ta() and (row["student"] != self.student() or row["state"] == REFUSED):
            raise web.HTTPError(403)
        return row

    def placed_beside(self, id: str, suffix: str) -> bytes:
        """What the service placed for the user's own delivered submission ``id``: its page
        (``.html``) or its marks (``.json``); 404 until placed."""
        row = self.own_row(int(id))
        if row["state"] != DELIVERED or not row["feedback"]:
            raise web.HTTPError(404)
        try:
            return (self.kit.feedback / f"{Path(row['feedback']).stem}{suffix}").read_bytes()
        except OSError:
            raise web.HTTPError(404) from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # A refusal of ours says why (``Told``: the assignment, the cap, why a hub name is no
        # student here); nothing else an error carries (HubOAuth's 403 causes, a traceback) is shown.
        error = kwargs.get("exc_info", (None, None, None))[1]
        why = error.text if isinstance(error, Told) else ""
        title = error_title(status_code)
        if status_code == 403 and not why:
            why = _("这不是你的提交或页面；全班的页面只有助教可以打开。")
        if self.api:
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(f"{status_code} {title}\n" + (f"{why}\n" if why else ""))
            return
        self.set_header("Content-Type", "text/html; charset=utf-8")
        prefix = self.hub_auth.base_url if hasattr(self.hub_auth, "base_url") else "/"
        self.finish(_ENV.get_template("hub_error.html.j2").render(html_lang=i18n.html_lang(), prefix=prefix, status=status_code, title=title, why=why))


class HealthHandler(web.RequestHandler):
    """No login, no data: 200 "ready" once the loop's workers are warm, 200 "warming" while it
    starts and warms them (submissions are taken and queued: JupyterHub, which waits for any answer
    under 500 before it serves its own pages, comes up at once), 503 otherwise (a probe's answer)."""

    def get(self) -> None:
        kit: Kit | None = self.settings["kit"]
        healthy = os.getppid() == self.settings["parent"]
        warming = healthy and (kit is None or kit.phase() != READY)
        if healthy and not warming and kit is not None:
            try:
                queue = kit.queue()
                try:
                    queue.ping()
                finally:
                    queue.close()
            except Exception:  # sqlite3's or SQLAlchemy's: the database cannot be read
                healthy = False
        self.set_status(200 if healthy else 503)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(("warming\n" if warming else "ready\n") if healthy else "unavailable\n")


class JwksHandler(web.RequestHandler):
    """No login: the tool's public key set, which the LMS checks the client assertion of the token
    exchange with (its "public JWK URL", docs/lms.md). The public half only; 404 without an LMS."""

    def get(self) -> None:
        kit: Kit | None = self.settings["kit"]
        from attnkit.lms.settings import registration_of
        from attnkit.lms.keys import jwks

        registration = registration_of(kit.state.parent) if kit is not None else None
        if registration is None:
            raise web.HTTPError(404)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "max-age=300")
        self.finish(json.dumps(jwks(registration.key_path)))


class HomeHandler(Handler):
    """The student's page: their submissions per assignment, the queue, the upload form."""

    @web.authenticated
    def get(self) -> None:
        status = student_status(self.kit, self.student(), time.time())
        self.page("hub_student.html.j2", status=status, suites=sorted(self.kit.suites), xsrf=self.xsrf_token.decode("ascii"))


class AttemptHandler(Handler):
    """One submission's state (refreshing itself while it waits) and the link to its page."""

    @web.authenticated
    def get(self, id: str) -> None:
        row = self.own_row(int(id))
        queue = self.kit.queue()
        try:
            places = queue.positions() if row["state"] == QUEUED else {}
        finally:
            queue.close()
        suite = self.kit.suites.get(row["assignment"])
        self.page("hub_attempt.html.j2", attempt=row_view(row, places.get(row["id"])), manual_points=suite.manual_points if suite else 0.0)


class FeedbackHandler(Handler):
    """The kit's page of one submission, exactly as placed for ``fetch_feedback`` (the policy's page)."""

    @web.authenticated
    def get(self, id: str) -> None:
        page = self.placed_beside(id, ".html")
        self.set_header("Content-Security-Policy", FEEDBACK_CSP)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(page)


@web.stream_request_body
class SubmitHandler(Handler):
    """POST a notebook: the upload form (cookie and XSRF) or a program (the user's token). The
    assignment is the one asked for; the notebook is stored under the assignment's own name.

    The body streams in (``data_received``) only once ``prepare`` has found the user, their student
    id and a length within the cap, and goes to a file of the service's own (``incoming``), never
    into memory: the notebook is moved from there into the spool. A cookie request's XSRF token
    therefore comes in the query (the form's ``action``) or the ``X-XSRFToken`` header."""

    body: tuple[int, Path] | None = None  # the body's file while it comes in (descriptor, path)
    received = 0
    uploader = ""  # the student whose body this is, while it is one of UPLOADING

    async def prepare(self) -> None:
        declared = self.request.headers.get("Content-Length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise web.HTTPError(400)
            if int(declared) > MAX_BODY_BYTES:
                raise Told(413, too_large())
        await super().prepare()
        if not self.current_user:
            raise web.HTTPError(403)  # never a login redirect: a POST without a user is refused, its body unread
        student = self.student()
        if self.path_args:
            self.suite(self.path_args[0])
        if student in UPLOADING:  # one body at a time per student: no one holds the disk with many
            raise Told(429, _("你还有一次上传没有结束：请等它结束后再提交"))
        UPLOADING.add(student)
        self.uploader = student
        # Only now may the body come, and only up to the cap (the server's own limit stays just
        # over it, for a chunk that says it is larger than what is left).
        self.body = incoming(self.kit.state)
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):  # HTTPServer's, always: the interface does not name the method
            connection.set_max_body_size(MAX_BODY_BYTES + 1024 * 1024)

    def data_received(self, chunk: bytes) -> None:
        if self._finished or self.body is None:
            return
        self.received += len(chunk)
        if self.received > MAX_BODY_BYTES:  # a chunked body with no Content-Length
            self.forget_body()
            refusal = Told(413, too_large())
            self.send_error(413, exc_info=(Told, refusal, None))
            return
        view = memoryview(chunk)
        while view:
            view = view[os.write(self.body[0], view) :]

    def forget_body(self) -> None:
        if self.body is not None:
            descriptor, path = self.body
            self.body = None
            os.close(descriptor)
            path.unlink(missing_ok=True)

    def release(self) -> None:
        self.forget_body()
        UPLOADING.discard(self.uploader)
        self.uploader = ""

    def on_finish(self) -> None:
        self.release()

    def on_connection_close(self) -> None:
        self.release()
        super().on_connection_close()

    def suite(self, name: str) -> Assignment:
        suite = self.kit.suites.get(name)
        if suite is None:  # the name is said back only when it could be one (short, printable)
            raise Told(400, _("没有名为 {assignment} 的作业").format(assignment=name if usable_id(name) else "?"))
        return suite

    async def post(self, assignment: str = "") -> None:
        assert self.body is not None  # prepare made it
        path = notebook = self.body[1]
        try:
            if self.api:
                name = assignment
            else:
                fields, part = read_form(path, self.request.headers.get("Content-Type", ""), MAX_FORM_PARTS)
                name = fields.get("assignment", b"").decode("utf-8", "replace")
                notebook = self.part(path, part)
            suite = self.suite(name)
            student = self.student()
            spooled = spool(self.kit.state, student, name, suite.notebook, notebook)
        except Refused as refused:
            raise Told(400, str(refused)) from None
        finally:
            if notebook != path:
                notebook.unlink(missing_ok=True)
            self.release()
        id = await self.queued_id(spooled.name)
        if self.api:
            self.set_status(202)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"id": id, "student": student, "assignment": name, "timestamp": spooled.timestamp}))
        elif id is None:
            self.redirect(self.hub_auth.base_url)
        else:
            self.redirect(url_path_join(self.hub_auth.base_url, "attempt", str(id)))

    def part(self, body: Path, where: tuple[int, int] | None) -> Path:
        """The form's notebook part copied from the body's file into a file of its own (empty without one)."""
        descriptor, path = incoming(self.kit.state)
        try:
            if where is not None:
                with open(body, "rb") as source:
                    source.seek(where[0])
                    left = where[1] - where[0]
                    while left > 0:
                        data = source.read(min(left, 1024 * 1024))
                        if not data:
                            break
                        os.write(descriptor, data)
                        left -= len(data)
        finally:
            os.close(descriptor)
        return path

    async def queued_id(self, inbound: str) -> int | None:
        """The queue's id of a spooled submission, once the loop has queued it (it is woken by the notice)."""
        deadline = time.monotonic() + NOTICED_WAIT
        # The loop still starting (its imports, its suites: seconds) queues nothing yet: wait for it.
        while self.kit.phase() == STARTING and time.monotonic() < deadline + STARTING_WAIT:
            await asyncio.sleep(0.2)
        queue = self.kit.queue()  # one connection for the wait (a shared queue's costs a few ms to open)
        try:
            while time.monotonic() < deadline:
                found = queue.id_of(inbound)
                if found is not None:
                    return found
                await asyncio.sleep(0.05)
        finally:
            queue.close()
        return None


class ApiSubmitHandler(SubmitHandler):
    api = True


class ApiAttemptsHandler(Handler):
    """The user's own submissions (JSON), as the student's page shows them."""

    api = True

    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(student_status(self.kit, self.student(), time.time())))


class ApiAttemptHandler(Handler):
    api = True

    @web.authenticated
    def get(self, id: str) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(row_view(self.own_row(int(id)))))


class ApiMarksHandler(Handler):
    """The marks of the user's own delivered submission (``report.cell_marks``, as placed beside its
    page) for the lab extension on ``--hub``; 404 until its page is placed."""

    api = True

    @web.authenticated
    def get(self, id: str) -> None:
        marks = self.placed_beside(id, ".json")
        self.set_header("Content-Type", "application/json")
        self.finish(marks)


class ClassHandler(Handler):
    """The TA's view: the class's states and queue (403 for a student)."""

    @web.authenticated
    def get(self) -> None:
        if not self.is_ta():
            raise web.HTTPError(403)
        if self.api:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(class_status(self.kit)))
        else:
            self.page("hub_class.html.j2", status=class_status(self.kit))


class ApiClassHandler(ClassHandler):
    api = True


def too_large() -> str:
    return _("请求体超过 {limit} MB，未读取").format(limit=MAX_BODY_BYTES // 1024 // 1024)


def application(kit: Kit | None, prefix: str, cookie_secret: bytes, parent: int = 0) -> web.Application:
    """``kit``: None until the course is loaded (``main``); ``parent``: the loop's pid (default: ``kit``'s)."""
    def at(path: str) -> str:
        # "$ATTNKIT_SERVICE_URL/api/submit/…" with the URL's own trailing slash: the prefix's "//" taken as "/"
        return prefix.rstrip("/") + "/+" + path

    return web.Application(
        [
            (at("health"), HealthHandler),
            (at("lti/jwks"), JwksHandler),
            (at("oauth_callback"), HubOAuthCallbackHandler),
            (at("api/submit/([^/]+)"), ApiSubmitHandler),
            (at("api/attempts"), ApiAttemptsHandler),
            (at("api/attempts/([0-9]{1,18})"), ApiAttemptHandler),
            (at("api/attempts/([0-9]{1,18})/marks"), ApiMarksHandler),
            (at("api/class"), ApiClassHandler),
            (at("submit"), SubmitHandler),
            (at("attempt/([0-9]{1,18})"), AttemptHandler),
            (at("attempt/([0-9]{1,18})/feedback"), FeedbackHandler),
            (at("class"), ClassHandler),
            (prefix.rstrip("/") + "/?", HomeHandler),
        ],
        kit=kit,
        loaded=asyncio.Event(),  # set once ``kit`` is
        parent=parent or (kit.parent if kit is not None else 0),
        cookie_secret=cookie_secret,
    )


def cookie_secret(state: Path) -> bytes:
    """The secret that signs the OAuth cookie, kept in the service's folder (0600): a restart keeps the students logged in."""
    path = state / "hub-cookie-secret"
    if not path.is_file():
        temporary = state / ".hub-cookie-secret.tmp"
        with open(temporary, "wb", opener=lambda name, flags: os.open(name, flags | os.O_TRUNC, 0o600)) as handle:
            handle.write(os.urandom(32))
        os.replace(temporary, path)
    return path.read_bytes()


HELD: list[int] = []  # the hub side's lock (``load_kit``), held until this process ends


def load_kit(course: Path, autograder: Path, state: Path, feedback: str, parent: int) -> Kit:
    """The course's suites, policies and hub settings (its nbgrader_config.py: a second or more), the
    bodies a killed run left cleared. ``feedback`` empty: the exchange's, and the queue where the
    loop will have it, read from the course as the loop reads them (started before the loop, issue
    49). Refused: the mapping gives one student id to two hub names; another hub side serves the course."""
    import fcntl

    from attnkit.service import settings

    lock = os.open(state / "hub.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a second service's hub side: never clear the first one's bodies
        os.close(lock)
        raise Refused(_("这个课程已有一个 attnkit serve --hub 在运行")) from None
    HELD.append(lock)
    config = course_config(course)
    show_times_in(config)
    queue_at = os.environ.get(QUEUE_AT_VARIABLE, "") or settings.queue_url_of(course) or ""
    section = AttnkitServe(config=config)  # (a course's settings as course.settings declares them)
    students = hub_students(section.hub_students)
    kit = Kit(
        state=state,
        feedback=Path(feedback) if feedback else settings.load_course(course).feedback,
        suites=discover(autograder),
        policies=policies_from(config),
        ta_groups=frozenset(section.hub_ta_groups),
        students=students,
        parent=parent,
        queue_at=queue_at,
    )
    clear_incoming(state)
    return kit


def main(argv: list[str]) -> int:
    """``python -m attnkit.service.hub COURSE AUTOGRADER STATE FEEDBACK PARENT [LISTENING]``: serve
    until SIGTERM. ``LISTENING``: a descriptor of ours already listening where the hub's URL says
    (``attnkit serve --hub`` binds it first thing: JupyterHub's probes wait in its backlog instead
    of backing off for seconds, issue 49)."""
    course, autograder, state, feedback, parent = Path(argv[0]), Path(argv[1]), Path(argv[2]), argv[3], int(argv[4])
    listening = int(argv[5]) if len(argv) > 5 else None
    # The loop killed (-9): we stop too, else its restart could not listen again.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 0
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "")
    port = url.port
    if port is None or not prefix:
        print(json.dumps({"event": "hub-failed", "cause": hub_missing()}, ensure_ascii=False), flush=True)
        return 2
    failed = 0

    # Bodies: at most MAX_OTHER_BODY_BYTES anywhere, refused before they are read; the submit
    # routes raise their own request's limit to the cap once they know the user (SubmitHandler).
    async def serve() -> None:
        nonlocal failed
        # The server is made in the running loop (tornado attaches its sockets to the current one).
        # It answers at once (/health "warming", other pages 503) while the course loads.
        app = application(None, prefix, cookie_secret(state), parent)
        server = HTTPServer(
            app,
            max_body_size=MAX_OTHER_BODY_BYTES,
            max_buffer_size=MAX_BODY_BYTES,
            max_header_size=MAX_HEADER_BYTES,
            xheaders=False,
        )
        if listening is not None:
            given = socket.socket(fileno=listening)
            given.setblocking(False)
            server.add_sockets([given])
        else:
            server.listen(port, url.hostname or "127.0.0.1")
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        loop.add_signal_handler(signal.SIGINT, lambda: None)  # Ctrl-C is the loop's: it stops us after
        print(json.dumps({"time": round(time.time(), 3), "event": "hub-listening", "url": url.geturl(), "prefix": prefix}), flush=True)
        try:
            app.settings["kit"] = await loop.run_in_executor(None, load_kit, course, autograder, state, feedback, parent)
            app.settings["loaded"].set()
        except Exception as error:  # the course's mapping gives one student id to two hub names, ...: no start
            cause = str(error) if isinstance(error, (Refused, GraderError)) else f"{type(error).__name__}: {error}"
            print(json.dumps({"event": "hub-failed", "cause": cause}, ensure_ascii=False), flush=True)
            failed = 2
            stopped.set()
        await stopped.wait()
        server.stop()

    asyncio.run(serve())
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
