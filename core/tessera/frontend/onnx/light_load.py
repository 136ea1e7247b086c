"""Loading an ``.onnx`` file without copying its weights: large initializers stay in the file.

``onnx.load`` parses the whole file, every initializer's ``raw_data`` included: a copy of the
weights in the proto, which the importer then copies again into its arrays (BERT-base: 0.4 GB
twice, and half a second of parsing). :func:`load_light` reads the file's protobuf encoding
just far enough to find the main graph's initializers: each whose ``raw_data`` holds at least
:data:`~tessera.ir.mapped.MAP_MIN_BYTES` is parsed without it and becomes an external-data
tensor whose location is the model file itself, at the offset where its bytes sit
(:mod:`.external_data` reads it, mapped from the file: :mod:`tessera.ir.mapped`). The rest of
the model (nodes, attributes, small initializers, sub-graphs) is parsed as ``onnx.load``
would. A file whose encoding this reader does not follow (a text format, an unexpected wire
type) is left to ``onnx.load``: :func:`load_light` returns None.

The protobuf encoding read here: a message is a sequence of fields, each a varint key
(``field_number << 3 | wire_type``) and a value: a varint (wire type 0), 8 bytes (1), a
varint length and that many bytes (2), or 4 bytes (5). ``ModelProto.graph`` is field 7,
``GraphProto.initializer`` field 5, ``TensorProto.raw_data`` field 9 and
``TensorProto.data_location`` field 14.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import onnx

from tessera.frontend.onnx.external_data import PATH_KEY
from tessera.ir.mapped import MAP_MIN_BYTES

__all__ = ["load_light"]

_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_TENSOR_DATA_LOCATION = 14


class _Unsupported(Exception):
    """An encoding this reader does not follow (left to ``onnx.load``)."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Unsupported("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field, wire type, field start, value start, value end)`` of each field in
    ``buf[start:end]`` (for wire type 2, the value is the bytes after the length)."""
    pos = start
    while pos < end:
        key, value = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, stop = _varint(buf, value)
        elif wire == 1:
            stop = value + 8
        elif wire == 2:
            length, value = _varint(buf, value)
            stop = value + length
        elif wire == 5:
            stop = value + 4
        else:
            raise _Unsupported(f"wire type {wire}")
        if stop > end:
            raise _Unsupported("a field runs past its message")
        yield field, wire, pos, value, stop
        pos = stop


def _light_tensor(buf: memoryview, start: int, end: int) -> tuple[bytes, int, int] | None:
    """The tensor's encoding without its ``raw_data``, and where that data sits (start,
    length); None to keep the tensor as it is (small, external already, or unusual)."""
    raw: list[tuple[int, int, int]] = []
    for field, wire, at, value, stop in _fields(buf, start, end):
        if field == _TENSOR_RAW_DATA and wire == 2:
            raw.append((at, value, stop))
        elif field == _TENSOR_DATA_LOCATION:
            return None  # external already, or a location this reader leaves alone
    if len(raw) != 1 or raw[0][2] - raw[0][1] < MAP_MIN_BYTES:
        return None
    at, value, stop = raw[0]
    return bytes(buf[start:at]) + bytes(buf[stop:end]), value, stop - value


def load_light(path: str | Path) -> onnx.ModelProto | None:
    """The model of file ``path`` with its large initializers left in the file (see the
    module doc), or None when the file is not one this reader follows."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.seek(0, 2) == 0:
                return None
            region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        return _load(memoryview(region), path)
    except _Unsupported:
        return None
    finally:
        try:
            region.close()
        except BufferError:  # a view still alive (an exception's frames): closed when freed
            pass


def _load(buf: memoryview, path: Path) -> onnx.ModelProto | None:
    out = bytearray()
    spans: list[tuple[int, int, int]] = []  # (initializer index, data start, length)
    graphs = 0
    for field, wire, at, value, stop in _fields(buf, 0, len(buf)):
        if field != _MODEL_GRAPH or wire != 2:
            out += buf[at:stop]
            continue
        graphs += 1
        graph = bytearray()
        index = 0
        for gfield, gwire, gat, gvalue, gstop in _fields(buf, value, stop):
            if gfield == _GRAPH_INITIALIZER and gwire == 2:
                light = _light_tensor(buf, gvalue, gstop)
                if light is not None:
                    tensor, data, length = light
                    graph += _encode_varint(gfield << 3 | 2) + _encode_varint(len(tensor))
                    graph += tensor
                    spans.append((index, data, length))
                    index += 1
                    continue
                index += 1
            graph += buf[gat:gstop]
        out += _encode_varint(field << 3 | 2) + _encode_varint(len(graph)) + graph
    if graphs != 1 or not spans:
        return None  # nothing to leave in the file (or a graph field twice: onnx.load merges)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(bytes(out))
    except Exception:  # noqa: BLE001 - protobuf's decode errors: leave the file to onnx.load
        return None
    where = str(path.resolve())
    for index, data, length in spans:
        t = proto.graph.initializer[index]
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", path.name), ("offset", str(data)),
                           ("length", str(length)), (PATH_KEY, where)):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
    return proto
