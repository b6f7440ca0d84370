"""The Gradescope autograder bundle (``make gradescope``) and its results converter.

Usage::

    python -m attnkit.course.gradescope [--out dist/gradescope.zip] [--assignment NAME]   # build the bundle(s)
    python -m attnkit.course.gradescope results SRC DEST                # attnkit results.json -> Gradescope's

The zip's root is what Gradescope unpacks into ``/autograder/source``. It mirrors this repository
so that attnkit, installed in place (``pip install -e``), sees the bundle as its project root: the
hidden suite at ``autograder/`` is its default suite and the whole bundle is hidden from the
sandboxes. Contents:

- ``setup.sh``, ``run_autograder``, ``README.md``: from ``gradescope/`` in this repository;
- ``requirements.lock`` and ``pyproject.toml``: the pinned dependencies and the package metadata;
- ``src/attnkit/``: attnkit's source (modules and templates);
- ``autograder/<assignment>/``: the one assignment's hidden suite (tests, manifest, the catalogue of
  mistakes, references), and ``assignments/<assignment>/``: its release notebook, whose grade cells
  give the points (nbgrader copies them from the source notebook).

One bundle grades one assignment (Gradescope gives an autograder to one assignment, and
``run_autograder`` grades every upload as the assignment whose suite the bundle holds). With one
suite under ``autograder/``, ``make gradescope`` writes ``--out``; with several and no
``--assignment``, one bundle per assignment beside it, ``dist/gradescope-<name>.zip``
(:func:`bundle_paths`); ``--assignment NAME`` writes only NAME's, to ``--out``.

Never the solutions, the project's own tests or any submission. Entries carry a fixed date and
mode (scripts 0755), so an unchanged tree builds a byte-identical zip.

Both scripts take ``AUTOGRADER_ROOT`` (default ``/autograder``) so the bundle can be run against a
simulated layout, and ``ATTNKIT_VENV`` to use an existing environment instead of ``setup.sh``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from attnkit.constants import PROJECT_ROOT, GraderError
from attnkit.files import write_zip
from attnkit.records import ResultsJson

ROOT = PROJECT_ROOT
DEFAULT_OUT = Path("dist") / "gradescope.zip"
TEMPLATE_DIR = "gradescope"
TEMPLATES = ("setup.sh", "run_autograder", "README.md")
EXECUTABLE = {"setup.sh", "run_autograder"}
PROJECT_FILES = ("requirements.lock", "pyproject.toml")
PACKAGE_SUFFIXES = {".py", ".j2", ".po", ".css", ".html", ".json", ".txt"}
SUITE_SKIP_SUFFIXES = {".pyc", ".pyo"}

# Gradescope's visibility settings for a result (its autograder specification). attnkit's default
# hides the result until the instructor publishes the grades, so a hidden-suite score is not seen
# before the TAs have looked at it; `--visibility` / ATTNKIT_VISIBILITY choose another.
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
DEFAULT_VISIBILITY = "after_published"

# Gradescope's keys for a test; everything else of ours goes to extra_data.
GRADESCOPE_TEST_KEYS = ("name", "score", "max_score", "status", "output")


class BundleError(RuntimeError):
    """The bundle cannot be built from this tree."""


def _files(folder: Path, keep: Any) -> list[Path]:
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and not any(part.startswith(".") for part in path.relative_to(folder).parts) and keep(path)
    )


def bundle_entries(root: Path = ROOT, assignment: str | None = None) -> list[tuple[str, Path]]:
    """(name in the zip, file) for everything the bundle holds, in a fixed order."""
    entries: list[tuple[str, Path]] = []
    for name in TEMPLATES:
        path = root / TEMPLATE_DIR / name
        if not path.is_file():
            raise BundleError(f"missing bundle template {path}")
        entries.append((name, path))
    for name in PROJECT_FILES:
        path = root / name
        if not path.is_file():
            raise BundleError(f"missing {path}")
        entries.append((name, path))
    package = root / "src" / "attnkit"
    for path in _files(package, lambda p: p.suffix in PACKAGE_SUFFIXES):
        entries.append((path.relative_to(root).as_posix(), path))
    from attnkit.assignment.folder import discover

    try:
        suites = discover(root / "autograder")
    except GraderError as error:
        raise BundleError(str(error)) from None
    if assignment is None and len(suites) != 1:
        raise BundleError(f"a Gradescope autograder grades one assignment: choose one with --assignment ({', '.join(suites)})")
    chosen = suites[assignment] if assignment is not None else next(iter(suites.values()))
    if assignment is not None and assignment not in suites:
        raise BundleError(f"no hidden suite for {assignment!r} ({', '.join(suites)})")
    for path in _files(chosen.folder, lambda p: p.suffix not in SUITE_SKIP_SUFFIXES):
        entries.append((path.relative_to(root).as_posix(), path))
    release = root / "assignments" / chosen.name / chosen.notebook
    if not release.is_file():
        raise BundleError(f"the release notebook is missing: {release} (make release)")
    entries.append((release.relative_to(root).as_posix(), release))
    return entries


def bundle_paths(destination: Path, root: Path = ROOT, assignment: str | None = None) -> dict[str, Path]:
    """Assignment name -> where its bundle goes: ``destination`` for the one chosen (or the only
    suite), else ``<stem>-<name><suffix>`` beside ``destination`` for each suite."""
    from attnkit.assignment.folder import discover

    try:
        suites = discover(root / "autograder")
    except GraderError as error:
        raise BundleError(str(error)) from None
    if assignment is not None:
        if assignment not in suites:
            raise BundleError(f"no hidden suite for {assignment!r} ({', '.join(suites)})")
        return {assignment: destination}
    if len(suites) == 1:
        return {name: destination for name in suites}
    return {name: destination.with_name(f"{destination.stem}-{name}{destination.suffix}") for name in suites}


def build_bundles(destination: Path, root: Path = ROOT, assignment: str | None = None) -> dict[str, Path]:
    """Every bundle :func:`bundle_paths` names, built (each atomically); name -> its zip."""
    return {name: build_bundle(path, root, name) for name, path in bundle_paths(destination, root, assignment).items()}


def build_bundle(destination: Path, root: Path = ROOT, assignment: str | None = None) -> Path:
    """Write the Gradescope bundle to ``destination`` (atomically) and return it."""
    entries = bundle_entries(root, assignment)
    data = [(name, path.read_bytes().replace(b"\r\n", b"\n") if name in EXECUTABLE else path.read_bytes()) for name, path in entries]
    return write_zip(destination, data, frozenset(EXECUTABLE))


# -- results ---------------------------------------------------------------------------------------
def _texts(autograder: Path | None, assignment: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """(mistake id -> explanation, grade id -> part title) of the assignment's suite."""
    try:
        from attnkit.assignment.folder import discover

        suite = discover(autograder)[assignment] if autograder is not None else None
    except Exception:  # the explanations are a courtesy; the scores stand without them
        suite = None
    if suite is None:
        return {}, {}
    return suite.mistakes, {grade_id: part.title for grade_id, part in suite.parts.items()}


