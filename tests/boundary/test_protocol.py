"""The wire protocol: only plain data crosses, and nothing a sandbox writes can run code here."""

from __future__ import annotations

import random
import socket
import struct
from collections import namedtuple

import pytest
import torch

from attnkit.boundary import wire


def roundtrip(value: object) -> object:
    return wire.decode(wire.encode(value))


def test_plain_data_survives_a_roundtrip() -> None:
    """Do tensors of every allowed dtype, numbers, strings, tuples, lists and dicts come back equal?"""
    tensors = [torch.randn(2, 3, dtype=dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)]
    tensors += [torch.tensor([[True, False]]), torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.zeros(0, 4)]
    value = (tensors, {"答案": [1, 2.5, None, True, "中文"]}, float("nan"), float("-inf"))
    back = roundtrip(value)
    assert isinstance(back, tuple) and isinstance(back[0], list)
    for original, copy in zip(tensors, back[0], strict=True):
        assert copy.dtype == original.dtype and copy.shape == original.shape and torch.equal(copy, original)
    assert back[1] == {"答案": [1, 2.5, None, True, "中文"]}
    assert back[2] != back[2] and back[3] == float("-inf")


def test_tuple_subclasses_travel_as_plain_tuples() -> None:
    """Is a shape answer written as `q.shape` (torch.Size) or a namedtuple read as a tuple of ints?"""
    assert roundtrip(torch.zeros(2, 3, 8).shape) == (2, 3, 8)
    assert type(roundtrip(torch.zeros(2, 3).shape)) is tuple
    Point = namedtuple("Point", "x y")
    assert type(roundtrip(Point(1, 2))) is tuple


def test_a_lying_tensor_subclass_arrives_as_a_plain_tensor() -> None:
    """Does a Tensor subclass whose __eq__ always says True arrive stripped to a base Tensor?"""

    class Liar(torch.Tensor):
        def __eq__(self, other):
            return True

    liar = torch.zeros(3).as_subclass(Liar)
    back = roundtrip(liar)
    assert type(back) is torch.Tensor
    assert not torch.equal(back, torch.ones(3))


class _Detour(torch.Tensor):
    """A subclass: encode takes its general path (strip, detach, contiguous, bytes via uint8)."""


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(2, 3, 4),
        lambda: torch.randn(3, 4).T,  # not contiguous
        lambda: torch.randn(4, 6)[:, ::2],  # strided
        lambda: torch.randn(1, 3).expand(1000, 3),  # stride 0
        lambda: torch.randn(3, requires_grad=True) * 2,  # needs grad
        lambda: torch.randn(4).neg().conj(),  # lazy bits
        lambda: torch.randn(2, 2)[0].neg(),
        lambda: torch.randn(2, 3, dtype=torch.bfloat16),
        lambda: torch.randn(2, 3, dtype=torch.float16),
        lambda: torch.randn(2, 3, dtype=torch.float64),
        lambda: torch.tensor([-0.0, 0.0, float("nan"), float("-inf")]),
        lambda: torch.zeros(0, 3),
        lambda: torch.tensor(3.5),  # 0-d
        lambda: torch.tensor([[True, False]]).T,
        lambda: torch.arange(12, dtype=torch.int8).reshape(3, 4)[1:],
        lambda: torch.arange(6, dtype=torch.uint8),
    ],
)
def test_the_fast_tensor_path_writes_the_same_frame(make) -> None:
    """Does a plain tensor, encoded on the fast path, give byte for byte the frame of the general
    path (the same tensor as a subclass), whatever its strides, grad, lazy bits or dtype?"""
    tensor = make()
    assert wire.encode({"x": [tensor, (tensor,)]}) == wire.encode({"x": [tensor.as_subclass(_Detour), (tensor.as_subclass(_Detour),)]})
    assert torch.equal(roundtrip(tensor), tensor.detach().resolve_neg().resolve_conj()) or tensor.isnan().any()
    sparse = torch.eye(3).to_sparse()  # not strided: the general path, as before
    assert wire.encode(sparse) == wire.encode(torch.eye(3))


