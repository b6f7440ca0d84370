"""The untrusted side: a zygote that forks one locked-down sandbox per submission.

The zygote imports torch, numpy, matplotlib and IPython once and never runs student code; it
forks a sandbox on request, so a sandbox starts in milliseconds instead of the seconds a Jupyter
kernel takes. It never imports the hidden tests or the reference solutions, so a sandbox cannot
find them in memory either.

Run as ``python -I -m attnkit.zygote FD CONFIG`` where FD is a unix socket to the trusted grader
and CONFIG a JSON object (``hide``: the grader's folders, never part of a sandbox's view). Each
request on FD carries one end of a fresh socketpair (SCM_RIGHTS) and the sandbox settings; the
reply gives the sandbox's pid, which the grader kills when it is done or out of time. A request
``{"plan": digest}`` with a memfd instead hands the zygote a worker's plan (the batch of requests
every submission's hidden tests will make, see ``attnkit.worker.Plan``): decoded once here, it is
in every sandbox forked afterwards, which then answers ``{"op": "batch", "plan": digest}``
without receiving or decoding it again.

Isolation (``attnkit.isolation``): the zygote enters a private mount namespace before its
imports and builds an allowlisted read-only root after them; each sandbox gets new user, mount,
PID, network and IPC namespaces, that root as its whole filesystem, uid 65534 and no
capabilities. Where the kernel allows none of this the zygote says so in its first message and
forks plain processes, which the grader uses only for notebooks it was told to trust. Then
resource limits on memory, CPU, files and processes; stdout/stderr bounded. Requests are served
one at a time: run a cell, call a function, read a variable. Only data goes back
(``attnkit.protocol``).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    import gc

    # Imports of torch, IPython and matplotlib only add objects: the collections they trigger
    # walk an ever larger heap for nothing (serve_forever collects once, then freezes).
    gc.disable()
    # Before torch and friends start threads: the kernel grants a new user namespace only to a
    # single-threaded process.
    from attnkit.isolation import enter_private_namespace

    if sys.argv[1] == "--seed":
        # A seed dies with the grader that started it, even in the middle of its imports.
        import ctypes
        import os
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != int(sys.argv[3]):
            os._exit(0)
        # Ctrl-C reaches the whole process group: the grader handles it and closes us. A zygote a
        # worker starts inherits the worker's ignoring it; the seed's children inherit this.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    MODE = enter_private_namespace()

import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import tempfile  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

# Imported here, before any fork, so every sandbox shares them and a sandbox never needs to read
# the (possibly hidden) project files again.
os.environ.setdefault("MPLBACKEND", "Agg")
import math  # noqa: E402,F401  (student code may import it: keep it warm)

import numpy  # noqa: E402,F401
import torch  # noqa: E402

torch.set_num_threads(1)  # before any op: a forked child of a multi-threaded libgomp can deadlock
torch.set_num_interop_threads(1)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402,F401
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

from attnkit.constants import CRASHED, DEFAULT_MAX_PROCESSES, DEFAULT_MEMORY_MB, MAX_MESSAGE
from attnkit import i18n  # noqa: E402
from attnkit.i18n import _  # noqa: E402
from attnkit import nonamespace, protocol  # noqa: E402
from attnkit.cgroup import Cgroup, sweep_stale  # noqa: E402
from attnkit.explain import student_frame  # noqa: E402
from attnkit.isolation import (  # noqa: E402
    NOBODY,
    PR_SET_NO_NEW_PRIVS,
    SANDBOX_HOME,
    IsolationError,
    Mode,
    build_root,
    clone_sandbox,
    enter_root,
    leave_session_keyring,
    map_sandbox_user,
    own_mount_namespace,
)
from attnkit.proxy import Outcome, read_variable, run_in_namespace, unreadable  # noqa: E402

PR_SET_PDEATHSIG = 1
OUTPUT_LIMIT = 20_000  # characters of stdout/stderr kept per cell
# Without a control group (no root), one process is the whole submission: a per-process memory
# limit then bounds the submission, and a fork bomb has nothing to fork.
UNCAPPED_PROCESSES = 1

_libc = ctypes.CDLL(None, use_errno=True)
# This zygote's layer without namespaces, once chosen (_isolate): its read-only trees, its uid block.
_LAYER: list[nonamespace.Layer | None] = [None]

# The plan this zygote holds (``hold_plan``): its digest and its decoded requests. Requests only
# (the hidden tests' inputs), never an expected result; every sandbox forked afterwards has its
# own copy-on-write copy, so what one submission's code does to it no other sees.
_plan: tuple[str, list] | None = None


def hold_plan(digest: str, descriptor: int) -> bool:
    """Read a plan's batch frame from ``descriptor`` (a memfd from the trusted grader), check it
    against ``digest``, decode it and keep it for the sandboxes forked from now on."""
    global _plan
    with os.fdopen(descriptor, "rb") as source:
        frame = source.read(protocol.MAX_FRAME_BYTES + 1)
    if len(frame) > protocol.MAX_FRAME_BYTES or hashlib.sha256(frame).hexdigest() != digest:
        return False
    try:
        batch = protocol.decode(frame)
    except protocol.ProtocolError:
        return False
    if not (isinstance(batch, dict) and isinstance(batch.get("requests"), list)):
        return False
    _plan = (digest, batch["requests"])
    gc.collect()
    gc.freeze()  # out of every sandbox's collections, like the rest of the zygote's heap
    return True

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


def _new_shell() -> InteractiveShell:
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
                tree = compile(text, "<cell>", "exec", compiler.flags | ast.PyCF_ONLY_AST, 1)
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
        if (known_cell is not None and compiler is shell.compile and nodelist is known_cell[1].body and cell_name == known_cell[2]
                and compiler.flags == known_cell[3]):
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
        except:  # noqa: E722 - as IPython's run_ast_nodes
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
        except Exception:  # noqa: BLE001 - IPython's own path compiles (and runs) statement by statement
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


class Sandbox:
    """One submission's process: lock down, then serve requests until told to stop."""

    def __init__(self, channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell) -> None:
        self.channel = channel
        self.settings = settings
        self.shell = shell
        self.isolation: list[str] = []
        self.output = BoundedWriter()
        # Swap sessions (``swap_begin``): forks of this sandbox holding stand-ins, each serving its
        # own channel until the grader closes it; and, in such a fork, whether a request is open
        # (its stand-ins answer only then).
        self.forks: list[int] = []
        self.live: list | None = None

    # -- lock down -----------------------------------------------------------------------------
    def lock_down(self, mode: Mode, capped: bool) -> None:
        if mode.namespaced:
            self.isolation += enter_root(mode)
            workdir = SANDBOX_HOME
        elif mode.isolated:  # no namespaces: Landlock, or a pool uid (attnkit.nonamespace)
            workdir = self.settings["workdir"]
            self.isolation += nonamespace.enter(mode, workdir, self.settings.get("sandbox_uid"))
        else:
            # Trusted notebooks only (--no-isolation, or a learner checking their own): the
            # grader's own view of the machine, less root.
            self.isolation.append("unisolated")
            leave_session_keyring()
            workdir = self.settings["workdir"]  # made by the zygote, which removes it afterwards
            if os.geteuid() == 0:
                os.chown(workdir, NOBODY, NOBODY)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                self.isolation.append("uid-nobody")
            _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        # Only the channel and the standard streams stay open: an inherited descriptor of a host
        # folder would be a way out of the sandbox's root.
        channel = self.channel.fileno()
        os.closerange(3, channel)
        os.closerange(channel + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        if capped:
            self.isolation.append("cgroup-memory-and-pids")
        # Die with the zygote (and so with the grader). Armed after the change of user: the
        # kernel clears it whenever a process's user changes.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.chdir(workdir)
        if os.environ.get("TMPDIR") != workdir:  # isolated: the zygote set them for every sandbox
            os.environ.update(_home_environment(workdir))
        self._limits(capped)
        self._redirect_output(workdir)
        if mode.isolated and not mode.namespaced:
            self.isolation += nonamespace.finish()  # the seccomp filter, last
        # Our own modules stay loaded (we run on them) but not importable by name: their source
        # folder is not in the sandbox's view, and student code should not find them in
        # sys.modules either.
        for name in _our_modules():
            sys.modules.pop(name, None)

    def _limits(self, capped: bool) -> None:
        memory = self.settings["address_space_base"] + int(self.settings.get("memory_mb", DEFAULT_MEMORY_MB)) * 1024 * 1024
        processes = DEFAULT_MAX_PROCESSES if capped else UNCAPPED_PROCESSES
        cpu = int(self.settings.get("cpu_seconds", 120))
        for limit, value in (
            (resource.RLIMIT_AS, memory),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_NOFILE, 64),
            (resource.RLIMIT_NPROC, processes),
            (resource.RLIMIT_FSIZE, 8 * 1024 * 1024),
            (resource.RLIMIT_CORE, 0),
        ):
            try:
                resource.setrlimit(limit, (value, value))
            except (ValueError, OSError):
                pass
        self.isolation.append("resource-limits" if capped else "resource-limits-single-process")

    def _redirect_output(self, workdir: str) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a huge write fails instead of killing us
        sink = os.open(os.path.join(workdir, ".output"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        os.close(sink)
        os.close(null)
        sys.stdin = io.StringIO()
        sys.stdout = sys.stderr = self.output

    # -- serve ---------------------------------------------------------------------------------
    def serve(self) -> None:
        ready: dict[str, Any] = {"ready": True, "isolation": self.isolation, "pid": os.getpid()}
        if _plan is not None:
            ready["plan"] = _plan[0]
        protocol.send(self.channel, ready)
        self._serve_requests()

    def _serve_requests(self) -> None:
        while True:
            try:
                request = protocol.receive(self.channel)
            except protocol.ProtocolError:
                return
            if not isinstance(request, dict) or request.get("op") == "bye":
                return
            if request.get("op") == "batch" and self.live is None:
                self.serve_batch(request)
                continue
            self.channel.sendall(self.answer(request))
            self._reap_forks()

    def answer(self, request: dict) -> bytes:
        """The reply frame to one request; whatever the student's code raises becomes data."""
        if self.live is not None:
            self.live.append(True)
        try:
            return self.handle(request)
        except BaseException as error:  # SystemExit, KeyboardInterrupt... from a student call
            return protocol.encode({"error_type": type(error).__name__, "message": str(error)[:MAX_MESSAGE]})
        finally:
            if self.live is not None:
                self.live.clear()

    def serve_batch(self, request: dict) -> None:
        """``{"op": "batch", "requests": [...], "cell_budget": s}`` (or ``"plan": digest``, the
        requests of the plan held since the fork): cells, calls and reads
        answered in order, one reply frame each, sent as soon as it is ready (the grader holds
        each to its own time limit, as if asked one by one). Cells that would start after
        ``cell_budget`` seconds are not run (``{"skipped": true}``), as the grader would not ask
        for them. Swap sessions and nested batches are not batched."""
        started = time.monotonic()
        budget = request.get("cell_budget")
        items = request.get("requests")
        if "plan" in request:  # the plan this sandbox was forked with (it said so when ready)
            if _plan is None or request["plan"] != _plan[0]:
                self.channel.sendall(protocol.encode({"error_type": "__protocol__", "message": "no such plan"}))
                return
            items = _plan[1]
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get("op") not in ("cell", "call", "get"):
                frame = protocol.encode({"error_type": "__protocol__", "message": "not batchable"})
            elif item["op"] == "cell" and isinstance(budget, (int, float)) and time.monotonic() - started > budget:
                frame = protocol.encode({"skipped": True})
            else:
                frame = self.answer(item)
            self.channel.sendall(frame)

    def handle(self, request: dict) -> bytes:
        """The reply frame to one request, encoded once."""
        op = request.get("op")
        name = str(request.get("name", ""))
        namespace = self.shell.user_ns
        if op == "cell":
            return protocol.encode(self.run_cell(str(request.get("source", ""))))
        if op == "call_with":
            if self.live is not None:  # in a swap session: the stand-ins are already bound
                return self.handle({**request, "op": "call"})
            return self.call_with_substitutes(request)
        if op == "swap_begin":
            if self.live is not None:  # no session within a session
                return protocol.encode({"swap": "refused"})
            return self.swap_begin(request)
        if op == "call":
            outcome = run_in_namespace(namespace, name, tuple(request["args"]), dict(request["kwargs"]), plain=False)
        elif op == "get":
            outcome = read_variable(namespace, name, plain=False)
        else:
            outcome = Outcome(error_type="__protocol__", message=f"unknown op {op!r}")
        reply = {"value": outcome.value, "error_type": outcome.error_type, "message": outcome.message}
        if outcome.where:
            reply["where"] = outcome.where
        if outcome.warnings:
            reply["warnings"] = outcome.warnings
        output = self.output.take()
        if output:
            reply["output"] = output
        try:
            return protocol.encode(reply)
        except protocol.Unsupported as error:
            unread = unreadable(name, error)
            return protocol.encode({"value": None, "error_type": unread.error_type, "message": unread.message, "output": output})

    def call_with_substitutes(self, request: dict) -> bytes:
        """A call with some names bound, for this call only, to stand-ins for the reference.

        Runs in a throwaway fork of this sandbox: whatever the student's code stores while the
        stand-ins are bound (the stand-in itself, results it obtained through it) dies with the
        fork, so no later call of the student's own functions can reuse the reference. A stand-in
        sends a ``callback`` frame (plain data) on the channel and waits for the trusted side's
        reply; it refuses once its call is over. The fork's reply comes back through a pipe and
        is sent from here. Where a fork is refused (process limit), the call runs in place and the
        original bindings are restored in ``finally``.
        """
        names = [str(item) for item in request.get("substitutes", [])]
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            return self._substituted_reply(request, names)
        if pid == 0:  # the throwaway fork
            try:
                os.close(read_end)
                _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                frame = self._substituted_reply(request, names)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(frame)
            finally:
                os._exit(0)
        os.close(write_end)
        chunks = []
        with os.fdopen(read_end, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        os.waitpid(pid, 0)
        frame = b"".join(chunks)
        if not frame:
            return protocol.encode({"value": None, "error_type": CRASHED, "message": _("调用时进程意外退出")})
        return frame

    def swap_begin(self, request: dict) -> bytes:
        """A swap session: a throwaway fork of this sandbox with each name in ``substitutes``
        bound to a stand-in, serving the calls of swapped tests on a channel of its own (sent by
        the grader right after this request) until the grader closes that channel.

        As with a single swapped call, whatever the student's code keeps while the stand-ins are
        bound (the stand-in itself, the reference's results) lives only in the fork: this
        sandbox, which answers every call that is not swapped, never sees it. The stand-ins answer
        only while one of the fork's requests is open. Replies ``{"swap": "forked"}``, or
        ``{"swap": "refused"}`` where no fork can be made (the grader then swaps call by call)."""
        names = [str(item) for item in request.get("substitutes", [])]
        try:
            _data, fds, _flags, _address = socket.recv_fds(self.channel, 1, 1)
        except OSError:
            fds = []
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return protocol.encode({"swap": "refused"})
        try:
            swap = socket.socket(fileno=fds[0])
        except OSError:
            os.close(fds[0])
            return protocol.encode({"swap": "refused"})
        try:
            pid = os.fork()
        except OSError:
            swap.close()
            return protocol.encode({"swap": "refused"})
        if pid == 0:  # the session's fork: serve the swap channel, then vanish
            try:
                _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                self.channel.close()
                self.channel = swap
                self.forks = []
                self.live = []
                namespace = self.shell.user_ns
                for key in names:
                    namespace[key] = self._stand_in(key, self.live)
                self._serve_requests()
            finally:
                os._exit(0)
        swap.close()
        self.forks.append(pid)
        return protocol.encode({"swap": "forked"})

    def _reap_forks(self) -> None:
        """Reap ended swap sessions (our own forks only: the student's children are theirs)."""
        for pid in list(self.forks):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.forks.remove(pid)

    def _substituted_reply(self, request: dict, names: list[str]) -> bytes:
        namespace = self.shell.user_ns
        live = [True]
        saved = {key: namespace[key] for key in names if key in namespace}
        for key in names:
            namespace[key] = self._stand_in(key, live)
        try:
            return self.handle({**request, "op": "call"})
        finally:
            live.clear()
            for key in names:
                if key in saved:
                    namespace[key] = saved[key]
                else:
                    namespace.pop(key, None)

    def _stand_in(self, name: str, live: list) -> Any:
        channel = self.channel

        def stand_in(*args: Any, **kwargs: Any) -> Any:
            if not live:
                raise RuntimeError(_("参考的 {name} 只在评分时的那一次调用中可用").format(name=name))
            try:
                frame = protocol.encode({"callback": name, "args": list(args), "kwargs": dict(kwargs)})
            except protocol.Unsupported as error:
                raise TypeError(_("{name} 只接受张量、数字等数据作参数：{error}").format(name=name, error=error)) from None
            channel.sendall(frame)
            reply = protocol.receive(channel)
            if not isinstance(reply, dict):
                raise RuntimeError(_("参考的 {name} 没有返回结果").format(name=name))
            if reply.get("error_type"):
                raise _builtin_exception(str(reply["error_type"]), str(reply.get("message") or ""))
            return reply.get("value")

        stand_in.__name__ = stand_in.__qualname__ = name
        return stand_in

    def run_cell(self, source: str) -> dict:
        started = time.perf_counter()
        result = self.shell.run_cell(source, store_history=False, silent=False)
        error = result.error_before_exec or result.error_in_exec
        reply: dict[str, Any] = {"ok": error is None, "seconds": time.perf_counter() - started}
        if error is not None:
            reply["error_type"] = type(error).__name__
            reply["message"] = str(error)[:MAX_MESSAGE]
            # The student's own failing line: a syntax error knows it; otherwise the innermost
            # frame of their code (perhaps a function from an earlier cell).
            if isinstance(error, SyntaxError) and error.lineno:
                reply["line"], reply["text"] = int(error.lineno), str(error.text or "").strip()[:300]
            elif (where := student_frame(error.__traceback__)) is not None:
                reply["line"], reply["text"] = int(where["line"]), str(where["text"])[:300]
        reply["output"] = self.output.take()
        return reply


def _home_environment(home: str) -> dict[str, str]:
    return {"HOME": home, "MPLCONFIGDIR": home, "IPYTHONDIR": home, "TMPDIR": home}


_OURS: list[Any] = [-1, ()]  # len(sys.modules) when last listed, and attnkit's modules then


def _our_modules() -> tuple[str, ...]:
    """attnkit's modules in ``sys.modules``, listed in the zygote (see ``_spawn``) so that a
    sandbox need not walk all of ``sys.modules`` itself: touching every module name's reference
    count would copy some 700 pages of the zygote's memory into each sandbox."""
    if _OURS[0] != len(sys.modules):
        _OURS[:] = [len(sys.modules), tuple(name for name in list(sys.modules) if name == "attnkit" or name.startswith("attnkit."))]
    return _OURS[1]


def _builtin_exception(type_name: str, message: str) -> Exception:
    import builtins

    cls = getattr(builtins, type_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(message)


def start_sandbox(channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell, mode: Mode, placed: int) -> None:
    """In the zygote's fresh child: wait until the zygote has mapped our user and placed us in our
    control group (one byte on ``placed``: "1" if capped), lock down, serve, and never return."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    byte = os.read(placed, 1)
    os.close(placed)
    sandbox = Sandbox(channel, settings, shell)
    try:
        if byte not in (b"0", b"1"):
            raise IsolationError(0, "the zygote could not set up this sandbox")
        sandbox.lock_down(mode, capped=byte == b"1")
        sandbox.serve()
    except BaseException as error:  # noqa: BLE001 - report set-up failures, then die quietly
        try:
            protocol.send(channel, {"ready": False, "error": f"{type(error).__name__}: {error}"})
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(0)


class Sandboxes:
    """The zygote's live sandboxes and their control groups, removed once each is reaped."""

    def __init__(self, can_make_cgroups: bool) -> None:
        self.groups: dict[int, Cgroup | None] = {}
        self.workdirs: dict[int, str] = {}  # unisolated sandboxes' folders (isolated: a tmpfs)
        self.count = 0
        self.spawned = 0  # sandboxes forked so far (each takes the next uid of a pool block)
        self.can_make_cgroups = can_make_cgroups

    def new_group(self, settings: dict[str, Any]) -> Cgroup | None:
        """A control group for the next sandbox: the whole submission's memory and processes."""
        if not self.can_make_cgroups:
            return None
        self.count += 1
        try:
            # What the submission allocates, all its processes together. Pages it shares with the
            # zygote are charged to the zygote; the few it copies on write (~40 MB for the whole
            # chapter notebook) count here.
            memory = int(settings.get("memory_mb", DEFAULT_MEMORY_MB)) * 1024 * 1024
            return Cgroup(f"attnkit-{os.getpid()}-{self.count}", memory, DEFAULT_MAX_PROCESSES)
        except OSError:
            return None

    def started(self, pid: int, group: Cgroup | None) -> bool:
        """Put the new sandbox in its group; whether it is capped."""
        if group is not None:
            try:
                group.add(pid)
            except OSError:  # the sandbox runs on its rlimits alone; its group is removed
                group.remove()
                group = None
        self.groups[pid] = group
        return group is not None

    def reap(self, block: bool = False) -> None:
        while self.groups:
            try:
                pid, _status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            group = self.groups.pop(pid, None)
            if group is not None:
                group.remove()
            if pid in self.workdirs:
                remove_folder(self.workdirs.pop(pid))

    def end_all(self) -> None:
        for pid in list(self.groups):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap(block=True)


def remove_folder(path: str) -> None:
    """Remove an unisolated sandbox's folder once the sandbox is gone, with whatever its code left
    there: folders it made unreadable included (itself too), never following a link out of it."""
    _remove_tree(path, None, MAX_FOLDER_DEPTH)


MAX_FOLDER_DEPTH = 64


def _remove_tree(name: str, parent: int | None, depth: int) -> None:
    """Folder ``name`` (a path, or a name in the folder open as ``parent``) and what it holds,
    ``depth`` levels down: each folder made accessible first; a link is removed, never followed."""
    try:
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
    except (OSError, ValueError, NotImplementedError):
        pass  # a link where a folder was (Python refuses to chmod one in place): the open refuses it
    try:
        folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return
    try:
        for entry in os.scandir(folder):
            try:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=folder)
                elif depth > 0:
                    _remove_tree(entry.name, folder, depth - 1)
            except OSError:
                continue
    finally:
        os.close(folder)
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass


MADV_COLLAPSE = 25  # Linux 6.1+
HUGE_PAGE = 2 << 20


def _collapse_into_huge_pages() -> int:
    """Back the zygote's large private heaps (torch's import alone leaves ~140 MB of them) with
    2 MiB pages, where the kernel can: a fork then copies one page-table entry per 2 MiB instead
    of 512, and a sandbox's exit tears down as few. Pages a sandbox writes are still copied 4 KiB
    at a time. Only what exists now is collapsed (no MADV_HUGEPAGE): a sandbox's own new memory
    stays in small pages. Returns the bytes collapsed; an older kernel (EINVAL) or a machine
    without huge pages just leaves everything as it was."""
    collapsed = 0
    try:
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
    except OSError:
        return 0
    for fields in regions:
        start, end = (int(value, 16) for value in fields[0].split("-"))
        anonymous = len(fields) < 6 or fields[5] == "[heap]"
        if fields[1] != "rw-p" or not anonymous:
            continue
        low, high = -(-start // HUGE_PAGE) * HUGE_PAGE, end // HUGE_PAGE * HUGE_PAGE
        if high - low >= 2 * HUGE_PAGE and _libc.madvise(ctypes.c_void_p(low), ctypes.c_size_t(high - low), MADV_COLLAPSE) == 0:
            collapsed += high - low
    return collapsed


# What most submissions do at least once: fail. A cell's first traceback (IPython's formatter,
# pygments, linecache), a function's first exception or warning, cost a sandbox 5-10 ms cold.
_FAILURES = (
    "def _warm(x):\n    raise NotImplementedError()\n_warm(1)",
    "torch.ones(2, 3) @ torch.ones(2, 3)",
    "def _broken(:\n    pass",
    "assert torch.allclose(torch.ones(2), torch.zeros(2)), 'differs'",
    "import warnings\nwarnings.warn('warm')\ntorch.ones(2, 2).T",
)


def _warm_failures(shell: InteractiveShell) -> None:
    """Fail once here, in each of the usual ways, so that every sandbox inherits the warm path."""
    real = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.StringIO()
    try:
        for source in _FAILURES:
            shell.run_cell(source, store_history=False, silent=False)
        namespace = shell.user_ns
        shell.run_cell("def _raises(x):\n    return x @ x.T + torch.ones(5)\ndef _warns(x):\n    import warnings\n"
                       "    warnings.warn('warm')\n    return x", store_history=False)
        for name in ("_raises", "_warns"):
            protocol.encode(run_in_namespace(namespace, name, (torch.ones(2, 3),), {}, plain=False).__dict__)
    except Exception:  # noqa: BLE001 - a colder sandbox, never a zygote that does not start
        pass
    finally:
        sys.stdout, sys.stderr = real


def _address_space() -> int:
    """This process's virtual size: a sandbox's memory limit comes on top of what it inherits."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _isolate(mode: Mode, hide: list[str]) -> Mode:
    """Build the sandboxes' root once (its folders in ``visible``); a zygote that cannot is not
    isolated, and says why. Without namespaces: the layer that needs none, where the OS has it."""
    if not mode.isolated:
        mode, _LAYER[0] = nonamespace.choose(mode, hide)
        return mode
    if not mode.namespaced:
        return mode
    try:
        mode.visible = build_root(hide)
        return mode
    except OSError as error:
        return Mode("none", f"could not build the sandbox's root: {error}")


def _spawn(mode: Mode, sandboxes: Sandboxes, channel: socket.socket, settings: dict[str, Any], shell: InteractiveShell, control: socket.socket) -> int:
    """Fork one sandbox; its pid once it is mapped and placed (nothing of the student's has run)."""
    group = sandboxes.new_group(settings)
    # Unisolated, a folder of the host's /tmp: made here, so that it is removed once reaped.
    workdir = settings["workdir"] = None if mode.namespaced else tempfile.mkdtemp(prefix="sandbox-")
    block = _LAYER[0].block if _LAYER[0] is not None else None
    if block is not None:  # as root without namespaces: this sandbox's uid, of the zygote's own block
        settings["sandbox_uid"] = block.uid(sandboxes.spawned)
    sandboxes.spawned += 1
    _our_modules()  # listed here, before the fork (the sandbox only reads the list)
    placed_read, placed_write = os.pipe()
    try:
        pid = clone_sandbox() if mode.namespaced else os.fork()
    except OSError:
        os.close(placed_read)
        os.close(placed_write)
        if group is not None:
            group.remove()
        if workdir is not None:
            remove_folder(workdir)
        raise
    if pid == 0:
        control.close()
        os.close(placed_write)
        start_sandbox(channel, settings, shell, mode, placed_read)
    os.close(placed_read)
    if workdir is not None:
        sandboxes.workdirs[pid] = workdir
    ready = b"0"
    try:
        if mode.namespaced:
            map_sandbox_user(pid, mode)
        # No code of the student's runs before this byte: the sandbox is inside its group first.
        ready = b"1" if sandboxes.started(pid, group) else b"0"
    except OSError:
        ready = b"x"  # the sandbox reports that it could not be set up, and exits
        sandboxes.started(pid, group)
    os.write(placed_write, ready)
    os.close(placed_write)
    return pid


def warm_shell() -> InteractiveShell:
    """What a zygote does first, whatever it grades: the shell, warm for the protocol and for the
    usual ways a cell fails."""
    # The imports, made with the collector off, out of its view before anything else: the full
    # collections that follow (a zygote's own, and the one in IPython's reset) walk only what came after.
    gc.freeze()
    shell = _new_shell()
    protocol.decode(protocol.encode((torch.ones(2, 2), {"a": [1, 2.0, "x", None, True]})))
    _warm_failures(shell)
    return shell


def serve_forever(control: socket.socket, config: dict[str, Any], mode: Mode, shell: InteractiveShell | None = None) -> None:
    """The zygote loop: one request per sandbox, one reply with its pid. ``shell``: the seed's
    (``warm_shell``), else made here."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:  # it and every sandbox keep to its worker's CPUs
        os.sched_setaffinity(0, [int(cpu) for cpu in config.get("cpus") or []] or os.sched_getaffinity(0))
    except (OSError, ValueError, TypeError):
        pass
    if shell is None:
        shell = warm_shell()
    # Run the kind of code every submission runs once here (the assignments' warm_up hooks), so
    # each sandbox inherits warm caches (torch's op dispatch, IPython's compiler) instead of
    # paying for them again.
    shell.run_cell(str(config.get("warm_up", "")), store_history=False, silent=True)
    shell.reset(new_session=False)  # and every sandbox starts from an empty namespace
    # The release notebooks' cells (public: the students' own starting point), compiled once here.
    for source in config.get("cells", []):
        shell.prepare_cell(str(source))
    # The grader's language, its catalogue compiled now: the project's files are out of view after
    # _isolate, and every sandbox forked from here inherits it in memory.
    i18n.set_language(config.get("lang"), export=False)
    i18n.catalogue(i18n.LOCALE_DIR, i18n.DOMAIN)
    # Nothing allocated so far is garbage a sandbox must ever collect: out of the collector's view,
    # a sandbox's collections no longer walk (and so copy on write) the zygote's whole heap.
    gc.collect()
    gc.freeze()
    gc.enable()  # student code may rely on it
    if os.environ.get("ATTNKIT_HUGE_PAGES", "1") != "0":
        _collapse_into_huge_pages()
    mode = _isolate(mode, [str(p) for p in config.get("hide", [])])
    if mode.namespaced:
        # Every isolated sandbox's home is the same folder of its own root: set once here (a
        # sandbox setting them itself touches ~160 pages it would then have to copy).
        os.environ.update(_home_environment(SANDBOX_HOME))
    sandboxes = Sandboxes(mode.can_make_cgroups)
    if mode.can_make_cgroups:
        sweep_stale()
    address_space = _address_space()
    protocol.send(control, {
        "zygote": "ready", "pid": os.getpid(),
        "isolation": {"kind": mode.kind, "why": mode.why, "sandbox_user": mode.sandbox_host_uid, "visible": mode.visible,
                      "exposed": mode.exposed},
    })
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 1 << 16, 1)
        except OSError:
            message = b""
        if not message:
            # The grader is done. Nothing here needs flushing, and an orderly interpreter exit
            # (torch, IPython, matplotlib) costs about half a second per worker.
            sandboxes.end_all()
            os._exit(0)
        sandboxes.reap()
        settings = json.loads(message)
        settings["address_space_base"] = address_space
        if "plan" in settings:
            if fds:
                try:
                    hold_plan(str(settings["plan"]), fds[0])
                except (OSError, ValueError):
                    pass  # sandboxes then just get the whole batch
            continue
        if not fds:
            continue
        channel = socket.socket(fileno=fds[0])
        try:
            pid = _spawn(mode, sandboxes, channel, settings, shell, control)
        except OSError as error:  # never a weaker sandbox instead: the grader is told why
            protocol.send(control, {"pid": None, "error": _("无法启动沙箱：{error}").format(error=error)})
            continue
        finally:
            channel.close()
        protocol.send(control, {"pid": pid})


def serve_seed(requests: socket.socket, mode: Mode) -> None:
    """``--seed`` (``attnkit.seed``): warm once, then fork a zygote for each request on
    ``requests`` (one end of a worker's socketpair, by SCM_RIGHTS). Each child receives its
    worker's configuration on that socket and serves it as a zygote started on its own would.
    When the grader closes ``requests``: wait for the children to end, kill what is left, exit."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    shell = warm_shell()
    gc.collect()
    gc.freeze()
    if os.environ.get("ATTNKIT_HUGE_PAGES", "1") != "0":
        # Shared with every child: the parts a child never writes stay one copy.
        _collapse_into_huge_pages()
    children: set[int] = set()
    seed = os.getpid()
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(requests, 64, 1)
        except OSError:
            message, fds = b"", []
        children -= _reaped(children)
        if not message:
            break
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            # Dies with the seed from now on (a fork does not inherit it), even before its worker's
            # configuration arrives: then its worker, at the end of a closed socket, starts its own.
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != seed:
                os._exit(0)
            requests.close()
            _serve_from_seed(socket.socket(fileno=fds[0]), mode, shell)
        os.close(fds[0])
        children.add(pid)
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        children -= _reaped(children)
        time.sleep(0.01)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


def _reaped(children: set[int]) -> set[int]:
    ended = set()
    for pid in children:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                ended.add(pid)
        except ChildProcessError:
            ended.add(pid)
    return ended


def _serve_from_seed(control: socket.socket, mode: Mode, shell: InteractiveShell) -> None:
    """In the seed's child: never returns into the seed's loop."""
    try:
        try:
            config = protocol.receive(control)
        except (OSError, protocol.ProtocolError):
            os._exit(0)  # its worker went away before configuring it
        if not isinstance(config, dict):
            os._exit(1)
        serve_forever(control, config, own_mount_namespace(mode), shell)
    finally:
        os._exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "--seed":
        serve_seed(socket.socket(fileno=int(sys.argv[2])), MODE)
    serve_forever(socket.socket(fileno=int(sys.argv[1])), json.loads(sys.argv[2]), MODE)
