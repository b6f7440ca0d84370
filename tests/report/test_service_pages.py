"""The service's own pages and words in one language, styled as the kit's page (issue 51).

- ``attnkit serve --status`` on a real SQLite queue: Chinese by default, English with ``--lang en``
  (the English the docs and the other tests quote, ``queued=… last hour: … not yet in the gradebook``);
- the hub side's error page and the class page's counts: Chinese, English under ``--lang en``;
- the scores-only, withheld and not-graded pages: the full page's stylesheet, CSP and head, and in
  headless Chromium the same layout (the title starts at the same column as the full page's);
- the points graded by hand where the assignment has them ("100/100 自动评分，另有 8 分人工评分待定"),
  on the full page and the scores page, from the source notebook's manual grade cells;
- every time a page shows states its zone.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import jinja2
import pytest
from commands import BIN, run_command

from attnkit import i18n
from attnkit.assignment.folder import discover
from attnkit.report import pages
from attnkit.service import policies
from attnkit.service.queue import open_queue

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch19-attention"
CJK = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
MOMENT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d(?:\.\d+)?)?")


@pytest.fixture
def language() -> object:
    """Each test's language set by itself; Chinese again after it."""
    yield i18n.set_language
    i18n.set_language("zh")


def results_of(score: float = 100.0) -> dict:
    """A graded submission's results as the service keeps them (the two parts' names are the suite's)."""
    suite = discover()[ASSIGNMENT]
    parts = {grade_id: {"score": part.points, "max_score": part.points} for grade_id, part in suite.parts.items()}
    first = next(iter(parts))
    parts[first]["score"] = parts[first]["max_score"] - (100.0 - score)
    return {"student_id": "ana", "assignment": ASSIGNMENT, "score": score, "max_score": 100.0, "parts": parts}


# -- attnkit serve --status ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def course_with_queue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A course folder whose service database holds one submission in each state the status shows."""
    root = tmp_path_factory.mktemp("status_course")
    (root / ".attnkit-serve").mkdir()
    queue = open_queue(root / ".attnkit-serve" / "service.db", "r1")
    try:
        now = time.time()
        for name in ("ana", "bo", "cy"):
            queue.notice(f"{name}+{ASSIGNMENT}+t1+r", name, ASSIGNMENT, "2026-12-07 10:00:00.000000 UTC", noticed=now - 30)
        graded, grading = queue.claim(2)[:2]
        queue.deliver(graded.id, {"score": 100}, "f.html", "full", 100.0, 100.0)
        del grading  # stays in grading
        queue.refuse(f"eve+{ASSIGNMENT}+t2+r", "eve", ASSIGNMENT, "t2", "not hers")
    finally:
        queue.close()
    return root


