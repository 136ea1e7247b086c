"""ONNX external data: weights kept in files beside the model, read straight into their arrays.

A model past protobuf's 2 GB limit keeps its tensors' bytes outside the ``.onnx`` file: each
such tensor has ``data_location = EXTERNAL`` and ``external_data`` entries naming a file
(``location``, relative to the model's folder), an ``offset`` into it and a ``length``.
``onnx.load`` would read every byte into the proto (a whole copy of the weights, and a proto
that cannot be serialised again past 2 GB); Tessera loads the graph only and leaves the data
where it is:

- :func:`resolve_external_data` (at load) checks every external tensor once: its file exists
  beside the model, and holds the bytes the tensor's type needs at its offset; a missing or
  short file is a :class:`~tessera.errors.ModelImportError` naming the tensor and the file.
  It records where the bytes are in two more ``external_data`` entries of Tessera's own
  (:data:`PATH_KEY`: the file's absolute path; :data:`BASE_KEY`: bytes of that file before
  the location's offset, 0 except in an artifact, where the data file is a member of the tar),
  so the proto can be serialised (it holds no weights) and read again in this process
  without the model's folder. ``location`` stays relative (the proto is still valid ONNX).
  The two entries' names hold a number drawn when the process starts: a model from
  elsewhere that names them anyway is not believed.
- :func:`read_external` gives one tensor's array: mapped read-only from its file
  (:mod:`tessera.ir.mapped`: no copy; the file's pages are the weight's memory) when it is
  large, else read into a new aligned array (one read, no intermediate ``bytes``).
- :func:`inline_external_data` gives a copy whose tensors hold their bytes (a model handed to
  code that expects ``raw_data``, such as the quantizer's output); :func:`external_tensors`
  lists them; :func:`pack_external_data` lays them out in one blob for an artifact.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tessera.errors import ModelImportError
from tessera.ir.aligned import ALIGNMENT, aligned_empty
from tessera.ir.mapped import MAP_MIN_BYTES, map_readonly, mapping_enabled

__all__ = ["BASE_KEY", "PATH_KEY", "PLAIN_TYPES", "external_tensors", "inline_external_data",
           "pack_external_data", "read_external", "resolve_external_data", "tensor_array",
           "uses_external"]

#: Element types whose raw bytes are the array's (little-endian) as numpy reads them.
PLAIN_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
    onnx.TensorProto.UINT16, onnx.TensorProto.INT32, onnx.TensorProto.UINT32,
    onnx.TensorProto.INT64, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})
#: Drawn when the process starts: Tessera's own ``external_data`` entries are named with it,
#: so a model from elsewhere cannot point Tessera at a file of its choosing (an entry of
#: another process, or made up, is not Tessera's).
_NONCE = secrets.token_hex(8)
#: ``external_data`` entry Tessera adds: the absolute path of the file holding the bytes.
PATH_KEY = f"tessera.path.{_NONCE}"
#: ``external_data`` entry Tessera adds: where the location's byte 0 is inside that file.
BASE_KEY = f"tessera.base.{_NONCE}"


def uses_external(t: onnx.TensorProto) -> bool:
    """Whether ``t`` keeps its bytes in an external file."""
    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def external_tensors(proto: onnx.ModelProto | onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model (initializers and tensor attributes, in sub-graphs too) that
    keeps its bytes in an external file."""
    graph = proto.graph if isinstance(proto, onnx.ModelProto) else proto
    for t in graph.initializer:
        if uses_external(t):
            yield t
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t") and uses_external(attr.t):
                yield attr.t
            for t in attr.tensors:
                if uses_external(t):
                    yield t
            if attr.HasField("g"):
                yield from external_tensors(attr.g)
            for g in attr.graphs:
                yield from external_tensors(g)


