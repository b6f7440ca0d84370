"""A student's feedback page, looked at in a real browser (headless Chromium from Debian)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from devtools import CHROMIUM, FLAGS  # the one Chromium command line of the browser tests
from PIL import Image
from commands import BIN, run_command

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "submitted"


@pytest.fixture(scope="module")
def page(graded_demo_class) -> Path:
    """The feedback page of the demo student who multiplied future scores by zero (from the demo
    class the session grades once, read only)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    return graded_demo_class("zh")[0] / "students" / "wangfang" / "ch19-attention" / "feedback.html"


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    return run_command([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], env=os.environ, timeout=120)


def test_rendered_page_names_the_mistake_in_chinese(page: Path, tmp_path: Path) -> None:
    """Does the page, as the browser builds it, show the diagnosis, its chapter section and both heatmaps?"""
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile").stdout
    results = json.loads((page.parent / "results.json").read_text(encoding="utf-8"))
    assert results["diagnoses"] == ["mask_by_multiplying"]
    assert 'data-diagnosis="mask_by_multiplying"' in dom
    assert "乘" in dom and "第 5 节" in dom, "the diagnosis is explained in Chinese with its section"
    for heatmap in ("causal-student", "causal-expected", "full-student", "full-expected"):
        assert f'data-heatmap="{heatmap}"' in dom
    # The student's causal weights leak into the future: row 0 is not (1, 0, 0).
    assert "0.4011" in dom and "1.0000" in dom


def test_screenshot_shows_the_heatmaps(page: Path, tmp_path: Path) -> None:
    """Does a screenshot of the page show the blue heatmap cells and dark (rendered) text?"""
    shot = tmp_path / "feedback.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri(), profile=tmp_path / "profile")
    assert shot.is_file(), "Chromium wrote no screenshot"
    shutil.copy(shot, ROOT / "tests" / "artifacts" / "feedback.png") if (ROOT / "tests" / "artifacts").is_dir() else None
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    blue = sum(count for count, (r, g, b) in colours if b > 150 and b - r > 60 and b - g > 30)
    dark = sum(count for count, (r, g, b) in colours if r < 80 and g < 80 and b < 80)
    assert blue > 2000, f"heatmap cells not visible ({blue} blue pixels)"
    assert dark > 2000, f"hardly any text rendered ({dark} dark pixels)"