def test_the_wire_format_stays_byte_for_byte() -> None:
    """Does a value with every kind of node (tensors fast and general, tuples and their
    subclasses, str-keyed dicts, big ints, NaN and infinities, numpy scalars, empty containers)
    still encode to the very frame it did when the encoder was last rewritten for speed?"""
    import hashlib

    import numpy

    point = namedtuple("point", "a b")
    value = {
        "op": "call",
        "name": "f",
        "args": [torch.arange(6, dtype=torch.float32).reshape(2, 3), (1, 2.5, None, True, "中文"), torch.Size([2, 3]), point(-7, torch.tensor([True, False]))],
        "kwargs": {
            "big": 2**70,
            "nan": float("nan"),
            "inf": float("-inf"),
            "half": torch.arange(3, dtype=torch.bfloat16),
            "empty": torch.zeros(0, 2, dtype=torch.int64),
            "scalar": numpy.float32(0.5),
            "nested": [[{"k": []}], {}],
        },
    }
    frame = wire.encode(value)
    assert (len(frame), hashlib.sha256(frame).hexdigest()) == (633, "f65b744e98dde5fc1b135878dc84816e42e26e0f8dede8a80ef3c753c2a2af9c")


@pytest.mark.parametrize("value", [object(), lambda: 1, {1: 2}, torch.zeros(2, dtype=torch.complex64), b"bytes", {"x"}])
def test_other_objects_are_refused(value: object) -> None:
    """Are functions, arbitrary objects, non-string dict keys, complex tensors, bytes and sets refused?"""
    with pytest.raises(wire.Unsupported):
        wire.encode(value)


def test_malformed_frames_raise_protocol_errors_only() -> None:
    """Do truncated, corrupted or random frames raise ProtocolError (never run code, never crash)?"""
    frame = wire.encode((torch.randn(4, 4), {"a": [1, 2, 3]}))
    generator = random.Random(0)
    for _ in range(500):
        broken = bytearray(frame)
        for _ in range(generator.randint(1, 8)):
            broken[generator.randrange(len(broken))] = generator.randrange(256)
        cut = broken[: generator.randint(0, len(broken))] if generator.random() < 0.3 else broken
        try:
            wire.decode(bytes(cut))
        except wire.ProtocolError:
            pass
    with pytest.raises(wire.ProtocolError):
        wire.decode(b"\x80\x04\x95pickle")


def test_a_tensor_header_cannot_claim_more_bytes_than_sent() -> None:
    """Is a tensor whose declared shape does not match its bytes rejected?"""
    body_sizes = b"[4]"
    header = b'{"__tensor__": 0, "dtype": "float32", "shape": [1000000]}'
    body = struct.pack("!I", len(body_sizes)) + body_sizes + header
    frame = struct.pack("!II", len(body), 4) + body + b"\0\0\0\0"
    with pytest.raises(wire.ProtocolError):
        wire.decode(frame)


def test_an_oversized_frame_is_refused_before_reading_it() -> None:
    """Does receive() refuse a frame that announces more than the limit, without allocating it?"""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack("!II", wire.MAX_FRAME_BYTES, 1))
        with pytest.raises(wire.ProtocolError):
            wire.receive(ours)


def test_a_huge_tensor_is_refused_both_ways() -> None:
    """Is a tensor above MAX_TENSOR_ELEMENTS refused when sent (a clear reason, before any copy of
    an expanded view) and when a forged frame claims one (before its bytes are used)?"""
    with pytest.raises(wire.Unsupported, match="过大"):
        wire.encode(torch.zeros(1, dtype=torch.bool).expand(wire.MAX_TENSOR_ELEMENTS + 1))
    thin = wire.encode(torch.zeros(wire.MAX_TENSOR_ELEMENTS, dtype=torch.bool))
    assert wire.decode(thin).shape == (wire.MAX_TENSOR_ELEMENTS,)
    # A forged frame that claims (and carries) one element more: refused.
    count = wire.MAX_TENSOR_ELEMENTS + 1
    sizes = f"[{count}]".encode()
    header = f'{{"__tensor__": 0, "dtype": "bool", "shape": [{count}]}}'.encode()
    body = struct.pack("!I", len(sizes)) + sizes + header
    forged = struct.pack("!II", len(body), count) + body + bytes(count)
    with pytest.raises(wire.ProtocolError, match="too large"):
        wire.decode(forged)


