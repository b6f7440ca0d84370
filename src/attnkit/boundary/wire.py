"""The wire protocol between the trusted grader and an untrusted sandbox.

Only plain data crosses: None, bools, ints, floats, strings, lists, tuples, str-keyed dicts and
CPU tensors of a few dtypes. A frame is a JSON header followed by raw tensor bytes; decoding uses
``json`` and ``torch.frombuffer`` only, so nothing the sandbox writes can run code on our side
(no pickle, no ``torch.load``). Sizes are bounded so a hostile peer cannot exhaust our memory.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import numpy
import torch

from attnkit.i18n import _

MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 1024 * 1024
MAX_DEPTH = 16
MAX_ITEMS = 100_000
MAX_STRING = 100_000
# Elements of one tensor. The hidden tests' inputs have at most a few hundred elements, so a
# correct answer is far below this; the cap keeps any arithmetic the trusted side does on a
# returned tensor (broadcasting two of them included, once their shapes are checked) small.
MAX_TENSOR_ELEMENTS = 1_000_000

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_ITEMSIZE = {dtype: torch.empty((), dtype=dtype).element_size() for dtype in DTYPES.values()}
# Those numpy can hold (not bfloat16): their bytes come from ``Tensor.numpy()`` without a copy,
# and decoding reads them with ``numpy.frombuffer``.
_NUMPY_DTYPES = frozenset(dtype for dtype in DTYPES.values() if dtype is not torch.bfloat16)
_NUMPY_OF = {dtype: torch.empty(0, dtype=dtype).numpy().dtype for dtype in _NUMPY_DTYPES}

_LENGTH = struct.Struct("!II")  # header bytes, payload bytes
_SIZES_LENGTH = struct.Struct("!I")  # the blob table's bytes, at the start of the header
# One encoder for every header (``json.dumps`` with options builds a new one per call), and json's
# C encoder made once from its settings (``JSONEncoder.encode`` makes one per call). No cycle
# check: a header is a tree ``_walk`` has just built (a cyclic value stops there, too deep).
_HEADER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_header_text: Callable[[Any], str] = _HEADER.encode  # an interpreter without json's C speedups
if _make_c_encoder is not None:
    _c_header = _make_c_encoder(None, _HEADER.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, False)

    def _c_header_text(node: Any) -> str:
        return "".join(_c_header(node, 0))

    _header_text = _c_header_text
# json's own scanner (C), which ``json.loads`` wraps: one value from a position, and where it ends.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in JSONDecoder.__init__, not in the stubs


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame (or went away)."""


class PeerClosed(ProtocolError):
    """The peer closed the connection (or its process ended) before a whole frame came."""


class Unsupported(TypeError):
    """A value of a kind the protocol refuses to carry."""


def _plain_tensor(value: torch.Tensor) -> torch.Tensor:
    # A subclass could override anything (``__eq__``, ``tolist``...); strip it to a base tensor.
    try:
        tensor = value if type(value) is torch.Tensor else torch.Tensor.as_subclass(value, torch.Tensor)
    except (NotImplementedError, RuntimeError):  # a subclass of a sparse layout: nothing to view
        raise Unsupported(_("不支持的张量类型 {dtype}").format(dtype=type(value).__name__)) from None
    if tensor.is_sparse or tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    return tensor.detach().cpu().contiguous()


def _within_limit(numel: int) -> None:
    if numel > MAX_TENSOR_ELEMENTS:
        raise Unsupported(_("返回的张量过大（{count} 个元素，上限 {limit}）").format(count=numel, limit=MAX_TENSOR_ELEMENTS))


def _numpy_bytes(item: torch.Tensor) -> bytes | None:
    """The usual case, a plain CPU tensor: its bytes straight from numpy. None for the general
    path: a subclass, bfloat16, another layout or device, or what numpy refuses (a tensor that
    needs grad or has a lazy negation bit)."""
    if type(item) is not torch.Tensor or item.dtype not in _NUMPY_DTYPES or item.layout is not torch.strided or not item.is_cpu:
        return None
    if not torch.Tensor.numel(item):
        return b""
    try:
        return item.numpy().tobytes()
    except (RuntimeError, TypeError):
        return None


