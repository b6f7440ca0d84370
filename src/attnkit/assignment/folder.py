"""An assignment is a plug-in folder: everything the engine knows about one chapter's exercise.

``autograder/<package>/`` holds the hidden tests, the reference, the catalogue of mistakes and a
``manifest.toml`` that names the assignment (``name``: its nbgrader name, the folder students
submit in); ``solutions/<name>/<notebook>`` is the nbgrader source notebook. The folder is a
Python package (so its name is an identifier: ``ch20_transformer`` for ``ch20-transformer``),
imported under its own name (``ch20_transformer.catalogue``), so two assignments' modules never
collide. The engine takes every chapter-specific thing from here:

- **points and parts**: the source notebook's autograded grade cells (grade id and points, in
  notebook order), as nbgrader itself reads them; the manifest only titles them;
- **the student API**: the function names the hidden tests may call (``functions``);
- **page texts**: the title of the feedback and report pages;
- **hooks** (``"module:attribute"`` in the package): ``warm_up``, source the zygote runs once so
  every sandbox inherits warm caches, and ``evidence``, a function ``(student, reference) -> dict``
  whose result the feedback page draws as heatmaps when a part in ``heatmap_parts`` fails.

A hidden test states its share of its part with ``@pytest.mark.weight(n)``; its points are the
part's points split in proportion to the weights (see :meth:`Assignment.test_points`).
"""

from __future__ import annotations

import functools
import importlib
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from attnkit import i18n
from attnkit.constants import AUTOGRADER_ROOT, GraderError, SOLUTIONS_ROOT, broken_python
from attnkit.notebook import CodeCell, grade_cells

MANIFEST = "manifest.toml"


@dataclass(frozen=True)
class Part:
    """One autograded grade cell of the source notebook."""

    grade_id: str
    title: str
    points: float


