"""What a sandbox's replies mean on the trusted side: a cell's reply as a :class:`CellRun`, a call's
or a read's as an ``Outcome`` (a missing function's defining cell named, a failing line's cell
located among the submission's cells).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnkit.constants import MISSING
from attnkit.boundary.explain import explain
from attnkit import i18n
from attnkit.i18n import _
from attnkit.source_analysis import defines, place_of
from attnkit.notebook import CodeCell
from attnkit.boundary.outcome import MAX_BASES, Outcome


@dataclass
class CellRun:
    index: int
    grade_id: str
    ok: bool
    error_type: str = ""
    message: str = ""
    output: str = ""
    seconds: float = 0.0
    line: int = 0  # the student's failing line (within its cell) and its text, when it failed
    text: str = ""
    # When the error came from a function defined in another cell: that function, its line (in
    # its own cell), the line's text, and that cell's index and section (``ReplyDecoding._locate``).
    inner: dict | None = None


class ReplyDecoding:
    """The reply decoding of a ``sandbox.Submission`` (a mixin: it reads the submission's cells and runs)."""

    if TYPE_CHECKING:  # what this part uses of the rest of sandbox.Submission
        cells: list[CodeCell]
        runs: list[CellRun]
        _missing_because: dict[str, str]

    def _cell_run(self, cell: CodeCell, reply: dict) -> CellRun:
        line = reply.get("line")
        inner = self._locate(reply.get("inner"))
        return CellRun(
            cell.index,
            cell.grade_id,
            bool(reply.get("ok")),
            str(reply.get("error_type") or ""),
            str(reply.get("message") or ""),
            str(reply.get("output") or ""),
            float(reply.get("seconds") or 0.0),
            line if isinstance(line, int) and 0 < line < 100_000 else 0,
            str(reply.get("text") or "")[:300],
            _inner_place(inner),
        )

    def _outcome(self, reply: dict, name: str = "") -> Outcome:
        error_type = reply.get("error_type")
        message = str(reply.get("message") or "")
        if error_type == MISSING and name:
            # Asked once per name: every planned call of a missing function comes back MISSING.
            if name not in self._missing_because:
                self._missing_because[name] = self._why_missing(name)
            message += self._missing_because[name]
        return Outcome(
            value=reply.get("value"),
            error_type=str(error_type) if error_type is not None else None,
            message=message,
            where=self._locate(reply.get("where")),
            warnings=[str(item)[:600] for item in reply.get("warnings", [])][:5] if isinstance(reply.get("warnings"), list) else [],
            # Names only: they pick trusted classes from a fixed table (``outcome.student_exception``).
            bases=[str(item)[:60] for item in reply.get("bases", [])][:MAX_BASES] if isinstance(reply.get("bases"), list) else [],
        )

    def _why_missing(self, name: str) -> str:
        """Where the student meant to define ``name``, if grading did not run it there: the cell
        that defines it failed (a syntax error, an exception before the ``def``), did not run, or
        is a skip-grading demo. Empty when no cell defines it (a misspelt name)."""
        runs = {run.index: run for run in self.runs}
        for cell in reversed(self.cells):  # the last definition is the one that would count
            if cell.is_check or not defines(cell.source, name):
                continue
            place = place_of(cell)
            if cell.skip:
                return _("：定义它的单元格（{place}）带有 skip-grading 标签：评分时不从这种演示单元格里取作答的函数，请把定义移到你的答案单元格里").format(
                    place=place
                )
            run = runs.get(cell.index)
            if run is not None and not run.ok:
                failed = _("：定义它的单元格（{place}）运行出错（{error}），所以它没有被定义，先修正那个单元格").format(
                    place=place, error=f"{run.error_type}：{run.message}"[:300] if run.message else run.error_type
                )
                # What that error means, where the kit knows: a failed import names what grading has.
                meaning = explain(run.error_type, run.message, run.text)
                return i18n.sentences([failed + _("。"), meaning]) if meaning else failed
            if run is None:
                return _("：定义它的单元格（{place}）没有运行（前面的单元格用完了时间，或运行环境崩溃）").format(place=place)
        return ""

    def _locate(self, where: Any) -> dict | None:
        """The failing line's cell, found among this submission's cells by its text (the sandbox
        knows IPython's name for it, not the notebook's): its index and section title."""
        if not isinstance(where, dict):
            return None
        text = str(where.get("cell_text") or "")
        located = {key: where.get(key) for key in ("function", "line", "text") if isinstance(where.get(key), (str, int))}
        for cell in reversed(self.cells):  # a later definition wins, as in the notebook
            if text and cell.source.strip() == text.strip():
                located.update(cell=cell.index, section=getattr(cell, "section", ""))
                break
        return located


def _inner_place(located: dict | None) -> dict | None:
    """Where in another cell a cell's error came from, as the page shows it (sizes capped: the
    function's name and the line are the student's text)."""
    if not located or not isinstance(located.get("line"), int) or not located.get("text"):
        return None
    return {
        "function": str(located.get("function") or "")[:200],
        "line": int(located["line"]),
        "text": str(located["text"])[:300],
        "section": str(located.get("section") or "")[:300],
    }
