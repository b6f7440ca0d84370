"""The service's policies as functions (issue 52: tested alone, not only end to end): a course's
``c.AttnkitServe.policies`` read through its declaration, the attempt limit's next feedback, and
what the due date releases under ``after-due`` with a limit."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from attnkit.service.policies import DEFAULT, Policy, ladder_levels, next_feedback_at, policies_from, released_at_due

HOUR = 3600.0


def config_with(policies: object) -> Config:
    config = Config()
    config.AttnkitServe.policies = policies
    return config


def test_a_course_policy_is_read_and_checked() -> None:
    found = policies_from(config_with({"ch19-attention": {"attempts": 2, "window_hours": 0.5, "visibility": "scores", "counts": "best"}}))
    assert found == {"ch19-attention": Policy(attempts=2, window_hours=0.5, visibility="scores", counts="best")}
    assert policies_from(Config()) == {}


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"attempt": 2}, "unknown keys ['attempt']"),
        ({"visibility": "sometimes"}, "visibility='sometimes'"),
        ({"counts": "first"}, "counts='first'"),
        ({"attempts": -1}, "attempts=-1"),
        ({"window_hours": 0}, "window_hours=0"),
        ({"hints": "sometimes"}, "hints='sometimes'"),
    ],
)
def test_a_wrong_policy_names_the_assignment_and_the_entry(entry: dict, named: str) -> None:
    with pytest.raises(ValueError, match="ch19-attention") as raised:
        policies_from(config_with({"ch19-attention": entry}))
    assert named in str(raised.value)


def test_policies_that_are_not_a_dict_are_refused_with_the_setting_named() -> None:
    with pytest.raises(ValueError, match="AttnkitServe.policies"):
        policies_from(config_with(["ch19-attention"]))


def test_the_next_feedback_comes_when_the_oldest_counted_page_leaves_the_window() -> None:
    policy = Policy(attempts=2, window_hours=1.0)
    assert next_feedback_at(policy, []) is None
    assert next_feedback_at(policy, [100.0]) is None
    assert next_feedback_at(policy, [100.0, 200.0]) == 100.0 + HOUR
    # Three shown (a page released at the due date counted too): the second-newest pair decides.
    assert next_feedback_at(policy, [100.0, 200.0, 300.0]) == 200.0 + HOUR
    assert next_feedback_at(Policy(attempts=0), [1.0, 2.0, 3.0]) is None, "no limit"
    assert next_feedback_at(DEFAULT, [float(n) for n in range(5)]) == 0.0 + HOUR


def test_after_due_with_a_limit_releases_no_more_full_pages_than_the_limit() -> None:
    policy = Policy(attempts=2, window_hours=1.0, visibility="after-due")
    pages = [(0.0, "after-due"), (60.0, "after-due"), (120.0, "after-due"), (2 * HOUR, "after-due")]
    released = released_at_due(policy, pages)
    # The first two become full pages; the third was past the limit in its window (its page says
    # when the next feedback came); the fourth, an hour and more later, is a new window's.
    assert released == [None, None, 0.0 + HOUR, None]


def test_a_not_graded_page_is_no_attempt_for_the_release() -> None:
    policy = Policy(attempts=1, window_hours=1.0, visibility="after-due")
    released = released_at_due(policy, [(0.0, "not-graded"), (10.0, "after-due"), (20.0, "after-due")])
    assert released == [None, None, 10.0 + HOUR]


def test_the_hint_ladder_policy_and_its_levels() -> None:
    """``hints`` (issue 53): ``full`` by default, ``ladder`` read from the course; each diagnosis one
    level above the highest its student has seen for it, at most 3, each mistake on its own."""
    assert DEFAULT.hints == "full"
    assert policies_from(config_with({"ch19-attention": {"hints": "ladder"}}))["ch19-attention"].hints == "ladder"
    assert ladder_levels(["a", "b", "c"], {"a": 1, "b": 3}) == {"a": 2, "b": 3, "c": 1}
    assert ladder_levels([], {"a": 2}) == {}