def status_of(root: Path, *lang: str) -> str:
    done = run_command([BIN / "attnkit", "serve", "--status", *lang], cwd=root, env={**os.environ, "ATTNKIT_LANG": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_status_is_chinese_by_default(course_with_queue: Path) -> None:
    text = status_of(course_with_queue)
    assert "排队中=1 评分中=1 已反馈=1 未能评分=0 已拒收=1" in text.splitlines()[0], text
    assert "过去一小时：" in text and "尚未写入成绩册：" in text and re.search(r"^已拒收 #\d+ eve\+", text, re.M), text
    assert not re.search(r"last hour|not yet|queued=|delivered=", text), text


def test_status_is_english_with_lang_en(course_with_queue: Path) -> None:
    text = status_of(course_with_queue, "--lang", "en")
    assert "queued=1 grading=1 delivered=1 failed=0 refused=1" in text.splitlines()[0], text
    assert "last hour: delivered=1 failed=0 refused=1" in text and "not yet in the gradebook: " in text, text
    assert not CJK.search(text.replace("not hers", "")), text


# -- the hub side's pages -------------------------------------------------------------------------


def hub_template(name: str, **values: object) -> str:
    from attnkit.service import hub

    return hub._ENV.get_template(name).render(html_lang=i18n.html_lang(), prefix="/services/attnkit/", **values)


def test_error_page_and_class_counts_are_chinese_then_english(language) -> None:
    from attnkit.service.hub import error_title

    counts = {"queued": 2, "grading": 1, "delivered": 5, "failed": 0, "refused": 1}
    expected = (
        ("zh", ("无权访问", "返回我的提交", "排队中 2", "已拒收 1"), re.compile("Forbidden|queued")),
        ("en", ("Forbidden", "queued 2", "refused 1"), CJK),
    )
    for lang, words, foreign in expected:
        language(lang)
        error = hub_template("hub_error.html.j2", status=403, title=error_title(403), why="")
        board = hub_template("hub_class.html.j2", status={"counts": counts, "queue": [], "latest": []}, user={}, ta=True)
        visible = re.sub(r"<style>.*?</style>|<[^>]+>", " ", error + board, flags=re.S)
        for word in words:
            assert word in visible, (lang, word, visible)
        assert not foreign.search(visible), (lang, visible)


# -- the scores-only and withheld pages ------------------------------------------------------------


def head_of(page: str) -> str:
    return page[: page.index("</head>")]


def test_service_pages_carry_the_full_pages_stylesheet_and_csp() -> None:
    css = jinja2.Environment(loader=jinja2.PackageLoader("attnkit.report", "templates")).get_template("base.css.j2").render()
    suite = discover()[ASSIGNMENT]
    for page in (
        policies.scores_page(results_of(), suite),
        policies.withheld_page(ASSIGNMENT, policies.limit_reason(policies.DEFAULT, time.time())),
        policies.not_graded_page(ASSIGNMENT, "no notebook"),
    ):
        head = head_of(page)
        assert css.strip() in head and pages.CSP in head and '<meta charset="utf-8">' in head, head[:400]


SAID = "100/100 自动评分，另有 8 分人工评分待定（满分共 108 分）"


def test_the_scores_page_states_the_manual_points_the_source_notebook_has() -> None:
    suite = discover()[ASSIGNMENT]
    assert suite.manual_points == 8, "the source notebook's four free-text cells, 2 points each"
    assert SAID in policies.scores_page(results_of(), suite)
    assert "92/100 自动评分，另有 8 分人工评分待定" in policies.scores_page(results_of(92.0), suite)


@pytest.mark.e2e
def test_the_full_page_states_the_manual_points_in_both_languages(graded_demo_class) -> None:
    full = (graded_demo_class("zh")[0] / "students" / "xiaolin" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert SAID in full
    english = (graded_demo_class("en")[0] / "students" / "xiaolin" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8")
    assert "100/100 autograded; 8 more points are graded by hand, still pending (108 in all)" in english


def test_the_hub_pages_state_the_manual_points(language) -> None:
    """The student's own page (per assignment) and an attempt's page, as the hub side renders them."""
    assignment = {"name": ASSIGNMENT, "submissions": [], "attempts": 5, "window_hours": 1, "next_feedback": None, "manual_points": 8.0}
    home = hub_template("hub_student.html.j2", status={"student": "ana", "assignments": [assignment]}, suites=[ASSIGNMENT], xsrf="x", user={}, ta=False)
    assert "本作业另有 8 分由助教人工评分，不在下面的得分里。" in home
    attempt = {"id": 3, "assignment": ASSIGNMENT, "student": "ana", "timestamp": "t", "state": "delivered", "position": None, "cause": ""}
    page = hub_template("hub_attempt.html.j2", attempt=attempt | {"score": 100.0, "max_score": 100.0, "page": True}, manual_points=8.0, user={}, ta=False)
    assert SAID in page
    hidden = hub_template("hub_attempt.html.j2", attempt=attempt | {"score": None, "max_score": None, "page": True}, manual_points=8.0, user={}, ta=False)
    assert "人工评分待定" not in hidden, "no score shown (the policy withheld it): nothing said of it"


def test_a_graded_manual_part_is_stated_as_graded() -> None:
    results = results_of() | {"late": {"manual": 6.0, "max": 108.0, "total": 106.0, "penalty": 0.0}}
    page = policies.scores_page(results, discover()[ASSIGNMENT])
    assert "100/100 自动评分；人工评分 6/8（满分共 108 分）" in page and "待定" not in page


def test_every_time_on_a_page_states_its_zone() -> None:
    due = time.time() + 3600
    for page in (
        policies.withheld_page(ASSIGNMENT, policies.limit_reason(policies.DEFAULT, due)),
        policies.withheld_page(ASSIGNMENT, policies.after_due_reason(due)),
    ):
        moments = [m for m in MOMENT.finditer(page)]
        assert moments, page
        for moment in moments:
            assert page[moment.end() : moment.end() + 4] == " UTC", page[moment.start() : moment.end() + 20]


def test_times_are_shown_in_the_courses_zone_when_it_names_one() -> None:
    """nbgrader's own ``c.Exchange.timezone``: the pages' times in it, zone and offset named."""
    from traitlets.config import Config

    moment = 1796688000.0  # 2026-12-08 00:00 UTC
    try:
        policies.show_times_in(Config({"Exchange": {"timezone": "Asia/Shanghai"}}))
        page = policies.withheld_page(ASSIGNMENT, policies.after_due_reason(moment))
        assert "2026-12-08 08:00 Asia/Shanghai (UTC+08:00)" in page, page
        policies.show_times_in(Config({"Exchange": {"timezone": "no/such-zone"}}))
        assert "2026-12-08 00:00 UTC" in policies.withheld_page(ASSIGNMENT, policies.after_due_reason(moment))
    finally:
        policies.show_times_in(Config())
    assert policies.when(moment) == "2026-12-08 00:00 UTC"


@pytest.mark.browser
@pytest.mark.e2e
def test_the_pages_look_alike_in_chromium(graded_demo_class, tmp_path: Path) -> None:
    """In headless Chromium at one window size, each page's title starts at the full page's column
    (the stylesheet's centred 60rem body; an unstyled page starts at the window's edge), in the same font size."""
    from devtools import CHROMIUM, FLAGS
    from PIL import Image

    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    suite = discover()[ASSIGNMENT]
    shown = {
        "full": (graded_demo_class("zh")[0] / "students" / "xiaolin" / ASSIGNMENT / "feedback.html").read_text(encoding="utf-8"),
        "scores": policies.scores_page(results_of(), suite),
        "withheld": policies.withheld_page(ASSIGNMENT, policies.limit_reason(policies.DEFAULT, time.time())),
    }
    left = {}
    for name, page in shown.items():
        path = tmp_path / f"{name}.html"
        path.write_text(page, encoding="utf-8")
        shot = tmp_path / f"{name}.png"
        subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile' / name}", f"--screenshot={shot}", "--window-size=1400,600", path.as_uri()],
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        image = Image.open(shot).convert("RGB")
        artifacts = ROOT / "tests" / "artifacts"
        if artifacts.is_dir():
            image.save(artifacts / f"service-page-{name}.png")
        width, height = image.size
        pixels = image.load()
        # The title's first dark pixel: the leftmost column with text in the page's top 120 px.
        left[name] = min(x for x in range(width) for y in range(10, 120) if sum(pixels[x, y]) < 240)
    assert abs(left["scores"] - left["full"]) <= 2 and abs(left["withheld"] - left["full"]) <= 2, left
    assert left["full"] > 100, f"the full page's body is centred ({left})"
