"""Tensor types: an element type and a shape of non-negative ints or, in a graph with symbolic
shapes, integer expressions over the model's size variables (``float32[batch, seq, 512]``).

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
import operator
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

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


@dataclass(frozen=True, eq=False)
class TensorType:
    """A tensor's type. ``shape`` is a tuple of dimensions (``()`` for a scalar), each an
    ``int`` or, in a graph with symbolic shapes, an integer expression over the model's size
    variables (a TIR expression: ``float32[batch, seq, 512]``; a ``str`` given for a dimension
    names a variable). Expressions are kept in a canonical form, so two types are equal when
    their dimensions are structurally equal (variables compare by name).

    A static type (every dimension an int) behaves as it always has: ``size`` and ``nbytes``
    are ints. A symbolic one gives them as expressions; :meth:`evaluate` and
    :meth:`upper_bound` give static types.
    """

    shape: tuple[Any, ...]
    dtype: DType

    def __post_init__(self) -> None:
        try:
            shape = tuple(operator.index(d) for d in self.shape)
        except TypeError:
            shape = tuple(_sym.normalize_dim(d, "TensorType") for d in self.shape)
        for d in shape:
            if isinstance(d, int):
                if d < 0:
                    raise IRError(f"negative dimension in shape {_sym.format_shape(shape)}")
            elif (hi := _sym.dim_algebra().bound(d, {})[1]) is not None and hi < 0:
                raise IRError(f"negative dimension {_sym.dim_str(d)} in shape "
                              f"{_sym.format_shape(shape)}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, DType):
            object.__setattr__(self, "dtype", DType.from_numpy(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """Whether every dimension is an int."""
        return all(type(d) is int for d in self.shape)

    @property
    def variables(self) -> set[str]:
        """The size variables the shape uses."""
        out: set[str] = set()
        for d in self.shape:
            if type(d) is not int:
                out |= _sym.dim_vars(d)
        return out

    @property
    def size(self) -> Any:
        """The element count: an int, or an expression for a symbolic type."""
        if self.is_static:
            return math.prod(self.shape)
        return _sym.prod_dims(self.shape)

    @property
    def nbytes(self) -> Any:
        """The size in bytes: an int, or an expression for a symbolic type."""
        size = self.size
        return size * self.dtype.itemsize if isinstance(size, int) else \
            _sym.normalize_dim(size * self.dtype.itemsize)

    def static_size(self, what: str = "the size") -> int:
        """:attr:`size` as an int; :class:`IRError` for a symbolic type."""
        if not self.is_static:
            raise IRError(f"{what} of {self} is not known before run time (symbolic shape)")
        return math.prod(self.shape)

    def evaluate(self, sizes: Mapping[str, int]) -> TensorType:
        """The static type at the variables' ``sizes``."""
        if self.is_static:
            return self
        return TensorType(tuple(_sym.eval_dim(d, sizes) for d in self.shape), self.dtype)

    def upper_bound(self, bounds: Mapping[str, int | tuple[int, int]]) -> TensorType:
        """A static type whose every dimension is at least this type's for the variables
        within ``bounds`` (a name -> upper bound, or (lower, upper)): what memory planning
        reserves. A variable without a bound is an error."""
        if self.is_static:
            return self
        ranges = {str(k): ((0, int(v)) if isinstance(v, (int, np.integer))
                           else (int(v[0]), int(v[1]))) for k, v in bounds.items()}
        missing = sorted(self.variables - set(ranges))
        if missing:
            raise IRError(f"{self}: no upper bound for {', '.join(missing)}")
        dims = []
        for d in self.shape:
            if type(d) is int:
                dims.append(d)
                continue
            hi = _sym.dim_algebra().bound(d, ranges)[1]
            if hi is None:
                raise IRError(f"{self}: dimension {_sym.dim_str(d)} has no upper bound for "
                              f"{ranges}")
            dims.append(max(int(hi), 0))
        return TensorType(tuple(dims), self.dtype)

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        """The type of a numpy array."""
        return TensorType(tuple(array.shape), DType.from_numpy(array.dtype))

    def with_shape(self, shape: tuple[Any, ...] | list[Any]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorType):
            return NotImplemented
        if self.dtype != other.dtype or len(self.shape) != len(other.shape):
            return False
        if self.shape == other.shape:  # ints, or the same expression objects
            return True
        return _sym.shapes_equal(self.shape, other.shape)

    def __hash__(self) -> int:
        if self.is_static:
            return hash((self.shape, self.dtype))
        return hash((tuple(_sym.dim_key(d) for d in self.shape), self.dtype))

    def __str__(self) -> str:
        if self.is_static:
            return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"
        return f"{self.dtype}{_sym.format_shape(self.shape)}"


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
    """Why a tensor of ``type`` is too big to plan (its size and the limit), or None (always
    for a symbolic type, whose size is known at run time)."""
    if not type.is_static:
        return None
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

# Last, not first: tessera.ir.symbolic imports DType from this module; TensorType uses it only
# when called (dimension expressions).
from tessera.ir import symbolic as _sym  # noqa: E402
