"""English for TAs and learners (`--lang en`): the message catalogues are complete, and a class
graded in English reads wholly in English (console, report.html, feedback pages, results.json)
with exactly the scores it gets in Chinese."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po
from commands import BIN, attnkit

from attnkit import i18n
from contract import ASSIGNMENTS

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "submitted"
ENGINE_PO = ROOT / "src" / "attnkit" / "locale" / "en" / "LC_MESSAGES" / "attnkit.po"
# Chinese characters, CJK punctuation (、。「」…) and full-width forms (（）：；，): any of these in
# English output is a mixed-language message.
CJK = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
PLACEHOLDER = re.compile(r"\{\w+\}|%\(\w+\)s")


def extracted(config: Path, folder: Path) -> dict[str, Any]:
    """msgid -> msgid (plural: the pair) of every message `pybabel extract -F config` finds."""
    with open(config, encoding="utf-8") as handle:
        method_map, options_map = parse_mapping_cfg(handle, str(config))
    found: dict[str, Any] = {}
    for _filename, _lineno, message, _comments, _context in extract_from_dir(str(folder), method_map, options_map, comment_tags=("Translators:",)):
        found[message[0] if isinstance(message, tuple) else message] = message
    return found


DOMAINS = {
    # the engine: babel.cfg at the root, run from the root
    "attnkit": (ROOT / "babel.cfg", ROOT, ENGINE_PO),
    # every assignment discover() finds: its babel.cfg, run from its folder (it moves with the
    # assignment), its own "assignment" catalogue beside it
    **{
        name: (a.folder / "babel.cfg", a.folder, a.folder / "locale" / "en" / "LC_MESSAGES" / f"{i18n.ASSIGNMENT_DOMAIN}.po") for name, a in ASSIGNMENTS.items()
    },
}
# At least this many messages, so that an extraction that finds nothing is not taken for a full one.
MIN_MESSAGES = {"attnkit": 100, "ch19-attention": 100}
# The catalogues this project ships: each must stay (and stay complete). A course's own added
# assignment may have none (ARCHITECTURE.md: English is optional), and is then shown in Chinese.
SHIPPED_ENGLISH = {"attnkit", "ch19-attention", "warmup-softmax"}


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_every_message_has_an_english_translation(domain: str) -> None:
    """Does every message the code uses (as `pybabel extract` finds it) have a non-empty English
    translation with the same placeholders, and does the .po hold nothing the code no longer uses?
    An added assignment without any locale/ (English optional) is shown as written instead."""
    config, folder, po = DOMAINS[domain]
    if domain not in SHIPPED_ENGLISH and not (folder / "locale").exists():
        assignment = ASSIGNMENTS[domain]
        assert i18n.translations(str(folder / "locale"), i18n.ASSIGNMENT_DOMAIN, "en").gettext(assignment.title) == assignment.title
        return
    used = extracted(config, folder)
    assert len(used) > MIN_MESSAGES.get(domain, 5)
    with open(po, "rb") as handle:
        catalog = read_po(handle)
    translated = {(m.id[0] if isinstance(m.id, tuple) else m.id): m for m in catalog if m.id}
    missing = sorted(set(used) - set(translated))
    assert not missing, f"used in the code but not in {po.name} (run pybabel extract/update, then translate): {missing}"
    stale = sorted(set(translated) - set(used))
    assert not stale, f"in {po.name} but no longer used: {stale}"
    for key, message in translated.items():
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        assert all(strings), f"empty translation: {key!r}"
        assert not message.fuzzy, f"fuzzy translation: {key!r}"
        assert isinstance(message.id, tuple) == isinstance(used[key], tuple), f"singular/plural mismatch: {key!r}"
        for string in strings:
            assert not CJK.search(string), f"Chinese left in the English translation of {key!r}: {string!r}"
            if not (isinstance(message.id, tuple) and "%(num)s" in key):
                assert set(PLACEHOLDER.findall(string)) == set(PLACEHOLDER.findall(key)), (key, string)


def test_chinese_is_the_default_and_english_is_chosen_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chinese unless --lang or ATTNKIT_LANG says otherwise; the system locale never decides."""
    monkeypatch.delenv(i18n.ENV_VARIABLE, raising=False)
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    try:
        assert i18n.set_language(None) == "zh"
        assert i18n._("评分结果") == "评分结果"
        monkeypatch.setenv(i18n.ENV_VARIABLE, "en_GB.UTF-8")
        assert i18n.set_language(None) == "en"
        assert i18n._("评分结果") == "Grading results"
        assert i18n.set_language("zh") == "zh"
        assert i18n._("评分结果") == "评分结果"
        monkeypatch.setenv(i18n.ENV_VARIABLE, "fr")
        assert i18n.set_language(None) == "zh"
    finally:
        i18n.set_language("zh", export=False)