def summary_text(results: ResultsJson, catalogue: dict[str, dict[str, str]], titles: dict[str, str] | None = None) -> str:
    """The top-level ``output`` students read on Gradescope (in the run's language, like the
    feedback page: ATTNKIT_LANG)."""
    from attnkit.i18n import _

    titles = titles or {}
    lines = [_("总分 {score}/{max_score}").format(score=f"{results.get('score', 0):g}", max_score=f"{results.get('max_score', 0):g}")]
    for problem in results.get("problems", []):
        lines.append(_("问题：{problem}").format(problem=problem))
    for note in results.get("notes", []):
        lines.append(_("提示：{note}").format(note=note))
    parts = results.get("parts", {})
    if parts:
        lines.append("")
        for part, scores in parts.items():
            if scores.get("max_score"):
                lines.append(
                    _("{part}：{score}/{max_score}").format(
                        part=titles.get(part, part), score=f"{scores.get('score', 0):g}", max_score=f"{scores.get('max_score', 0):g}"
                    )
                )
    diagnoses = results.get("diagnoses", [])
    if diagnoses:
        lines.append("")
        lines.append(_("诊断（你的结果与这些常见错误的结果一致）："))
        for mistake in diagnoses:
            info = catalogue.get(mistake, {})
            explanation = info.get("text") or info.get("zh") or ""
            if info.get("section") and explanation:
                lines.append("- " + _("{mistake}（{section}）：{explanation}").format(mistake=mistake, section=info["section"], explanation=explanation))
            elif explanation:
                lines.append("- " + _("{mistake}：{explanation}").format(mistake=mistake, explanation=explanation))
            else:
                lines.append(f"- {mistake}")
    for cell in results.get("cells", []):
        if cell.get("error_type"):
            # A student finds a cell by its section heading, not by an index that counts markdown cells.
            if cell.get("section"):
                text = _("「{section}」一节的单元格运行出错：{error}：{message}").format(
                    section=cell["section"], error=cell.get("error_type"), message=cell.get("message", "")
                )
            else:
                text = _("单元格 {cell} 运行出错：{error}：{message}").format(
                    cell=cell.get("grade_id") or cell.get("index"), error=cell.get("error_type"), message=cell.get("message", "")
                )
            lines.append(text[:500])
    return "\n".join(lines)


