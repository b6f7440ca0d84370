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


def student_frame(traceback: TracebackType | None, outermost: bool = False, same_cell: bool = False) -> dict[str, Any] | None:
    """The innermost frame of the student's own code in ``traceback`` (``outermost``: the first,
    the cell that ran, whose line called into the rest; ``same_cell``: the innermost of the frames
    in that first cell, a helper the cell itself defines included, so that its line counts in the
    cell the page names): its function, line number within its cell, the line's text and the whole
    cell's text (to find the cell by)."""
    found = None
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if _STUDENT_FILES.match(code.co_filename) and (not same_cell or found is None or code.co_filename == found[0]):
            found = (code.co_filename, traceback.tb_lineno, code.co_name)
            if outermost:
                break
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

# What happened, by kind: the explanation of each (in Chinese; English through the catalogue).
EXPLANATIONS: dict[str, str] = {
    "view": N_(
        "view 只能用在内存连续的张量上；transpose 或 permute 之后的张量不再连续。把 .view(...) 换成 .reshape(...)，或者先调用 .contiguous() 再 .view(...)。"
    ),
    "dtype": N_(
        "参与运算的张量数据类型不一致（例如一个是 float32、一个是 float64）。不要把输入强制转成某一种类型；"
        "需要新建张量时用 torch.zeros_like(x) 或 dtype=x.dtype，让结果与输入的类型保持一致。"
    ),
    "matmul": N_(
        "矩阵乘法 A @ B 要求 A 的最后一维等于 B 的倒数第二维，前面的批次维（批次、头）能够广播。"
        "例如 Q @ Kᵀ 应是 (…, T_q, d_k) @ (…, d_k, T_k)，权重 @ V 应是 (…, T_q, T_k) @ (…, T_k, d_v)。"
        "在这一行前临时 print 两边的 .shape，对照第 4 节的形状表推一遍。"
    ),
    "dimension": N_(
        "维度编号超出了这个张量的维数：一个 2 维张量只有 dim=0、1（或 -1、-2），3 维张量只有 0 到 2。"
        "本章的函数要接受任意多个前导维（批次、头，或者一个也没有），所以沿“最后一维”“倒数第二维”计算时请用负数编号，"
        "例如 softmax(dim=-1)、transpose(-2, -1)，不要写死 dim=2 或 dim=3。"
    ),
    "broadcast": N_(
        "两个张量的形状无法广播：从最后一维往前逐一对齐，每一对维度要么相等、要么其中一个是 1（矩阵乘法 @ 前面的批次维也按这个规则广播）。"
        "错误信息里的 non-singleton dimension 是出错的那一维。检查掩码与分数的形状：allowed 应能直接广播到 (…, T_q, T_k)，"
        "例如 (T_q, T_k) 或 (B, 1, 1, T_k)，不需要再给它添加或调换维度。在这一行前临时 print 两边的 .shape。"
    ),
    "reshape": N_(
        "reshape / view 的目标形状与张量的元素总数不一致（错误信息里 input of size 后面是元素总数）。"
        "拆头时目标形状应是 (B, T, h, D/h)，合并时应是 (B, T, h·d)：各维之积必须等于原来的元素总数。"
    ),
    "batch_dims": N_(
        "torch.bmm（以及 torch.baddbmm）只接受三维张量 (B, n, m)：一个批次维加一个矩阵，错误信息里的 batch1、batch2 就是它的两个参数。"
        "本章的函数要接受任意多个前导维（批次、头，或者一个也没有），例如 (B, h, T, d_k) 的四维输入，bmm 就接不住。"
        "把 torch.bmm(a, b) 换成 a @ b（或 torch.matmul(a, b)）：它们把最后两维当作矩阵，前面的维度都按批次广播。"
    ),
    "mask_dtype": N_("masked_fill 的掩码必须是布尔张量（torch.bool）。allowed 本身就是布尔张量；取反用 ~allowed，不要用 1 - allowed。"),
    "keyword": N_(
        "调用时用了一个函数定义里没有的参数名（错误信息里引号中的那个）。作业函数的参数名是固定的，"
        "例如 scaled_attention(query, key, value, allowed=None) 的掩码参数叫 allowed。让调用处写的参数名与函数定义一致，或者按位置传参。"
    ),
    "arguments": N_(
        "调用时传入的参数个数与函数定义不一致（少了必需的参数，或者多了）。对照作业说明里的函数签名检查调用处和定义处："
        "参数的个数、顺序，以及带默认值的参数（如 allowed=None）。"
    ),
    "module": N_(
        "评分环境里只安装了 torch、numpy、matplotlib 和 Python 标准库，其他包（例如 einops）无法导入。"
        "请只用这些库改写；导入失败的单元格里之后的定义也都没有运行。"
    ),
    "name": N_(
        "用到了一个没有定义的名字。检查拼写；如果它定义在别的单元格里，那个单元格要能运行：评分时按顺序运行全部代码单元格，"
        "但带 skip-grading 标签的演示单元格只运行其中被答案用到的 def、class 和 import，其余语句（赋值、实验、画图）不运行，"
        "只在那里赋值得到的名字在评分时不存在，请把它移到你的答案单元格里。"
    ),
}

