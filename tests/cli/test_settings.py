"""Every setting declared once (``attnkit.course.settings``, issue 52): one precedence (command line >
environment > the course's nbgrader_config.py > default) whichever entry point reads it,
``attnkit config`` saying each value and where it came from, a parent's copy handed to the
processes it starts, no setting read by hand anywhere else, and a course's limit in effect under
nbgrader's own ``autograde``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from attnkit.course.settings import ENVIRONMENT_ONLY, SECTIONS, AttnkitLimits, KitSettings, traits_of

from commands import BIN, run_command

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "attnkit"
ASSIGNMENT = "ch19-attention"


def course_with(tmp_path: Path, lines: str) -> Path:
    (tmp_path / "nbgrader_config.py").write_text(f"c = get_config()\n{lines}\n")
    return tmp_path


def test_one_precedence_command_line_environment_course_default(tmp_path: Path) -> None:
    course = course_with(tmp_path, "c.AttnkitLimits.cell_timeout = 20.0\nc.AttnkitLimits.call_timeout = 7.5\nc.AttnkitServe.queue_url = 'postgresql://file/x'")
    environ = {"ATTNKIT_QUEUE_URL": "postgresql://env/x"}
    settings = KitSettings.load(course, {"AttnkitLimits.cell_timeout": 30.0, "AttnkitLimits.call_timeout": None}, environ)
    assert settings.limits.cell_timeout == 30.0 and settings.sources["AttnkitLimits.cell_timeout"] == "--cell-timeout"
    assert settings.limits.call_timeout == 7.5 and settings.sources["AttnkitLimits.call_timeout"] == str(course / "nbgrader_config.py")
    assert settings.serve.queue_url == "postgresql://env/x" and settings.sources["AttnkitServe.queue_url"] == "$ATTNKIT_QUEUE_URL"
    assert settings.limits.memory_mb == AttnkitLimits.memory_mb.default_value and "AttnkitLimits.memory_mb" not in settings.sources
    limits = settings.limits.limits()
    assert (limits.cell_seconds, limits.call_seconds) == (30.0, 7.5)


def test_a_child_takes_its_parents_copy_and_never_the_course_again(tmp_path: Path) -> None:
    course = course_with(tmp_path, "c.AttnkitLimits.cell_timeout = 20.0")
    parent = KitSettings.load(course, {"AttnkitLimits.memory_mb": 512}, {})
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.AttnkitLimits.cell_timeout = 99.0\n")  # changed after the parent read it
    child = KitSettings.load(course, {}, parent.environment())
    assert (child.limits.cell_timeout, child.limits.memory_mb) == (20.0, 512)
    assert child.sources["AttnkitLimits.memory_mb"].startswith("parent process")


def test_a_wrong_type_in_the_course_is_named() -> None:
    from traitlets import TraitError

    settings = KitSettings(config=__import__("traitlets.config", fromlist=["Config"]).Config())
    settings.set("AttnkitLimits", "cell_timeout", "ten", "nbgrader_config.py")
    with pytest.raises(TraitError, match="cell_timeout"):
        settings.limits.cell_timeout  # noqa: B018


def test_the_flags_are_the_declarations(tmp_path: Path) -> None:
    """``--cell-timeout`` and the others come from the traits: their help says the default and the config name."""
    helped = run_command([str(BIN / "attnkit"), "serve", "--help"], cwd=tmp_path, timeout=120).stdout
    for section in SECTIONS:
        for name, trait in traits_of(section).items():
            flag = trait.metadata.get("flag")
            if flag and flag != "--lang" and section.__name__ in ("AttnkitLimits", "AttnkitServe"):
                assert flag in helped and f"c.{section.__name__}.{name}" in helped.replace("\n", " ").replace("  ", " "), flag


def test_attnkit_config_prints_every_setting_its_value_and_source(tmp_path: Path) -> None:
    course = course_with(tmp_path, "c.AttnkitLimits.call_timeout = 4.0\nc.AttnkitServe.queue_url = 'postgresql://kit:s3cret@db.example/kit'")
    found = run_command([str(BIN / "attnkit"), "config", "--course", str(course), "--memory-mb", "900"], cwd=tmp_path, timeout=120)
    assert found.returncode == 0, found.stderr
    for section in SECTIONS:
        for name in traits_of(section):
            assert f"{section.__name__}.{name}" in found.stdout
    lines = found.stdout.splitlines()
    assert any(line.startswith("AttnkitLimits.call_timeout") and "4.0" in line and "nbgrader_config.py" in line for line in lines)
    assert any(line.startswith("AttnkitLimits.memory_mb") and "900" in line and "[--memory-mb]" in line for line in lines)
    assert any(line.startswith("AttnkitLimits.cell_timeout") and "[default]" in line for line in lines)
    assert "s3cret" not in found.stdout, "a database password is never printed"
    for variable in ENVIRONMENT_ONLY:
        assert f"${variable}" in found.stdout


def test_no_setting_is_read_by_hand() -> None:
    """No ``c.Attnkit*`` section read out of a loaded config outside ``course/settings.py``, and no
    ``ATTNKIT_`` variable anywhere that is not declared there (a trait's ``env`` or ENVIRONMENT_ONLY)."""
    declared = set(ENVIRONMENT_ONLY) | {str(t.metadata["env"]) for s in SECTIONS for t in traits_of(s).values() if t.metadata.get("env")}
    by_hand, undeclared = [], []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "course":
            continue
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(SRC)
        by_hand += [f"{relative}: {m[0]}" for m in re.finditer(r"""(\.get\(|\[)\s*["']Attnkit[A-Za-z]*["']""", text)]
        undeclared += [f"{relative}: {name}" for name in set(re.findall(r"\bATTNKIT_[A-Z_]+\b", text)) - declared]
    assert not by_hand, by_hand
    assert not undeclared, undeclared


@pytest.mark.e2e
def test_a_course_limit_is_in_effect_under_nbgrader_autograde(tmp_path: Path) -> None:
    """``c.AttnkitLimits.cell_timeout`` in the course's nbgrader_config.py reaches the kit's grader that
    nbgrader's own ``autograde`` starts (it used to start it with a fixed command line)."""
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    with open(course / "nbgrader_config.py", "a") as config:
        config.write("\nc.AttnkitLimits.cell_timeout = 1.5\n")
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "assignments", course / "assignments")
    notebook = json.loads((ROOT / "solutions" / ASSIGNMENT / "attention.ipynb").read_text(encoding="utf-8"))
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "import time\ntime.sleep(4)"})
    folder = course / "submitted" / "slowcell" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "attention.ipynb").write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    nbgrader = str(BIN / "nbgrader")
    for step in (("generate_assignment", ASSIGNMENT, "--force"), ("autograde", ASSIGNMENT, "--force")):
        done = run_command([nbgrader, *step], cwd=course, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    graded = json.loads((course / "autograded" / "slowcell" / ASSIGNMENT / "attention.ipynb").read_text(encoding="utf-8"))
    carried = json.dumps(graded["metadata"], ensure_ascii=False)
    assert "1.5 秒" in carried, "the course's cell limit (1.5 s), not the default 10 s, stopped the sleeping cell"
