"""Op: ``BitCast``, reinterpreting the bits of each element as another element type.

As ONNX specifies (opset 26), the two element types must have the same width, the shape does
not change and the bytes are read as little endian. Unlike ``Cast`` no value is converted: a
float32 ``1.0`` bit-cast to int32 is ``0x3F800000``.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op


def check_bitcast(src: DType, to: DType) -> None:
    """Raise :class:`OpError` unless ``src`` elements can be reinterpreted as ``to``."""
    if src.itemsize != to.itemsize:
        raise OpError(f"the input element type {src} ({src.itemsize * 8} bits) and 'to' {to} "
                      f"({to.itemsize * 8} bits) must have the same bit width")


def _bitcast_infer(x: TensorType, *, to: DType) -> TensorType:
    check_bitcast(x.dtype, to)
    return x.with_dtype(to)


@register_op("BitCast", attrs={"to": Attr.dtype()}, infer=_bitcast_infer,
             pattern=OpPattern.ELEMWISE)
def bitcast(x: np.ndarray, *, to: DType) -> np.ndarray:
    """Each element's bytes (little endian) read as element type ``to`` of the same width."""
    check_bitcast(DType.from_numpy(x.dtype), to)
    little = x.astype(x.dtype.newbyteorder("<"), copy=False)
    return little.view(to.numpy.newbyteorder("<")).astype(to.numpy, copy=False)


__all__ = ["bitcast", "check_bitcast"]
