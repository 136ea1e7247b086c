"""ONNX element types as Tessera's: what the importer and the converters share."""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tessera.errors import ModelImportError
from tessera.frontend.onnx.external_data import PLAIN_TYPES, read_external, uses_external
from tessera.ir.aligned import aligned_empty, as_aligned
from tessera.ir.types import DType


def onnx_dtype(elem_type: int, what: str) -> DType:
    """The Tessera element type of an ONNX ``TensorProto.DataType``."""
    try:
        np_type = helper.tensor_dtype_to_np_dtype(elem_type)
        return DType.from_numpy(np_type)
    except Exception:  # noqa: BLE001
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise ModelImportError(f"{what}: element type {name} is not supported; expected one of "
                               f"{', '.join(d.value for d in DType)}") from None


def read_initializer(t: onnx.TensorProto) -> np.ndarray:
    """An initializer's array (its element type checked), its data 64-byte aligned
    (:mod:`tessera.ir.aligned`): a backend that keeps the weight as it is uses this array
    rather than a copy of its own."""
    onnx_dtype(t.data_type, f"initializer {t.name!r}")
    if uses_external(t):
        return read_external(t)  # its own errors name the tensor and the file
    try:
        array = _raw_array(t)
        if array is None:
            array = as_aligned(numpy_helper.to_array(t))
    except Exception as e:  # noqa: BLE001
        raise ModelImportError(f"initializer {t.name!r} cannot be read: {e}") from None
    return array


def _raw_array(t: onnx.TensorProto) -> np.ndarray | None:
    """The array of an initializer stored as raw data in the model, read straight into an
    aligned array (one copy, where ``numpy_helper.to_array`` and an aligned copy would make
    two); None for any other storage (typed fields, packed types; external data is
    :func:`read_initializer`'s first case)."""
    if t.data_type not in PLAIN_TYPES or not t.HasField("raw_data") or sys.byteorder != "little":
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
    raw = t.raw_data
    count = int(np.prod(t.dims, dtype=np.int64))
    if len(raw) != count * dtype.itemsize:
        raise ValueError(f"raw data of {len(raw)} bytes for {count} elements of {dtype}")
    out = aligned_empty(tuple(t.dims), dtype)
    out.reshape(-1)[...] = np.frombuffer(raw, dtype=dtype)
    return out
