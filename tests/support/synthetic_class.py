"""The synthetic class ``make bench`` grades, and what the tests share with it: a class in
nbgrader's layout built from the release notebook in a TA's proportions (``make_class``), or one
named submission kind per student (``make_named_class``); samples spread across the class's mix;
the seconds per submission in ``nbgrader autograde``'s log. ``tools/bench.py`` imports it from here.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from attnkit.assignment.folder import discover

# The assignment benchmarked (its catalogue makes the class); its manifest names the notebook.
ASSIGNMENT = "ch19-attention"
NOTEBOOK = discover()[ASSIGNMENT].notebook
ROOT = Path(__file__).resolve().parents[2]
STUB_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


# -- the synthetic class ---------------------------------------------------------------------------
def load_catalogue(autograder: Path) -> ModuleType:
    """The chapter's ``catalogue`` module, from the suites folder ``autograder``."""
    return discover(autograder)[ASSIGNMENT].catalogue()


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def grade_id(cell: dict) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def is_answer_cell(cell: dict) -> bool:
    """A code cell the student writes (an nbgrader solution cell)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("solution")) and bool(meta.get("grade_id"))


def model_answers(solution: dict) -> dict[str, str]:
    """grade_id -> the model answer as a student would have typed it (no BEGIN/END markers)."""
    answers = {}
    for cell in solution["cells"]:
        if is_answer_cell(cell):
            lines = [line for line in _source(cell).splitlines(keepends=True) if line.strip() not in STUB_MARKERS]
            answers[grade_id(cell)] = "".join(lines)
    return answers


@dataclass(frozen=True)
class Kind:
    """One kind of submission: which answer cells are filled in, and with what."""

    name: str
    answers: dict[str, str] = field(hash=False)


# Mistakes a student makes that the catalogue does not list: diagnosis runs for them too and must
# name nothing. Each replaces one answer cell of an otherwise correct notebook.
UNCATALOGUED: dict[str, tuple[str, str]] = {
    "weights_transposed": (
        "scaled_attention",
        """from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])  # (..., T_q, T_k)
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights.transpose(-2, -1)
""",
    ),
    "sigmoid_weights": (
        "scaled_attention",
        """from math import sqrt
import torch

def scaled_attention(query, key, value, allowed=None):
    scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])
    if allowed is not None:
        if not allowed.any(dim=-1).all():
            raise ValueError("每个查询至少需要一个允许访问的位置")
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.sigmoid(scores)
    return weights @ value, weights
""",
    ),
    "causal_all_allowed": (
        "causal_allowed",
        """import torch

def causal_allowed(size):
    return torch.ones(size, size, dtype=torch.bool)
""",
    ),
    "padding_flat": (
        "padding_allowed",
        """import torch

def padding_allowed(lengths, size):
    lengths = torch.as_tensor(lengths)
    return torch.arange(size) < lengths[:, None]  # (B, size): no head or query axis
""",
    ),
    "single_head": (
        "multi_head_attention",
        """def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
    source = x if context is None else context
    output, weights = scaled_attention((x @ w_q)[:, None], (source @ w_k)[:, None], (source @ w_v)[:, None], allowed)
    return output[:, 0] @ w_o, weights.expand(-1, num_heads, -1, -1)