# (kind, pattern in the exception's message), in order: the first that matches says what happened.
# Each pattern is narrow (``tests/boundary/test_explain_table.py`` holds real torch and Python messages):
# a broadcast mismatch is not a matmul's shapes, an axis out of range neither.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("view", re.compile(r"view size is not compatible with input tensor's size and stride|use \.reshape\(\.\.\.\) instead")),
    (
        "mask_dtype",
        re.compile(
            r"masked_fill_? only supports boolean masks|expected mask dtype to be Bool|where expected condition to be a boolean|"
            r"operator\.invert\) is only implemented on integer and Boolean"
        ),
    ),
    (
        "dtype",
        re.compile(
            r"expected scalar type|expected m1 and m2 to have the same dtype|must have the same dtype|"
            r"expected both vectors to have same dtype|found dtype \w+ but expected|Float but found Double|"
            r"Double but found Float|same dtype"
        ),
    ),
    ("dimension", re.compile(r"Dimension out of range")),
    ("batch_dims", re.compile(r"batch[12] must be a 3D tensor")),
    ("broadcast", re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\) at non-singleton dimension")),
    (
        "matmul",
        re.compile(
            r"mat1 and mat2 shapes cannot be multiplied|Expected size for first two dimensions of batch2|shapes cannot be multiplied|"
            r"inconsistent tensor size|size mismatch"
        ),
    ),
    ("reshape", re.compile(r"shape '\[[-\d, ]*\]' is invalid for input of size \d+")),
    ("keyword", re.compile(r"got an unexpected keyword argument")),
    ("arguments", re.compile(r"missing \d+ required (positional|keyword-only) arguments?|takes (from )?\d+ (to \d+ )?positional arguments? but \d+")),
    # Before "is not defined": a failed import is why a name is missing, and what to change.
    ("module", re.compile(r"No module named")),
    ("name", re.compile(r"is not defined")),
)

DOT_T_EXPLANATION = N_(
    "这一行对多于两维的张量用了 .T。.T 会把张量的所有维度倒过来（(B, h, T, d) 变成 (d, T, h, B)），"
    "只有二维矩阵时它才等于转置，所以本章的二维例子能算、带批次和头的输入就出错。"
    "要交换最后两维，请写 key.transpose(-2, -1)（或 key.mT）。"
)


def explanation_kind(type_name: str, message: str, line: str = "", warnings: list[str] | None = None) -> str:
    """What happened, as a key of ``EXPLANATIONS`` ("dot_t" for ``.T`` on more than two
    dimensions), or "" when we have nothing better than the message itself."""
    warned_dot_t = any("x.T" in warning for warning in warnings or [])
    if type_name in ("RuntimeError", "IndexError") and (warned_dot_t or _DOT_T.search(line or "")):
        return "dot_t"
    for kind, pattern in _PATTERNS:
        if pattern.search(message or ""):
            return kind
    return ""


def explain(type_name: str, message: str, line: str = "", warnings: list[str] | None = None) -> str:
    """An explanation (in the current language) of a common torch or Python failure, matched to
    what happened, or "" when we have nothing better than the message itself."""
    kind = explanation_kind(type_name, message, line, warnings)
    if not kind:
        return ""
    text = DOT_T_EXPLANATION if kind == "dot_t" else EXPLANATIONS[kind]
    return _(text)
