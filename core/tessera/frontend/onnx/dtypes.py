"""ONNX element types as Tessera's: what the importer and the converters share."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tessera.errors import ModelImportError
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
    """An initializer's array (its element type checked)."""
    try:
        array = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001
        raise ModelImportError(f"initializer {t.name!r} cannot be read: {e}") from None
    onnx_dtype(t.data_type, f"initializer {t.name!r}")
    return array