""",
    ),
}
# A TA's class: a quarter correct, three in five with one mistake (from the catalogue or not),
# the rest broken or unfinished. One cycle of CYCLE submissions.
CYCLE = 20
CORRECT_PER_CYCLE = 5
MISTAKES_PER_CYCLE = 12


def submission_kinds(solution: dict, mistakes: Sequence[Any]) -> list[Kind]:
    """Every kind of submission: "correct", one kind per mistake, and the broken or partial ones."""
    answers = model_answers(solution)
    order = list(answers)  # notebook order: the functions, then the answer cells
    kinds = [Kind("correct", answers), Kind("release", {})]
    for done in (3, 5):
        kinds.append(Kind(f"half_{done}_of_{len(order)}", {gid: answers[gid] for gid in order[:done]}))
    broken = answers.get("scaled_attention", "").replace("def scaled_attention(", "def scaled_attention(\n", 1).replace("):", ")", 1)
    kinds.append(Kind("syntax_error", {**answers, "scaled_attention": broken}))
    for mistake in mistakes:
        if mistake.function in answers:
            kinds.append(Kind(f"mistake:{mistake.id}", {**answers, mistake.function: mistake.source}))
    for name, (function, source) in UNCATALOGUED.items():
        if function in answers:
            kinds.append(Kind(f"uncatalogued:{name}", {**answers, function: source}))
    return kinds


def class_mix(kinds: list[Kind], size: int) -> list[Kind]:
    """``size`` submissions in the TA's proportions (25 % correct, 60 % one mistake, 15 % broken
    or partial), the mistakes and the broken kinds taken in turn."""
    by_name = {kind.name: kind for kind in kinds}
    wrong = [k for k in kinds if k.name.startswith(("mistake:", "uncatalogued:"))]
    broken = [k for k in kinds if k.name in ("release", "syntax_error") or k.name.startswith("half_")]
    mix: list[Kind] = []
    for index in range(size):
        cycle, position = divmod(index, CYCLE)
        if position < CORRECT_PER_CYCLE:
            mix.append(by_name["correct"])
        elif position < CORRECT_PER_CYCLE + MISTAKES_PER_CYCLE:
            mix.append(wrong[(cycle * MISTAKES_PER_CYCLE + position - CORRECT_PER_CYCLE) % len(wrong)])
        else:
            slots = CYCLE - CORRECT_PER_CYCLE - MISTAKES_PER_CYCLE
            mix.append(broken[(cycle * slots + position - CORRECT_PER_CYCLE - MISTAKES_PER_CYCLE) % len(broken)])
    return mix


def build_notebook(release: dict, kind: Kind, student_id: str) -> dict:
    notebook = copy.deepcopy(release)
    for cell in notebook["cells"]:
        if is_answer_cell(cell) and grade_id(cell) in kind.answers:
            cell["source"] = kind.answers[grade_id(cell)]
    notebook.setdefault("metadata", {})["attnkit_bench"] = {"student": student_id, "kind": kind.name}
    return notebook


def _load(root: Path, autograder: Path | None) -> tuple[dict, list[Kind]]:
    autograder = autograder or root / "autograder"
    release = json.loads((root / "assignments" / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
    solution = json.loads((root / "solutions" / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
    return release, submission_kinds(solution, load_catalogue(autograder).MISTAKES)


def write_submission(dest: Path, student_id: str, release: dict, kind: Kind) -> Path:
    folder = dest / student_id / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(build_notebook(release, kind, student_id), ensure_ascii=False, indent=1)
    (folder / NOTEBOOK).write_text(text + "\n", encoding="utf-8")
    return folder / NOTEBOOK


def make_class(dest: Path, size: int, root: Path = ROOT, autograder: Path | None = None, prefix: str = "s") -> dict[str, str]:
    """Write ``size`` submissions under ``dest`` (nbgrader's layout); return student id -> kind."""
    release, kinds = _load(root, autograder)
    roster = {}
    for index, kind in enumerate(class_mix(kinds, size)):
        student_id = f"{prefix}{index:05d}"
        write_submission(dest, student_id, release, kind)
        roster[student_id] = kind.name
    return roster


def make_named_class(dest: Path, students: dict[str, str], root: Path = ROOT, autograder: Path | None = None) -> None:
    """Write one submission per student id, of the named kind ("correct", "release",
    "half_3_of_8", "mistake:<id>", as in :func:`submission_kinds`)."""
    release, kinds = _load(root, autograder)
    by_name = {kind.name: kind for kind in kinds}
    for student_id, kind_name in students.items():
        if kind_name not in by_name:
            raise KeyError(f"no submission kind {kind_name!r}; known: {', '.join(by_name)}")
        write_submission(dest, student_id, release, by_name[kind_name])


# -- measuring a command ---------------------------------------------------------------------------


# -- nbgrader's log --------------------------------------------------------------------------------
_LOG_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) \[AutogradeApp \| \w+\] (.*)$")


def nbgrader_durations(log: str) -> list[float]:
    """Seconds per submission from nbgrader's timestamped log: from "Creating/updating student"
    to that submission's last "Setting destination file permissions"."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    for line in log.splitlines():
        match = _LOG_LINE.match(line.strip())
        if not match:
            continue
        moment = datetime.strptime(match.group(1), "%H:%M:%S.%f")
        if match.group(2).startswith("Creating/updating student"):
            starts.append(moment)
        elif match.group(2).startswith("Setting destination file permissions"):
            if len(ends) < len(starts):
                ends.append(moment)
            else:
                ends[-1] = moment
    durations = []
    for start, end in zip(starts, ends, strict=False):
        seconds = (end - start).total_seconds()
        durations.append(seconds + 86400 if seconds < 0 else seconds)  # past midnight
    return durations


# -- samples of a class ----------------------------------------------------------------------------
def spread(items: list[str], count: int) -> list[str]:
    """``count`` items evenly spaced over ``items`` (deterministic)."""
    if count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def spread_across_mix(items: list[str], count: int) -> list[str]:
    """``count`` items spread over ``items`` and across the repeating class mix: evenly spaced
    picks would all land on the same place of the mix (all "correct" when the spacing is a
    multiple of the cycle), so each pick moves a little further into it."""
    if count >= len(items):
        return list(items)
    step = len(items) // count
    return [items[i * step + (i * 3) % step] for i in range(count)]


def sample_by_kind(roster: dict[str, str], count: int) -> list[str]:
    """Up to ``count`` students, one per kind first (in roster order), then evenly spread."""
    first_of_kind: dict[str, str] = {}
    for student_id, kind in roster.items():
        first_of_kind.setdefault(kind, student_id)
    chosen = spread(list(first_of_kind.values()), count)
    for student_id in spread(list(roster), count):
        if len(chosen) >= count:
            break
        if student_id not in chosen:
            chosen.append(student_id)
    return sorted(chosen)
