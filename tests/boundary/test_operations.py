"""The list of sandbox operations (``attnkit.boundary.operations``) and of a worker's messages
(``attnkit.engine.messages``): each builder makes the bytes the wire has always carried, a real
sandbox serves every operation listed, and no module on either side spells one itself."""

from __future__ import annotations

import ast
import json
import socket
from pathlib import Path

import pytest
import torch

from attnkit.boundary import operations
from attnkit.boundary import wire
from attnkit.engine import messages
from attnkit.boundary.policy import Limits
from attnkit.driver.zygote_handle import Zygote

SRC = Path(__file__).resolve().parents[2] / "src" / "attnkit"

# Each builder beside the message it must equal, written out as the wire has carried it (keys in
# this order: a request is also the key of a prefetched answer, compared as bytes).
TENSOR = torch.arange(6, dtype=torch.float32).reshape(2, 3)
FRAMES = {
    "cell": (operations.cell("x = 1"), {"op": "cell", "source": "x = 1"}),
    "call": (operations.call("f", (TENSOR, 2), {"allowed": None}), {"op": "call", "name": "f", "args": [TENSOR, 2], "kwargs": {"allowed": None}}),
    "get": (operations.get("answer"), {"op": "get", "name": "answer"}),
    "call_with": (
        operations.call_with("f", (TENSOR,), {}, {"split_heads": None, "causal_allowed": None}),
        {"op": "call_with", "name": "f", "args": [TENSOR], "kwargs": {}, "substitutes": ["causal_allowed", "split_heads"]},
    ),
    "plain_call": (operations.plain_call(operations.call_with("f", (TENSOR,), {}, ["g"])), {"op": "call", "name": "f", "args": [TENSOR], "kwargs": {}}),
    "swap_begin": (operations.swap_begin(frozenset({"split_heads", "causal_allowed"})), {"op": "swap_begin", "substitutes": ["causal_allowed", "split_heads"]}),
    "batch": (operations.batch([{"op": "get", "name": "a"}]), {"op": "batch", "requests": [{"op": "get", "name": "a"}]}),
    "batch_budget": (operations.batch([], 30.0), {"op": "batch", "requests": [], "cell_budget": 30.0}),
    "held_batch": (operations.held_batch("ab" * 32), {"op": "batch", "plan": "ab" * 32}),
    "bye": (operations.bye(), {"op": "bye"}),
    "swap_forked": (operations.swap_reply(forked=True), {"swap": "forked"}),
    "swap_refused": (operations.swap_reply(forked=False), {"swap": "refused"}),
    "callback": (operations.callback("g", (TENSOR,), {"k": 1}), {"callback": "g", "args": [TENSOR], "kwargs": {"k": 1}}),
}
CONTROL = {  # the zygote's control socket: JSON
    "spawn": (operations.spawn(2048, 120), {"memory_mb": 2048, "cpu_seconds": 120}),
    "hold_plan": (operations.hold_plan("ab" * 32), {"plan": "ab" * 32}),
}
MESSAGES = {  # a worker's to its parent
    "fatal": (messages.fatal("why"), {"fatal": "why"}),
    "started": (messages.started(12, "s/a"), {"started": 12, "key": "s/a"}),
    "chunk_done": (messages.chunk_done([12, 13]), {"chunk_done": True, "jobs": [12, 13]}),
    "chunk_failed": (messages.chunk_failed("why", [12]), {"chunk_failed": "why", "jobs": [12]}),
    "record": (messages.record(12, {"student_id": "s", "tests": []}), {"record": {"student_id": "s", "tests": []}, "job": 12}),
    "from_worker": (messages.from_worker({"started": 12, "key": "s/a"}, 7), {"started": 12, "key": "s/a", "pid": 7}),
}


@pytest.mark.parametrize("name", FRAMES)
def test_each_request_is_the_frame_the_wire_has_carried(name: str) -> None:
    built, carried = FRAMES[name]
    assert wire.encode(built) == wire.encode(carried)


@pytest.mark.parametrize("name", [*CONTROL, *MESSAGES])
def test_each_control_and_worker_message_is_as_before(name: str) -> None:
    built, carried = {**CONTROL, **MESSAGES}[name]
    assert json.dumps(built) == json.dumps(carried)


def test_a_message_is_read_as_its_kind_with_fatal_first() -> None:
    kinds = {name: messages.kind_of(built) for name, (built, _wire) in MESSAGES.items()}
    assert kinds == {
        "fatal": "fatal",
        "started": "started",
        "chunk_done": "chunk_done",
        "chunk_failed": "chunk_failed",
        "record": "record",
        "from_worker": "started",
    }
    # A record that names no job (the format before issue 50) is no message at all: the parent discards it.
    assert messages.kind_of({"student_id": "s", "assignment": "a", "tests": [], "pid": 7}) is None
    assert messages.kind_of({**messages.chunk_done([1]), **messages.fatal("why")}) == messages.FATAL


