"""Op: ``BitCast``, reinterpreting the bits of each element as another element type.

As ONNX specifies (opset 26), the two element types must have the same bit width, the shape
does not change and the bytes are read as little endian. Unlike ``Cast`` no value is converted:
a float32 ``1.0`` bit-cast to int32 is ``0x3F800000``. The 4-bit types (int4, uint4, float4
e2m1) and the 2-bit ones (int2, uint2) reinterpret among themselves: ``ml_dtypes`` keeps each
element in the low bits of its own byte, so viewing that byte reinterprets the element.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op

#: Element types narrower than the byte numpy stores them in.
_SUB_BYTE_BITS = {DType.int4: 4, DType.uint4: 4, DType.float4_e2m1fn: 4, DType.int2: 2,
                  DType.uint2: 2}


def bit_width(dtype: DType) -> int:
    """The number of bits of one element of ``dtype`` (bool: 8, one byte)."""
    return _SUB_BYTE_BITS.get(dtype, dtype.itemsize * 8)


def check_bitcast(src: DType, to: DType) -> None:
    """Raise :class:`OpError` unless ``src`` elements can be reinterpreted as ``to``."""
    if bit_width(src) != bit_width(to):
        raise OpError(f"the input element type {src} ({bit_width(src)} bits) and 'to' {to} "
                      f"({bit_width(to)} bits) must have the same bit width")


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


__all__ = ["bit_width", "bitcast", "check_bitcast"]
