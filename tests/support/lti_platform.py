"""An LTI 1.3 platform (the LMS's side) on 127.0.0.1 for the LMS tests, built on ``lti1p3platform``
(PyPI, by OpenLearning): its registration, its OIDC login initiation and signed launch message,
its token endpoint (which checks the tool's client assertion against the tool's JWKS, fetched from
the URL the tool serves it at) and its token validation are the library's, not ours.

What the library leaves to its host (Django or FastAPI views and a store) is here: the HTTP
server, the Assignment and Grade Services store (line items, scores, results: one result per user
and line item, the latest score's, as the AGS spec says) and the Names and Role Provisioning
Services roster. Each request is recorded (``requests``) so a test can count line items created
and scores posted, and look at every form the tool sent. ``stop``/``start`` take the platform off
the air and back (the same port, the same store: an LMS outage)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request

LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
RESULT = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"
ROSTER = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
CONTEXT = "course-19"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Conf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs: Any) -> None:
        self._registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: Any) -> Registration:
        return self._registration


class _Request(Request):
    def build_metadata(self, request: Any) -> Any:
        return request


class _Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, **kwargs: Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> str:
        return url


class _Launch(LTIAdvantageMessageLaunchAbstract):
    def render_launch_form(self, launch_data: dict[str, Any], **kwargs: Any) -> str:
        fields = "".join(
            f'<input type="hidden" name="{name}" value="{launch_data[name]}">' for name in ("id_token", "state")
        )
        return (
            f'<html><body><form id="launch" method="post" action="{launch_data["launch_url"]}">{fields}</form>'
            '<script>document.getElementById("launch").submit()</script></body></html>'
        )


class Platform:
    """The platform, its store and its server (``base``: its URL)."""

    def __init__(self, tool_jwks_url: str, tool_login_url: str = "", tool_launch_url: str = "") -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
        self.public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.client_id = "attnkit-tool-1"
        self.deployment_id = "deployment-1"
        self.registration = (
            Registration()
            .set_iss(self.base)
            .set_client_id(self.client_id)
            .set_deployment_id(self.deployment_id)
            .set_oidc_login_url(tool_login_url or f"{self.base}/no-login")
            .set_launch_url(tool_launch_url or f"{self.base}/no-launch")
            .set_tool_key_set_url(tool_jwks_url)
            .set_platform_public_key(self.public_pem)
            .set_platform_private_key(self.private_pem)
        )
        self.lock = threading.Lock()
        self.line_items: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, dict[str, Any]]] = {}  # line item id -> user id -> result
        self.members: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []  # method, path, form / json, authorization
        self.launch_users: dict[str, dict[str, Any]] = {}  # login_hint -> the user's claims
        self.server: ThreadingHTTPServer | None = None
        self.start()

    # -- what the tests set and read ------------------------------------------------------------
    def enrol(self, user_id: str, email: str, sourcedid: str, name: str = "") -> None:
        member = {"user_id": user_id, "email": email, "lis_person_sourcedid": sourcedid, "name": name or user_id, "roles": [LEARNER], "status": "Active"}
        self.members.append(member)

    def settings(self) -> dict[str, str]:
        """``c.AttnkitLti`` for a course registered on this platform."""
        return {
            "issuer": self.base,
            "client_id": self.client_id,
            "deployment_id": self.deployment_id,
            "token_url": f"{self.base}/token",
            "lineitems_url": f"{self.base}/{CONTEXT}/lineitems",
            "memberships_url": f"{self.base}/{CONTEXT}/memberships",
            "auth_login_url": f"{self.base}/authorize",
            "platform_jwks_url": f"{self.base}/jwks",
        }

    def requests_to(self, method: str, suffix: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["method"] == method and r["path"].split("?")[0].endswith(suffix)]

    def result_of(self, user_id: str) -> dict[str, Any] | None:
        with self.lock:
            for item in self.results.values():
                if user_id in item:
                    return item[user_id]
        return None

    # -- on and off the air --------------------------------------------------------------------------
    def start(self) -> None:
        platform = self

        class Handler(_Handler):
            owner = platform

        deadline = time.monotonic() + 10
        while True:
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    # -- the launch (OIDC login initiation, then the signed id_token) --------------------------------
    def login_initiation_url(self, user: dict[str, Any], target: str) -> str:
        """Where a browser goes when the user clicks the course's link: the tool's login initiation."""
        hint = user["sub"]
        self.launch_users[hint] = user
        login = _Login(_Request({"method": "GET", "get_data": {}, "form_data": {}}), _Conf(registration=self.registration))
        login._registration = self.registration
        login.set_lti_message_hint(hint=f"link-{CONTEXT}")
        login.set_launch_url(target)
        return str(login.initiate_login(hint))

    def authorize(self, query: dict[str, str]) -> str:
        """The OIDC authorization endpoint: the launch form carrying the signed id_token."""
        user = self.launch_users[query["login_hint"]]
        launch = _Launch(_Request({"method": "GET", "get_data": query, "form_data": {}}), _Conf(registration=self.registration))
        launch.set_launch_url(query.get("target_link_uri", ""))
        launch.set_user_data(user["sub"], [LEARNER], full_name=user.get("name"), email_address=user.get("email"))
        launch.set_resource_link_claim(f"link-{CONTEXT}")
        launch.set_launch_context_claim(CONTEXT, context_label="ch19", context_title="注意力机制")
        launch.set_ags(lineitems_url=f"{self.base}/{CONTEXT}/lineitems", allow_creating_lineitems=True)
        launch.set_nrps(context_memberships_url=f"{self.base}/{CONTEXT}/memberships")
        if user.get("sourcedid"):
            launch.set_extra_claims({"https://purl.imsglobal.org/spec/lti/claim/lis": {"person_sourcedid": user["sourcedid"]}})
        return str(launch.lti_launch())

    # -- the services --------------------------------------------------------------------------------
    def allowed(self, authorization: str, scope: str) -> bool:
        if not authorization.startswith("Bearer "):
            return False
        conf = _Conf(registration=self.registration)
        try:
            return conf.validate_token(authorization[len("Bearer ") :], allowed_scopes=[scope])
        except Exception:
            return False


class _Handler(BaseHTTPRequestHandler):
    owner: Platform
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def parse_request(self) -> bool:
        # A connection kept alive from before ``stop`` gets no answer either: an outage is total.
        if not super().parse_request():
            return False
        if self.owner.server is not self.server:
            self.close_connection = True
            return False
        return True

    def _send(self, status: int, body: Any, kind: str = "application/json", headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _record(self, **extra: Any) -> None:
        with self.owner.lock:
            self.owner.requests.append({"method": self.command, "path": self.path, "authorization": self.headers.get("Authorization", ""), **extra})

    def do_GET(self) -> None:
        platform = self.owner
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        self._record(query=query)
        auth = self.headers.get("Authorization", "")
        if parts.path == "/jwks":
            return self._send(200, _Conf(registration=platform.registration).get_jwks())
        if parts.path == "/authorize":
            return self._send(200, platform.authorize(query), "text/html")
        if parts.path == f"/{CONTEXT}/memberships":
            if not platform.allowed(auth, ROSTER):
                return self._send(401, {"error": "unauthorized"})
            return self._send(200, {"id": self.path, "context": {"id": CONTEXT}, "members": platform.members})
        if parts.path == f"/{CONTEXT}/lineitems":
            if not platform.allowed(auth, LINEITEM):
                return self._send(401, {"error": "unauthorized"})
            with platform.lock:
                items = list(platform.line_items.values())
            for key, field in (("resource_id", "resourceId"), ("tag", "tag")):
                if key in query:
                    items = [item for item in items if item.get(field) == query[key]]
            return self._send(200, items)
        if parts.path.endswith("/results"):
            if not platform.allowed(auth, RESULT):
                return self._send(401, {"error": "unauthorized"})
            item_id = platform.base + parts.path[: -len("/results")]
            with platform.lock:
                found = list(platform.results.get(item_id, {}).values())
            return self._send(200, found)
        return self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        platform = self.owner
        parts = urllib.parse.urlsplit(self.path)
        body = self._body()
        auth = self.headers.get("Authorization", "")
        if parts.path == "/token":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            self._record(form=form)
            try:
                answer = _Conf(registration=platform.registration).get_access_token(form)
            except Exception as error:
                return self._send(400, {"error": "invalid_client", "error_description": type(error).__name__})
            return self._send(200, answer)
        document = json.loads(body or b"{}")
        self._record(json=document)
        if parts.path == f"/{CONTEXT}/lineitems":
            if not platform.allowed(auth, LINEITEM):
                return self._send(401, {"error": "unauthorized"})
            with platform.lock:
                item = dict(document) | {"id": f"{platform.base}/{CONTEXT}/lineitems/{len(platform.line_items) + 1}"}
                platform.line_items[item["id"]] = item
            return self._send(201, item)
        if parts.path.endswith("/scores"):
            if not platform.allowed(auth, SCORE):
                return self._send(401, {"error": "unauthorized"})
            item_id = platform.base + parts.path[: -len("/scores")]
            with platform.lock:
                if item_id not in platform.line_items:
                    return self._send(404, {"error": "no such line item"})
                if document.get("userId") not in {m["user_id"] for m in platform.members}:
                    return self._send(422, {"error": "no such user"})
                held = platform.results.setdefault(item_id, {})
                previous = held.get(document["userId"])
                if previous is not None and previous["timestamp"] > document["timestamp"]:
                    return self._send(409, {"error": "older timestamp"})
                held[document["userId"]] = {
                    "id": f"{item_id}/results/{document['userId']}",
                    "scoreOf": item_id,
                    "userId": document["userId"],
                    "resultScore": document.get("scoreGiven"),
                    "resultMaximum": document.get("scoreMaximum"),
                    "timestamp": document["timestamp"],
                    "gradingProgress": document.get("gradingProgress"),
                    "activityProgress": document.get("activityProgress"),
                }
            return self._send(200, {})
        return self._send(404, {"error": "not found"})

    def do_PUT(self) -> None:
        platform = self.owner
        parts = urllib.parse.urlsplit(self.path)
        document = json.loads(self._body() or b"{}")
        self._record(json=document)
        if not platform.allowed(self.headers.get("Authorization", ""), LINEITEM):
            return self._send(401, {"error": "unauthorized"})
        item_id = platform.base + parts.path
        with platform.lock:
            if item_id not in platform.line_items:
                return self._send(404, {"error": "not found"})
            platform.line_items[item_id] = dict(document) | {"id": item_id}
        return self._send(200, platform.line_items[item_id])