def to_gradescope(
    results: ResultsJson, catalogue: dict[str, dict[str, str]] | None = None, visibility: str = DEFAULT_VISIBILITY, titles: dict[str, str] | None = None
) -> dict[str, Any]:
    """attnkit's results.json in Gradescope's schema: its keys at the top and in each test,
    attnkit's own (diagnoses, per-part scores, problems...) under ``extra_data``."""
    tests = []
    for test in results.get("tests", []):
        fields: Mapping[str, Any] = test  # read by keys that are not literals
        entry = {key: fields[key] for key in GRADESCOPE_TEST_KEYS if key in fields}
        extra = {key: value for key, value in fields.items() if key not in GRADESCOPE_TEST_KEYS}
        if extra:
            entry["extra_data"] = extra
        tests.append(entry)
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}, not {visibility!r}")
    extra_keys = ("diagnoses", "parts", "problems", "notes", "cells", "assignment", "fingerprint", "sandbox")
    keyed: Mapping[str, Any] = results  # read by a key that is not a literal
    return {
        "score": results.get("score", 0),
        "max_score": results.get("max_score", 0),
        "output": summary_text(results, catalogue or {}, titles),
        "output_format": "text",
        "execution_time": round(float(results.get("seconds", 0.0) or 0.0), 3),
        "visibility": visibility,
        "tests": tests,
        "extra_data": {key: keyed[key] for key in extra_keys if key in keyed},
    }


def convert(source: Path, destination: Path, autograder: Path | None = None, visibility: str = DEFAULT_VISIBILITY) -> dict[str, Any]:
    """Write Gradescope's results.json for attnkit's ``source`` at ``destination``."""
    results = json.loads(source.read_text(encoding="utf-8"))
    catalogue, titles = _texts(autograder, str(results.get("assignment", "")))
    converted = to_gradescope(results, catalogue, visibility, titles)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    partial.write_text(json.dumps(converted, ensure_ascii=False, indent=1), encoding="utf-8")
    partial.replace(destination)
    return converted


# -- command line ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["results"]:
        parser = argparse.ArgumentParser(prog="python -m attnkit.course.gradescope results", description="Convert attnkit's results.json to Gradescope's.")
        parser.add_argument("source", type=Path)
        parser.add_argument("destination", type=Path)
        parser.add_argument("--autograder", type=Path, default=None, help="the hidden suite, for the mistakes' explanations (default: next to attnkit)")
        parser.add_argument(
            "--visibility",
            choices=VISIBILITIES,
            default=os.environ.get("ATTNKIT_VISIBILITY") or DEFAULT_VISIBILITY,
            help=f"when students see the result (default: $ATTNKIT_VISIBILITY or {DEFAULT_VISIBILITY})",
        )
        args = parser.parse_args(argv[1:])
        if args.autograder is None:
            from attnkit.constants import AUTOGRADER_ROOT

            args.autograder = AUTOGRADER_ROOT
        if not args.source.is_file():
            print(f"no results to convert: {args.source}", file=sys.stderr)
            return 1
        converted = convert(args.source, args.destination, args.autograder, args.visibility)
        print(f"score {converted['score']:g}/{converted['max_score']:g} -> {args.destination}")
        return 0
    parser = argparse.ArgumentParser(prog="python -m attnkit.course.gradescope", description="Build the Gradescope autograder bundle.")
    parser.add_argument("--out", type=Path, default=ROOT / DEFAULT_OUT, help=f"where to write the zip (default {DEFAULT_OUT})")
    parser.add_argument("--assignment", default=None, help="the assignment to grade (default: every one, each in its own bundle; one alone goes to --out)")
    args = parser.parse_args(argv[1:] if argv[:1] == ["build"] else argv)
    try:
        bundles = build_bundles(args.out.resolve(), assignment=args.assignment)
    except BundleError as error:
        print(f"cannot build the bundle: {error}", file=sys.stderr)
        return 1
    for name, bundle in bundles.items():
        with zipfile.ZipFile(bundle) as opened:
            count = len(opened.namelist())
        print(f"Gradescope bundle for {name}: {bundle} ({count} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