def _entries(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _set_entry(t: onnx.TensorProto, key: str, value: str) -> None:
    for e in t.external_data:
        if e.key == key:
            e.value = value
            return
    entry = t.external_data.add()
    entry.key, entry.value = key, value


def _int_entry(t: onnx.TensorProto, entries: dict[str, str], key: str) -> int | None:
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        value = -1
    if value < 0:
        raise ModelImportError(f"tensor {t.name!r}: external data {key} {entries[key]!r} is "
                               f"not a byte count")
    return value


def _expected_bytes(t: onnx.TensorProto) -> int | None:
    """The bytes ``t``'s type and dims take as raw data (None for strings)."""
    if t.data_type == onnx.TensorProto.STRING:
        return None
    count = int(np.prod(t.dims, dtype=np.int64))
    four_bit = {getattr(onnx.TensorProto, name, None)
                for name in ("INT4", "UINT4", "FLOAT4E2M1")} - {None}
    if t.data_type in four_bit:  # two to a byte
        return (count + 1) // 2
    # raw data holds each element in its own size (not the typed field's storage type)
    return count * int(np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize)


def _span(t: onnx.TensorProto) -> tuple[Path | None, str, int, int]:
    """(resolved file or None, location, first byte in that file, bytes) of ``t``."""
    entries = _entries(t)
    location = entries.get("location", "")
    if not location:
        raise ModelImportError(f"tensor {t.name!r} keeps its data externally but names no "
                               f"file (external_data has no 'location')")
    offset = _int_entry(t, entries, "offset") or 0
    length = _int_entry(t, entries, "length")
    expected = _expected_bytes(t)
    if length is None:
        if expected is None:
            raise ModelImportError(f"tensor {t.name!r}: external string data needs a length")
        length = expected
    elif expected is not None and length != expected:
        raise ModelImportError(f"tensor {t.name!r} of dims {list(t.dims)} needs {expected} "
                               f"bytes; its external data says {length}")
    path = Path(entries[PATH_KEY]) if PATH_KEY in entries else None
    base = _int_entry(t, entries, BASE_KEY) or 0
    return path, location, base + offset, length


def resolve_external_data(proto: onnx.ModelProto, model_dir: str | os.PathLike | None,
                          what: str = "the model") -> onnx.ModelProto:
    """Check every external tensor of ``proto`` (in place) and record where its bytes are
    (see the module doc). ``model_dir`` is the folder of the model file the locations are
    relative to; None when the model came as a proto or bytes: a tensor not resolved before
    (by Tessera, in this process) is then an error saying how to give the data."""
    sizes: dict[Path, int] = {}
    for t in external_tensors(proto):
        path, location, start, length = _span(t)
        if path is None:
            if model_dir is None:
                raise ModelImportError(
                    f"tensor {t.name!r} keeps its data in the external file {location!r}, "
                    f"relative to the model file's folder, and {what} came without its path: "
                    f"give tessera the model's path, or load it with onnx.load(path) (which "
                    f"reads the external data into the model)")
            rel = PurePosixPath(location.replace("\\", "/"))
            if rel.is_absolute() or ".." in rel.parts or Path(location).is_absolute():
                raise ModelImportError(f"tensor {t.name!r}: external data location "
                                       f"{location!r} must be a path inside the model's "
                                       f"folder (relative, without '..')")
            path = (Path(model_dir) / Path(*rel.parts)).resolve()
        if path not in sizes:
            try:
                sizes[path] = path.stat().st_size if path.is_file() else -1
            except OSError:
                sizes[path] = -1
        size = sizes[path]
        if size < 0:
            raise ModelImportError(f"tensor {t.name!r} keeps its data in {str(path)!r}, which "
                                   f"does not exist (the external data file "
                                   f"{location!r} must sit beside the model file)")
        if start + length > size:
            raise ModelImportError(f"tensor {t.name!r} needs bytes {start} to {start + length} "
                                   f"of {str(path)!r}, which holds {size}: the data file is "
                                   f"short (truncated, or from another export)")
        _set_entry(t, PATH_KEY, str(path))
    return proto


def _located(t: onnx.TensorProto) -> tuple[Path, int, int]:
    """(file, first byte, bytes) of a resolved external tensor."""
    path, location, start, length = _span(t)
    if path is None:
        raise ModelImportError(f"tensor {t.name!r} keeps its data in the external file "
                               f"{location!r}, which was not resolved against the model's "
                               f"folder (load the model from its path)")
    return path, start, length


def read_external(t: onnx.TensorProto) -> np.ndarray:
    """The array of external tensor ``t`` (resolved by :func:`resolve_external_data`): mapped
    from its file, read-only, at whatever alignment it has there; or read into a new 64-byte
    aligned array (see the module doc)."""
    path, start, length = _located(t)
    if sys.byteorder != "little" or t.data_type not in PLAIN_TYPES:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(t)
        _hold_bytes(tensor, _read_bytes(t))
        return numpy_helper.to_array(tensor)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
    # mapped at any offset (a model file's own bytes sit where protobuf put them): a consumer
    # that needs alignment copies (tessera.ir.aligned.as_aligned)
    if length >= MAP_MIN_BYTES and mapping_enabled():
        try:
            return map_readonly(path, start, tuple(t.dims), dtype)
        except (OSError, ValueError):
            pass  # a file that cannot be mapped (a pipe, some network file systems)
    out = aligned_empty(tuple(t.dims), dtype)
    if out.size:
        _read_into(t, path, start, memoryview(out.reshape(-1)).cast("B"))
    return out


def tensor_array(t: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array(t)``, reading an external tensor's bytes from its file."""
    return read_external(t) if uses_external(t) else numpy_helper.to_array(t)


def _read_into(t: onnx.TensorProto, path: Path, start: int, buf: memoryview) -> None:
    """Fill ``buf`` with ``t``'s bytes from ``path`` at ``start`` (its whole length)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            got = f.readinto(buf) or 0
    except OSError as e:
        raise ModelImportError(f"tensor {t.name!r}: cannot read its external data from "
                               f"{str(path)!r}: {e}") from None
    if got != len(buf):
        raise ModelImportError(f"tensor {t.name!r} needs bytes {start} to {start + len(buf)} "
                               f"of {str(path)!r}, which ends after {start + got}: the data "
                               f"file is short (changed since the model was loaded?)")


def _read_bytes(t: onnx.TensorProto) -> bytes:
    path, start, length = _located(t)
    data = bytearray(length)
    if length:
        _read_into(t, path, start, memoryview(data))
    return bytes(data)


def _hold_bytes(t: onnx.TensorProto, data: bytes) -> None:
    """Make external tensor ``t`` hold ``data`` as its raw data (in place)."""
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT
    t.raw_data = data


def inline_external_data(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` itself when no tensor is external, else a copy whose external tensors hold
    their bytes as raw data (for models within protobuf's 2 GB)."""
    if next(external_tensors(proto), None) is None:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t in external_tensors(copy):
        _hold_bytes(t, _read_bytes(t))
    return copy


def pack_external_data(proto: onnx.ModelProto, location: str) -> tuple[onnx.ModelProto, bytes]:
    """A copy of ``proto`` whose external tensors all live in one file ``location`` (beside
    the model; each at a 64-byte aligned offset), and that file's bytes: how an artifact
    stores a model with external data."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    blob = bytearray()
    for t in external_tensors(copy):
        data = _read_bytes(t)
        blob += bytes(-len(blob) % ALIGNMENT)
        offset = len(blob)
        blob += data
        del t.external_data[:]
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(len(data)))):
            _set_entry(t, key, value)
    return copy, bytes(blob)


