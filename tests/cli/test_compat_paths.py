"""Paths that courses and assignment folders already name keep working after the move to sub-packages.

An assignment folder written for the flat package imports ``attnkit.checks``, ``attnkit.mistakes`` and
``attnkit.proxy.StudentRaised``; a course's ``nbgrader_config.py`` names
``attnkit.nbgrader_course.KitAutoGrades`` and ``KitFeedbackExporter`` (or calls its ``configure``);
scripts run ``python -m attnkit.release``, ``attnkit.gradescope``, ``attnkit.zygote`` and pytest
``-p attnkit.plugin``. Each old name is the very object of the new path, not a copy.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item

from commands import run_command

OLD_TO_NEW = {
    "attnkit.checks.assert_shape": "attnkit.assignment.checks.assert_shape",
    "attnkit.checks.fail": "attnkit.assignment.checks.fail",
    "attnkit.mistakes.Mistake": "attnkit.assignment.mistakes.Mistake",
    "attnkit.proxy.StudentRaised": "attnkit.boundary.outcome.StudentRaised",
    "attnkit.proxy.Student": "attnkit.grading.student.Student",
    "attnkit.proxy.LocalBackend": "attnkit.grading.student.LocalBackend",
    "attnkit.nbgrader_course.KitAutoGrades": "attnkit.course.nbgrader_commands.KitAutoGrades",
    "attnkit.nbgrader_course.KitFeedbackExporter": "attnkit.course.nbgrader_commands.KitFeedbackExporter",
    "attnkit.nbgrader_course.configure": "attnkit.course.nbgrader_commands.configure",
    "attnkit.plugin.GradingPlugin": "attnkit.grading.plugin.GradingPlugin",
    "attnkit.plugin.pytest_configure": "attnkit.grading.plugin.pytest_configure",
    "attnkit.release.main": "attnkit.course.release.main",
    "attnkit.gradescope.main": "attnkit.course.gradescope.main",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_name_is_the_new_object(old: str) -> None:
    assert import_item(old) is import_item(OLD_TO_NEW[old])


# The course's nbgrader_config.py as courses have it (before the move), plus the two lines a course
# may have written by hand to name the kit's classes itself.
OLD_CONFIG = """
c = get_config()  # noqa: F821
from attnkit.nbgrader_course import configure as _attnkit_configure
_attnkit_configure(c, {root!r})
c.GenerateFeedback.exporter_class = "attnkit.nbgrader_course.KitFeedbackExporter"
c.Autograde.autograde_preprocessors = [*c.Autograde.autograde_preprocessors, "attnkit.nbgrader_course.KitAutoGrades"]
"""


def test_an_old_nbgrader_config_still_configures_the_kit(tmp_path: Path) -> None:
    from nbconvert.exporters import Exporter
    from nbconvert.preprocessors import Preprocessor

    from attnkit.course.nbgrader_commands import KitAutoGrades, KitFeedbackExporter

    (tmp_path / "nbgrader_config.py").write_text(OLD_CONFIG.format(root=str(tmp_path)), encoding="utf-8")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    exporter = import_item(config.GenerateFeedback.exporter_class)
    assert exporter is KitFeedbackExporter and issubclass(exporter, Exporter)
    preprocessors = [import_item(name) if isinstance(name, str) else name for name in config.Autograde.autograde_preprocessors]
    assert KitAutoGrades in preprocessors
    assert all(issubclass(each, Preprocessor) for each in preprocessors)


@pytest.mark.parametrize("module", ["attnkit.release", "attnkit.gradescope"])
def test_an_old_module_path_still_runs(module: str) -> None:
    result = run_command([sys.executable, "-m", module, "--help"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "usage" in result.stdout


def test_the_old_zygote_path_still_starts_the_zygote() -> None:
    """``python -I -m attnkit.zygote`` runs the zygote's own entry: without its arguments it says how it is run."""
    old = run_command([sys.executable, "-I", "-m", "attnkit.zygote"])
    new = run_command([sys.executable, "-I", "-m", "attnkit.sandbox.zygote"])
    assert (old.returncode, old.stderr.splitlines()[-1:]) == (new.returncode, new.stderr.splitlines()[-1:])


def test_the_old_plugin_path_registers_the_fixture() -> None:
    plugin = importlib.import_module("attnkit.plugin")
    assert callable(getattr(plugin, "student", None))
