"""The grader's intake grades valid notebooks as nbgrader would read them (issue 25, "Intake fidelity").

One real `attnkit grade` run of a class of copies of the demo's perfect notebook, each sent in a
way a real student sends it: renamed by the browser (``attention (1).ipynb``) or by hand
(``Attention.ipynb``), saved in the old nbformat 3, or over 20 MB because of one embedded image.
Each must score what the plain copy scores; the renamed ones with a note and ``stored_as`` naming
the assignment's notebook.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import nbformat
import pytest
from commands import attnkit

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ch19-attention"
PERFECT = ROOT / "examples" / "submitted" / "xiaolin" / ASSIGNMENT / "attention.ipynb"
IMAGE_BYTES = 16 * 1024 * 1024  # base64 makes it ~21 MB: the file is over the 20 MB cap, its code is not


def with_image(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    image = base64.b64encode(os.urandom(IMAGE_BYTES)).decode()
    code.outputs = [nbformat.v4.new_output("display_data", data={"image/png": image, "text/plain": "<Figure>"})]
    return notebook


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("fidelity")
    submitted = base / "submitted"

    def perfect() -> nbformat.NotebookNode:  # a fresh copy each time: nbformat.convert changes its argument
        return nbformat.read(str(PERFECT), as_version=4)

    files = {
        "plain": ("attention.ipynb", PERFECT.read_bytes()),
        "browser_copy": ("attention (1).ipynb", PERFECT.read_bytes()),
        "other_case": ("Attention.ipynb", PERFECT.read_bytes()),
        "v3": ("attention.ipynb", nbformat.writes(nbformat.convert(perfect(), 3), version=3).encode()),
        "big_image": ("attention.ipynb", nbformat.writes(with_image(perfect())).encode()),
    }
    for student, (name, data) in files.items():
        folder = submitted / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / name).write_bytes(data)
    assert (submitted / "big_image" / ASSIGNMENT / "attention.ipynb").stat().st_size > 20 * 1024 * 1024
    out = base / "graded"
    run = attnkit("grade", "--submitted", str(submitted), "--out", str(out), "--jobs", "2", "--quiet", timeout=900)
    results = {student: json.loads((out / "students" / student / ASSIGNMENT / "results.json").read_text(encoding="utf-8")) for student in files}
    return {"run": run, "results": results, "submitted": submitted, "files": files}


def score(results: dict) -> float:
    return sum(test["score"] for test in results["tests"])


def test_the_plain_copy_scores_full_marks(graded: dict) -> None:
    plain = graded["results"]["plain"]
    assert not plain["problems"] and score(plain) == sum(test["max_score"] for test in plain["tests"]) > 0, graded["run"].stderr[-2000:]


@pytest.mark.parametrize("student, original", [("browser_copy", "attention (1).ipynb"), ("other_case", "Attention.ipynb")])
def test_a_renamed_notebook_is_graded_under_the_assignments_name(graded: dict, student: str, original: str) -> None:
    results = graded["results"][student]
    assert not results["problems"] and score(results) == score(graded["results"]["plain"])
    assert any(original in note and "attention.ipynb" in note for note in results["notes"]), results["notes"]
    # For the gradebook: autograded/ gets these bytes under the assignment's name.
    assert results["notebooks"] == [{"name": original, "sha256": results["notebooks"][0]["sha256"], "stored_as": "attention.ipynb"}]


def test_an_nbformat_3_notebook_is_converted_on_read(graded: dict) -> None:
    results = graded["results"]["v3"]
    assert not results["problems"] and score(results) == score(graded["results"]["plain"]), results["problems"]
    assert any("nbformat 3" in note for note in results["notes"])


def test_an_embedded_image_does_not_count_against_the_size_cap(graded: dict) -> None:
    results = graded["results"]["big_image"]
    assert not results["problems"] and score(results) == score(graded["results"]["plain"]), results["problems"]
    # The stored copy keeps what the student sent.
    kept = (graded["submitted"] / "big_image" / ASSIGNMENT / "attention.ipynb").read_bytes()
    assert kept == graded["files"]["big_image"][1]
