"""The plugin's own test loop (``GradingPlugin.pytest_runtestloop``) against pytest's: the same
results for passing, failing, raising, skipping and ``pytest.fail`` tests, and pytest's own loop
whenever a session holds anything the plugin's loop does not do."""

from __future__ import annotations

import gc
import os
import shutil
import time
from pathlib import Path

import pytest

from attnkit.grading import plugin as plugin_module
from attnkit.grading.local_provider import LocalProvider, notebook_source
from attnkit.grading.plugin import GradingPlugin
from attnkit.grading.student import LocalBackend, Student

from contract import own_imports

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "tests" / "support" / "course"

# Extra hidden tests of the warm-up's first part, one of each kind of ending.
EXTRA_TESTS = '''

@pytest.mark.grade_id("check_softmax")
def test_rows_sum_to_one(student):
    """每一行之和是否为 1？"""
    rows = student.softmax(torch.zeros(2, 4, dtype=torch.float64)).sum(-1)  # (2,)
    assert torch.allclose(rows, torch.ones(2, dtype=torch.float64)), "每一行之和应为 1"


@pytest.mark.grade_id("check_softmax")
def test_raises_on_purpose(student):
    """学生函数抛出的异常是否被记录？"""
    student.softmax("不是张量")


@pytest.mark.grade_id("check_softmax")
def test_skips_itself(student):
    """跳过自己的测试是否没有结果？"""
    pytest.skip("not today")


@pytest.mark.grade_id("check_softmax")
def test_fails_on_purpose(student):
    """pytest.fail 是否记为失败？"""
    pytest.fail("由测试自己判定失败")
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The warm-up assignment, with the extra tests, in a folder of its own."""
    root = tmp_path_factory.mktemp("loop")
    folder = root / "autograder" / "warmup_softmax"
    shutil.copytree(COURSE / "autograder" / "warmup_softmax", folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(COURSE / "solutions", root / "solutions")
    with (folder / "test_softmax.py").open("a", encoding="utf-8") as tests:
        tests.write(EXTRA_TESTS)
    return folder, root / "solutions" / "warmup-softmax" / "softmax.ipynb"


def grade(folder: Path, notebook: Path) -> list[tuple]:
    grading = GradingPlugin(LocalProvider(notebook, api=("softmax",)))
    with own_imports(folder.name):  # this copy's package, not the tests' course's of the same name
        code = pytest.main([str(folder), "-q", "-p", "no:cacheprovider", "--rootdir", str(folder), "-c", "/dev/null"], plugins=[plugin_module, grading])
    assert code in (0, 1), code
    results = grading.results[notebook.stem]
    return [(r["nodeid"], r["status"], r["score"], r["output"], r["error"].get("type")) for r in results]


def test_the_plugins_loop_records_what_pytests_loop_records(suite, monkeypatch: pytest.MonkeyPatch) -> None:
    """Do a passing, a failing, a raising, a skipping and a ``pytest.fail`` test give the same
    results (none for the skip) in the plugin's loop as in pytest's?"""
    folder, notebook = suite
    ours = grade(folder, notebook)
    loops: list[str] = []
    original = GradingPlugin.pytest_runtestloop

    def pytests_loop(self: GradingPlugin, session: pytest.Session) -> bool | None:
        loops.append("pytest")
        return None

    monkeypatch.setattr(GradingPlugin, "pytest_runtestloop", pytests_loop)
    theirs = grade(folder, notebook)
    monkeypatch.setattr(GradingPlugin, "pytest_runtestloop", original)
    assert loops == ["pytest"]
    assert ours == theirs
    by_name = {nodeid.split("::")[-1]: (status, output, kind) for nodeid, status, _, output, kind in ours}
    assert "test_skips_itself" not in by_name
    assert by_name["test_rows_sum_to_one"][0] == "passed"
    assert by_name["test_fails_on_purpose"][0] == "failed" and "由测试自己判定失败" in by_name["test_fails_on_purpose"][1]
    assert by_name["test_raises_on_purpose"][0] == "failed"


def test_a_session_with_other_fixtures_runs_in_pytests_loop(suite, tmp_path: Path) -> None:
    """A hidden test that asks for another fixture (here ``tmp_path``): does the session run in
    pytest's loop, with that fixture provided, and still grade every test?"""
    folder, notebook = suite
    extra = folder / "test_uses_tmp_path.py"
    extra.write_text(
        "import pytest\n\n\n@pytest.mark.grade_id('check_stable')\n@pytest.mark.function('softmax')\n"
        "def test_with_a_folder(student, tmp_path):\n    assert tmp_path.is_dir()\n",
        encoding="utf-8",
    )
    try:
        results = grade(folder, notebook)
    finally:
        extra.unlink()
    assert ("test_uses_tmp_path.py::test_with_a_folder", "passed") in [(nodeid, status) for nodeid, status, *_ in results]
    assert len(results) == 6  # the two shipped tests, three of the four extra (one skips), this one


class ManySources(LocalProvider):
    """Several trusted sources in one session, by id (development backend, in-process)."""

    def __init__(self, sources: dict[str, Path]) -> None:
        super().__init__(next(iter(sources.values())), api=("softmax",))
        self.sources = sources

    def submission_ids(self) -> list[str]:
        return list(self.sources)

    def open(self, submission_id: str) -> Student:
        return Student(LocalBackend.from_cells(notebook_source(self.sources[submission_id]), submission_id), api=self.api)


class Collected:
    """How many items a session collected."""

    def __init__(self) -> None:
        self.count = 0

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.count = len(items)


def test_a_suite_seen_plain_is_collected_once_in_later_sessions(suite, tmp_path: Path) -> None:
    """Once a session has run a suite of plain tests, does the next session of the same files
    collect each test once (not once per submission), grade every submission exactly as the
    first session did, and leave the garbage collector as it found it? Does an edited file make
    the next session collect per submission again?"""
    folder, notebook = suite
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import torch\n\ndef softmax(x):\n    return x.exp() / x.exp().sum()\n", encoding="utf-8")
    broken = tmp_path / "broken.py"
    broken.write_text("def softmax(x):\n    raise NotImplementedError()\n", encoding="utf-8")
    sources = {"right": notebook, "wrong": wrong, "broken": broken}

    def session() -> tuple[int, dict[str, list[tuple]]]:
        grading, collected = GradingPlugin(ManySources(sources)), Collected()
        with own_imports(folder.name):
            code = pytest.main(
                [str(folder), "-q", "-p", "no:cacheprovider", "--rootdir", str(folder), "-c", "/dev/null"], plugins=[plugin_module, grading, collected]
            )
        assert code in (0, 1), code
        assert gc.isenabled()
        return collected.count, {
            key: [(r["nodeid"], r["status"], r["score"], r["output"], r["diagnoses"]) for r in results] for key, results in grading.results.items()
        }

    def touch() -> None:  # a state of the suite's files no session has seen yet
        stamp = time.time_ns() + 1_000_000_000 * len(plugin_module._PLAIN_SUITES)
        os.utime(folder / "test_softmax.py", ns=(stamp, stamp))

    touch()
    first_count, first = session()
    second_count, second = session()
    assert first_count == 3 * second_count and second_count == 6  # two shipped tests, four extra
    assert second == first
    assert [status for _, status, *_ in first["right"]] != [status for _, status, *_ in first["wrong"]]
    touch()
    third_count, third = session()
    assert third_count == first_count and third == first