def memory_order(item: torch.Tensor) -> list[int] | None:
    """For a permuted view of dense memory (what ``transpose`` and ``permute`` return, e.g. the
    heads of split_heads), the dimensions in memory order; None for any other tensor. The frame
    carries the layout so the receiver gets the same kind of view: a function's own tests see the
    non-contiguous inputs its callers really give it."""
    if item.dim() < 2 or torch.Tensor.is_contiguous(item) or item.layout is not torch.strided:
        return None
    strides = item.stride()
    order = sorted(range(item.dim()), key=lambda dim: -strides[dim])
    if order == list(range(item.dim())) or not item.permute(order).is_contiguous():
        return None
    return order


def _in_memory_order(item: torch.Tensor) -> tuple[torch.Tensor, list[int] | None, bytes | None]:
    """``item`` viewed in memory order, that order (None: as it is), and its bytes where
    ``_numpy_bytes`` has them (None: the general path). What a frame and a fingerprint both take
    of a tensor."""
    # Before any copy: an expanded view of one element can claim 10**12 of them.
    _within_limit(torch.Tensor.numel(item))
    order = memory_order(item)
    if order is not None:
        item = item.permute(order)
    return item, order, _numpy_bytes(item)


def _walk_tensor(item: torch.Tensor, blobs: list[bytes]) -> dict:
    return _tensor_node(*_in_memory_order(item), blobs)


