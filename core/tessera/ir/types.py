"""Static tensor types: an element type and a shape of non-negative ints."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import StrEnum

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

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY_DTYPES[self.value]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float16, DType.float32, DType.float64)

    @property
    def is_int(self) -> bool:
        return self.numpy.kind in "iu"

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


#: Each DType's numpy dtype, made once (``DType.numpy`` is read on every run's input checks).
_NUMPY_DTYPES: dict[str, np.dtype] = {d.value: np.dtype(d.value) for d in DType}
