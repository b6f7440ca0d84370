"""``attnkit lms-sync`` against a real LTI 1.3 platform (lti1p3platform, on 127.0.0.1): the token
exchange, one line item whatever the number of syncs, one score per student, truthful progress,
a regrade and a TA's manual points updated, a student the roster lacks reported (never dropped),
an outage waited out, and no token or key in anything printed.

The tests share one course (``lms_course``, module-scoped: a sync is a process that reads the
gradebook, seconds on a loaded machine) and run in the order of a term, each from where the last
one left the platform."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jwt
import pytest
from commands import attnkit
from lms_course import ASSIGNMENT, LmsCourse, grade_by_ta

from attnkit.lms import platform as lms_platform
from attnkit.lms.keys import ensure_key, jwks
from attnkit.lms.passback import rows
from attnkit.lms.settings import registration_of

SCOPES = {
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
    "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
}


def sync(course: LmsCourse, *extra: str) -> tuple[int, str]:
    done = attnkit("lms-sync", "--course", str(course.root), *extra, timeout=120)
    course.printed.append(done.stdout + done.stderr)
    return done.returncode, done.stdout + done.stderr


def users(course: LmsCourse) -> dict[str, str]:
    return {m["email"].partition("@")[0]: m["user_id"] for m in course.platform.members}


def test_token_exchange_signs_a_client_assertion_and_asks_the_scopes(lms_course: LmsCourse) -> None:
    registration = registration_of(lms_course.root)
    assert registration is not None
    ensure_key(registration.key_path)
    client = lms_platform.Platform(registration)
    token = client.token()
    assert token  # the platform (lti1p3platform's get_access_token) checked the assertion against the tool's JWKS URL
    (request,) = lms_course.platform.requests_to("POST", "/token")
    form = request["form"]
    assert form["grant_type"] == "client_credentials"
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    assert set(form["scope"].split()) == SCOPES
    (public,) = jwks(registration.key_path)["keys"]
    assert set(public) == {"kty", "n", "e", "kid", "alg", "use"}  # the public half only
    header = jwt.get_unverified_header(form["client_assertion"])
    assert header == {"alg": "RS256", "typ": "JWT", "kid": public["kid"]}
    claims = jwt.decode(
        form["client_assertion"], jwt.PyJWK(public).key, algorithms=["RS256"], audience=registration.token_url, options={"require": ["exp", "iat", "jti"]}
    )
    assert claims["iss"] == claims["sub"] == lms_course.platform.client_id
    assert 0 < claims["exp"] - claims["iat"] <= 300
    assert client.token() == token  # kept until it expires
    assert len(lms_course.platform.requests_to("POST", "/token")) == 1
    client.close()


def test_an_assertion_signed_by_another_key_is_refused(lms_course: LmsCourse, tmp_path: Path) -> None:
    registration = registration_of(lms_course.root)
    assert registration is not None
    forger = dataclasses.replace(registration, key_path=tmp_path / "other" / "key.pem", retries=0)
    ensure_key(forger.key_path)  # a key of its own; the JWKS the platform fetches is the course's
    with pytest.raises(lms_platform.Refused):
        lms_platform.Platform(forger).token()


def test_dry_run_prints_what_the_lms_holds_and_would_post_and_posts_nothing(lms_course: LmsCourse) -> None:
    code, output = sync(lms_course, "--dry-run")
    assert code == 0, output
    lines = {line.split("\t")[0]: line for line in output.splitlines() if line.count("\t") >= 3}
    assert set(lines) == {"alice", "bob", "carol", "dave"}, output
    assert "14/15 FullyGraded" in lines["alice"] and "—" in lines["alice"]
    assert "7/15 PendingManual" in lines["bob"]
    assert "名单里没有" in lines["dave"]
    assert lms_course.platform.requests_to("POST", "/scores") == []
    assert lms_course.platform.requests_to("POST", "/lineitems") == []


def test_three_syncs_leave_one_line_item_and_one_score_per_student(lms_course: LmsCourse) -> None:
    for round in range(3):
        if round == 2:  # the third as from a fresh machine: the queue's table lost, every score posted again
            for suffix in ("", "-wal", "-shm"):
                (lms_course.root / ".attnkit-serve" / f"lms-passback.db{suffix}").unlink(missing_ok=True)
        code, output = sync(lms_course)
        assert code == 1, output  # dave is not on the roster: said each time, never dropped
        assert "dave/ch19-attention" in output
    platform = lms_course.platform
    assert len(platform.line_items) == 1
    (item,) = platform.line_items.values()
    assert (item["resourceId"], item["tag"], item["scoreMaximum"]) == (ASSIGNMENT, "attnkit", 15.0)
    assert len(platform.requests_to("POST", "/lineitems")) == 1
    results = platform.results[item["id"]]
    ids = users(lms_course)
    assert set(results) == {ids["alice"], ids["bob"], ids["carol"]}
    assert len(platform.requests_to("POST", "/scores")) == 3 + 3  # the second found nothing changed; the third posted again
    assert (results[ids["alice"]]["resultScore"], results[ids["alice"]]["gradingProgress"]) == (14.0, "FullyGraded")
    assert (results[ids["bob"]]["resultScore"], results[ids["bob"]]["gradingProgress"]) == (7.0, "PendingManual")
    assert results[ids["carol"]]["resultScore"] == 15.0
    assert all(r["activityProgress"] == "Completed" for r in results.values())  # no due date still ahead
    (dave,) = [row for row in rows(lms_course.root) if row["student"] == "dave"]
    assert dave["state"] == "unmatched"
    code, output = sync(lms_course, "--dry-run")
    line = next(line for line in output.splitlines() if line.startswith("alice\t"))
    assert "14/15" in line.split("\t")[2] and "不变" in line, output


def test_a_regrade_and_manual_points_are_updated_on_the_platform(lms_course: LmsCourse) -> None:
    grade_by_ta(lms_course.gradebook, "bob", 7.0, 3.0)  # the TA grades bob's free-text answer
    grade_by_ta(lms_course.gradebook, "alice", 8.0, 4.0)  # a regrade lowers alice's autograded points
    code, output = sync(lms_course)
    ids = users(lms_course)
    platform = lms_course.platform
    assert len(platform.line_items) == 1
    assert (platform.result_of(ids["bob"]) or {}).get("resultScore") == 10.0, output
    assert (platform.result_of(ids["bob"]) or {}).get("gradingProgress") == "FullyGraded"
    assert (platform.result_of(ids["alice"]) or {}).get("resultScore") == 12.0
    assert len(platform.requests_to("POST", "/scores")) == 6 + 2, output  # the two changed, nothing else


def test_a_student_missing_from_the_roster_is_posted_once_enrolled(lms_course: LmsCourse) -> None:
    lms_course.platform.enrol("8f1c-dave", "dave@uni.example.edu", "S-dave")
    code, output = sync(lms_course)
    assert code == 0, output
    assert (lms_course.platform.result_of("8f1c-dave") or {}).get("resultScore") == 4.0


def test_an_outage_leaves_the_scores_queued_and_the_next_sync_posts_them(lms_course: LmsCourse) -> None:
    grade_by_ta(lms_course.gradebook, "carol", 9.0, 5.0)
    grade_by_ta(lms_course.gradebook, "dave", 5.0, 1.0)
    lms_course.platform.stop()
    try:
        code, output = sync(lms_course)
    finally:
        lms_course.platform.start()
    assert code == 1 and "等待重试" in output, output
    waiting = {row["student"]: row for row in rows(lms_course.root) if row["state"] == "pending"}
    assert set(waiting) == {"carol", "dave"} and all(row["cause"] for row in waiting.values())
    code, output = sync(lms_course)
    assert code == 0, output
    ids = users(lms_course)
    assert (lms_course.platform.result_of(ids["carol"]) or {}).get("resultScore") == 14.0
    assert (lms_course.platform.result_of(ids["dave"]) or {}).get("resultScore") == 6.0
    assert len(lms_course.platform.line_items) == 1


def test_make_grade_s_hook_posts_what_the_gradebook_recorded(lms_course: LmsCourse) -> None:
    """``pipeline.class_record.record_class``'s last step (``attnkit grade --gradebook`` and ``attnkit merge --gradebook``
    into the course's gradebook): the recorded students' scores are posted, nothing else."""
    from attnkit.pipeline.class_record import post_to_lms

    (lms_course.root / "solutions").mkdir(exist_ok=True)  # what makes the folder a course (course.gradebook.course_root)
    grade_by_ta(lms_course.gradebook, "alice", 10.0, 5.0)
    grade_by_ta(lms_course.gradebook, "bob", 6.0, 3.0)
    before = len(lms_course.platform.requests_to("POST", "/scores"))
    post_to_lms(lms_course.gradebook, [("alice", ASSIGNMENT)], quiet=True)
    ids = users(lms_course)
    assert (lms_course.platform.result_of(ids["alice"]) or {}).get("resultScore") == 15.0
    assert (lms_course.platform.result_of(ids["bob"]) or {}).get("resultScore") == 10.0  # not recorded by this run: not posted by it
    assert len(lms_course.platform.requests_to("POST", "/scores")) == before + 1
    assert len(lms_course.platform.line_items) == 1


def test_no_token_assertion_or_key_in_anything_printed(lms_course: LmsCourse) -> None:
    platform = lms_course.platform
    secrets = [r["authorization"].removeprefix("Bearer ") for r in platform.requests if r["authorization"]]
    secrets += [r["form"]["client_assertion"] for r in platform.requests if "form" in r]
    key = (lms_course.root / ".attnkit-serve" / "lti-tool-key.pem").read_text()
    body = "".join(key.splitlines()[1:-1])
    secrets += [body[i : i + 32] for i in range(0, len(body) - 32, 32)]  # any piece of the key
    assert len(lms_course.printed) >= 8 and len(secrets) > 40
    for text in lms_course.printed:
        for secret in secrets:
            assert secret not in text
    assert (lms_course.root / ".attnkit-serve" / "lti-tool-key.pem").stat().st_mode & 0o777 == 0o600
    assert (lms_course.root / ".attnkit-serve").stat().st_mode & 0o777 == 0o700
