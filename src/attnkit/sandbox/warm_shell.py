"""The fast cell path: the warm IPython shell every sandbox inherits from its zygote.

Imports torch, numpy, matplotlib and IPython (once, in the zygote, before any fork: every
sandbox shares them and never reads the possibly hidden project files again), makes IPython's
``run_cell`` skip its tokenizer on plain Python cells, fails once in the usual ways so that a
sandbox's first traceback is warm, and bounds what a cell prints (:class:`BoundedWriter`).
Import it only after ``attnkit.sandbox.zygote``'s pre-import step (see there): torch starts threads.
"""

from __future__ import annotations

import gc
import io
import os
import sys
from typing import Any

os.environ.setdefault("MPLBACKEND", "Agg")
import math  # noqa: F401  (student code may import it: keep it warm)

import numpy
import torch

torch.set_num_threads(1)  # before any op: a forked child of a multi-threaded libgomp can deadlock
torch.set_num_interop_threads(1)
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from attnkit.boundary import wire
from attnkit.i18n import _
from attnkit.boundary.policy import OUTPUT_LIMIT
from attnkit.boundary.outcome import run_in_namespace


class BoundedWriter(io.TextIOBase):
    """A stdout/stderr that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def take(self) -> str:
        text = "".join(self.parts)
        if self.dropped:
            text += "\n" + _("…（另有 {count} 个字符的输出被截断）").format(count=self.dropped)
        self.parts, self.kept, self.dropped = [], 0, 0
        return text


def new_shell() -> InteractiveShell:
    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.xmode = "Plain"
    shell = InteractiveShell.instance(config=config)
    _skip_tokenizing_plain_python(shell)
    return shell


def _skip_tokenizing_plain_python(shell: InteractiveShell) -> None:
    """``run_cell`` exactly as IPython runs it, less three costs on cells that are plain Python
    (most of a notebook's cells, and most of IPython's cost per cell): the tokenizer pass, a
    second parse, and one compilation per statement.

    IPython's token transforms rewrite only what plain Python cannot contain: a logical line that
    starts with ``%``, ``!``, ``?``, ``,``, ``;`` or ``/``, an assignment from ``%``/``!``, a line
    ending in ``?``. So when the cell, after IPython's own cheap clean-up transforms, parses as
    Python, the token transforms would leave it unchanged and are skipped; and such a cell with no
    ``await``/``async`` anywhere cannot need the coroutine runner. Its parse is kept for IPython's
    own ``ast_parse`` of the same text. IPython then compiles and runs each statement on its own;
    for such a cell the statements before the displayed last expression are compiled as one
    module (the same code, run in the same namespace, stopping at the same first exception), and
    where that compilation fails (a ``return`` outside a function parses but does not compile)
    IPython's per-statement path runs, so the statements before the bad one still run. Everything
    else (magics, shell escapes, one-line cells with their autocall, top-level await, syntax
    errors) takes IPython's full path, so what a student sees (outputs, displayed values,
    tracebacks, line numbers) is IPython's in every case."""
    import ast
    import inspect

    from IPython.core.interactiveshell import softspace

    manager = shell.input_transformer_manager
    compiler = shell.compile
    plain: list[str] = [""]
    parsed: list[Any] = []  # [text, tree] of the plain cell about to run, until IPython parses it
    grouped: list[bool] = [False]  # the statements being run are that cell's
    # Cells prepared ahead (``shell.prepare_cell``, in the zygote: the release notebook's, which
    # most submissions keep as they are): raw text -> (text, tree, cell name, flags, code objects).
    # Compilation is a pure function of these, so running the very same text reuses it.
    known: dict[str, tuple[str, Any, str, int, list[Any]]] = {}
    hit: list[Any] = [None]  # the known cell about to run

    def transform_cell(raw_cell: str) -> str:
        hit[0] = known.get(raw_cell)
        if hit[0] is not None and hit[0][3] == compiler.flags and not shell.ast_transformers:
            plain[0] = hit[0][0]
            parsed[:] = [hit[0][0], hit[0][1]]
            return plain[0]
        hit[0] = None
        cell = raw_cell if raw_cell.endswith("\n") else raw_cell + "\n"
        lines = cell.splitlines(keepends=True)
        for transform in manager.cleanup_transforms + manager.line_transforms:
            lines = transform(lines)
        parsed.clear()
        if len(lines) > 1:
            text = "".join(lines)
            try:
                tree = compile(text, "<cell>", "exec", compiler.flags | ast.PyCF_ONLY_AST, dont_inherit=True)
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                pass
            else:
                for transform in shell.input_transformers_post:
                    lines = transform(lines)
                plain[0] = "".join(lines)
                if plain[0] == text:
                    parsed[:] = [text, tree]
                return plain[0]
        plain[0] = ""
        return InteractiveShell.transform_cell(shell, raw_cell)

    def should_run_async(raw_cell: str, *, transformed_cell: str | None = None, preprocessing_exc_tuple: Any = None) -> bool:
        if transformed_cell is not None and transformed_cell == plain[0] and "async" not in transformed_cell and "await" not in transformed_cell:
            return False
        return InteractiveShell.should_run_async(shell, raw_cell, transformed_cell=transformed_cell, preprocessing_exc_tuple=preprocessing_exc_tuple)

    ast_parse = compiler.ast_parse

    def parse_once(source: str, filename: str = "<unknown>", symbol: str = "exec") -> Any:
        if parsed and symbol == "exec" and source == parsed[0]:
            tree = parsed.pop()
            parsed.clear()
            grouped[0] = True
            return tree
        grouped[0] = False
        return ast_parse(source, filename, symbol)

    run_ast_nodes = shell.run_ast_nodes

    async def run_grouped(nodelist: list, cell_name: str, interactivity: str = "last_expr", compiler: Any = compile, result: Any = None) -> Any:
        plain_cell, grouped[0] = grouped[0], False
        known_cell, hit[0] = hit[0], None
        if not plain_cell or interactivity != "last_expr" or not nodelist:
            return await run_ast_nodes(nodelist, cell_name, interactivity=interactivity, compiler=compiler, result=result)
        if (
            known_cell is not None
            and compiler is shell.compile
            and nodelist is known_cell[1].body
            and cell_name == known_cell[2]
            and compiler.flags == known_cell[3]
        ):
            codes: list[Any] | None = known_cell[4]
        else:
            codes = compile_grouped(nodelist, cell_name, compiler)
        if codes is None:  # outside the handler: a traceback must not chain our failed attempt
            return await run_ast_nodes(nodelist, cell_name, interactivity=interactivity, compiler=compiler, result=result)
        try:
            for code in codes:
                if await shell.run_code(code, result, async_=inspect.CO_COROUTINE & code.co_flags == inspect.CO_COROUTINE):
                    return True
            if softspace(sys.stdout, 0):
                print()
        except:  # as IPython's run_ast_nodes
            if result:
                result.error_before_exec = sys.exc_info()[1]
            shell.showtraceback()
            return True
        return False

    def compile_grouped(nodelist: list, cell_name: str, compiler: Any) -> list[Any] | None:
        """The statements before the displayed last expression as one module, that expression
        in IPython's "single" mode; None where that does not compile."""
        shown = 1 if isinstance(nodelist[-1], ast.Expr) else 0
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0x0) if shell.autoawait else 0x0
        try:
            with compiler.extra_flags(flags):
                codes = [compiler(ast.Module(nodelist[: len(nodelist) - shown], []), cell_name, "exec")] if len(nodelist) > shown else []
                return codes + ([compiler(ast.Interactive(nodelist[-1:]), cell_name, "single")] if shown else [])
        except Exception:  # IPython's own path compiles (and runs) statement by statement
            return None

    def prepare_cell(raw_cell: str) -> None:
        """Transform, parse and compile a plain cell now, without running it, as ``run_cell``
        would (same cell name, same flags)."""
        text = transform_cell(raw_cell)
        if not parsed or text != parsed[0] or not text.strip():
            parsed.clear()
            return
        tree = parsed.pop()
        parsed.clear()
        hit[0] = None
        flags = compiler.flags
        cell_name = compiler.cache(text, shell.execution_count, raw_code=raw_cell)
        codes = compile_grouped(ast.fix_missing_locations(tree).body, cell_name, compiler) if tree.body else None
        # A cell with a __future__ import changes the flags of every later compilation: it is
        # compiled when it runs, as IPython would, and preparing it changes nothing.
        if codes is not None and compiler.flags == flags:
            known[raw_cell] = (text, tree, cell_name, flags, codes)
        compiler.flags = flags

    shell.transform_cell = transform_cell  # type: ignore[method-assign]
    shell.should_run_async = should_run_async  # type: ignore[method-assign]
    compiler.ast_parse = parse_once  # type: ignore[method-assign]
    shell.run_ast_nodes = run_grouped  # type: ignore[method-assign]
    shell.prepare_cell = prepare_cell  # type: ignore[attr-defined]