@pytest.fixture(scope="module")
def key_t_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The feedback page of a student whose scaled_attention uses key.T instead of
    key.transpose(-2, -1) (right on the chapter's 2-D example, wrong with batch and head dims)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    base = tmp_path_factory.mktemp("browser_key_t")
    notebook = json.loads((DEMO / "xiaolin" / "ch19-attention" / "attention.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "scaled_attention")
    source = "".join(cell["source"])
    assert "key.transpose(-2, -1)" in source
    cell["source"] = source.replace("key.transpose(-2, -1)", "key.T")
    target = base / "submitted" / "keyt" / "ch19-attention"
    target.mkdir(parents=True)
    (target / "attention.ipynb").write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    run_command(
        [BIN / "attnkit", "grade", "--submitted", str(base / "submitted"), "--out", str(base / "out"), "--jobs", "1", "--quiet"], check=True, timeout=300
    )
    return base / "out" / "students" / "keyt" / "ch19-attention" / "feedback.html"


def visible_text(page: Path, tmp_path: Path) -> tuple[str, str]:
    """(the DOM as Chromium builds it, the text a reader sees: innerText leaves closed <details> out)."""
    import html

    import re

    probe = tmp_path / "visible.html"
    script = '<script>document.body.setAttribute("data-visible", document.body.innerText)</script></body>'
    # The page forbids scripts (its Content-Security-Policy): this test-only copy drops that
    # policy so that the probe script may read what a reader sees.
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text(encoding="utf-8"))
    assert "Content-Security-Policy" not in text
    probe.write_text(text.replace("</body>", script), encoding="utf-8")
    dom = chromium("--dump-dom", probe.as_uri(), profile=tmp_path / "profile").stdout
    start = dom.index('data-visible="') + len('data-visible="')
    return dom, html.unescape(dom[start : dom.index('"', start)])


def test_key_t_page_explains_once_and_folds_the_repeats(key_t_page: Path, tmp_path: Path) -> None:
    """Does the key.T page show one expanded Chinese explanation ("从这里开始") with the student's
    failing line and its section title, and fold the other tests that failed for the same reason?"""
    results = json.loads((key_t_page.parent / "results.json").read_text(encoding="utf-8"))
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    assert len(failed) >= 10 and all(t.get("error", {}).get("text", "").startswith("scores = query @ key.T") for t in failed)
    dom, seen = visible_text(key_t_page, tmp_path)
    assert dom.count('class="cause"') == 1
    assert dom.count('<details class="repeat"') == len(failed) and "<details open" not in dom
    assert seen.count("从这里开始") >= 1
    assert seen.count(".T 会把张量的所有维度倒过来") == 1, "the explanation is shown once, expanded"
    # The failing line, once in its own block (torch's warning may quote it again beside itself).
    assert dom.count("data-failing-line=") == 1 and "scores = query @ key.T / sqrt(query.shape[-1])" in seen
    assert "「练习 4.1：scaled_attention」一节" in seen, "the cell is named by its section title"
    assert "key.transpose(-2, -1)" in seen
    assert seen.count("The use of `x.T` on tensors of dimension other than 2") == 1, "torch's warning, shown once with the cause"
    # The multi-head tests pass with the reference scaled_attention and say so.
    assert "这一项用参考的 scaled_attention 代替了你的实现" in seen
    # Never the grader's paths or the hidden tests' source.
    for leak in ("autograder/", "test_ch19", "student.", "Traceback", "site-packages"):
        assert leak not in seen, leak


# -- English (--lang en) --------------------------------------------------------------------------
# Chinese characters, CJK punctuation and full-width forms: none may be visible on an English page
# except what the page quotes from the student's notebook (which stays Chinese: section headings,
# the student's own lines and the messages their own code raised).
CJK = __import__("re").compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")


@pytest.fixture(scope="module")
def english_class(graded_demo_class) -> Path:
    """The whole demo class graded with --lang en (conftest.py's, the same class tests/report/test_i18n.py
    reads): its output folder."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    return graded_demo_class("en")[0]


def quoted_from_notebooks(results: list[dict]) -> list[str]:
    data = set()
    for r in results:
        for cell in r["cells"]:
            data |= {str(cell.get(key) or "") for key in ("section", "text", "message", "output")}
        for test in r["tests"]:
            error = test.get("error") or {}
            data |= {str(error.get(key) or "") for key in ("section", "text", "message")} | set(error.get("warnings", []))
    return sorted((d for d in data if d), key=len, reverse=True)


def english_screenshot(page: Path, name: str, tmp_path: Path) -> Image.Image:
    shot = tmp_path / name
    chromium(f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri(), profile=tmp_path / "profile")
    assert shot.is_file(), "Chromium wrote no screenshot"
    if (ROOT / "tests" / "artifacts").is_dir():
        shutil.copy(shot, ROOT / "tests" / "artifacts" / name)
    return Image.open(shot).convert("RGB")


@pytest.mark.parametrize("which", ["report", "feedback"])
def test_english_pages_in_the_browser(english_class: Path, tmp_path: Path, which: str) -> None:
    """report.html and a feedback page with failing tests (wangfang: multiplies future scores by
    zero), graded with --lang en: <html lang="en">, English headings, no Chinese in the text a
    reader sees (except what is quoted from notebooks), and a screenshot with rendered text
    (tests/artifacts/report_en.png, feedback_en.png)."""
    results = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((english_class / "students").glob("*/*/results.json"))]
    if which == "report":
        page, quoted = english_class / "report.html", quoted_from_notebooks(results)
        expected = ("Chapter 19, Attention · Class report", "Most common diagnoses", "mask_by_multiplying", "Pass rate per test")
    else:
        page = english_class / "students" / "wangfang" / "ch19-attention" / "feedback.html"
        mine = [r for r in results if r["student_id"] == "wangfang"]
        assert mine[0]["diagnoses"] == ["mask_by_multiplying"] and any(t["status"] == "failed" for t in mine[0]["tests"])
        quoted = quoted_from_notebooks(mine)
        expected = (
            "Chapter 19, Attention · Feedback",
            "Diagnosis: possible mistakes",
            "multiplies the scores by zero",
            "section 5",
            "Score per part",
            "Attention with a mask (sections 5 and 7)",
        )
    assert '<html lang="en">' in page.read_text(encoding="utf-8")
    dom, seen = visible_text(page, tmp_path)
    for text in expected:
        assert text in seen, text
    for item in quoted:
        seen = seen.replace(item, " ")
    leaks = [seen[max(0, m.start() - 40) : m.end() + 40] for m in CJK.finditer(seen)]
    assert not leaks, leaks[:5]
    image = english_screenshot(page, f"{which}_en.png", tmp_path)
    colours = image.getcolors(maxcolors=1 << 20) or []
    dark = sum(count for count, (r, g, b) in colours if r < 80 and g < 80 and b < 80)
    assert dark > 2000, f"hardly any text rendered ({dark} dark pixels)"
    if which == "feedback":
        blue = sum(count for count, (r, g, b) in colours if b > 150 and b - r > 60 and b - g > 30)
        assert blue > 2000, f"heatmap cells not visible ({blue} blue pixels)"
