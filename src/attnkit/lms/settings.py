"""The course's LTI 1.3 platform registration: ``c.AttnkitLti`` in its nbgrader_config.py, read as
the other settings are (docs/lms.md). None when the course is not connected to an LMS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traitlets import TraitError

from attnkit.constants import GraderError
from attnkit.i18n import _

STATE_FOLDER = ".attnkit-serve"  # the service's own folder in the course (0700; service.settings names it too)
KEY_FILE = "lti-tool-key.pem"  # the tool's private key, in STATE_FOLDER (0600)
PASSBACK_DATABASE = "lms-passback.db"  # the passback queue, in STATE_FOLDER
# How a student of the course is known to the LMS (the LMS user -> the course's student id):
# "sub" (the LMS's opaque user id), "email", "email_local" (the part of the email before "@"),
# "sourcedid" (the roster's id: Canvas' SIS user id, Moodle's ID number).
STUDENT_ID_CLAIMS = ("sub", "email", "email_local", "sourcedid")
REQUIRED = ("issuer", "client_id", "deployment_id", "token_url", "lineitems_url", "memberships_url")


@dataclass(frozen=True)
class Registration:
    """The tool as the platform registered it, and the course's context on it."""

    issuer: str  # the platform's issuer (iss of its launches)
    client_id: str  # the tool's client id on the platform
    deployment_id: str
    token_url: str  # the platform's OAuth 2 token endpoint
    lineitems_url: str  # AGS: the course context's line items container
    memberships_url: str  # NRPS: the course context's memberships
    auth_login_url: str = ""  # the platform's OIDC authorization endpoint (the hub's login)
    platform_jwks_url: str = ""  # the platform's key set (the hub's login checks launches with it)
    student_id: str = "sub"
    key_path: Path = Path()
    tag: str = "attnkit"  # every line item the kit makes carries it, with resourceId = the assignment
    timeout: float = 10.0  # seconds per HTTP request
    retries: int = 4  # retries of a request after a 429, a 5xx or no answer (attnkit lms-sync, grade)
    backoff: float = 1.0  # seconds before the first retry, doubled each time
    backoff_max: float = 60.0  # the longest wait between two tries (also the queue's)


def registration_of(root: Path) -> Registration | None:
    """``c.AttnkitLti`` of the course at ``root`` (``course.settings.AttnkitLti``); None where it names no issuer (no LMS)."""
    from attnkit.course.settings import KitSettings

    try:
        section = KitSettings.load(root).lti
    except TraitError as error:
        raise GraderError(_("nbgrader_config.py 的 c.AttnkitLti 有误：{reason}（见 docs/lms.md）").format(reason=error)) from None
    if not section.issuer:
        return None
    missing = [name for name in REQUIRED if not getattr(section, name)]
    if missing:
        raise GraderError(_("nbgrader_config.py 的 c.AttnkitLti 缺少这些设置：{names}（见 docs/lms.md）").format(names=", ".join(missing)))
    key = Path(section.private_key or root / STATE_FOLDER / KEY_FILE)
    return Registration(
        issuer=section.issuer,
        client_id=section.client_id,
        deployment_id=section.deployment_id,
        token_url=section.token_url,
        lineitems_url=section.lineitems_url,
        memberships_url=section.memberships_url,
        auth_login_url=section.auth_login_url,
        platform_jwks_url=section.platform_jwks_url,
        student_id=section.student_id,
        key_path=key if key.is_absolute() else root / key,
        tag=section.tag,
        timeout=section.timeout,
        retries=section.retries,
        backoff=section.backoff,
        backoff_max=section.backoff_max,
    )


LIS_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/lis"


def student_of_launch(claims: dict[str, Any], how: str) -> str | None:
    """The course's student id of an LTI launch's id_token (the hub's login), or None."""
    if how == "sub":
        found = claims.get("sub")
    elif how in ("email", "email_local"):
        found = claims.get("email")
    else:  # sourcedid
        lis = claims.get(LIS_CLAIM)
        found = lis.get("person_sourcedid") if isinstance(lis, dict) else None
    return _normalised(found, how)


def student_of_member(member: dict[str, Any], how: str) -> str | None:
    """The course's student id of an NRPS member (the same mapping as the launch's), or None."""
    found = {"sub": member.get("user_id"), "email": member.get("email"), "email_local": member.get("email")}.get(how, member.get("lis_person_sourcedid"))
    return _normalised(found, how)


def _normalised(found: object, how: str) -> str | None:
    if not isinstance(found, str) or not found.strip():
        return None
    text = found.strip()
    if how == "email_local":
        text = text.partition("@")[0]
    # JupyterHub lowercases user names (Authenticator.normalize_username); the course's ids are its users'.
    return text.lower()
