"""Runtime errors that teach: where in the student's own code a call failed, and what the common
torch failures mean, in Chinese.

The sandbox reports the innermost frame of the student's own code (a notebook cell, never the
grader's files or the hidden tests) and the warnings the call raised; this module turns them, and
torch's English message, into the text the feedback page shows.
"""

from __future__ import annotations

import linecache
import re
from types import TracebackType
from typing import Any

from attnkit.i18n import N_, _

# Frames of the student's code: IPython's cells, the development backend's source, a notebook run
# in-process. Everything else (torch, the standard library, the grader) is never shown.
_STUDENT_FILES = re.compile(r"^(<ipython-input-\d+-[0-9a-f]+>|<submission>|.*\.ipynb)$")
MAX_WARNINGS = 3


def student_frame(traceback: TracebackType | None) -> dict[str, Any] | None:
    """The innermost frame of the student's own code in ``traceback``: its function, line number
    within the cell, the line's text and the whole cell's text (to find the cell by)."""
    found = None
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if _STUDENT_FILES.match(code.co_filename):
            found = (code.co_filename, traceback.tb_lineno, code.co_name)
        traceback = traceback.tb_next
    if found is None:
        return None
    filename, line, function = found
    lines = linecache.getlines(filename)
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return {"function": function, "line": line, "text": text[:300], "cell_text": "".join(lines)[:20_000]}


def warning_text(message: Any, category: type, filename: str, lineno: int) -> str:
    """One warning as the page shows it: its class and message, and the student's line when the
    warning points into their code."""
    text = _("{category}：{message}").format(category=category.__name__, message=str(message).split(" (Triggered internally", 1)[0][:400])
    if _STUDENT_FILES.match(filename or ""):
        line = linecache.getline(filename, lineno).strip()
        if line:
            text += _("（出自你的这一行：{line}）").format(line=line[:200])
    return text


_DOT_T = re.compile(r"\.T\b")

# (pattern in torch's message, explanation). The first that matches wins.
_EXPLANATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"view size is not compatible with input tensor's size and stride|use \.reshape\(\.\.\.\) instead"),
        N_(
            "view 只能用在内存连续的张量上；transpose 或 permute 之后的张量不再连续。把 .view(...) 换成 .reshape(...)，或者先调用 .contiguous() 再 .view(...)。"
        ),
    ),
    (
        re.compile(
            r"expected scalar type|expected m1 and m2 to have the same dtype|must have the same dtype|"
            r"expected both vectors to have same dtype|found dtype \w+ but expected|Float but found Double|"
            r"Double but found Float|same dtype"
        ),
        N_(
            "参与运算的张量数据类型不一致（例如一个是 float32、一个是 float64）。不要把输入强制转成某一种类型；"
            "需要新建张量时用 torch.zeros_like(x) 或 dtype=x.dtype，让结果与输入的类型保持一致。"
        ),
    ),
    (
        re.compile(
            r"mat1 and mat2 shapes cannot be multiplied|size of tensor a \(\d+\) must match the size of tensor b|"
            r"Expected size for first two dimensions of batch2|shapes cannot be multiplied|"
            r"inconsistent tensor size|Dimension out of range|size mismatch"
        ),
        N_(
            "矩阵乘法 A @ B 要求 A 的最后一维等于 B 的倒数第二维，前面的批次维（批次、头）能够广播。"
            "例如 Q @ Kᵀ 应是 (…, T_q, d_k) @ (…, d_k, T_k)，权重 @ V 应是 (…, T_q, T_k) @ (…, T_k, d_v)。"
            "在这一行前临时 print 两边的 .shape，对照第 3 节的形状推一遍。"
        ),
    ),
    (
        re.compile(r"masked_fill_? only supports boolean masks|expected mask dtype to be Bool"),
        N_("masked_fill 的掩码必须是布尔张量（torch.bool）。allowed 本身就是布尔张量；取反用 ~allowed，不要用 1 - allowed。"),
    ),
    (
        # Before "is not defined": a failed import is why a name is missing, and what to change.
        re.compile(r"No module named"),
        N_(
            "评分环境里只安装了 torch、numpy、matplotlib 和 Python 标准库，其他包（例如 einops）无法导入。"
            "请只用这些库改写；导入失败的单元格里之后的定义也都没有运行。"
        ),
    ),
    (
        re.compile(r"is not defined"),
        N_(
            "用到了一个没有定义的名字。检查拼写；如果它定义在别的单元格里，那个单元格要能运行：评分时按顺序运行全部代码单元格，"
            "但带 skip-grading 标签的演示单元格除外，只定义在这种单元格里的名字在评分时不存在，请把它移到你的答案单元格里。"
        ),
    ),
)

DOT_T_EXPLANATION = N_(
    "这一行对多于两维的张量用了 .T。.T 会把张量的所有维度倒过来（(B, h, T, d) 变成 (d, T, h, B)），"
    "只有二维矩阵时它才等于转置，所以本章的二维例子能算、带批次和头的输入就出错。"
    "要交换最后两维，请写 key.transpose(-2, -1)（或 key.mT）。"
)


def explain(type_name: str, message: str, line: str = "", warnings: list[str] | None = None) -> str:
    """An explanation (in the current language) of a common torch failure, or "" when we have nothing better than
    torch's own message."""
    warned_dot_t = any("x.T" in warning for warning in warnings or [])
    if type_name in ("RuntimeError", "IndexError") and (warned_dot_t or _DOT_T.search(line or "")):
        return _(DOT_T_EXPLANATION)
    for pattern, text in _EXPLANATIONS:
        if pattern.search(message or ""):
            return _(text)
    return ""
