"""The hub's login by LTI 1.3: JupyterHub's own ``jupyterhub-ltiauthenticator`` (``LTI13Authenticator``),
configured from the course's registration (``c.AttnkitLti``), with the LMS user mapped to the
course's student id the way the passback maps the roster (``settings.student_of_launch``: the LMS's
``sub``, the email, its local part, or the roster's id, as ``c.AttnkitLti.student_id`` says).

In ``jupyterhub_config.py`` (docs/lms.md)::

    from attnkit.lms.hub_login import configure
    configure(c, "/srv/courses/ch19")

A launch whose id_token does not carry the chosen claim is refused (a 403 from the hub), never
let in under another name: ltiauthenticator's own fallback to ``sub`` would give the student a
second account whose submissions the gradebook files under an id the course does not know."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ltiauthenticator.lti13.auth import LTI13Authenticator
from tornado import web
from traitlets import Unicode

from attnkit.lms.settings import registration_of, student_of_launch


class CourseLTI13Authenticator(LTI13Authenticator):
    """``LTI13Authenticator`` whose user name is the course's student id of the launch."""

    course_root = Unicode("", config=True, help="the course root whose nbgrader_config.py holds c.AttnkitLti")
    student_id = Unicode("sub", config=True, help="sub, email, email_local or sourcedid (c.AttnkitLti.student_id)")

    def get_username(self, token: dict[str, Any]) -> str:
        found = student_of_launch(token, self.student_id)
        if not found:
            self.log.warning("LTI launch without the claim that names the student (%s): refused", self.student_id)
            raise web.HTTPError(403, "this LMS link does not say who you are in the course")
        return found


def configure(c: Any, course_root: str | Path) -> None:
    """Set ``c`` (a jupyterhub_config.py's config) for LTI 1.3 logins from the course's registration."""
    root = Path(course_root)
    registration = registration_of(root)
    if registration is None:
        raise RuntimeError(f"{root}/nbgrader_config.py has no c.AttnkitLti.issuer: no LMS to log in from")
    c.JupyterHub.authenticator_class = CourseLTI13Authenticator
    c.CourseLTI13Authenticator.course_root = str(root)
    c.CourseLTI13Authenticator.student_id = registration.student_id
    c.CourseLTI13Authenticator.issuer = registration.issuer
    c.CourseLTI13Authenticator.client_id = [registration.client_id]
    c.CourseLTI13Authenticator.authorize_url = registration.auth_login_url
    c.CourseLTI13Authenticator.jwks_endpoint = registration.platform_jwks_url
    c.CourseLTI13Authenticator.username_key = "sub"  # (unused: get_username above decides)