@pytest.mark.e2e
def test_a_real_sandbox_serves_every_operation_listed() -> None:
    """Each name in ``operations.OPERATIONS``, built by its builder and sent to a sandbox forked by
    a real zygote: answered as that operation (never as an unknown one), and ``bye`` ends it."""
    zygote = Zygote(trusted=True)
    channel, _pid = zygote.spawn(Limits())
    try:
        channel.settimeout(30)
        assert wire.receive(channel)["ready"]
        served = set()

        def ask(request: dict) -> dict:
            served.add(request["op"])
            wire.send(channel, request)
            return wire.receive(channel)

        cell = ask(operations.cell("answer = 42\ndef double(x):\n    return helper(x) * 2\ndef helper(x):\n    return x\n"))
        assert cell["ok"], cell
        assert ask(operations.get("answer"))["value"] == 42
        assert torch.equal(ask(operations.call("double", (torch.ones(2),), {}))["value"], torch.full((2,), 2.0))
        # call_with: the stand-in for helper asks us (a callback frame) and gets our answer.
        served.add(operations.CALL_WITH)
        wire.send(channel, operations.call_with("double", (torch.ones(2),), {}, ["helper"]))
        callback = wire.receive(channel)
        assert callback[operations.CALLBACK] == "helper"
        wire.send(channel, {"value": torch.full((2,), 5.0), "error_type": None, "message": ""})
        assert torch.equal(wire.receive(channel)["value"], torch.full((2,), 10.0))
        # swap_begin: a session on a channel of its own, whose calls are plain ones.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        served.add(operations.SWAP_BEGIN)
        wire.send(channel, operations.swap_begin(["helper"]))
        socket.send_fds(channel, [b"\0"], [theirs.fileno()])
        theirs.close()
        assert wire.receive(channel) == operations.swap_reply(forked=True)
        ours.settimeout(30)
        wire.send(ours, operations.plain_call(operations.call_with("double", (torch.ones(2),), {}, ["helper"])))
        assert wire.receive(ours)[operations.CALLBACK] == "helper"
        wire.send(ours, {"value": torch.full((2,), 3.0), "error_type": None, "message": ""})
        assert torch.equal(wire.receive(ours)["value"], torch.full((2,), 6.0))
        ours.close()
        # batch: one reply each, in order.
        served.add(operations.BATCH)
        wire.send(channel, operations.batch([operations.get("answer"), operations.call("double", (torch.ones(1),), {})]))
        assert wire.receive(channel)["value"] == 42
        assert torch.equal(wire.receive(channel)["value"], torch.full((1,), 2.0))
        # What is not an operation is answered as none (so the checks above do tell them apart).
        wire.send(channel, {"op": "no_such_operation"})
        assert wire.receive(channel)["error_type"] == "__protocol__"
        served.add(operations.BYE)
        wire.send(channel, operations.bye())
        with pytest.raises(wire.PeerClosed):
            wire.receive(channel)
        assert served == set(operations.OPERATIONS)
    finally:
        channel.close()
        zygote.close()


# The modules on either side of the sandbox's channel and of the worker's pipe. (plugin.py is not
# one: its "call" is pytest's report phase.)
BOUNDARY = [
    "boundary/outcome.py",
    "grading/student.py",
    "driver/submission.py",
    "driver/zygote_handle.py",
    "driver/swapped_calls.py",
    "driver/replies.py",
    "sandbox/server.py",
    "sandbox/fork_server.py",
    "sandbox/seed_server.py",
    "driver/seed.py",
    "sandbox/zygote.py",
    "sandbox/warm_shell.py",
    "sandbox/lockdown/sequence.py",
    "grading/scope.py",
    "engine/worker.py",
    "engine/fan_out.py",
]
SPELLED_HERE_ONLY = {
    *operations.OPERATIONS,
    operations.CALLBACK,
    operations.PLAN,
    operations.SWAP,
    operations.SKIPPED,
    operations.SWAP_FORKED,
    operations.SWAP_REFUSED,
    operations.OP,
    *messages.KINDS,
}


def spelled_names(path: Path) -> list[str]:
    """Where ``path``'s code (not its docstrings) writes one of the listed names as a string."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    # A method's name (``getattr(backend, "call_with")``) is Python's, not the wire's.
    attributes = {
        id(node.args[1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) > 1
    }
    return [
        f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | attributes and node.value in SPELLED_HERE_ONLY
    ]


def test_no_module_at_the_boundary_spells_an_operation_or_a_message() -> None:
    """Every operation and worker message is spelled in its own module only: the others build
    requests through its builders and dispatch on its names."""
    assert [hit for name in BOUNDARY for hit in spelled_names(SRC / name)] == []
