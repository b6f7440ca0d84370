"""From the LMS to the LMS (issue 54), with nothing mocked: an LTI 1.3 platform (lti1p3platform, on
127.0.0.1: tests/support/lti_platform.py) launches students into a real JupyterHub whose login is
``jupyterhub-ltiauthenticator`` configured by ``attnkit.lms.hub_login.configure``; the hub runs
``attnkit serve --hub`` (test_service_hub.py's hub, this course registered on the platform); the
student submits; the service grades; its recorder records the gradebook and queues the passback;
the platform's one line item holds the score. The platform fetches the tool's JWKS from the
service's HTTP side (``/services/attnkit/lti/jwks``) to check every token request.

Then the platform goes down during a burst of submissions: every feedback is delivered all the
same, the scores wait in the course's passback table, and every one is posted once the platform
is back. Nothing the hub, the service or its recorder logged holds a token, an assertion or a piece
of the tool's private key."""

from __future__ import annotations

import html
import json
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from lti_platform import Platform
from test_service_hub import ASSIGNMENT, CORRECT, MISTAKE, WAIT, Hub, request, running

pytestmark = [pytest.mark.e2e, pytest.mark.root]
DOMAIN = "uni.example.edu"


class LtiHub(Hub):
    """test_service_hub's hub and course, its login by LTI 1.3 from ``platform``, the course registered there."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.c = self.a.replace("-a", "-c")
        self.platform = Platform(
            tool_jwks_url=f"{self.service}lti/jwks", tool_login_url=f"{self.url}/hub/lti13/oauth_login", tool_launch_url=self.service
        )
        for name in (self.a, self.b, self.c):
            self.platform.enrol(f"lms-{name}", f"{name}@{DOMAIN}", f"S-{name}")

    def users(self) -> list[str]:
        return [self.a, self.b, self.c, self.ta]

    def config(self) -> str:
        return super().config() + f"\nfrom attnkit.lms.hub_login import configure\nconfigure(c, {str(self.course)!r})\n"

    def course_config(self) -> str:
        settings = self.platform.settings() | {"student_id": "email_local", "backoff": 0.2, "backoff_max": 1.0, "retries": 1, "timeout": 3.0}
        return f"c.AttnkitServe.hub_ta_groups = ['{self.ta}']\n" + "".join(f"c.AttnkitLti.{name} = {value!r}\n" for name, value in settings.items())

    def passbacks(self) -> dict[str, sqlite3.Row]:
        path = self.course / ".attnkit-serve" / "lms-passback.db"
        if not path.exists():
            return {}
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            return {row["student"]: row for row in db.execute("SELECT * FROM passbacks")}


@pytest.fixture(scope="module")
def lti_hub() -> Iterator[LtiHub]:
    with running(LtiHub) as setup:
        try:
            yield setup
        finally:
            setup.platform.stop()


def launch(hub: LtiHub, user: str) -> httpx.Response:
    """The student clicks the course's link in the LMS: the platform's login initiation, the hub's
    redirect to the platform's authorization, the auto-submitted form with the signed id_token,
    the hub's callback, and on to the link's target (the service's page)."""
    client = httpx.Client(follow_redirects=True, timeout=WAIT)
    start = hub.platform.login_initiation_url({"sub": f"lms-{user}", "email": f"{user}@{DOMAIN}", "name": user}, hub.service)
    form_page = client.get(start)
    assert form_page.status_code == 200 and "id_token" in form_page.text, form_page.text[:2000]
    action = html.unescape(re.search(r'action="([^"]+)"', form_page.text).group(1))  # type: ignore[union-attr]
    fields = dict(re.findall(r'name="(id_token|state)" value="([^"]*)"', form_page.text))
    return client.post(action, data=fields)


def wait_for(what: str, check: object, deadline: float = WAIT) -> None:
    end = time.monotonic() + deadline
    while not check():  # type: ignore[operator]
        assert time.monotonic() < end, f"waited {deadline} s for {what}"
        time.sleep(0.3)


def submit(hub: LtiHub, user: str, notebook: Path) -> int:
    status, answer = request(f"{hub.service}api/submit/{ASSIGNMENT}", token=hub.token(user), data=notebook.read_bytes(), method="POST")
    assert status == 202, answer
    return int(json.loads(answer)["id"])


def state_of(hub: LtiHub, user: str, id: int) -> str:
    return str(json.loads(request(f"{hub.service}api/attempts/{id}", token=hub.token(user))[1])["state"])


def test_an_lti_launch_logs_the_student_in_and_their_score_reaches_the_line_item(lti_hub: LtiHub) -> None:
    landed = launch(lti_hub, lti_hub.a)
    assert landed.status_code == 200, landed.text[:2000]
    assert urllib.parse.urlsplit(str(landed.url)).path == urllib.parse.urlsplit(lti_hub.service).path  # the link's target: the service's page
    assert lti_hub.a in landed.text  # ... as the student the LMS's email names
    assert lti_hub.api("GET", f"users/{lti_hub.a}")["name"] == lti_hub.a
    id = submit(lti_hub, lti_hub.a, CORRECT)
    wait_for("the feedback", lambda: state_of(lti_hub, lti_hub.a, id) == "delivered")
    wait_for("the score on the platform", lambda: lti_hub.platform.result_of(f"lms-{lti_hub.a}") is not None)
    result = lti_hub.platform.result_of(f"lms-{lti_hub.a}")
    assert result is not None
    (item,) = lti_hub.platform.line_items.values()
    with lti_hub.db() as db:
        graded = db.execute("SELECT score, max_score FROM submissions WHERE id = ?", (id,)).fetchone()
    # The model answers: every autograded point; the free-text answers' points are the TA's to give.
    assert result["resultScore"] == graded["score"] == graded["max_score"] > 0
    assert result["resultMaximum"] == item["scoreMaximum"] > graded["max_score"]
    assert result["gradingProgress"] == "PendingManual"  # the free-text answers wait for a TA
    assert result["activityProgress"] == "Submitted"  # the due date is a day away: the student may submit again


def test_the_platform_down_during_a_burst_delays_no_feedback_and_every_score_is_posted_once_back(lti_hub: LtiHub) -> None:
    lti_hub.platform.stop()
    try:
        ids = {user: submit(lti_hub, user, MISTAKE if user != lti_hub.c else CORRECT) for user in (lti_hub.b, lti_hub.c)}
        for user, id in ids.items():
            wait_for(f"{user}'s feedback", lambda user=user, id=id: state_of(lti_hub, user, id) == "delivered")
        # Recorded and queued while the platform is away: nothing posted, nothing dropped.
        wait_for("the queued scores", lambda: {lti_hub.b, lti_hub.c} <= set(lti_hub.passbacks()))
        assert all(lti_hub.passbacks()[user]["state"] == "pending" for user in ids)
        assert lti_hub.platform.result_of(f"lms-{lti_hub.b}") is None
    finally:
        lti_hub.platform.start()
    wait_for("every score on the platform", lambda: all(lti_hub.platform.result_of(f"lms-{user}") is not None for user in ids))
    # (a score can reach the platform an instant before its row is marked: waited for, not raced)
    wait_for("every row of the queue posted", lambda: {row["state"] for row in lti_hub.passbacks().values()} == {"posted"})
    assert len(lti_hub.platform.line_items) == 1
    assert len(lti_hub.platform.requests_to("POST", "/lineitems")) == 1


def test_nothing_logged_holds_a_token_an_assertion_or_the_key(lti_hub: LtiHub) -> None:
    platform = lti_hub.platform
    secrets = [r["authorization"].removeprefix("Bearer ") for r in platform.requests if r["authorization"]]
    secrets += [r["form"]["client_assertion"] for r in platform.requests if "form" in r]
    assert secrets, "the service's recorder asked the platform for a token"
    key = (lti_hub.course / ".attnkit-serve" / "lti-tool-key.pem").read_text()
    body = "".join(key.splitlines()[1:-1])
    secrets += [body[i : i + 32] for i in range(0, len(body) - 32, 32)]
    log = lti_hub.log.read_text(errors="replace")
    assert "lms_passback" in log  # the recorder's thread did speak in this log
    for secret in secrets:
        assert secret not in log
    status, page = request(f"{lti_hub.service}lti/jwks")
    assert status == 200
    (public,) = json.loads(page)["keys"]
    assert set(public) == {"kty", "n", "e", "kid", "alg", "use"}  # no private member (d, p, q, dp, dq, qi)
    assert (lti_hub.course / ".attnkit-serve" / "lti-tool-key.pem").stat().st_mode & 0o777 == 0o600