def grade(out: Path, *lang: str, env_lang: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != i18n.ENV_VARIABLE}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["COLUMNS"] = "200"  # the summary table's cells are not wrapped
    if env_lang:
        env[i18n.ENV_VARIABLE] = env_lang
    return attnkit("grade", "--submitted", str(DEMO), "--out", str(out), "--jobs", "2", *lang, script=True, env=env)


@pytest.fixture(scope="module")
def classes(graded_demo_class) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """The demo class graded in Chinese (the default) and in English (--lang en), as :func:`grade`
    does (conftest.py's session fixture: tests/report/test_feedback_browser.py reads the same English class)."""
    return {name: graded_demo_class(name) for name in ("zh", "en")}


def notebook_data(results: dict[str, Any]) -> list[str]:
    """The texts a page quotes from the student's notebook, which stays Chinese (the textbook's
    section headings, the student's own code lines, messages their own code raised or printed)."""
    data: list[str] = []
    for cell in results["cells"]:
        data += [str(cell.get(key) or "") for key in ("section", "text", "message", "output")]
        data += [str((cell.get("inner") or {}).get(key) or "") for key in ("section", "text", "function")]  # the other cell it names
    for test in results["tests"]:
        error = test.get("error") or {}
        data += [str(error.get(key) or "") for key in ("section", "text", "message")] + list(error.get("warnings", []))
    return sorted({d for d in data if d}, key=len, reverse=True)


def without(text: str, data: list[str]) -> str:
    for item in data:
        text = text.replace(item, " ")
    return text


def cjk_in(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 40] for m in CJK.finditer(text)][:5]


def all_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "students").glob("*/*/results.json"))]


@pytest.mark.e2e
def test_english_run_reads_wholly_in_english(classes) -> None:
    """With --lang en: is there no Chinese anywhere in the console output, report.html, the
    feedback pages and the messages of results.json, except what is quoted from the notebooks?"""
    out, run = classes["en"]
    assert "Grading results" in run.stderr and "Isolated" in run.stderr
    assert not cjk_in(run.stdout + run.stderr), cjk_in(run.stdout + run.stderr)
    results = all_results(out)
    quoted = sorted({d for r in results for d in notebook_data(r)}, key=len, reverse=True)
    report = html.unescape((out / "report.html").read_text(encoding="utf-8"))
    assert '<html lang="en">' in report and "Class report" in report
    assert not cjk_in(without(report, quoted)), cjk_in(without(report, quoted))
    for r in results:
        page = html.unescape((out / "students" / r["student_id"] / r["assignment"] / "feedback.html").read_text(encoding="utf-8"))
        assert '<html lang="en">' in page
        own = notebook_data(r)
        assert not cjk_in(without(page, own)), (r["student_id"], cjk_in(without(page, own)))
        messages = [t["name"] for t in r["tests"]] + [without(t["output"], own) for t in r["tests"]]
        messages += [without(text, own) for text in r["problems"] + r["notes"] + [r["not_graded"]]]
        messages += [without(c["message"], own) for c in r["cells"]]
        for message in messages:
            assert not CJK.search(message), (r["student_id"], message)
    assert "Feedback" in page and "Score per part" in page


