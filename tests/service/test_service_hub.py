"""``attnkit serve --hub`` as a JupyterHub-managed service, with a real hub (issue 40).

One JupyterHub for the module (PyPI's ``jupyterhub``, behind npm's configurable-http-proxy from
``make hub-proxy``), its DummyAuthenticator with a password, three hub users: students A and B and
a TA (a member of the course's TA group). The hub starts ``attnkit serve --hub`` itself as a
managed service, from a course with the assignment released; users get tokens through the hub's
REST API (an admin service's token), as a single-user server's ``JUPYTERHUB_API_TOKEN`` would be.

In headless Chromium, A logs in on the hub, opens the service, submits the model answers through
the page's form and reads the kit's page for that very attempt; B, logged in the same way, gets
403 on A's attempt and page. Over the API: no token, B's token on A's submission, and headers or
form fields that name A (X-Forwarded-User, REMOTE_USER, Referer, ``user=``) are all refused; B's
own ``attnkit submit`` is B's whatever the request says; the TA sees the class; /health answers
without a login; a body over the cap is refused before it is read. Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from commands import BIN, ROOT, run_command, start_tool, stop_group, tool_env
from devtools import Browser
from test_nbgrader_exchange import instructor, nbgrader_utc

ASSIGNMENT = "ch19-attention"
CORRECT = ROOT / "solutions" / ASSIGNMENT / "attention.ipynb"
MISTAKE = ROOT / "examples" / "submitted" / "wangfang" / ASSIGNMENT / "attention.ipynb"  # masks by multiplying
CHP = ROOT / ".hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
SERVICE = "attnkit"
WAIT = 300.0  # seconds a start or a page may take (a shared, loaded machine; no timing is asserted)
TA_GROUP = "ak40a-tas"

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.browser]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def request(
    url: str, token: str | None = None, headers: dict[str, str] | None = None, data: bytes | None = None, method: str | None = None
) -> tuple[int, bytes]:
    """(status, body) of one request, redirects not followed."""
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"token {token}"
    try:
        with OPENER.open(urllib.request.Request(url, data=data, headers=sent, method=method), timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError) as error:  # nothing listening (yet)
        return 0, str(error).encode()


def multipart(fields: dict[str, str], notebook: bytes) -> tuple[bytes, str]:
    boundary = secrets.token_hex(16)
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode() for name, value in fields.items()]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="notebook"; filename="attention.ipynb"\r\nContent-Type: application/json\r\n\r\n'.encode()
    )
    return b"".join(parts) + notebook + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


class Hub:
    """The course, the hub with the service, the users and their tokens (``users`` and
    ``course_config``: what a subclass changes, tests/service/test_hub_attacks.py's)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.course = base / "course"
        self.exchange = base / "exchange"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.service_port = free_port()
        self.service = f"{self.url}/services/{SERVICE}/"
        self.admin_token = secrets.token_hex(32)
        self.password = secrets.token_hex(8)
        suffix = f"{os.getpid() % 100000}"
        self.a, self.b, self.ta = f"ak40a-a{suffix}", f"ak40a-b{suffix}", f"ak40a-t{suffix}"
        self.tokens: dict[str, str] = {}
        self.log = base / "hub.log"
        self.process: Any = None
        self.started = 0.0  # time.monotonic() just before the hub was started

    def config(self) -> str:
        service_env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        return f"""
c = get_config()
c.JupyterHub.bind_url = {self.url!r}
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{str(CHP)!r}]
c.JupyterHub.db_url = "sqlite:///{self.base}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{self.base}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{self.base}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {self.password!r}
c.Authenticator.allowed_users = {set(self.users())!r}
c.JupyterHub.load_groups = {{{TA_GROUP!r}: {{"users": [{self.ta!r}]}}}}
c.JupyterHub.spawner_class = "simple"
c.JupyterHub.default_url = "/hub/home"
# The lines docs/hub.md gives a course, as a course would write them:
c.JupyterHub.services = [
    {{
        "name": {SERVICE!r},
        "url": "http://127.0.0.1:{self.service_port}",
        "command": [{str(BIN / "attnkit")!r}, "serve", "--hub", "--jobs", "1"],
        "cwd": {str(self.course)!r},
        "environment": {service_env!r},
        "oauth_no_confirm": True,
        "timeout": 60,
    }},
    {{"name": "ak40a-admin", "api_token": {self.admin_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service={SERVICE}"]}},
    {{"name": "ak40a-admin", "scopes": ["admin:users", "tokens", "read:users"], "services": ["ak40a-admin"]}},
]
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "access:services!service={SERVICE}"]
"""

    def users(self) -> list[str]:
        """The hub's users (its allowed_users): A, B and the TA."""
        return [self.a, self.b, self.ta]

    def course_config(self) -> str:
        """What the course's nbgrader_config.py says beside the exchange: the TA group, the policy."""
        return (
            f"c.AttnkitServe.hub_ta_groups = [{TA_GROUP!r}]\n"
            # One graded feedback per hour: the student's page then says when the next one comes.
            f"c.AttnkitServe.policies = {{{ASSIGNMENT!r}: {{'attempts': 1, 'window_hours': 1}}}}\n"
        )

    def api(self, method: str, path: str, body: dict | None = None) -> Any:
        status, answer = request(
            f"{self.url}/hub/api/{path}",
            token=self.admin_token,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        assert 200 <= status < 300, f"{method} {path}: {status} {answer[:500]!r}"
        return json.loads(answer) if answer else None

    def token(self, user: str) -> str:
        """The user's own token for the service, made through the hub's REST API."""
        if user not in self.tokens:
            made = self.api("POST", f"users/{user}/tokens", {"scopes": [f"access:services!service={SERVICE}"], "note": "ak40a test"})
            self.tokens[user] = made["token"]
        return self.tokens[user]

    def events(self) -> list[dict]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    def db(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.course / ".attnkit-serve" / "service.db")
        connection.row_factory = sqlite3.Row
        return connection


H = TypeVar("H", bound=Hub)


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    with running(Hub) as setup:
        yield setup


@contextlib.contextmanager
def running(kind: type[H], ready: bool = True) -> Iterator[H]:
    """A hub of ``kind`` (its users, its course's configuration) with the service, until the block
    ends; ``ready``: once the service's /health says ready (its workers warm), else at once after
    the hub's start (``Hub.started``: the monotonic clock just before it)."""
    if os.geteuid() != 0:
        pytest.fail("this test runs the grading service's sandboxes as root: run it as root")
    if not CHP.is_file():
        pytest.fail(f"configurable-http-proxy is not installed at {CHP}: `make hub-proxy` (make test does it)")
    base = Path(tempfile.mkdtemp(prefix="attnkit-hub-"))
    setup = kind(base)
    try:
        setup.exchange.mkdir()
        setup.course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", setup.course / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", setup.course / "solutions")
        shutil.copytree(ROOT / "assignments", setup.course / "assignments")
        with open(setup.course / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(setup.exchange)!r}\n" + setup.course_config())
        due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(days=1)
        instructor(setup.course, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(due)}")
        instructor(setup.course, str(BIN / "nbgrader"), "release_assignment", ASSIGNMENT)
        # As the docs say an instructor does: the hidden parts the grader's (and its TAs') alone.
        instructor(setup.course, str(BIN / "attnkit"), "course", "secure")
        (base / "jupyterhub_config.py").write_text(setup.config())
        setup.started = time.monotonic()
        setup.process = start_tool([BIN / "jupyterhub", "-f", base / "jupyterhub_config.py"], log=setup.log, cwd=base)
        deadline = time.monotonic() + WAIT
        while ready and request(setup.service + "health") != (200, b"ready\n"):
            assert setup.process.poll() is None and time.monotonic() < deadline, setup.log.read_text(errors="replace")[-5000:]
            time.sleep(0.5)
        yield setup
    finally:
        if setup.process is not None:
            stop_group(setup.process)
        # The hub starts the proxy and the service each in a session of its own and stops them when
        # it stops; what it left behind (a hub that gave up half-way through its start) is found by
        # its working folder, which is this module's own.
        for pid in left_in(base):
            try:
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(base, ignore_errors=True)


def left_in(base: Path) -> list[int]:
    """The processes working in a folder under ``base`` (the hub's proxy and service, started there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(base):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def log_in(browser: Browser, hub: Hub, user: str, url: str) -> None:
    """Open ``url``, which sends a browser without the service's cookie to the hub's login; log in as ``user``."""
    browser.go(url)
    browser.wait_for("#username_input", WAIT)
    browser.type_into("#username_input", user)
    browser.type_into("#password_input", hub.password)
    browser.click("#login_submit")


def test_student_submits_through_the_page_and_reads_the_kits_page_and_b_is_refused(hub: Hub, tmp_path: Path) -> None:
    """A logs in on the hub, opens the service, submits through the form, and reads the page of that
    attempt; B, logged in, gets 403 on A's attempt and on its page."""
    browser = Browser(tmp_path / "profile", tmp_path / "chromium.log")
    try:
        log_in(browser, hub, hub.a, hub.service)
        home = browser.wait_for("#upload", WAIT)
        assert f"{hub.a}" in home and browser.url().startswith(hub.service)
        browser.set_file("#upload input[type=file]", CORRECT)
        browser.click("#submit")
        attempt_page = browser.wait_for("#feedback-link", WAIT)
        attempt_url = browser.url()
        with hub.db() as db:
            (row,) = db.execute("SELECT * FROM submissions WHERE student = ?", (hub.a,)).fetchall()
        assert attempt_url == f"{hub.service}attempt/{row['id']}"
        assert row["state"] == "delivered" and row["inbound"].startswith("http+") and row["score"] == row["max_score"] > 0
        assert f"{row['score']:g} / {row['max_score']:g}" in attempt_page
        assert f"{row['score']:g}/{row['max_score']:g} 自动评分，另有 8 分人工评分待定" in attempt_page, "the source notebook's manual cells"
        browser.click("#feedback-link")
        page = browser.wait_for("#score", WAIT)
        assert browser.url() == f"{attempt_url}/feedback"
        # The kit's own page for this attempt, as placed for nbgrader's fetch_feedback.
        placed = (hub.exchange / "ch19" / "feedback" / row["feedback"]).read_text(encoding="utf-8")
        assert 'id="score"' in placed and hub.a in placed
        assert f"{row['score']:g} / {row['max_score']:g}" in page and hub.a in page and 'data-diagnosis="' not in page

        # A's own page lists the attempt with its score, and, the limit reached, when the next feedback comes.
        browser.go(hub.service)
        home = browser.wait_for("#next-feedback", WAIT)
        assert f'data-attempt="{row["id"]}" data-state="delivered"' in home and f"{row['score']:g} / {row['max_score']:g}" in home
        next_at = int(browser.evaluate("document.querySelector('#next-feedback').dataset.nextFeedback"))
        assert abs(next_at - (row["finished"] + 3600)) < 2
        if (ROOT / "tests" / "artifacts").is_dir():  # for a reader: the student's page as the browser shows it
            browser.screenshot(ROOT / "tests" / "artifacts" / "hub-student.png")

        # B, in the same browser after A's cookies are gone, logs in and tries A's attempt and page.
        browser.clear_cookies()
        log_in(browser, hub, hub.b, attempt_url)
        refused = browser.wait_for("body", WAIT)
        assert browser.url() == attempt_url and "403" in refused and hub.a not in refused
        assert "无权访问" in refused and "Forbidden" not in refused, "the refusal in the pages' language"
        browser.go(f"{attempt_url}/feedback")
        refused = browser.html()
        assert "403" in refused and 'id="score"' not in refused and "无权访问" in refused
        browser.go(hub.service)
        own = browser.wait_for("#upload", WAIT)
        assert hub.b in own and hub.a not in own and f'data-attempt="{row["id"]}"' not in own
    finally:
        browser.close()


def a_submission(hub: Hub) -> int:
    """A's graded submission (made through the page by the test above, or here over the API)."""
    with hub.db() as db:
        found = db.execute("SELECT id FROM submissions WHERE student = ? AND state = 'delivered' ORDER BY id LIMIT 1", (hub.a,)).fetchone()
    if found is not None:
        return int(found[0])
    status, answer = request(f"{hub.service}api/submit/{ASSIGNMENT}", token=hub.token(hub.a), data=CORRECT.read_bytes(), method="POST")
    assert status == 202, answer
    id = json.loads(answer)["id"]
    deadline = time.monotonic() + WAIT
    while json.loads(request(f"{hub.service}api/attempts/{id}", token=hub.token(hub.a))[1])["state"] != "delivered":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    return int(id)


FORGED = [
    {"X-Forwarded-User": "{a}"},
    {"REMOTE_USER": "{a}", "X-Remote-User": "{a}"},
    {"Referer": "{url}/user/{a}/"},
    {"Cookie": "jupyterhub-user={a}; jupyterhub-services=forged"},
]


def test_api_refuses_no_token_anothers_token_and_forged_identity(hub: Hub) -> None:
    """Without a token, with B's token on A's submission, or with headers and form fields naming A: refused."""
    id = a_submission(hub)
    own = f"{hub.service}api/attempts/{id}"
    assert request(own, token=hub.token(hub.a))[0] == 200
    for url in (own, f"{hub.service}api/attempts", f"{hub.service}api/class"):
        assert request(url)[0] == 403, url
    # A page without a login goes to the hub's login, never to the data.
    status, body = request(f"{hub.service}attempt/{id}")
    assert status == 302 and hub.a.encode() not in body
    for forged in FORGED:
        headers = {key: value.format(a=hub.a, url=hub.url) for key, value in forged.items()}
        assert request(own, headers=headers)[0] == 403, headers
        assert request(f"{hub.service}attempt/{id}/feedback", headers=headers)[0] in (302, 403), headers
        assert request(own, token=hub.token(hub.b), headers=headers)[0] == 403, headers
    for url in (own, f"{hub.service}attempt/{id}", f"{hub.service}attempt/{id}/feedback"):
        status, body = request(url, token=hub.token(hub.b))
        assert status == 403 and hub.a.encode() not in body, url
    # A submission naming A in a form field and a header, without a token: refused, nothing spooled.
    body, kind = multipart({"assignment": ASSIGNMENT, "user": hub.a}, MISTAKE.read_bytes())
    before = len(list((hub.course / ".attnkit-serve" / "attempts").iterdir()))
    status, _answer = request(f"{hub.service}submit", data=body, method="POST", headers={"Content-Type": kind, "X-Forwarded-User": hub.a, "REMOTE_USER": hub.a})
    assert status == 403
    assert len(list((hub.course / ".attnkit-serve" / "attempts").iterdir())) == before
    # The same with B's token: taken as B's, whatever the request says.
    status, answer = request(
        f"{hub.service}submit", token=hub.token(hub.b), data=body, method="POST", headers={"Content-Type": kind, "X-Forwarded-User": hub.a}
    )
    assert status == 302, answer  # the form's answer: to the attempt's page
    with hub.db() as db:
        newest = db.execute("SELECT student FROM submissions ORDER BY id DESC LIMIT 1").fetchone()
    assert newest["student"] == hub.b


def test_cookie_post_without_xsrf_is_refused(hub: Hub, tmp_path: Path) -> None:
    """A logged-in browser's cookie alone cannot submit: the form's XSRF token is checked."""
    browser = Browser(tmp_path / "profile", tmp_path / "chromium.log")
    try:
        log_in(browser, hub, hub.a, hub.service)
        browser.wait_for("#upload", WAIT)
        cookies = "; ".join(f"{c['name']}={c['value']}" for c in browser.call("Network.getCookies", urls=[hub.service])["cookies"])
    finally:
        browser.close()
    body, kind = multipart({"assignment": ASSIGNMENT}, MISTAKE.read_bytes())
    headers = {"Content-Type": kind, "Cookie": cookies, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "cross-site"}
    assert request(hub.service, headers={"Cookie": cookies})[0] == 200  # the cookie is A's login
    status, _answer = request(f"{hub.service}submit", data=body, method="POST", headers=headers)
    assert status == 403


def test_client_submits_with_the_users_own_token(hub: Hub, tmp_path: Path) -> None:
    """``attnkit submit`` in a user's server (JUPYTERHUB_API_TOKEN): the submission is that user's."""
    env = tool_env(JUPYTERHUB_API_TOKEN=hub.token(hub.b), ATTNKIT_SERVICE_URL=hub.service)
    done = run_command([BIN / "attnkit", "submit", MISTAKE, "--assignment", ASSIGNMENT], env=env, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["student"] == hub.b and answer["page"] == f"{hub.service}attempt/{answer['id']}"
    mine = json.loads(request(f"{hub.service}api/attempts", token=hub.token(hub.b))[1])
    ids = [s["id"] for a in mine["assignments"] for s in a["submissions"]]
    assert answer["id"] in ids
    theirs = json.loads(request(f"{hub.service}api/attempts", token=hub.token(hub.a))[1])
    assert answer["id"] not in [s["id"] for a in theirs["assignments"] for s in a["submissions"]]
    refused = run_command([BIN / "attnkit", "submit", MISTAKE, "--assignment", "no-such-assignment"], env=env, timeout=WAIT)
    assert refused.returncode != 0 and "400" in refused.stdout + refused.stderr and "no-such-assignment" in refused.stdout + refused.stderr


def test_ta_sees_the_class_and_a_student_does_not(hub: Hub) -> None:
    id = a_submission(hub)
    assert request(f"{hub.service}api/class", token=hub.token(hub.a))[0] == 403
    status, answer = request(f"{hub.service}api/class", token=hub.token(hub.ta))
    assert status == 200
    seen = json.loads(answer)
    assert id in [s["id"] for s in seen["latest"]] and {s["student"] for s in seen["latest"]} >= {hub.a}
    assert request(f"{hub.service}api/attempts/{id}", token=hub.token(hub.ta))[0] == 200
    status, page = request(f"{hub.service}class", token=hub.token(hub.ta))
    counts = page.decode().split('id="counts"')[1].split("</p>")[0]
    assert status == 200 and "已反馈" in counts and "delivered" not in counts.replace('data-count="delivered"', ""), counts


@pytest.mark.slow
def test_attnkit_submit_from_the_students_own_environment(hub: Hub, student_env: Any, tmp_path: Path) -> None:
    """``attnkit submit`` from the venv docs/student-environment.md's one command made (no grader
    venv on PATH, only what a single-user server has): the submission is the user's and is graded."""
    env = {
        "PATH": f"{student_env.bin}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "JUPYTERHUB_API_TOKEN": hub.token(hub.b),
        "ATTNKIT_SERVICE_URL": hub.service,
    }
    done = run_command(["attnkit", "submit", CORRECT, "--assignment", ASSIGNMENT], env=env, cwd=tmp_path, timeout=WAIT)
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["student"] == hub.b and answer["page"] == f"{hub.service}attempt/{answer['id']}"
    deadline = time.monotonic() + WAIT
    while (seen := json.loads(request(f"{hub.service}api/attempts/{answer['id']}", token=hub.token(hub.b))[1]))["state"] != "delivered":
        assert time.monotonic() < deadline, seen
        time.sleep(0.5)


def test_health_answers_without_a_login_and_says_nothing_else(hub: Hub) -> None:
    status, body = request(f"{hub.service}health")
    assert status == 200 and body == b"ready\n"


def test_body_over_the_cap_is_refused_before_it_is_read(hub: Hub) -> None:
    """A Content-Length over the cap: refused at once, the body never sent (nor waited for)."""
    connection = http.client.HTTPConnection("127.0.0.1", hub.service_port, timeout=60)
    try:
        connection.putrequest("POST", f"/services/{SERVICE}/api/submit/{ASSIGNMENT}")
        connection.putheader("Authorization", f"token {hub.token(hub.a)}")
        connection.putheader("Content-Length", str(200 * 1024 * 1024))
        connection.endheaders()
        try:
            status = connection.getresponse().status
        except (http.client.RemoteDisconnected, ConnectionResetError):
            status = 0  # closed without an answer: refused all the same
    finally:
        connection.close()
    assert status in (0, 400, 413)
    assert urllib.parse.urlparse(hub.service).path == f"/services/{SERVICE}/"
