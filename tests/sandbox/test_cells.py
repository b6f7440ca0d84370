"""Does a cell run by the sandbox's shell (``attnkit.sandbox.warm_shell``, which skips IPython's tokenizer, its
second parse and its per-statement compilation on plain-Python cells, and reuses what the zygote
compiled ahead for cells of the very same text) do exactly what IPython's own ``run_cell`` does:
the same output, displayed values, tracebacks, errors and namespace?"""

from __future__ import annotations

import json
import os
import sys

import pytest

from commands import run_command

CELLS = [
    "x = 1\ny = x + 1\ny",  # a displayed last expression
    "print('a')\nprint('b')",  # a last expression of None
    "def f(n):\n    return n * 2\nz = f(3)\nz * 10\n",
    "from __future__ import annotations\ndef g(a: Undefined) -> Other:\n    return a\ng.__annotations__",
    "def k(a: Later) -> None:\n    pass\nk.__annotations__",  # the __future__ import above holds from then on
    "w = 5\nprint('before')\n1 / 0\nw = 6",  # the statements after the error do not run
    "def h():\n    return 1\nv = h()\nreturn v",  # parses, does not compile: h and v still defined?
    "for i in range(3):\n    pass\nbreak",
    "q = [n for n in range(4)]\nq",
    "%xmode Plain\nt = 3\nt",  # a magic: IPython's own path
    "!echo shell",
    "u = 1; u",  # one line
    "def broken(:\n    pass",  # a syntax error
    "display('shown')\nget_ipython() is not None",
    "import warnings\nwarnings.warn('careful')\n'after warning'",
    "class Point:\n    x: int = 1\nPoint.__annotations__",
    "raise SystemExit(3)",
    "y",  # state carried from the first cell
    "async def co():\n    return 1\nco.__name__",
    "import asyncio\nawait asyncio.sleep(0)\n'awaited'",
    "def boom(n):\n    return [1][n]\nboom(0)",
    "a = boom(0)\nboom(5)",  # a traceback through a function of an earlier cell
    "1 + 1\n",
    "b = _ * 3\nb",  # the displayed value of the cell before
    "import sys\nprint('to stderr', file=sys.stderr)\nprint('no newline', end='')",
    "raise KeyboardInterrupt",
    "exit is not None and get_ipython().execution_count >= 0",
    # A listener on the execution events hears every cell, as in IPython.
    "def _post(result):\n    print('post', type(result.error_in_exec).__name__)\ndef _pre():\n    print('pre')\n"
    "get_ipython().events.register('post_run_cell', _post)\nget_ipython().events.register('pre_execute', _pre)\n'registered'",
    "m = 7\nm",
    "m / 0",
    "get_ipython().events.unregister('post_run_cell', _post)\nget_ipython().events.unregister('pre_execute', _pre)\n'unregistered'",
    "m * 2",
    "'again'\nwarnings.warn('careful')",  # the same warning from the same line, cells later
]

SCRIPT = r"""
import io, json, sys
from attnkit.sandbox import warm_shell
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

if sys.argv[1] in ("ours", "prepared"):
    shell = warm_shell.new_shell()
    if sys.argv[1] == "prepared":  # compiled ahead, as the zygote does with the release's cells
        for source in json.loads(sys.argv[2]):
            shell.prepare_cell(source)
else:
    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    shell = InteractiveShell.instance(config=config)
records = []
for source in json.loads(sys.argv[2]):
    out = io.StringIO()
    real, sys.stdout, sys.stderr = sys.stdout, out, out
    try:
        result = shell.run_cell(source, store_history=False, silent=False)
    finally:
        sys.stdout = sys.stderr = real
    error = result.error_before_exec or result.error_in_exec
    names = {k: v.__qualname__ if callable(v) else repr(v) for k, v in shell.user_ns.items()
             if k in ("x", "y", "z", "w", "v", "h", "q", "t", "u", "i", "f", "g", "k", "Point", "co", "boom", "a", "b", "m")}
    records.append({"output": out.getvalue(), "error": type(error).__name__ if error else None, "names": names})
print(json.dumps(records))
"""


def run(kind: str) -> list[dict]:
    done = run_command([sys.executable, "-c", SCRIPT, kind, json.dumps(CELLS)], env=os.environ, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_the_sandboxs_shell_runs_cells_as_ipython_does() -> None:
    """Cell by cell: the same output (displayed values and tracebacks included), the same error,
    the same names defined, as stock IPython, for plain cells and for the ones that take
    IPython's own path (magics, syntax errors, top-level await)?"""
    ours, prepared, stock = run("ours"), run("prepared"), run("stock")
    assert len(ours) == len(prepared) == len(stock) == len(CELLS)
    for cell, mine, ahead, theirs in zip(CELLS, ours, prepared, stock, strict=True):
        assert mine == theirs, cell
        assert ahead == theirs, cell
    by_start = {cell.split("\n")[0]: record for cell, record in zip(CELLS, stock, strict=True)}
    assert by_start["x = 1"]["output"].strip().endswith("2")  # displayed, so the comparison means something
    assert by_start["w = 5"]["error"] == "ZeroDivisionError" and "before" in by_start["w = 5"]["output"]
    assert by_start["def h():"]["error"] == "SyntaxError" and by_start["def h():"]["names"].get("v") == "1"  # ran up to the bad line
    assert by_start["def k(a: Later) -> None:"]["error"] is None  # the annotation stayed a string
    assert "post ZeroDivisionError" in by_start["m / 0"]["output"]  # the listeners heard the failed cell
    assert by_start["m = 7"]["output"].startswith("pre")
    assert "IndexError" in by_start["a = boom(0)"]["output"] and by_start["b = _ * 3"]["names"].get("b") == "6"
    assert "careful" in by_start["'again'"]["output"]