# What most submissions do at least once: fail. A cell's first traceback (IPython's formatter,
# pygments, linecache), a function's first exception or warning, cost a sandbox 5-10 ms cold.
_FAILURES = (
    "def _warm(x):\n    raise NotImplementedError()\n_warm(1)",
    "torch.ones(2, 3) @ torch.ones(2, 3)",
    "def _broken(:\n    pass",
    "assert torch.allclose(torch.ones(2), torch.zeros(2)), 'differs'",
    "import warnings\nwarnings.warn('warm')\ntorch.ones(2, 2).T",
)


def warm_failures(shell: InteractiveShell) -> None:
    """Fail once here, in each of the usual ways, so that every sandbox inherits the warm path."""
    real = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.StringIO()
    try:
        for source in _FAILURES:
            shell.run_cell(source, store_history=False, silent=False)
        namespace = shell.user_ns
        shell.run_cell(
            "def _raises(x):\n    return x @ x.T + torch.ones(5)\ndef _warns(x):\n    import warnings\n    warnings.warn('warm')\n    return x",
            store_history=False,
        )
        for name in ("_raises", "_warns"):
            wire.encode(run_in_namespace(namespace, name, (torch.ones(2, 3),), {}, plain=False).__dict__)
    except Exception:  # a colder sandbox, never a zygote that does not start
        pass
    finally:
        sys.stdout, sys.stderr = real


