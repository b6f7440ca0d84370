"""The LMS as the tool talks to it: the OAuth 2 token exchange with a signed client assertion,
Assignment and Grade Services (line items, scores, results) and Names and Role Provisioning Services
(the roster), with retries on 429 and 5xx.

Written on PyJWT and httpx, not on an LTI library: the tool's side of LTI Advantage that the kit
needs is one JWT (RFC 7523's client assertion) and five JSON requests; pylti1p3 has had no release
since 2022 and its fork (pylti1p3next) brings a framework adapter the kit does not use (docs/lms.md).

No token, assertion or key ever reaches a log line, an exception's text or a page: errors name
the request's method, the URL's path and the status, and any text taken from an answer has the
secrets of this client cut out (``redact``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit, parse_qsl

import httpx
import jwt

from attnkit.lms.keys import ALGORITHM, private_pem, public_jwk
from attnkit.lms.settings import Registration

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_RESULT = "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCOPE_ROSTER = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
SCOPES = (SCOPE_LINEITEM, SCOPE_RESULT, SCOPE_SCORE, SCOPE_ROSTER)
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
RESULTS_TYPE = "application/vnd.ims.lis.v2.resultcontainer+json"
MEMBERS_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
ASSERTION_SECONDS = 300
LEARNER = "Learner"


class Unavailable(Exception):
    """The platform did not answer, or answered 429 or 5xx, after the retries: try again later."""


class Refused(Exception):
    """The platform refused the request (a 4xx other than 429): trying again will not help."""


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


@dataclass
class Platform:
    """One registration's client: a token fetched when needed and kept until shortly before it expires."""

    registration: Registration
    retries: int | None = None  # None: the registration's; 0: one try (the recorder's queue retries later)
    sleep: Callable[[float], None] = time.sleep
    client: httpx.Client = field(default_factory=lambda: httpx.Client(follow_redirects=False))
    _token: str = ""
    _expires: float = 0.0
    _secrets: list[str] = field(default_factory=list)
    requests_made: int = 0

    def close(self) -> None:
        self.client.close()

    # -- the token ----------------------------------------------------------------------------
    def client_assertion(self) -> str:
        """RFC 7523's JWT for the client credentials grant, signed with the tool's key (IMS Security Framework 4.1)."""
        pem = private_pem(self.registration.key_path)
        now = int(time.time())
        claims = {
            "iss": self.registration.client_id,
            "sub": self.registration.client_id,
            "aud": self.registration.token_url,
            "iat": now,
            "exp": now + ASSERTION_SECONDS,
            "jti": uuid.uuid4().hex,
        }
        assertion = jwt.encode(claims, pem, algorithm=ALGORITHM, headers={"kid": public_jwk(pem)["kid"]})
        self._secrets.append(assertion)
        return assertion

    def token(self) -> str:
        if self._token and time.time() < self._expires:
            return self._token
        form = {
            "grant_type": "client_credentials",
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": self.client_assertion(),
            "scope": " ".join(SCOPES),
        }
        answer = self._send("POST", self.registration.token_url, data=form, authorised=False)
        body = answer.json()
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise Refused(f"POST {urlsplit(self.registration.token_url).path}: no access_token in the answer")
        self._token = token
        self._secrets.append(token)
        self._expires = time.time() + max(0.0, float(body.get("expires_in", 3600)) - 60)
        return token

    # -- one request, with its retries --------------------------------------------------------
    def _send(self, method: str, url: str, *, authorised: bool = True, accept: str = "application/json", **kwargs: Any) -> httpx.Response:
        tries = 1 + (self.registration.retries if self.retries is None else self.retries)
        where = f"{method} {urlsplit(url).path}"
        renewed = False
        attempt = 0
        while True:
            attempt += 1
            headers = {"Accept": accept, **kwargs.pop("headers", {})}
            if authorised:
                headers["Authorization"] = f"Bearer {self.token()}"
            wait = self.registration.backoff * 2 ** (attempt - 1)
            try:
                self.requests_made += 1
                answer = self.client.request(method, url, headers=headers, timeout=self.registration.timeout, **kwargs)
            except httpx.TransportError as error:
                why = f"{where}: {type(error).__name__}"
            else:
                if answer.status_code == 401 and authorised and not renewed:
                    self._token, renewed = "", True  # expired early, or revoked: one new token
                    attempt -= 1
                    continue
                if answer.is_success:
                    return answer
                why = f"{where}: HTTP {answer.status_code}"
                if answer.status_code != 429 and answer.status_code < 500:
                    raise Refused(why + ": " + redact(answer.text[:300], self._secrets))
                after = answer.headers.get("Retry-After", "")
                if after.isdigit():
                    wait = max(wait, float(after))
            if attempt >= tries:
                raise Unavailable(why)
            self.sleep(min(wait, self.registration.backoff_max))

    # -- Assignment and Grade Services ------------------------------------------------------------
    def line_items(self, resource_id: str | None = None) -> list[dict[str, Any]]:
        """The context's line items (all pages), those with the kit's tag and ``resource_id`` when given
        (the filter is asked of the platform and checked here: not every platform applies it)."""
        query = {"tag": self.registration.tag} | ({"resource_id": resource_id} if resource_id else {})
        found = [
            item
            for item in self._pages(_with_query(self.registration.lineitems_url, query), LINEITEMS_TYPE)
            if item.get("tag") == self.registration.tag and (resource_id is None or item.get("resourceId") == resource_id)
        ]
        return found

    def create_line_item(self, resource_id: str, label: str, maximum: float) -> dict[str, Any]:
        item = {"scoreMaximum": maximum, "label": label, "resourceId": resource_id, "tag": self.registration.tag}
        answer = self._send("POST", self.registration.lineitems_url, json=item, headers={"Content-Type": LINEITEM_TYPE}, accept=LINEITEM_TYPE)
        created: dict[str, Any] = answer.json()
        return created

    def update_line_item(self, item: dict[str, Any]) -> None:
        self._send("PUT", str(item["id"]), json=item, headers={"Content-Type": LINEITEM_TYPE}, accept=LINEITEM_TYPE)

    def post_score(self, item: dict[str, Any], score: dict[str, Any]) -> None:
        self._send("POST", _below(str(item["id"]), "scores"), json=score, headers={"Content-Type": SCORE_TYPE})

    def results(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self._pages(_below(str(item["id"]), "results"), RESULTS_TYPE))

    # -- Names and Role Provisioning Services ---------------------------------------------------
    def members(self) -> list[dict[str, Any]]:
        """The context's learners (every page of the membership container)."""
        found = []
        for page in self._raw_pages(self.registration.memberships_url, MEMBERS_TYPE):
            for member in page.get("members", []) if isinstance(page, dict) else []:
                roles = member.get("roles", []) if isinstance(member, dict) else []
                if any(str(role).rsplit("#", 1)[-1].rsplit("/", 1)[-1] == LEARNER for role in roles):
                    found.append(member)
        return found

    def _raw_pages(self, url: str, accept: str) -> Iterator[Any]:
        seen = 0
        next_url: str | None = url
        while next_url and seen < 1000:
            seen += 1
            answer = self._send("GET", next_url, accept=accept)
            yield answer.json()
            next_url = answer.links.get("next", {}).get("url")

    def _pages(self, url: str, accept: str) -> Iterator[dict[str, Any]]:
        for page in self._raw_pages(url, accept):
            yield from (entry for entry in (page if isinstance(page, list) else []) if isinstance(entry, dict))


def _with_query(url: str, extra: dict[str, str]) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=urlencode(parse_qsl(parts.query) + list(extra.items()))))


def _below(url: str, name: str) -> str:
    """``{lineitem}/scores``: the path gains a segment, the query (Canvas and Moodle put one there) stays."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name))
