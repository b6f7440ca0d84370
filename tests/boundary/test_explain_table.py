"""Runtime-error explanations keyed on what really happened (issue 41), checked on a table of real
messages: each row's operation is run here and its message must be the one recorded (torch
2.13.0+cpu on CPython 3.11.2) and be explained as its kind; Python's own messages were also
recorded on CPython 3.12.1 and 3.13.0 (pyenv's, which have no torch: torch's messages come from
its C++ and do not depend on the Python)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from attnkit.boundary.explain import EXPLANATIONS, explain, explanation_kind


def _three(query, key, value, allowed=None):  # a student's function, as the chapter's API has it
    return query


_OPERATIONS: dict[str, tuple[Callable[[], object], str, str, str]] = {
    # name: (the operation, its exception type, its message as recorded, the kind it must get)
    "softmax over dim 2 of a 2-D tensor": (
        lambda: torch.randn(2, 3).softmax(dim=2),
        "IndexError",
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
        "dimension",
    ),
    "softmax over dim 3 of a 3-D tensor": (
        lambda: torch.randn(2, 3, 4).softmax(dim=3),
        "IndexError",
        "Dimension out of range (expected to be in range of [-3, 2], but got 3)",
        "dimension",
    ),
    "transpose(2, 3) of a 2-D key": (
        lambda: torch.randn(2, 3).transpose(2, 3),
        "IndexError",
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
        "dimension",
    ),
    "a mask with an extra axis": (
        lambda: torch.randn(2, 3, 4, 6).masked_fill(torch.ones(4, 1, 6, dtype=torch.bool), 0.0),
        "RuntimeError",
        "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1",
        "broadcast",
    ),
    "adding a (4, 3) bias to (2, 3) scores": (
        lambda: torch.randn(2, 3) + torch.randn(4, 3),
        "RuntimeError",
        "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0",
        "broadcast",
    ),
    "a matmul whose head dims differ": (
        lambda: torch.randn(2, 3, 4, 5) @ torch.randn(2, 2, 5, 4),
        "RuntimeError",
        "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1",
        "broadcast",
    ),
    "weights @ V^T, 2-D": (
        lambda: torch.randn(1, 3) @ torch.randn(2, 3),
        "RuntimeError",
        "mat1 and mat2 shapes cannot be multiplied (1x3 and 2x3)",
        "matmul",
    ),
    "weights @ V^T, 4-D": (
        lambda: torch.randn(1, 1, 3, 3) @ torch.randn(1, 1, 2, 3),
        "RuntimeError",
        "Expected size for first two dimensions of batch2 tensor to be: [1, 3] but got: [1, 2].",
        "matmul",
    ),
    "Q @ K without the transpose, 3-D": (
        lambda: torch.randn(3, 2, 7) @ torch.randn(3, 4, 7),
        "RuntimeError",
        "Expected size for first two dimensions of batch2 tensor to be: [3, 7] but got: [3, 4].",
        "matmul",
    ),
    "torch.bmm on 4-D heads": (
        lambda: torch.bmm(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 2, 3)),
        "RuntimeError",
        "batch1 must be a 3D tensor",
        "batch_dims",
    ),
    "torch.bmm on a 2-D matrix": (
        lambda: torch.bmm(torch.randn(3, 2), torch.randn(2, 3)),
        "RuntimeError",
        "batch1 must be a 3D tensor",
        "batch_dims",
    ),
    "view after transpose": (
        lambda: torch.randn(2, 3, 4).transpose(1, 2).view(2, 12),
        "RuntimeError",
        "view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces)."
        " Use .reshape(...) instead.",
        "view",
    ),
    "reshape to the wrong size": (lambda: torch.randn(2, 3, 4).reshape(5, 5), "RuntimeError", "shape '[5, 5]' is invalid for input of size 24", "reshape"),
    "float32 @ float64": (
        lambda: torch.randn(2, 3) @ torch.randn(3, 2, dtype=torch.float64),
        "RuntimeError",
        "expected m1 and m2 to have the same dtype, but got: float != double",
        "dtype",
    ),
    "masked_fill with a float mask": (
        lambda: torch.randn(2, 2).masked_fill(torch.ones(2, 2), 0.0),
        "RuntimeError",
        "masked_fill_ only supports boolean masks, but got mask with dtype float",
        "mask_dtype",
    ),
    "where with a float condition": (
        lambda: torch.where(torch.ones(2, 2), torch.randn(2, 2), 0.0),
        "RuntimeError",
        "where expected condition to be a boolean tensor, but got a tensor with dtype Float",
        "mask_dtype",
    ),
    "~ of a float mask": (lambda: ~torch.ones(2, 2), "TypeError", "~ (operator.invert) is only implemented on integer and Boolean-type tensors", "mask_dtype"),
    "an unexpected keyword": (lambda: _three(1, 2, 3, mask=None), "TypeError", "_three() got an unexpected keyword argument 'mask'", "keyword"),
    "a missing argument": (lambda: _three(1, 2), "TypeError", "_three() missing 1 required positional argument: 'value'", "arguments"),
    "too many arguments": (lambda: _three(1, 2, 3, 4, 5), "TypeError", "_three() takes from 3 to 4 positional arguments but 5 were given", "arguments"),
    "a missing name": (lambda: eval("d_k", {}), "NameError", "name 'd_k' is not defined", "name"),
}

# Python's own messages on the other Pythons the kit supports (recorded with pyenv's 3.12.1 and
# 3.13.0: the same words as 3.11's for these; the function's name differs).
OTHER_PYTHONS = [
    ("TypeError", "f() got an unexpected keyword argument 'mask'", "keyword"),
    ("TypeError", "f() missing 1 required positional argument: 'v'", "arguments"),
    ("TypeError", "f() takes from 3 to 4 positional arguments but 5 were given", "arguments"),
    ("NameError", "name 'd_k' is not defined", "name"),
    ("ModuleNotFoundError", "No module named 'einops'", "module"),
]


@pytest.mark.parametrize("name", list(_OPERATIONS))
def test_a_real_message_is_explained_by_what_happened(name):
    operation, type_name, recorded, kind = _OPERATIONS[name]
    with pytest.raises(Exception) as caught:
        operation()
    assert type(caught.value).__name__ == type_name
    assert str(caught.value) == recorded, "torch or Python words this differently now: record the new message and check its kind"
    assert explanation_kind(type_name, recorded) == kind
    assert explain(type_name, recorded)  # every kind has its text


@pytest.mark.parametrize(("type_name", "message", "kind"), OTHER_PYTHONS)
def test_pythons_own_messages_on_3_12_and_3_13(type_name, message, kind):
    assert explanation_kind(type_name, message) == kind


def test_no_explanation_for_what_we_cannot_tell():
    assert explain("ValueError", "empty row") == "" and explain("RuntimeError", "something else entirely") == ""


def test_each_kind_is_reached_by_some_real_message():
    reached = {kind for *_rest, kind in _OPERATIONS.values()} | {kind for *_rest, kind in OTHER_PYTHONS}
    assert reached == set(EXPLANATIONS)


def test_dot_t_on_more_than_two_dimensions_keeps_its_own_explanation():
    text = explain("RuntimeError", "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1", "scores = q @ k.T")
    assert re.search(r"\.T", text) and "transpose(-2, -1)" in text
