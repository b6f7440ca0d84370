"""What a student reads about one test: its result record and the fixed sentences of the page.

The pytest hooks (:mod:`attnkit.grading.plugin`) decide what happened; this module says it: a failure's
curated message (never the test's source), a student exception structured for the page, the note
on a test run with reference dependencies, and what a swapped re-run may still show. Every text
is Chinese in the code and English through the ``attnkit`` message catalogue.
"""

from __future__ import annotations

import re

from typing import Any

from attnkit import i18n
from attnkit.assignment.folder import Assignment
from attnkit.constants import MAX_MESSAGE
from attnkit.i18n import _, ngettext
from attnkit.records import HiddenTestRecord
from attnkit.boundary.outcome import SandboxCrashed, StudentMissing, StudentRaised, StudentTimeout


# A hidden test's result has one definition, ``records.HiddenTestRecord``: the plugin makes it
# (``test_result``), charges and diagnosis adjust it in place, the worker sends it as it is.
TestResult = HiddenTestRecord


def test_result(
    name: str,
    nodeid: str,
    grade_id: str,
    max_score: float,
    score: float,
    status: str,
    output: str = "",
    substituted: list[str] | None = None,
    functions: list[str] | None = None,
    error: dict[str, Any] | None = None,
    concept: str = "",
) -> TestResult:
    """A new result; ``diagnoses`` and ``charge`` are filled in later, when there are any."""
    return HiddenTestRecord(
        name=name,
        nodeid=nodeid,
        grade_id=grade_id,
        max_score=max_score,
        score=score,
        status=status,
        output=output,
        diagnoses=[],
        substituted=list(substituted or []),
        functions=list(functions or []),
        error=dict(error or {}),
        charge={},
        concept=concept,
    )


test_result.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, despite its name


def substitution_note(functions: dict[str, str], passed: bool, assignment: Assignment) -> str:
    """The page's sentence for a test run with reference dependencies (function -> failed part)."""
    names = i18n.join(functions)
    where = i18n.join(
        dict.fromkeys(
            _("第 {number} 部分「{title}」").format(number=assignment.part_number(grade_id), title=assignment.part_title(grade_id))
            if grade_id in assignment.parts
            else _("它自己的检查")
            for grade_id in functions.values()
        )
    )
    text = ngettext(
        "这一项用参考的 {names} 代替了你的实现，因为你的实现没有通过{where}：先修正它。",
        "这一项用参考的 {names} 代替了你的实现，因为你的这些实现没有通过{where}：先修正它。",
        len(functions),
    ).format(names=names, where=where)
    if not passed:
        text += _("换上参考实现之后这一项仍未通过，问题在这一项自己检查的函数里：")
    return text


def only_failed_functions(ids: list[str], assignment: Assignment, failed: dict[str, str]) -> list[str]:
    """The diagnoses whose mistake is in a function that failed a test: a function that passes all
    its own tests (run before every test that depends on it) is never told it has a mistake, even
    when a caller's failure happens to look like one of its mistakes."""
    function_of = {mistake.id: mistake.function for mistake in getattr(assignment.catalogue(), "MISTAKES", ())}
    return [id_ for id_ in ids if function_of.get(id_) is None or function_of[id_] in failed]


def error_info(error: BaseException) -> dict[str, Any]:
    """A student's exception, structured for the page: type, message, the failing line of their
    own code and where it is (section title, line in the cell), a Chinese explanation, warnings,
    and a key shared by failures with one cause (the page shows each cause once)."""
    # A check that caught the student's exception and failed with its own words (``pytest.fail``
    # inside ``except``) failed from the same cause: found through the exception's chain.
    error = next((cause for cause in (error, error.__cause__, error.__context__) if isinstance(cause, StudentRaised)), error)
    if not isinstance(error, StudentRaised) or error.type_name == "NotImplementedError":
        return {}
    from attnkit.boundary.explain import explain

    where = error.where or {}
    text = str(where.get("text") or "")
    function = str(where.get("function") or error.function)
    section = str(where.get("section") or "")
    line = where.get("line")
    if isinstance(line, int):
        place = (
            _("「{section}」一节，函数 {function} 的第 {line} 行（从单元格第一行数起）")
            if section
            else _("函数 {function} 的第 {line} 行（从单元格第一行数起）")
        ).format(section=section, function=function, line=line)
    else:
        place = (_("「{section}」一节，函数 {function}") if section else _("函数 {function}")).format(section=section, function=function)
    message = str(error)
    # The student's own ``raise``: the failing line of their code raises this very class. A
    # decision of theirs, not an error that interrupted their code (the page says which).
    raised = re.match(r"raise\s+([A-Za-z_][\w.]*)", text)
    own_raise = bool(raised) and raised.group(1).rsplit(".", 1)[-1] == error.type_name  # type: ignore[union-attr]
    return {
        "type": error.type_name,
        "own_raise": own_raise,
        "message": message[:MAX_MESSAGE],
        "function": function,
        # The function the test called, when the failing line is in another one it called: the
        # page leads with it when that other function passes its own tests (``pages.causes``).
        "called": error.function if error.function != function else "",
        "section": section,
        "line": line if isinstance(line, int) else None,
        "text": text,
        "place": place,
        "explanation": "" if own_raise else explain(error.type_name, message, text, error.warnings),
        "warnings": list(error.warnings),
        # One cause: the same exception from the same line of the same function (torch's message
        # differs with each test's shapes); without a line, the same message.
        "key": f"{error.type_name}|{function}|{text}" if text else f"{error.type_name}|{function}|{message[:300]}",
    }


