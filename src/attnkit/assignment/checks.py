"""Curated checks for any assignment's hidden tests: every failure says, in the student's language
(Chinese, or English through the engine's catalogue), what was checked and what
went wrong (shapes, the largest error and where, the first wrong row), never the test's code.

The plugin runs pytest with ``--assert=plain``, so the text of the AssertionError raised here is
exactly what the student reads.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import torch

from attnkit import i18n
from attnkit.boundary.outcome import StudentRaised
from attnkit.i18n import _, ngettext

# Tolerances by dtype, for results compared with a float64 expectation.
# float32: machine epsilon ~1.2e-7; a softmax over <= 8 keys and a matmul over <= 8 terms of O(1)
#   values stay within a few 1e-6, so 1e-5 absolute + 1e-4 relative leaves ~10x headroom for other
#   correct styles (einsum, -1e9, a hand-written softmax, renormalising after softmax), while every
#   catalogued mistake moves some value by >= 1e-2.
# float64: epsilon ~2.2e-16; those styles agree to ~1e-14, so 1e-10 / 1e-9 is generous and still
#   eight orders of magnitude below any real mistake.
TOLERANCE = {
    torch.float32: (1e-5, 1e-4),
    torch.float64: (1e-10, 1e-9),
}

# Concept level: the property tests (an error on empty rows, no leak from the future) ask whether
# the same call computes attention at all, not to how many digits. 1e-3 is far above any rounding
# (a float32 intermediate in a float64 computation: ~1e-7) and ten times below the smallest change
# a catalogued mistake makes (>= 1e-2). An error within this band but above TOLERANCE is reported
# as a precision problem, never as rows that print alike.
CONCEPT_TOLERANCE = (1e-3, 1e-3)

_MAX_SHOWN = 8


def fmt_number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = f"{x:.4f}"
    return "0.0000" if text == "-0.0000" else text


def fmt_row(row: torch.Tensor) -> str:
    values = row.reshape(-1).tolist()
    shown = [fmt_number(float(v)) if not isinstance(v, bool) else str(v) for v in values[:_MAX_SHOWN]]
    more = _("，…") if len(values) > _MAX_SHOWN else ""
    return "[" + ", ".join(shown) + more + "]"


def fmt_shape(shape: Any) -> str:
    shape = tuple(shape)
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def fmt_index(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def _w(label: str) -> str:
    """A label followed by Chinese text: a space after Latin text or a closing bracket of code
    (English sentences put their own spaces)."""
    if i18n.language() != "zh":
        return label
    return label + " " if label and (label[-1].isascii() and label[-1] not in "。，") else label


def fail(message: str) -> NoReturn:
    raise AssertionError(message)


def assert_tensor(got: Any, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        fail(_("{what}应是一个 torch.Tensor，实际得到的是 {type}。").format(what=_w(what), type=type(got).__name__))
    return got


def assert_shape(got: Any, expected: Any, what: str) -> torch.Tensor:
    got = assert_tensor(got, what)
    if tuple(got.shape) != tuple(expected):
        fail(_("{what}的形状应为 {expected}，实际为 {got}。").format(what=_w(what), expected=fmt_shape(expected), got=fmt_shape(got.shape)))
    return got


def assert_dtype(got: torch.Tensor, expected: torch.dtype, what: str) -> None:
    if got.dtype != expected:
        fail(_("{what}的数据类型应与输入一致（{expected}），实际为 {got}。").format(what=_w(what), expected=expected, got=got.dtype))


def assert_close(got: Any, expected: torch.Tensor, what: str, atol: float | None = None, rtol: float | None = None) -> None:
    """Shape, dtype-independent values within ``atol + rtol * |expected|``; names the worst element."""
    got = assert_shape(got, expected.shape, what)
    if not got.is_floating_point():
        fail(_("{what}应是浮点张量，实际数据类型为 {dtype}。").format(what=_w(what), dtype=got.dtype))
    # The dtype policy: the tests check separately that a result keeps its input's dtype; values
    # are judged to the precision of the less precise of the answer and the expectation, so an
    # answer more precise than a float32 expectation is never held to float64's tolerance.
    default_atol, default_rtol = looser(TOLERANCE.get(got.dtype, TOLERANCE[torch.float32]), TOLERANCE.get(expected.dtype, TOLERANCE[torch.float32]))
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    if got.numel() == 0:
        return
    g = got.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    # Most answers pass: isclose tests the very bound below (|g - e| <= atol + rtol * |e|, or
    # equal), in fewer steps. Anything it does not accept takes the full check and its message.
    if bool(torch.isclose(g, e, rtol=rtol, atol=atol).all()):
        return
    bad_value = ~torch.isfinite(g) & torch.isfinite(e)
    if bad_value.any():
        index = _first(bad_value)
        fail(
            i18n.sentences(
                [
                    _("{what}中出现了 {value}（第一处在位置 {index}），期望是有限的数。").format(
                        what=_w(what), value=fmt_number(float(g[index])), index=fmt_index(index)
                    ),
                    _row_text(g, e, index),
                ]
            )
        )
    excess = (g - e).abs() - (atol + rtol * e.abs())
    excess = torch.where(torch.isnan(excess), torch.zeros_like(excess), excess)
    if excess.max() > 0:
        index = _unravel(int(torch.argmax(excess)), excess.shape)
        error = float((g - e).abs()[index])
        concept_atol, concept_rtol = CONCEPT_TOLERANCE
        if float(((g - e).abs() - (concept_atol + concept_rtol * e.abs())).nan_to_num(0.0).max()) <= 0:
            rows = _row_text(g, e, index)
            shown = _row_text(e, e, index)  # the same text with the expected row twice: rows that print alike
            fail(
                i18n.sentences(
                    [
                        _(
                            "{what}只差一点：最大误差 {error}（位置 {index}），超出了允许的舍入误差。"
                            "精度问题：检查 float32 的中间结果（例如先转成 float32 再算，或用 float32 的张量做缩放）。"
                        ).format(what=_w(what), error=f"{error:.3g}", index=fmt_index(index)),
                        *([] if rows == shown else [rows]),
                    ]
                )
            )
        fail(
            i18n.sentences(
                [
                    _("{what}与期望不符：最大误差 {error}，出现在位置 {index}。").format(what=_w(what), error=f"{error:.4g}", index=fmt_index(index)),
                    _row_text(g, e, index),
                ]
            )
        )


def looser(first: tuple[float, float], second: tuple[float, float]) -> tuple[float, float]:
    """The looser of two (atol, rtol) tolerances."""
    return max(first[0], second[0]), max(first[1], second[1])


def _unravel(flat: int, shape: Any) -> tuple[int, ...]:
    """``torch.unravel_index`` for one index, in plain Python (torch's first use imports sympy)."""
    index = []
    for size in reversed(tuple(shape)):
        flat, position = divmod(flat, size)
        index.append(position)
    return tuple(reversed(index))


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def _row_text(got: torch.Tensor, expected: torch.Tensor, index: tuple[int, ...]) -> str:
    if got.dim() == 0:
        return _("应为 {expected}，实际为 {got}。").format(expected=fmt_number(float(expected)), got=fmt_number(float(got)))
    if got.dim() == 1:
        return _("应为 {expected}，实际为 {got}。").format(expected=fmt_row(expected), got=fmt_row(got))
    row = index[:-1]
    return _("位置 {row} 这一行应为 {expected}，实际为 {got}。").format(row=fmt_index(row), expected=fmt_row(expected[row]), got=fmt_row(got[row]))


def assert_bool_equal(got: Any, expected: torch.Tensor, what: str) -> None:
    """A bool mask: dtype bool, the exact shape, the exact values (names the first difference)."""
    got = assert_tensor(got, what)
    if got.dtype != torch.bool:
        fail(_("{what}应是布尔张量（torch.bool），实际数据类型为 {dtype}。").format(what=_w(what), dtype=got.dtype))
    assert_shape(got, expected.shape, what)
    different = got != expected
    if different.any():
        index = _first(different)
        count = int(different.sum())
        fail(
            ngettext(
                "{what}有 {count} 处取值不对，第一处在位置 {index}：应为 {expected}，实际为 {got}。",
                "{what}有 {count} 处取值不对，第一处在位置 {index}：应为 {expected}，实际为 {got}。",
                count,
            ).format(what=_w(what), count=count, index=fmt_index(index), expected=bool(expected[index]), got=bool(got[index]))
        )


def assert_equal_exactly(got: Any, expected: torch.Tensor, what: str) -> None:
    """Pure data movement (reshape/transpose) must reproduce the elements exactly."""
    got = assert_shape(got, expected.shape, what)
    if got.dtype != expected.dtype:
        fail(_("{what}的数据类型应为 {expected}，实际为 {got}。").format(what=_w(what), expected=expected.dtype, got=got.dtype))
    different = got != expected
    if different.any():
        index = _first(different)
        fail(
            _("{what}的元素放错了位置：第一处不同在位置 {index}，应为 {expected}，实际为 {got}。").format(
                what=_w(what), index=fmt_index(index), expected=fmt_number(float(expected[index])), got=fmt_number(float(got[index]))
            )
        )


def broadcast_shape(*shapes: Any) -> tuple[int, ...]:
    """``torch.broadcast_shapes`` for shapes of tensors (RuntimeError where they do not broadcast),
    in plain Python: torch's own goes through its symbolic-shape machinery, whose first use
    imports sympy (about half a second in every grading process)."""
    sizes = [tuple(int(size) for size in shape) for shape in shapes]
    length = max((len(shape) for shape in sizes), default=0)
    result = []
    for dims in zip(*((1,) * (length - len(shape)) + shape for shape in sizes), strict=True):
        others = {size for size in dims if size != 1}
        if len(others) > 1:
            raise RuntimeError(f"shapes {sizes} cannot be broadcast together")
        result.append(others.pop() if others else 1)
    return tuple(result)


def max_change(a: torch.Tensor, b: torch.Tensor) -> tuple[float, tuple[int, ...]]:
    """Largest absolute difference between two same-shape tensors and where (NaN counts as a change)."""
    diff = (a.to(torch.float64) - b.to(torch.float64)).abs()
    both_nan = torch.isnan(a) & torch.isnan(b) if a.is_floating_point() else torch.zeros_like(diff, dtype=torch.bool)
    diff = torch.where(torch.isnan(diff) & ~both_nan, torch.full_like(diff, math.inf), diff)
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    index = _unravel(int(torch.argmax(diff)), diff.shape)
    return float(diff[index]), index


def expect_value_error(call: Any, what: str) -> None:
    """``call()`` must raise ValueError (a student's ValueError comes back as a ValueError subclass)."""
    try:
        result = call()
    except ValueError:
        return
    except StudentRaised as error:
        if error.type_name == "NotImplementedError":
            raise  # the plugin says "not finished yet"
        fail(_("{what}应抛出 ValueError，实际抛出了 {type}：{message}").format(what=_w(what), type=error.type_name, message=str(error)[:300]))
    if isinstance(result, (tuple, list)):
        tensors = [item for item in result if isinstance(item, torch.Tensor)]
        if any(t.is_floating_point() and torch.isnan(t).any() for t in tensors):
            fail(_("{what}应抛出 ValueError，但你的函数正常返回了（返回值中出现了 NaN）。").format(what=_w(what)))
    fail(_("{what}应抛出 ValueError，但你的函数正常返回了。").format(what=_w(what)))


# -- answer cells --------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A 0-d tensor answer (``(a == b).all()``, ``x.shape[0] * 2`` on a tensor) as a Python number."""
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    return value


def _integral(value: Any) -> int | None:
    value = _plain(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def answer_shape(value: Any, name: str) -> tuple[int, ...]:
    """A shape answer: a tuple or list of integers (floats of integral value accepted)."""
    if value is None:
        fail(_("{name} 还没有填写。").format(name=name))
    if isinstance(value, torch.Tensor) and value.dim() == 1:
        value = value.tolist()
    if not isinstance(value, (tuple, list)):
        fail(_("{name} 应是一个形状，写成整数元组，例如 (2, 3)；实际得到的是 {type}。").format(name=name, type=type(value).__name__))
    numbers = [_integral(item) for item in value]
    if any(n is None for n in numbers):
        fail(_("{name} 的每一项都应是整数，实际为 {value}。").format(name=name, value=repr(list(value))))
    return tuple(numbers)  # type: ignore[arg-type]


def answer_int(value: Any, name: str) -> int:
    if value is None:
        fail(_("{name} 还没有填写。").format(name=name))
    number = _integral(value)
    if number is None:
        fail(_("{name} 应是一个整数（倍数），实际得到的是 {value}。").format(name=name, value=repr(value)))
    return number


def answer_bool(value: Any, name: str) -> bool:
    if value is None:
        fail(_("{name} 还没有填写。").format(name=name))
    value = _plain(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    fail(_("{name} 应是 True 或 False，实际得到的是 {value}。").format(name=name, value=repr(value)))
    raise AssertionError  # unreachable


def judge_answers(student: Any, items: list[tuple[str, Any, Any]], hint: str) -> None:
    """Check answer variables ``(name, parser, expected)``: name the wrong ones, never the right values."""
    problems, wrong = [], []
    for name, parse, expected in items:
        try:
            value = parse(student.get(name), name)
        except AssertionError as problem:  # the answer's format, explained by the parser
            problems.append(str(problem))
            continue
        if value != expected:
            wrong.append(name)
    if wrong:
        problems.append(i18n.sentences([_("答案不对：{names}。").format(names=i18n.join(wrong)), hint]))
    if problems:
        fail(i18n.sentences(problems))
