"""Does the chapter's own script still print exactly what the chapter says it prints?"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "attention.py"

# Copied verbatim from the chapter (section 7, "输出为：").
CHAPTER_OUTPUT = (
    "Q/K/V 形状：(1, 1, 3, 2)\n"
    "未加掩码的权重：[[0.4011, 0.1978, 0.4011], [0.1978, 0.4011, 0.4011], "
    "[0.2483, 0.2483, 0.5035]]\n"
    "第一行加权结果：[8.0222, 5.9889]\n"
    "因果权重：[[1.0, 0.0, 0.0], [0.3302, 0.6698, 0.0], [0.2483, 0.2483, 0.5035]]\n"
    "因果输出：[[10.0, 0.0], [3.3024, 6.6976], [7.5174, 7.5174]]\n"
    "改变第三个位置后，前两个输出不变：True\n"
    "错误地将未来分数乘零，第一行未来权重合计：0.4965\n"
)


@pytest.mark.e2e  # runs the chapter's script with torch in a subprocess
def test_script_prints_the_chapters_seven_lines_byte_for_byte() -> None:
    """Does `python examples/attention.py` print the chapter's output, byte for byte, and nothing on stderr?"""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    assert result.stdout == CHAPTER_OUTPUT.encode("utf-8")
    assert result.stdout.count(b"\n") == 7


def test_script_is_the_chapters_code() -> None:
    """Does the script keep the chapter's scaled_attention exactly (the notebook's model answer)?"""
    source = SCRIPT.read_text(encoding="utf-8")
    assert source.startswith('"""第 19 章：亲手计算缩放点积注意力与因果掩码；PyTorch CPU。"""\n')
    assert 'raise ValueError("每个查询至少需要一个允许访问的位置")' in source
    assert 'scores = scores.masked_fill(~allowed, float("-inf"))' in source