def failure_message(error: BaseException) -> str:
    """What the student reads about a failure: curated text, never the test's source."""
    if isinstance(error, StudentTimeout):
        return _("运行超时：{error}").format(error=error)
    if isinstance(error, StudentMissing):
        return _("{error}。请确认名称与题目一致，并且定义它的单元格能运行。").format(error=error)
    if isinstance(error, SandboxCrashed):
        return _("运行你的代码的进程意外结束：{error}").format(error=error)
    if isinstance(error, StudentRaised):
        if error.type_name == "NotImplementedError":
            return _("{function} 还没有完成（仍是 raise NotImplementedError()）。").format(function=error.function)
        info = error_info(error)
        inner = str(info.get("function") or error.function)
        if inner != error.function:  # the failing line is in a function it called: say which
            text = _("你的 {function} 抛出了 {type}，出错的一行在它调用的 {inner} 里：{error}").format(
                function=error.function, type=error.type_name, inner=inner, error=error
            )
        else:
            text = _("你的 {function} 抛出了 {type}：{error}").format(function=error.function, type=error.type_name, error=error)
        if info.get("text"):
            text += "\n" + _("出错的一行：{place}：{text}").format(place=info["place"], text=info["text"])
        if info.get("explanation"):
            text += f"\n{info['explanation']}"
        if info.get("warnings"):
            text += "\n" + _("运行时的警告：{warnings}").format(warnings=_("；").join(info["warnings"]))
        return text
    if isinstance(error, AssertionError):
        return str(error) or _("检查未通过。")
    # The student's value had an unexpected structure, so a check could not even be computed.
    return _("无法检查你的返回值（{type}：{error}）。请核对返回值的类型与结构。").format(type=type(error).__name__, error=error)


def swapped_failure(message: str, error: BaseException | None) -> tuple[str, BaseException | None]:
    """What a failed swapped re-run may say: none of the student code's own text. In that run the
    code held the reference's answers, so whatever it raised, warned or returned (a message, a
    shape, a number a check quotes) could carry them onto the page; scrubbing numbers out of free
    text would miss other encodings. Only the grader's own texts stay (timeouts, crashes, an
    out-of-scope call); anything else becomes one fixed sentence, and the error its class only."""
    if isinstance(error, (StudentTimeout, SandboxCrashed)) or (isinstance(error, AssertionError) and _is_scope_failure(message)):
        # The grader's own text, and its error without the chain it was raised in: an out-of-scope
        # call's failure is raised while the student's exception is handled, and ``error_info``
        # reads a chain for the student's exception (its message and line would reach the page).
        return message, type(error)(*error.args)
    if isinstance(error, StudentRaised):
        return _("代入参考实现重新运行时，你的代码抛出了异常（其内容不显示）。"), None
    return _("代入参考实现重新运行时，这一项仍未通过（具体数值不显示）。"), None


def _is_scope_failure(message: str) -> bool:
    from attnkit.grading import scope

    head = _(scope.OUT_OF_SCOPE).split("{name}")[0]
    return message.startswith(head)


def fail_out_of_scope(substitutes: dict[str, Any], error: BaseException | None = None) -> None:
    """A swapped re-run whose student code called a swapped-in reference outside its scope fails
    for that reason, whatever that code made of the refusal (caught it, or raised something of
    its own instead: ``error``)."""
    from attnkit.grading import scope

    refused = scope.refusals(substitutes)
    if refused:
        raise AssertionError(scope.out_of_scope_message(refused)) from error
