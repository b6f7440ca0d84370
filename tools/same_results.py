"""``python tools/same_results.py OUT_A OUT_B``: did two runs grade a class the same?

Compares every ``students/<id>/<assignment>/results.json`` of two output folders (``attnkit grade
--out``), key by key, with what depends on timing left out: any ``seconds`` or ``*_seconds``, the
sandbox's peak memory (``max_rss_kb``) and ``fingerprint`` (it covers the grader's own files, so
two checkouts always differ there). Everything else (scores, parts, every test's status, score,
message and output, diagnoses, evidence, cells, notes, isolation, restarts) must be equal, and
both folders must hold the same submissions. Prints each difference (the first ``--show`` of
them) and exits 0 when there is none, 1 otherwise, 2 when a folder holds no results at all.

Use it to check a change on the per-submission path: grade one kept class (``tools/bench.py
--keep DIR`` leaves one in DIR/submitted) with the code before and after, then compare.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Keys whose values depend on timing or on the grader's own files, at any depth.
VOLATILE = frozenset({"seconds", "max_rss_kb", "fingerprint"})


def volatile(key: str) -> bool:
    return key in VOLATILE or key.endswith("_seconds")


def without_timings(value: Any) -> Any:
    """``value`` with every volatile key removed, at any depth."""
    if isinstance(value, dict):
        return {key: without_timings(item) for key, item in value.items() if not volatile(key)}
    if isinstance(value, list):
        return [without_timings(item) for item in value]
    return value


def results_of(out: Path) -> dict[str, Any]:
    """Relative path of each results.json under ``out``'s students folder -> its contents."""
    return {str(path.relative_to(out)): json.loads(path.read_text(encoding="utf-8")) for path in sorted(out.glob("students/*/*/results.json"))}


def differences(first: Any, second: Any, where: str = "") -> Iterator[str]:
    """Where ``first`` and ``second`` differ (a JSON path each), timings already left out."""
    if isinstance(first, dict) and isinstance(second, dict):
        for key in sorted(first.keys() | second.keys()):
            if key not in first or key not in second:
                yield f"{where}.{key}: only in {'the first' if key in first else 'the second'}"
            else:
                yield from differences(first[key], second[key], f"{where}.{key}")
    elif isinstance(first, list) and isinstance(second, list):
        if len(first) != len(second):
            yield f"{where}: {len(first)} items against {len(second)}"
        for index, (one, other) in enumerate(zip(first, second, strict=False)):
            yield from differences(one, other, f"{where}[{index}]")
    elif _same_nan(first, second):
        return  # json reads the page's NaN (a row with no allowed key) as a float that equals nothing
    elif first != second or type(first) is not type(second):
        yield f"{where}: {json.dumps(first, ensure_ascii=False)[:200]} against {json.dumps(second, ensure_ascii=False)[:200]}"


def _same_nan(first: Any, second: Any) -> bool:
    return isinstance(first, float) and isinstance(second, float) and math.isnan(first) and math.isnan(second)


def compare(first_out: Path, second_out: Path) -> tuple[int, list[str]]:
    """How many results were compared, and every difference (a line each)."""
    first, second = results_of(first_out), results_of(second_out)
    found = [f"{path}: only in {first_out}" for path in sorted(first.keys() - second.keys())]
    found += [f"{path}: only in {second_out}" for path in sorted(second.keys() - first.keys())]
    for path in sorted(first.keys() & second.keys()):
        found += [f"{path}{where}" for where in differences(without_timings(first[path]), without_timings(second[path]))]
    return len(first.keys() & second.keys()), found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/same_results.py", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("first", type=Path, help="one run's --out folder")
    parser.add_argument("second", type=Path, help="the other run's --out folder")
    parser.add_argument("--show", type=int, default=20, help="differences printed at most (default 20)")
    args = parser.parse_args(argv)
    compared, found = compare(args.first, args.second)
    if not compared and not found:
        print(f"no results.json under {args.first}/students or {args.second}/students", file=sys.stderr)
        return 2
    for line in found[: args.show]:
        print(line)
    if len(found) > args.show:
        print(f"… and {len(found) - args.show} more")
    print(f"{compared} results compared: {'identical (timings left out)' if not found else f'{len(found)} difference(s)'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