@dataclass(eq=False)  # one object per folder (see _by_folder): hashed by identity
class Assignment:
    """One assignment's manifest, with its grade cells read from the source notebook."""

    name: str
    folder: Path  # the hidden suite, a package: autograder/<package>/
    source: Path  # the nbgrader source notebook: solutions/<name>/<notebook>
    title: str
    notebook: str
    functions: tuple[str, ...]
    parts: dict[str, Part]
    heatmap_parts: frozenset[str] = frozenset()
    hooks: dict[str, str] = field(default_factory=dict)
    release_readme: str = ""
    # The source notebook's grade cells graded by hand (formgrader): their points, beside the
    # autograded ``parts``' (a page says "100/100 自动评分，另有 8 分人工评分待定").
    manual_points: float = 0.0

    def part_number(self, grade_id: str) -> int | None:
        """1-based position of a part on the page (None: not one of this notebook's parts)."""
        order = list(self.parts)
        return order.index(grade_id) + 1 if grade_id in order else None

    # -- the package --------------------------------------------------------------------------
    def module(self, name: str) -> ModuleType:
        """``<name>.<module>`` of this assignment's package (imported once, trusted code)."""
        root = str(self.folder.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
        package = sys.modules.get(self.folder.name)
        if package is not None and Path(getattr(package, "__file__", "") or "").parent != self.folder:
            raise GraderError(f"the module name {self.folder.name!r} is already taken by {package.__file__}; rename the assignment folder")
        return importlib.import_module(f"{self.folder.name}.{name}")

    def catalogue(self) -> ModuleType:
        return self.module("catalogue")

    def hook(self, key: str) -> Any:
        """The attribute a manifest hook names, or None when the manifest has none."""
        target = self.hooks.get(key)
        if not target:
            return None
        module, _, attribute = target.partition(":")
        return getattr(self.module(module), attribute)

    def release_cells(self) -> list[str]:
        """The code cells of the release notebook (``assignments/<name>/<notebook>`` beside the
        source's folder) that a sandbox runs, as students receive them: public, so the zygote may
        compile them ahead. Not the check cells (the hidden suite replaces them) nor those tagged
        skip-grading (never run). Empty where there is no release."""
        return [cell.source for cell in self._runnable_release_cells]

    def warm_up_cells(self) -> list[str]:
        """The release's own cells between the answers (its examples and experiments), which the
        zygote runs once after ``warm_up_source`` with the ``warm_up`` hook's stand-ins for the
        student's functions, so that what every submission runs is warm before any sandbox."""
        return [cell.source for cell in self._runnable_release_cells if not cell.grade_id]

    # Read once per Assignment (two lists a worker asks for at start): only the zygote's ahead-of-time
    # compilation and warm-up use it, so a release edited during a run makes them colder, no more.
    @functools.cached_property
    def _runnable_release_cells(self) -> list[CodeCell]:
        from attnkit.notebook import read_notebook

        # The source is solutions/<name>/<notebook> (or, in a bundle, the release itself).
        release = release_path(self.source.parent.parent, self.name, self.notebook)
        if not release.is_file():
            return []
        return [cell for cell in read_notebook(release).cells if cell.runs_in_sandbox]

    def warm_up_source(self) -> str:
        """The ``warm_up`` hook's code: what the zygote runs once before it forks sandboxes."""
        return str(self.hook("warm_up") or "")

    # -- texts in the reader's language ---------------------------------------------------------
    def _(self, message: str) -> str:
        """A text of this assignment (manifest titles, the catalogue) in the current language:
        Chinese as written, else from ``locale/<language>/LC_MESSAGES/assignment.po`` beside it."""
        return i18n.translations(self._locale_folder, i18n.ASSIGNMENT_DOMAIN, i18n.language()).gettext(message)

    @functools.cached_property  # per Assignment: derived from its folder, which never changes
    def _locale_folder(self) -> str:
        return str(self.folder / "locale")

    @property
    def page_title(self) -> str:
        return self._(self.title)

    def part_title(self, grade_id: str) -> str:
        return self._(self.parts[grade_id].title) if grade_id in self.parts else i18n._("其他")

    @property
    def mistakes(self) -> dict[str, dict[str, Any]]:
        """Mistake id -> {section, zh, text, function, hints} (``zh`` as written, ``text`` in the
        current language; ``hints``: the hint ladder's levels in the current language, a nudge, the
        misconception explained, the fix, from the catalogue's ``HINTS``; [] when it has none), from
        the catalogue, for pages and summaries."""
        catalogue = self.catalogue()
        ladders = getattr(catalogue, "HINTS", {})
        return {
            m.id: {
                "section": self._(m.section),
                "zh": m.zh,
                "text": self._(m.zh),
                "function": m.function,
                "hints": [self._(level) for level in ladders.get(m.id, ())],
            }
            for m in catalogue.MISTAKES
        }

    def digest_files(self) -> list[Path]:
        """The files every result of this assignment depends on besides the submission: its code,
        manifest and message catalogues (results hold its messages), and the source notebook."""
        files = [p for p in self.folder.rglob("*") if p.is_file() and p.suffix in (".py", ".toml", ".po") and "__pycache__" not in p.parts]
        return sorted(files) + [self.source]

    # -- points -------------------------------------------------------------------------------
    def test_points(self, weights: dict[str, tuple[str, float]]) -> dict[str, float]:
        """Points per test from ``{test: (grade_id, weight)}``: each part's points (from the
        source notebook) split in proportion to its tests' weights. The suite and the notebook
        must agree on which parts exist: a part without tests, or a test of no part, stops
        grading (a wrong total would otherwise reach every student's grade)."""
        totals: dict[str, float] = {}
        for grade_id, weight in weights.values():
            if grade_id not in self.parts:
                raise GraderError(f"{self.name}: a hidden test belongs to {grade_id!r}, which is not an autograded grade cell of {self.source.name}")
            if weight <= 0:
                raise GraderError(f"{self.name}: a hidden test of {grade_id!r} has weight {weight:g} (must be > 0)")
            totals[grade_id] = totals.get(grade_id, 0.0) + weight
        untested = [grade_id for grade_id in self.parts if grade_id not in totals]
        if untested:
            raise GraderError(f"{self.name}: no hidden test for the grade cells {', '.join(untested)} of {self.source.name}")
        return {test: self.parts[grade_id].points * weight / totals[grade_id] for test, (grade_id, weight) in weights.items()}


def release_path(solutions: Path, name: str, notebook: str) -> Path:
    """Where ``make release`` puts the student notebook of the source ``solutions/<name>/<notebook>``."""
    return solutions.parent / "assignments" / name / notebook


def compile_suites(autograder: Path) -> None:
    """``compile_suite`` for every assignment under ``autograder``: the service's start (and
    ``--status``) name a broken hidden file before anything is graded; ``attnkit grade`` sets a
    broken assignment aside and grades the others instead (``engine.preflight``)."""
    for folder in sorted(autograder.iterdir()) if autograder.is_dir() else []:
        if (folder / MANIFEST).is_file():
            compile_suite(folder)


def compile_suite(folder: Path) -> None:
    """Every Python file of the hidden suite ``folder`` compiled (not run), so that a syntax error
    stops grading at its start naming the file, the line and the error (GraderError): pytest would
    otherwise collect nothing from that file, and the error would surface as untested grade cells."""
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as error:  # ValueError: a null byte in the source
            raise GraderError(broken_python(path, error)) from None


def load(folder: Path, solutions: Path = SOLUTIONS_ROOT) -> Assignment:
    """The assignment whose hidden suite is ``folder`` (``folder/manifest.toml``)."""
    try:
        manifest = tomllib.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise GraderError(f"cannot read the manifest of {folder}: {error}") from None
    name = str(manifest.get("name") or folder.name)
    if not folder.name.isidentifier() or not (folder / "__init__.py").is_file():
        raise GraderError(
            f"{folder}: a hidden suite is a Python package (a folder named like an identifier, e.g. {name.replace('-', '_')!r}, with an __init__.py)"
        )
    notebook = str(manifest["notebook"])
    source = solutions / name / notebook
    if not source.is_file():
        # A bundle shipped without solutions (Gradescope): the release nbgrader generated from
        # the source carries the same grade cells, points included.
        source = release_path(solutions, name, notebook)
    if not source.is_file():
        raise GraderError(f"{name}: the source notebook {solutions / name / notebook} is missing (points and parts are read from it)")
    titles = dict(manifest.get("parts", {}))
    every_cell = grade_cells(source)
    cells = [cell for cell in every_cell if cell["autograded"]]
    parts = {cell["grade_id"]: Part(cell["grade_id"], str(titles.get(cell["grade_id"], cell["grade_id"])), cell["points"]) for cell in cells}
    unknown = set(titles) - set(parts)
    if unknown:
        raise GraderError(f"{folder / MANIFEST} titles parts that are not autograded grade cells of {source.name}: {', '.join(sorted(unknown))}")
    readme = manifest.get("release_readme", "")
    return Assignment(
        name=name,
        folder=folder,
        source=source,
        title=str(manifest.get("title", name)),
        notebook=notebook,
        functions=tuple(manifest.get("functions", ())),
        parts=parts,
        heatmap_parts=frozenset(manifest.get("heatmap_parts", ())),
        hooks={str(k): str(v) for k, v in manifest.get("hooks", {}).items()},
        release_readme=(folder / readme).read_text(encoding="utf-8") if readme else "",
        manual_points=sum(cell["points"] for cell in every_cell if not cell["autograded"]),
    )


def solutions_beside(autograder: Path) -> Path:
    """The source notebooks that go with a suites folder: ``../solutions`` beside it (a course
    folder), or where it would be when the releases lie beside it instead (a Gradescope bundle:
    :func:`load` then reads each release, never another tree's notebooks for this suite), else
    this project's (a copy of the suites taken elsewhere)."""
    beside = autograder.parent / "solutions"
    return beside if beside.is_dir() or (autograder.parent / "assignments").is_dir() else SOLUTIONS_ROOT


def discover(autograder: Path = AUTOGRADER_ROOT, unloadable: list[tuple[Path, str]] | None = None) -> dict[str, Assignment]:
    """Every assignment under ``autograder`` (each folder with a manifest), by name.
    ``unloadable``: where given, a folder whose manifest (or source notebook) cannot be read is
    appended there with the reason, and the others are still found (else: GraderError)."""
    if not autograder.is_dir():
        raise GraderError(f"no hidden suites: {autograder} is not a folder")
    autograder = autograder.resolve()
    found: dict[str, Assignment] = {}
    for folder in sorted(autograder.iterdir()):
        if (folder / MANIFEST).is_file():
            try:
                assignment = _by_folder(folder)
            except GraderError as error:
                if unloadable is None:
                    raise
                unloadable.append((folder, str(error)))
                continue
            if assignment.name in found:
                raise GraderError(f"two hidden suites for {assignment.name!r}: {found[assignment.name].folder} and {folder}")
            found[assignment.name] = assignment
    if not found:
        reasons = "; ".join(reason for _folder, reason in unloadable or [])
        raise GraderError(reasons or f"no assignment under {autograder} (each needs a {MANIFEST})")
    return found


def of_path(path: Path) -> Assignment | None:
    """The assignment a hidden test file belongs to (the nearest folder above with a manifest)."""
    for folder in [path, *path.parents]:
        if (folder / MANIFEST).is_file():
            return _by_folder(folder.resolve())
    return None


# Folder -> its Assignment, per process and never invalidated: one object per suite folder (hashed
# by identity), its manifest, source notebook and catalogue read once. A run does not change its
# suites; an edit between runs is a new process's, and ``engine.grader_digest`` (recomputed for each
# intake, with the files' contents) is what makes the next run regrade.
_LOADED: dict[Path, Assignment] = {}


def _by_folder(folder: Path) -> Assignment:
    if folder not in _LOADED:
        _LOADED[folder] = load(folder, solutions_beside(folder.parent))
    return _LOADED[folder]


def assignment_for(suites: dict[str, Assignment], name: str | None, notebook: str) -> Assignment:
    """``--assignment`` if given; else the assignment whose notebook is called ``notebook``, or
    the only one there is."""
    if name is not None:
        if name not in suites:
            raise GraderError(i18n._("未知作业 {name}（已有：{known}）").format(name=name, known=i18n.join(suites)))
        return suites[name]
    matching = [suite for suite in suites.values() if suite.notebook == notebook] or (list(suites.values()) if len(suites) == 1 else [])
    if len(matching) != 1:
        raise GraderError(i18n._("无法确定 {notebook} 属于哪项作业：请用 --assignment 指定（{known}）").format(notebook=notebook, known=i18n.join(suites)))
    return matching[0]