def warm_up(shell: InteractiveShell, source: str, cells: list[str]) -> None:
    """Run ``source`` (the assignments' ``warm_up`` hooks: imports and stand-ins for the
    student's functions) and then ``cells`` (the release notebooks' examples, public), as a
    sandbox would run a notebook, with what they print thrown away; then leave the shell as a
    sandbox must find it: an empty namespace, no figure open, and the random generators of torch,
    numpy and Python where they were (an unseeded draw in a notebook gives what it gave before)."""
    import random

    import matplotlib.pyplot as pyplot

    generators = torch.get_rng_state(), numpy.random.get_state(), random.getstate()
    default_dtype = torch.get_default_dtype()
    real = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.StringIO()
    try:
        shell.run_cell(source, store_history=False, silent=True)
        for cell in cells:
            shell.run_cell(cell, store_history=False, silent=False)
    finally:
        sys.stdout, sys.stderr = real
        pyplot.close("all")
        torch.set_default_dtype(default_dtype)
        torch.set_rng_state(generators[0])
        numpy.random.set_state(generators[1])
        random.setstate(generators[2])
        shell.reset(new_session=False)


def warm_shell() -> InteractiveShell:
    """What a zygote does first, whatever it grades: the shell, warm for the protocol and for the
    usual ways a cell fails."""
    # The imports, made with the collector off, out of its view before anything else: the full
    # collections that follow (a zygote's own, and the one in IPython's reset) walk only what came after.
    gc.freeze()
    shell = new_shell()
    wire.decode(wire.encode((torch.ones(2, 2), {"a": [1, 2.0, "x", None, True]})))
    warm_failures(shell)
    return shell
