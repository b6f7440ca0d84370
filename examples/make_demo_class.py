"""Rebuild the demo class in examples/submitted/ (nbgrader's layout) from the release notebook.

Each demo student starts from the notebook students are handed (assignments/), fills in the
answers from solutions/, then makes their characteristic mistake. Run from the repository root:

    .venv/bin/python examples/make_demo_class.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "ch19-attention"
OUT = ROOT / "examples" / "submitted"

from attnkit.assignment.folder import discover

by_id = discover()[ASSIGNMENT].catalogue().by_id  # trusted: the demo is built by the instructor

SOLUTION_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION[ \t]*\n?", re.S | re.M)


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def answered(release: dict, solution: dict) -> dict:
    """The release notebook with every solution cell answered as the model answer does."""
    model = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in solution["cells"] if c["metadata"].get("nbgrader", {}).get("solution")}
    for cell in release["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if cell["metadata"].get("nbgrader", {}).get("solution") and grade_id in model:
            source = SOLUTION_BLOCK.sub(lambda m: m.group(1), model[grade_id])
            cell["source"] = source.replace("=== BEGIN MARK SCHEME ===", "").replace("=== END MARK SCHEME ===", "")
    return release


def with_cell(notebook: dict, grade_id: str, source: str) -> dict:
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = source
    return notebook


def write(student: str, notebook: dict | str) -> None:
    folder = OUT / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    text = notebook if isinstance(notebook, str) else json.dumps(notebook, ensure_ascii=False, indent=1) + "\n"
    (folder / "attention.ipynb").write_text(text, encoding="utf-8")


def main() -> None:
    release_path = ROOT / "assignments" / ASSIGNMENT / "attention.ipynb"
    solution = load(ROOT / "solutions" / ASSIGNMENT / "attention.ipynb")
    if OUT.exists():
        shutil.rmtree(OUT)

    # A perfect submission.
    write("xiaolin", answered(load(release_path), solution))
    # The chapter's two classic masking mistakes (section 5's warning).
    for student, mistake in (("wangfang", "mask_by_multiplying"), ("lilei", "mask_after_softmax")):
        write(student, with_cell(answered(load(release_path), solution), by_id(mistake).function, by_id(mistake).source))
    # Half finished: the attention and masks done, multi-head and the self-test left as stubs.
    half = answered(load(release_path), solution)
    stubs = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in load(release_path)["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
    }
    for grade_id in ("split_heads", "merge_heads", "multi_head_attention", "self_test"):
        with_cell(half, grade_id, stubs[grade_id])
    write("zhaoqiang", half)
    # Fails to run: a typo in the import cell, so every function meets an undefined `torch`.
    broken = answered(load(release_path), solution)
    for cell in broken["cells"]:
        if cell["cell_type"] == "code" and "import torch" in "".join(cell["source"]) and not cell["metadata"].get("nbgrader"):
            cell["source"] = "".join(cell["source"]).replace("import torch", "import torhc", 1)
            break
    write("chenjing", broken)
    # An invalid file: the upload was cut off.
    write("sunmei", json.dumps(answered(load(release_path), solution), ensure_ascii=False, indent=1)[:5000])
    print(f"wrote {len(list(OUT.iterdir()))} students to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
