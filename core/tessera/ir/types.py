"""Static tensor types: an element type and a shape of non-negative ints.

Besides numpy's own types, :class:`DType` has the low-precision types of ``ml_dtypes`` (the
package onnx itself uses for them): bfloat16, the float8 variants, float4 e2m1 and the 4-bit and
2-bit integers. numpy stores each in a whole byte (two for bfloat16), so a tensor of them is an
ordinary array of ``ml_dtypes`` scalars. They are *storage* types: the reference backend casts,
quantizes, dequantizes and moves them, and computes with the float ones in float32; no other
backend's kernels read them (a backend claims only nodes whose operands it handles, so such nodes
fall back to ``ref``).

* ``is_float`` is true for bfloat16, the float8 types, float8 e8m0 and float4 e2m1: they are
  floating-point numbers (ops that take floats take them, computing in float32);
* ``is_int`` stays false for int4/uint4/int2/uint2: numpy's integer machinery (``np.iinfo``,
  integer ufuncs, bit operations) does not work on them; ops that take them name them.
* ``is_low_precision`` is true for all of these.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import StrEnum

import ml_dtypes
import numpy as np

from tessera.errors import IRError


class DType(StrEnum):
    """Element types of tensors. The value is the numpy name."""

    float16 = "float16"
    float32 = "float32"
    float64 = "float64"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    bool = "bool"
    # low-precision types (ml_dtypes; one byte per element, two for bfloat16)
    bfloat16 = "bfloat16"
    float8_e4m3fn = "float8_e4m3fn"
    float8_e4m3fnuz = "float8_e4m3fnuz"
    float8_e5m2 = "float8_e5m2"
    float8_e5m2fnuz = "float8_e5m2fnuz"
    float8_e8m0fnu = "float8_e8m0fnu"
    float4_e2m1fn = "float4_e2m1fn"
    int4 = "int4"
    uint4 = "uint4"
    int2 = "int2"
    uint2 = "uint2"

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY_DTYPES[self.value]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        """float16/32/64 and the low-precision floats (bfloat16, float8, float4)."""
        return self.value in _FLOATS

    @property
    def is_int(self) -> bool:
        """numpy's integer types (not int4/uint4/int2/uint2: see the module docstring)."""
        return self.numpy.kind in "iu"

    @property
    def is_low_precision(self) -> bool:
        """Whether this is one of ``ml_dtypes``' types (bfloat16, float8, float4, int4, ...)."""
        return self.value in _LOW_PRECISION

    @staticmethod
    def from_numpy(dtype: np.dtype | type | str) -> DType:
        name = np.dtype(dtype).name
        try:
            return DType(name)
        except ValueError:
            raise IRError(f"unsupported element type {name!r}; expected one of "
                          f"{', '.join(d.value for d in DType)}") from None

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TensorType:
    """A tensor's static type. ``shape`` is a tuple of ints (``()`` for a scalar)."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise IRError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, DType):
            object.__setattr__(self, "dtype", DType.from_numpy(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        """The type of a numpy array."""
        return TensorType(tuple(array.shape), DType.from_numpy(array.dtype))

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def max_tensor_bytes() -> int:
    """The largest tensor Tessera agrees to plan: ``TESSERA_MAX_TENSOR_BYTES``, else the
    machine's physical memory (a bigger tensor could never be allocated here)."""
    env = os.environ.get("TESSERA_MAX_TENSOR_BYTES")
    if env:
        return int(env)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return 1 << 40


def human_bytes(n: int) -> str:
    """``n`` bytes for a message: ``40.0 GiB``."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} bytes"


def oversize(type: TensorType) -> str | None:
    """Why a tensor of ``type`` is too big to plan (its size and the limit), or None."""
    limit = max_tensor_bytes()
    if type.nbytes <= limit:
        return None
    return (f"{type} takes {human_bytes(type.nbytes)}, more than the {human_bytes(limit)} a "
            f"tensor may take here (this machine's memory; TESSERA_MAX_TENSOR_BYTES sets it)")


#: The DTypes backed by ``ml_dtypes`` (their value is the ml_dtypes name).
_LOW_PRECISION = frozenset({
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"})
_FLOATS = frozenset({"float16", "float32", "float64"}) | (
    _LOW_PRECISION - {"int4", "uint4", "int2", "uint2"})

#: Each DType's numpy dtype, made once (``DType.numpy`` is read on every run's input checks).
_NUMPY_DTYPES: dict[str, np.dtype] = {
    d.value: np.dtype(getattr(ml_dtypes, d.value) if d.value in _LOW_PRECISION else d.value)
    for d in DType}