def _fingerprint_corpus() -> list[object]:
    """Values whose frames are equal or differ in the ways that matter: numbers a plain ``==``
    confuses (True and 1, 1 and 1.0, 0.0 and -0.0), strings cut at the limit, big ints and
    non-finite floats, containers and their order, subclasses and numpy scalars that travel as
    their plain base, and tensors by dtype, layout, strides, grad and sign of zero."""
    import numpy

    point = namedtuple("point", "a b")
    grid = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    long = "x" * wire.MAX_STRING
    values: list[object] = [None, True, False, 0, 1, -1, 1.0, 0.0, -0.0, 2.5, float("nan"), float("inf"), float("-inf")]
    values += [2**63, 2**64, float(2**64), "", "a", "1", long, long + "x", long + "yz"]
    values += [(), [], {}, (1, 2), [1, 2], (1, (2,)), (1, [2]), point(1, 2), torch.Size([1, 2]), {"a": 1}, {"b": 1}]
    values += [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"__tensor__": 0}, {"__dict__": {}}, [{"a": (1.0,)}], [{"a": (1,)}]]
    values += [numpy.float64(2.5), numpy.int64(1), numpy.bool_(True), numpy.float32(0.5), 0.5]
    values += [grid, grid.clone(), grid.T, grid.T.contiguous(), grid[:, :2], grid[:, :2].contiguous(), grid.double(), grid.half()]
    values += [grid.bfloat16(), grid.requires_grad_(False).clone().requires_grad_(True), torch.nn.Parameter(grid.clone())]
    values += [grid.as_subclass(_Detour), -grid, torch.tensor([0.0]), torch.tensor([-0.0]), torch.tensor([True]), torch.tensor([1], dtype=torch.uint8)]
    values += [torch.zeros(0), torch.zeros(0, 3), torch.eye(2).to_sparse(), torch.eye(2), torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)]
    values += [(grid, {"k": [grid]}), (grid, {"k": [grid.clone()]}), (grid.T, {"k": [grid]}), {"op": "call", "name": "f", "args": (grid,), "kwargs": {}}]
    return values


def test_fingerprints_are_equal_exactly_when_frames_are() -> None:
    """Does ``fingerprint`` (how a request is compared with the plan's, and the key of the probe and
    replay caches) tell two values apart exactly when their frames differ, for every pair of a
    corpus built to confuse it, and agree with the image of the general walker on each value?"""
    values = _fingerprint_corpus()
    frames = [wire.encode(value) for value in values]
    prints = [wire.fingerprint(value) for value in values]
    for print_ in prints:
        hash(print_)
    wrong = [
        (i, j)
        for i in range(len(values))
        for j in range(len(values))
        if (prints[i] == prints[j]) != (frames[i] == frames[j])
    ]
    assert not wrong, [(values[i], values[j]) for i, j in wrong[:5]]
    assert len(set(frames)) < len(frames), "the corpus must hold values that encode alike"
    for value, print_ in zip(values, prints, strict=True):
        blobs: list[bytes] = []
        assert wire._image(wire._walk(value, 0, blobs), blobs) == print_, value


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [object(), {1: 2}, torch.zeros(2, dtype=torch.complex64), _nested(wire.MAX_DEPTH + 1)])
def test_a_value_the_wire_refuses_has_no_fingerprint(value: object) -> None:
    """Does ``fingerprint`` refuse what ``encode`` refuses, rather than match it to something?"""
    with pytest.raises(wire.Unsupported):
        wire.encode(value)
    with pytest.raises(wire.Unsupported):
        wire.fingerprint(value)


def test_a_header_with_anything_around_its_json_is_refused() -> None:
    """Is a frame whose header holds more than one JSON value (or none) refused as malformed?"""
    good = wire.encode({"a": [1, 2]})
    body_length, payload_length = struct.unpack_from("!II", good)
    body = good[8 : 8 + body_length]
    (sizes_length,) = struct.unpack_from("!I", body)
    header = body[4 + sizes_length :]
    for changed in (header + b" 1", header + b"x", b"", b" " + header):
        new_body = body[: 4 + sizes_length] + changed
        with pytest.raises(wire.ProtocolError):
            wire.decode(struct.pack("!II", len(new_body), payload_length) + new_body + good[8 + body_length :])
    assert wire.decode(good) == {"a": [1, 2]}