def _tensor_node(item: torch.Tensor, order: list[int] | None, data: bytes | None, blobs: list[bytes]) -> dict:
    """``item`` (in memory order: ``order`` applied) as a header node; ``data``: its bytes where
    ``_numpy_bytes`` had them, else None (the general path)."""
    tensor = item
    if data is None:
        tensor = _plain_tensor(item)
        if tensor.dtype not in DTYPE_NAMES:
            raise Unsupported(_("不支持的张量类型 {dtype}").format(dtype=tensor.dtype))
        _within_limit(tensor.numel())
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    blobs.append(data)
    node = {"__tensor__": len(blobs) - 1, "dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape)}
    if order is not None:
        node["order"] = order
    return node


def _walk(item: Any, depth: int, blobs: list[bytes]) -> Any:
    """``item`` as its JSON header node, its tensors' bytes appended to ``blobs``."""
    if depth > MAX_DEPTH:
        raise Unsupported(_("嵌套层数过多"))
    kind = type(item)
    # The exact types first, the commonest first; subclasses take the general checks below.
    if kind is torch.Tensor:
        return _walk_tensor(item, blobs)
    if item is None or kind is bool:
        return item
    if kind is str:
        return item[:MAX_STRING] if len(item) > MAX_STRING else item
    if kind is int:
        return item if abs(item) < 2**63 else {"__float__": float(item)}
    if kind is float:
        return item if math.isfinite(item) else {"__float__": repr(item)}
    if kind is dict:
        for key in item:
            if type(key) is not str:
                raise Unsupported(_("字典的键必须是字符串"))
        return {"__dict__": {key: _walk(val, depth + 1, blobs) for key, val in item.items()}}
    if isinstance(item, torch.Tensor):
        return _walk_tensor(item, blobs)
    if isinstance(item, (list, tuple)):
        # Subclasses (torch.Size, namedtuples) travel as their plain base: a shape answer
        # written as `q.shape` is a tuple of ints.
        if len(item) > MAX_ITEMS:
            raise Unsupported(_("列表过长"))
        if isinstance(item, tuple):
            return {"__tuple__": [_walk(element, depth + 1, blobs) for element in tuple.__iter__(item)]}
        return [_walk(element, depth + 1, blobs) for element in list.__iter__(item)]
    # numpy scalars are common in answers; carry their plain value only.
    if kind.__module__ == "numpy" and hasattr(item, "item"):
        plain = item.item()
        if type(plain) in (bool, int, float):
            return _walk(plain, depth, blobs)
    raise Unsupported(_("不支持的值类型 {type}").format(type=kind.__name__))


# -- fingerprints: equality of encodings without encoding --------------------------------------
# Comparing a request with the requests of the plan (is this the call the plan asked, so that its
# answer is already here?), keying a cache by a call's inputs: only whether two values would
# encode to the same frame matters, and building the frame (its JSON header above all) is most of
# that cost. A fingerprint is a hashable image of what ``_walk`` makes of a value, its header
# node with each tensor's bytes in place of the tensor's index: the frame is a function of it and
# it of the frame, so two fingerprints are equal exactly when the two frames are. Built directly
# for the common exact types (``_print``); anything else goes through ``_walk`` itself and the
# same image is taken of its node (``_image``), so the two ways agree by construction.
def fingerprint(value: Any) -> Any:
    """A hashable that equals another value's fingerprint exactly when ``encode`` would give the
    two the same bytes (and raises ``Unsupported`` where ``encode`` would)."""
    return _print(value, 0)


def _print(item: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise Unsupported(_("嵌套层数过多"))
    kind = type(item)
    if kind is torch.Tensor:
        item, order, data = _in_memory_order(item)
        if data is not None:  # the usual tensor, exactly as ``_tensor_node`` describes it
            fields: tuple = (("__tensor__", data), ("dtype", DTYPE_NAMES[item.dtype]), ("shape", ("l", tuple(item.shape))))
            return ("d", fields + (("order", ("l", tuple(order))),) if order is not None else fields)
        blobs: list[bytes] = []
        return _image(_tensor_node(item, order, data, blobs), blobs)
    if item is None or kind is str and len(item) <= MAX_STRING:
        return item
    if kind is bool:
        return ("b", item)
    if kind is int and abs(item) < 2**63:
        return item
    if kind is float and math.isfinite(item):
        return ("f", repr(item))
    if kind is tuple:
        return ("d", (("__tuple__", ("l", tuple([_print(element, depth + 1) for element in item]))),))
    if kind is list:
        return ("l", tuple([_print(element, depth + 1) for element in item]))
    if kind is dict and all(type(key) is str for key in item):
        return ("d", (("__dict__", ("d", tuple([(key, _print(val, depth + 1)) for key, val in item.items()]))),))
    blobs = []
    return _image(_walk(item, depth, blobs), blobs)


def _image(node: Any, blobs: list[bytes]) -> Any:
    """The fingerprint of a header node that ``_walk`` made (its tensors' bytes in ``blobs``)."""
    kind = type(node)
    if node is None or kind is str or kind is int:
        return node
    if kind is bool:
        return ("b", node)
    if kind is float:
        return ("f", repr(node))
    if kind is list:
        return ("l", tuple([_image(element, blobs) for element in node]))
    if "__dict__" in node:  # a dict of the value's own: its keys are the value's, not node fields
        return ("d", (("__dict__", ("d", tuple([(key, _image(val, blobs)) for key, val in node["__dict__"].items()]))),))
    return ("d", tuple([(key, blobs[val] if key == "__tensor__" else _image(val, blobs)) for key, val in node.items()]))


def encode(value: Any) -> bytes:
    """Serialise ``value`` into one frame (header + tensor blobs)."""
    blobs: list[bytes] = []
    header = _header_text(_walk(value, 0, blobs)).encode()
    payload = b"".join(blobs)
    sizes = ("[" + ", ".join([str(len(blob)) for blob in blobs]) + "]").encode()  # json.dumps' own form
    body = struct.pack("!I", len(sizes)) + sizes + header
    if len(body) + len(payload) > MAX_FRAME_BYTES:
        raise Unsupported(_("返回的数据过大"))
    return _LENGTH.pack(len(body), len(payload)) + body + payload


def decode(frame: bytes) -> Any:
    """Rebuild a value from one frame, without running any code from it."""
    try:
        return _decode(frame)
    except ProtocolError:
        raise
    except (struct.error, ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError, RuntimeError) as error:
        # Whatever a hostile peer sends, the caller sees one kind of error.
        raise ProtocolError(f"malformed frame: {type(error).__name__}") from None


def _json(data: bytes) -> Any:
    """One JSON value that is the whole of ``data`` (the sender writes no whitespace around it).
    The C scanner directly: ``json.loads`` adds two regular-expression passes per call."""
    text = data.decode()
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ProtocolError("bad header: no JSON value") from None
    if end != len(text):
        raise ProtocolError("bad header: extra data")
    return value


def _decode(frame: bytes) -> Any:
    if len(frame) < _LENGTH.size:
        raise ProtocolError("frame too short")
    body_length, payload_length = _LENGTH.unpack_from(frame)
    if body_length > MAX_HEADER_BYTES:
        raise ProtocolError("header too large")
    if _LENGTH.size + body_length + payload_length != len(frame):
        raise ProtocolError("frame length mismatch")
    body = frame[_LENGTH.size : _LENGTH.size + body_length]
    base = _LENGTH.size + body_length  # where the tensor bytes start
    (sizes_length,) = _SIZES_LENGTH.unpack_from(body)
    try:
        sizes = _json(body[4 : 4 + sizes_length])
        tree = _json(body[4 + sizes_length :])
    except ValueError as error:  # UnicodeDecodeError included
        raise ProtocolError(f"bad header: {error}") from None
    if type(sizes) is not list:
        raise ProtocolError("bad blob table")
    offsets = [0]
    total = 0
    for size in sizes:
        if type(size) is not int or size < 0:
            raise ProtocolError("bad blob table")
        total += size
        offsets.append(total)
    if total != payload_length:
        raise ProtocolError("blob sizes do not add up")

    def build(item: Any, depth: int) -> Any:
        if depth > MAX_DEPTH + 2:
            raise ProtocolError("too deep")
        kind = type(item)
        if item is None or kind is str or kind is int or kind is float or kind is bool:
            return item
        if kind is list:
            return [build(element, depth + 1) for element in item]
        if kind is dict:
            if "__tensor__" in item:
                return _tensor(item)
            if "__tuple__" in item:
                return tuple([build(element, depth + 1) for element in _field(item, "__tuple__", list)])
            if "__dict__" in item:
                return {str(k): build(v, depth + 1) for k, v in _field(item, "__dict__", dict).items()}
            if "__float__" in item:
                return float(_field(item, "__float__", (str, float)))
        raise ProtocolError("unknown node")

    def _tensor(node: dict) -> torch.Tensor:
        tensor = _dense(node)
        if "order" not in node:
            return tensor
        order = _field(node, "order", list)
        if sorted(order) != list(range(tensor.dim())) or not all(type(dim) is int for dim in order):
            raise ProtocolError("bad tensor order")
        # Back to the sender's view of that memory: the inverse of the permutation it applied.
        return tensor.permute([order.index(dim) for dim in range(tensor.dim())])

    def _dense(node: dict) -> torch.Tensor:
        index, name, shape = node.get("__tensor__"), node.get("dtype"), node.get("shape")
        if type(index) is not int or type(name) is not str or type(shape) is not list:
            raise ProtocolError("bad tensor node")
        dtype = DTYPES.get(name)
        if dtype is None or not 0 <= index < len(sizes):
            raise ProtocolError("bad tensor node")
        if len(shape) > MAX_DEPTH * 4:
            raise ProtocolError("too many dimensions")
        numel = 1
        for n in shape:
            if type(n) is not int or n < 0:
                raise ProtocolError("bad tensor node")
            numel *= n
        if numel > MAX_TENSOR_ELEMENTS:
            raise ProtocolError("tensor too large")
        if numel * _ITEMSIZE[dtype] != sizes[index]:
            raise ProtocolError("tensor size mismatch")
        if not numel:
            return torch.empty(shape, dtype=dtype)
        start = base + offsets[index]
        numpy_dtype = _NUMPY_OF.get(dtype)
        if numpy_dtype is not None:
            # One copy of just these bytes, aligned and owned by the tensor.
            return torch.from_numpy(numpy.frombuffer(frame, dtype=numpy_dtype, count=numel, offset=start).reshape(shape).copy())
        # bfloat16, which numpy lacks: a writable copy, then a tensor that owns its memory (clone).
        return torch.frombuffer(bytearray(frame[start : start + sizes[index]]), dtype=dtype).reshape(shape).clone()

    return build(tree, 0)


def _field(node: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    value = node.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise ProtocolError(f"bad field {name}")
    return value


def send(sock: socket.socket, value: Any) -> None:
    """Send one value as a frame."""
    sock.sendall(encode(value))


def receive(sock: socket.socket, deadline: float | None = None) -> Any:
    """Read exactly one frame and decode it. Raises ProtocolError on EOF or garbage, and
    ``socket.timeout`` when the whole frame has not arrived by ``deadline`` (time.monotonic()):
    a peer that drips one byte a second cannot stretch a time limit."""
    head = _read_exactly(sock, _LENGTH.size, deadline)
    body_length, payload_length = _LENGTH.unpack(head)
    # The JSON part is small (tensor bytes travel in the payload); a huge one is an attack on
    # the decoder's memory and time, refused before it is read.
    if body_length > MAX_HEADER_BYTES or body_length + payload_length > MAX_FRAME_BYTES:
        raise ProtocolError("frame too large")
    return decode(head + _read_exactly(sock, body_length + payload_length, deadline))


def _read_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(remaining)
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise PeerClosed("peer closed the connection")
        chunks += chunk
    return bytes(chunks)