@pytest.mark.e2e
def test_chinese_run_is_unchanged_and_wholly_chinese(classes) -> None:
    """The default run is Chinese: Chinese pages, <html lang="zh-CN">, no English sentence of ours."""
    out, run = classes["zh"]
    assert "评分结果" in run.stderr and "Grading results" not in run.stderr
    report = (out / "report.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in report and "全班评分报告" in report
    page = (out / "students" / "wangfang" / "ch19-attention" / "feedback.html").read_text(encoding="utf-8")
    assert "诊断：可能的错误" in page and "用乘零" in page
    assert "The mask multiplies the scores" not in page, "the Chinese page carries no English explanation"


@pytest.mark.e2e
def test_same_scores_in_both_languages(classes) -> None:
    """Are scores, grade ids, per-test results, diagnoses, grades.csv and results.json's structure
    the same whichever language the class was graded in?"""
    zh, en = classes["zh"][0], classes["en"][0]
    assert (zh / "grades.csv").read_text(encoding="utf-8") == (en / "grades.csv").read_text(encoding="utf-8")
    header = next(csv.reader(io.StringIO((en / "grades.csv").read_text(encoding="utf-8"))))
    assert header[:4] == ["student_id", "assignment", "score", "max_score"] and "check_masking" in header
    for a, b in zip(all_results(zh), all_results(en), strict=True):
        assert a.keys() == b.keys()
        for key in ("student_id", "assignment", "score", "max_score", "parts", "diagnoses", "isolation", "notebooks"):
            assert a[key] == b[key], key
        assert [(t["grade_id"], t["score"], t["max_score"], t["status"], t["diagnoses"]) for t in a["tests"]] == [
            (t["grade_id"], t["score"], t["max_score"], t["status"], t["diagnoses"]) for t in b["tests"]
        ]
        assert [sorted(t) for t in a["tests"]] == [sorted(t) for t in b["tests"]]
        assert len(a["problems"]) == len(b["problems"]) and len(a["cells"]) == len(b["cells"])


@pytest.mark.e2e
def test_switching_language_regrades_and_env_selects_english(classes, tmp_path: Path) -> None:
    """A re-run in the other language regrades (stored messages are in the run's language), and
    ATTNKIT_LANG=en alone gives English."""
    out = tmp_path / "out"
    shutil.copytree(classes["zh"][0], out)
    run = grade(out, env_lang="en")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "6 to grade" in run.stderr and not cjk_in(run.stderr), run.stderr[-2000:]
    assert '<html lang="en">' in (out / "report.html").read_text(encoding="utf-8")
    rerun = grade(out, "--lang", "en", env_lang="zh")
    assert "0 to grade" in rerun.stderr, rerun.stderr[-2000:]


@pytest.mark.e2e
def test_check_command_in_english(tmp_path: Path) -> None:
    """`attnkit check --lang en` (a learner's own notebook): every line it prints is English."""
    env = {k: v for k, v in os.environ.items() if k != i18n.ENV_VARIABLE}
    run = attnkit("check", str(DEMO / "wangfang" / "ch19-attention" / "attention.ipynb"), "--lang", "en", script=True, env=env, timeout=300)
    # 87: masking (10) and the causal future test (3); the empty-row tests rest on masking and its
    # raise is right (issue 53; 77 before).
    assert "Total 87/100" in run.stdout and "Diagnosis mask_by_multiplying (section 5)" in run.stdout, run.stdout[-2000:]
    assert not cjk_in(run.stdout + run.stderr), cjk_in(run.stdout + run.stderr)


@pytest.mark.e2e
def test_errors_before_grading_are_english(tmp_path: Path) -> None:
    """The grader's own refusals (an empty submissions folder, a missing notebook) in English."""
    env = {k: v for k, v in os.environ.items() if k != i18n.ENV_VARIABLE}
    (tmp_path / "empty").mkdir()
    for args in (
        ["grade", "--submitted", str(tmp_path / "empty"), "--out", str(tmp_path / "out"), "--lang", "en"],
        ["check", str(tmp_path / "missing.ipynb"), "--lang", "en"],
    ):
        run = attnkit(*args, script=True, env=env, timeout=120)
        assert run.returncode == 2 and "Cannot grade:" in run.stderr, run.stderr
        assert not cjk_in(run.stderr), run.stderr


@pytest.mark.e2e
def test_messages_made_inside_the_sandbox_are_english(tmp_path: Path) -> None:
    """The sandbox (forked from the zygote, which is told the language before it locks itself
    down) writes its own messages in English too: a return value it cannot send back."""
    notebook = json.loads((DEMO / "xiaolin" / "ch19-attention" / "attention.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "scaled_attention")
    cell["source"] = "def scaled_attention(query, key, value, allowed=None):\n    return object(), object()\n"
    folder = tmp_path / "submitted" / "obj" / "ch19-attention"
    folder.mkdir(parents=True)
    (folder / "attention.ipynb").write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != i18n.ENV_VARIABLE}
    run = attnkit(
        "grade",
        "--submitted",
        str(tmp_path / "submitted"),
        "--out",
        str(tmp_path / "out"),
        "--jobs",
        "1",
        "--quiet",
        "--lang",
        "en",
        script=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = all_results(tmp_path / "out")[0]
    outputs = [t["output"] for t in results["tests"] if "scaled_attention" in t.get("functions", []) or t["grade_id"] == "check_scaled_attention"]
    assert any("unsupported value type object" in output for output in outputs), outputs[:2]
    own = notebook_data(results)
    for test in results["tests"]:
        assert not CJK.search(without(test["output"], own)), test["output"]
